//! `edgemu bench decode`: prefill and continuous-batching decode throughput of
//! the real backend, the speedup of batching over one-at-a-time decoding, how
//! well a profile predicts iteration times it was not fitted on, and the
//! baselines measured in the same run on the same weights.
//!
//! Figures (all from engine-reported, wall-clock-measured durations):
//! * `prefill_tok_s["200"|"1536"]`: one prompt of that many tokens (real text,
//!   tokenized), after a warm-up prefill.
//! * `decode_tok_s["B"]` for each batch size B (default 1, 4, 16, 32): B
//!   requests (prompts of 40–88 tokens) submitted together to a
//!   [`BatchEngine`]; tokens produced by decode iterations with the full batch
//!   divided by those iterations' time.
//! * `speedup_16`: the 16 requests run one after another (each alone, prefill +
//!   decode) versus together, total time over total time.
//! * `model_error`: a profile is fitted on batch sizes *other* than the measured
//!   ones ([`held_out_fit_batches`]: 1, 2, 8, 23, 48 for the default) with
//!   synthetic contexts of 32 and 160 tokens, and its predicted step time is
//!   compared with every full-batch decode iteration above at the held-out batch
//!   sizes (4, 16, 32) and their real occupancies: mean |pred − real| / real.
//! * `baselines`: candle-transformers' `quantized_llama` on the same GGUF, and
//!   llama.cpp (llama-cpp-python) when installed — prefill of the same
//!   200-token prompt, decode of one stream, and a *batched* decode of 16
//!   sequences, which our batch-16 figure is compared with
//!   ([`crate::baseline`]).
//! * `gpu`: one NVML reading after the runs (memory, utilization, power), or
//!   why there is none.

use std::path::PathBuf;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use edgemu_engine::batch::{BatchEngine, EngineConfig, Request};
use edgemu_engine::profile::{held_out_fit_batches, mean_relative_error, Profile};

use crate::backend::RealBackend;
use crate::baseline::{Baseline, BaselineWorkload};
use crate::error::{GpuError, Result};
use crate::model::{KvDtype, ModelSource, RandomWeights, WeightLayout};
use crate::profile::{profile_backend, ProfileOptions};
use crate::telemetry::{GpuSample, Telemetry};

/// Options of [`run_decode_bench`].
#[derive(Debug, Clone)]
pub struct DecodeBenchOptions {
    /// GGUF file (`None` → default lookup).
    pub model: Option<PathBuf>,
    /// Seeded random weights instead of the file (same shapes and types).
    pub random_weights: Option<RandomWeights>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Fewer decode steps (8 instead of 32) for a fast run.
    pub quick: bool,
    /// Weight layout (`None` → per device default).
    pub layout: Option<WeightLayout>,
    /// Decode batch sizes (default 1, 4, 16, 32).
    pub batches: Vec<usize>,
    /// Measure the baselines too.
    pub baselines: bool,
}

impl Default for DecodeBenchOptions {
    fn default() -> Self {
        DecodeBenchOptions {
            model: None,
            random_weights: None,
            device: "cpu".into(),
            quick: false,
            layout: None,
            batches: vec![1, 4, 16, 32],
            baselines: true,
        }
    }
}

/// Prefill figures by prompt length.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillFigures {
    #[serde(rename = "200")]
    pub p200: f64,
    #[serde(rename = "1536")]
    pub p1536: f64,
}

/// Decode tok/s by batch size, in the order measured (a JSON object keyed by
/// the batch size).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeFigures(pub Vec<(usize, f64)>);

impl DecodeFigures {
    /// The figure at batch `b`.
    pub fn get(&self, b: usize) -> Option<f64> {
        self.0.iter().find(|(x, _)| *x == b).map(|(_, v)| *v)
    }
}

impl Serialize for DecodeFigures {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (b, v) in &self.0 {
            m.serialize_entry(&b.to_string(), v)?;
        }
        m.end()
    }
}

/// How `model_error` was measured.
#[derive(Debug, Clone, Serialize)]
pub struct ModelErrorCheck {
    /// Batch sizes and context lengths the profile was fitted on.
    pub fit_batches: Vec<usize>,
    pub fit_context_lens: Vec<usize>,
    /// Batch sizes whose measured iterations were predicted (none is fitted).
    pub eval_batches: Vec<usize>,
    /// Number of iterations compared.
    pub eval_iterations: usize,
}

/// The baselines, and our figures over theirs.
#[derive(Debug, Clone, Serialize)]
pub struct Baselines {
    pub candle_transformers: Baseline,
    pub llama_cpp: Baseline,
}

/// Our figure / a baseline's (same prompt, same weights, same run).
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    pub prefill_200: f64,
    pub decode_b1: f64,
    /// Our batch-16 continuous batching / their batched 16.
    pub decode_b16_batched: Option<f64>,
}

/// What [`run_decode_bench`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeBenchReport {
    pub prefill_tok_s: PrefillFigures,
    pub decode_tok_s: DecodeFigures,
    pub speedup_16: f64,
    pub model_error: f64,
    /// Decode-phase-only speedup of batch 16 over sequential.
    pub speedup_16_decode: f64,
    pub model_error_check: ModelErrorCheck,
    pub device: String,
    pub model: String,
    pub layout: String,
    pub decode_steps: usize,
    pub baselines: Option<Baselines>,
    /// Ours / candle-transformers'.
    pub vs_candle_transformers: Option<Ratios>,
    /// Ours / llama.cpp's.
    pub vs_llama_cpp: Option<Ratios>,
    /// NVML reading after the runs.
    pub gpu: Option<GpuSample>,
    /// Why there is no NVML reading.
    pub gpu_unavailable: Option<String>,
    /// 1-minute load average when the bench ended (Linux), for context.
    pub load_average: Option<f64>,
    /// The profile measured for `model_error`.
    #[serde(skip)]
    pub profile: Option<Profile>,
}

fn ratios(ours: &DecodeBenchReport, b: &Baseline) -> Option<Ratios> {
    let f = b.figures()?;
    Some(Ratios {
        prefill_200: ours.prefill_tok_s.p200 / f.prefill_200_tok_s,
        decode_b1: ours.decode_tok_s.get(1)? / f.decode_b1_tok_s,
        decode_b16_batched: ours
            .decode_tok_s
            .get(16)
            .zip(f.decode_b16_tok_s)
            .map(|(a, b)| a / b),
    })
}

impl DecodeBenchReport {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "device {}  model {}  layout {}  decode steps {}\n",
            self.device, self.model, self.layout, self.decode_steps
        ));
        s.push_str(&format!(
            "prefill  200 tok: {:8.1} tok/s\n",
            self.prefill_tok_s.p200
        ));
        s.push_str(&format!(
            "prefill 1536 tok: {:8.1} tok/s\n",
            self.prefill_tok_s.p1536
        ));
        for (b, v) in &self.decode_tok_s.0 {
            s.push_str(&format!("decode batch {b:>3}: {v:8.1} tok/s aggregate\n"));
        }
        s.push_str(&format!(
            "batch 16 vs one-after-another: {:.2}x total, {:.2}x decode only\n",
            self.speedup_16, self.speedup_16_decode
        ));
        let c = &self.model_error_check;
        s.push_str(&format!(
            "modeled vs real step time: {:.1} % mean abs error ({} iterations at held-out batches {:?}; fitted on batches {:?}, contexts {:?})\n",
            self.model_error * 100.0,
            c.eval_iterations,
            c.eval_batches,
            c.fit_batches,
            c.fit_context_lens
        ));
        if let Some(bl) = &self.baselines {
            for (name, b, r) in [
                (
                    "candle-transformers",
                    &bl.candle_transformers,
                    &self.vs_candle_transformers,
                ),
                ("llama.cpp", &bl.llama_cpp, &self.vs_llama_cpp),
            ] {
                match (b, r) {
                    (Baseline::Measured(f), Some(r)) => {
                        s.push_str(&format!(
                            "{name}: prefill 200 {:.1} tok/s, decode batch 1 {:.1} tok/s, batched 16 {} ({})\n",
                            f.prefill_200_tok_s,
                            f.decode_b1_tok_s,
                            f.decode_b16_tok_s.map_or("-".into(), |x| format!("{x:.1} tok/s")),
                            f.notes
                        ));
                        s.push_str(&format!(
                            "  ours/theirs: prefill 200 {:.2}, decode batch 1 {:.2}, batch 16 vs their batched 16 {}\n",
                            r.prefill_200,
                            r.decode_b1,
                            r.decode_b16_batched.map_or("-".into(), |x| format!("{x:.2}"))
                        ));
                    }
                    (Baseline::Measured(_), None) => {
                        s.push_str(&format!("{name}: measured (see --json)\n"))
                    }
                    (Baseline::Unavailable { reason }, _) => {
                        s.push_str(&format!("{name}: not measured: {reason}\n"))
                    }
                }
            }
        }
        match (&self.gpu, &self.gpu_unavailable) {
            (Some(g), _) => s.push_str(&format!(
                "gpu {}: memory {} / {} MiB, utilization {} %, power {} W\n",
                g.name.as_deref().unwrap_or("?"),
                g.memory_used_bytes
                    .map_or("?".into(), |b| (b >> 20).to_string()),
                g.memory_total_bytes
                    .map_or("?".into(), |b| (b >> 20).to_string()),
                g.utilization_pct.map_or("?".into(), |u| u.to_string()),
                g.power_w.map_or("?".into(), |p| format!("{p:.0}")),
            )),
            (None, Some(r)) => s.push_str(&format!("gpu telemetry: none ({r})\n")),
            (None, None) => {}
        }
        if let Some(l) = self.load_average {
            s.push_str(&format!("load average at end: {l:.2}\n"));
        }
        s
    }
}

const TEXT: &str = "Edge servers run large language models close to their users. Each server \
receives requests over a wireless link, prefills the prompt, and then decodes the answer one \
token at a time while other requests join and leave the batch. The key-value cache of every \
request grows with each generated token, and its memory decides how many requests fit at once. ";

fn text_tokens(tok: &edgemu_tokenizer::Tokenizer, n: usize) -> Vec<u32> {
    let base = tok.encode(TEXT);
    base.iter().copied().cycle().take(n).collect()
}

struct DecodeRun {
    tok_s: f64,
    decode_s: f64,
    total_s: f64,
    /// (batch, occupancy before the iteration, measured step seconds)
    steps: Vec<(usize, u64, f64)>,
}

fn run_batch(
    engine: &mut BatchEngine<RealBackend>,
    prompts: &[Vec<u32>],
    steps: usize,
    id0: u64,
) -> Result<DecodeRun> {
    for (i, p) in prompts.iter().enumerate() {
        engine.submit(
            Request::with_tokens(id0 + i as u64, p.clone(), steps + 1),
            0,
        )?;
    }
    let b = prompts.len();
    let mut now = 0u64;
    let (mut toks, mut dec_s, mut total) = (0usize, 0.0, 0.0);
    let mut samples = Vec::new();
    while !engine.is_idle() {
        let occ = engine.ledger().occupancy_bytes();
        let o = engine.step(now)?;
        now += o.duration_ns;
        total += o.duration_s();
        if o.decode_batch == b && o.admitted.is_empty() {
            toks += b;
            dec_s += o.decode_s();
            samples.push((b, occ, o.decode_s()));
        }
    }
    Ok(DecodeRun {
        tok_s: if dec_s > 0.0 {
            toks as f64 / dec_s
        } else {
            0.0
        },
        decode_s: dec_s,
        total_s: total,
        steps: samples,
    })
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Runs the benchmark (see the module doc).
pub fn run_decode_bench(opts: &DecodeBenchOptions) -> Result<DecodeBenchReport> {
    run_decode_bench_with_progress(opts, &|_, _| {})
}

/// Context lengths the held-out profile is fitted on (the measured requests
/// hold 40–121 tokens).
const FIT_CONTEXT_LENS: [usize; 2] = [32, 160];

/// [`run_decode_bench`] with a `(done, total)` progress callback.
pub fn run_decode_bench_with_progress(
    opts: &DecodeBenchOptions,
    progress: &dyn Fn(usize, usize),
) -> Result<DecodeBenchReport> {
    let mut batches = opts.batches.clone();
    batches.sort_unstable();
    batches.dedup();
    if batches.is_empty() || batches[0] == 0 {
        return Err(GpuError::Engine(
            "bench decode: batch sizes must be ≥ 1".into(),
        ));
    }
    let max_batch = *batches.last().unwrap_or(&1);
    let source = ModelSource::new(opts.model.clone(), opts.random_weights);
    let device = crate::model::parse_device(&opts.device)?;
    let lm = source.load(&device, opts.layout)?;
    let tokenizer = lm.tokenizer;
    let layout = lm.model.layout();
    let backend = RealBackend::new(lm.model, KvDtype::F32, None);
    let mut engine = BatchEngine::new(
        backend,
        EngineConfig {
            kv_capacity_bytes: 64 * 1024 * 1024 * 1024,
            max_batch: max_batch.max(16),
            ..EngineConfig::default()
        },
    );
    let steps = if opts.quick { 8 } else { 32 };
    let total_parts = 6 + batches.len() + 2 * usize::from(opts.baselines);
    let mut done = 0;
    let mut tick = || {
        done += 1;
        progress(done, total_parts);
    };

    // Prefill.
    let prefill = |n: usize, id: u64, e: &mut BatchEngine<RealBackend>| -> Result<f64> {
        e.submit(Request::with_tokens(id, text_tokens(&tokenizer, n), 1), 0)?;
        let o = e.step(0)?;
        Ok(n as f64 / o.prefill_s().max(1e-9))
    };
    // Warm-up: a prefill and a decode step, so that one-off work (kernel
    // loading, library handles) is not counted in the first figures.
    engine.submit(Request::with_tokens(1, text_tokens(&tokenizer, 32), 2), 0)?;
    engine.run_to_idle(0)?;
    let p200 = prefill(200, 2, &mut engine)?;
    tick();
    let p1536 = prefill(1536, 3, &mut engine)?;
    tick();

    // Continuous-batching decode at each batch size.
    let n_prompts = max_batch.max(16);
    let prompts: Vec<Vec<u32>> = (0..n_prompts)
        .map(|i| {
            let mut p = text_tokens(&tokenizer, 40 + (i * 3) % 49);
            p[0] = 100 + (i % 1000) as u32; // distinct prompts
            p
        })
        .collect();
    let mut runs = Vec::new();
    for (k, &b) in batches.iter().enumerate() {
        runs.push((
            b,
            run_batch(
                &mut engine,
                &prompts[..b],
                steps,
                1_000_000 * (k as u64 + 1),
            )?,
        ));
        tick();
    }

    // The same 16 requests one after another, and together.
    let b16 = match runs.iter().find(|(b, _)| *b == 16) {
        Some((_, r)) => (r.total_s, r.decode_s),
        None => {
            let r = run_batch(&mut engine, &prompts[..16], steps, 50_000_000)?;
            (r.total_s, r.decode_s)
        }
    };
    let (mut seq_total, mut seq_decode) = (0.0, 0.0);
    for (i, p) in prompts[..16].iter().enumerate() {
        let r = run_batch(
            &mut engine,
            std::slice::from_ref(p),
            steps,
            90_000_000 + i as u64,
        )?;
        seq_total += r.total_s;
        seq_decode += r.decode_s;
    }
    tick();
    let speedup_16 = seq_total / b16.0.max(1e-9);
    let speedup_16_decode = seq_decode / b16.1.max(1e-9);

    // A profile fitted on other batch sizes and context lengths, then its error
    // on the measured iterations at the held-out batch sizes.
    let fit_batches = held_out_fit_batches(&batches);
    let popts = ProfileOptions {
        batch_sizes: fit_batches.clone(),
        context_lens: FIT_CONTEXT_LENS.to_vec(),
        steps: if opts.quick { 2 } else { 3 },
        ..ProfileOptions::default()
    };
    let profile = profile_backend(engine.backend_mut(), &popts, &|_, _| {})?;
    tick();
    let eval_batches: Vec<usize> = batches
        .iter()
        .copied()
        .filter(|b| !fit_batches.contains(b))
        .collect();
    let samples: Vec<(usize, u64, f64)> = runs
        .iter()
        .filter(|(b, _)| eval_batches.contains(b))
        .flat_map(|(_, r)| r.steps.iter().copied())
        .collect();
    let model_error = mean_relative_error(&profile, &samples).unwrap_or(0.0);
    tick();

    // Baselines on the same weights and token ids.
    let baselines = if opts.baselines {
        let len = 64;
        let work = BaselineWorkload {
            prefill_prompt: text_tokens(&tokenizer, 200),
            decode_prompts: (0..16)
                .map(|i| {
                    let mut p = text_tokens(&tokenizer, len);
                    p[0] = 100 + i as u32;
                    p
                })
                .collect(),
            steps,
        };
        drop(engine);
        let candle = match crate::baseline::candle_llama::measure(&source, &device, &work) {
            Ok(f) => Baseline::Measured(f),
            Err(e) => Baseline::Unavailable {
                reason: e.to_string(),
            },
        };
        tick();
        let llama_cpp = if device.is_cpu() {
            crate::baseline::llama_cpp::measure(&source, &work)
        } else {
            Baseline::Unavailable {
                reason: "llama-cpp-python is only run against the CPU".into(),
            }
        };
        tick();
        Some(Baselines {
            candle_transformers: candle,
            llama_cpp,
        })
    } else {
        None
    };

    let telemetry = Telemetry::for_device(&opts.device);
    let gpu = telemetry.sample();
    let gpu_unavailable = telemetry.unavailable_reason().map(str::to_string);
    tick();
    let mut report = DecodeBenchReport {
        prefill_tok_s: PrefillFigures { p200, p1536 },
        decode_tok_s: DecodeFigures(runs.iter().map(|(b, r)| (*b, r.tok_s)).collect()),
        speedup_16,
        model_error,
        speedup_16_decode,
        model_error_check: ModelErrorCheck {
            fit_batches,
            fit_context_lens: FIT_CONTEXT_LENS.to_vec(),
            eval_batches,
            eval_iterations: samples.len(),
        },
        device: opts.device.clone(),
        model: source.label(),
        layout: layout.label(),
        decode_steps: steps,
        baselines,
        vs_candle_transformers: None,
        vs_llama_cpp: None,
        gpu,
        gpu_unavailable,
        load_average: load_average(),
        profile: Some(profile),
    };
    if let Some(b) = &report.baselines {
        report.vs_candle_transformers = ratios(&report, &b.candle_transformers);
        report.vs_llama_cpp = ratios(&report, &b.llama_cpp);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::BaselineFigures;

    fn report() -> DecodeBenchReport {
        DecodeBenchReport {
            prefill_tok_s: PrefillFigures {
                p200: 1.0,
                p1536: 2.0,
            },
            decode_tok_s: DecodeFigures(vec![(1, 3.0), (4, 4.0), (16, 5.0), (32, 6.0), (128, 9.0)]),
            speedup_16: 7.0,
            model_error: 0.1,
            speedup_16_decode: 8.0,
            model_error_check: ModelErrorCheck {
                fit_batches: vec![1, 2, 8, 23, 48],
                fit_context_lens: vec![32, 160],
                eval_batches: vec![4, 16, 32],
                eval_iterations: 3,
            },
            device: "cpu".into(),
            model: "m".into(),
            layout: "x".into(),
            decode_steps: 8,
            baselines: Some(Baselines {
                candle_transformers: Baseline::Measured(BaselineFigures {
                    prefill_200_tok_s: 0.5,
                    decode_b1_tok_s: 1.5,
                    decode_b16_tok_s: Some(2.5),
                    batch16: "static".into(),
                    notes: "n".into(),
                }),
                llama_cpp: Baseline::Unavailable {
                    reason: "not installed".into(),
                },
            }),
            vs_candle_transformers: None,
            vs_llama_cpp: None,
            gpu: None,
            gpu_unavailable: Some("device `cpu` is not a GPU".into()),
            load_average: None,
            profile: None,
        }
    }

    #[test]
    fn json_shape() {
        let mut r = report();
        let b = r.baselines.clone().unwrap();
        r.vs_candle_transformers = ratios(&r, &b.candle_transformers);
        r.vs_llama_cpp = ratios(&r, &b.llama_cpp);
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["prefill_tok_s"]["200"], 1.0);
        assert_eq!(v["prefill_tok_s"]["1536"], 2.0);
        for (k, x) in [
            ("1", 3.0),
            ("4", 4.0),
            ("16", 5.0),
            ("32", 6.0),
            ("128", 9.0),
        ] {
            assert_eq!(v["decode_tok_s"][k], x);
        }
        assert_eq!(v["speedup_16"], 7.0);
        assert_eq!(v["model_error"], 0.1);
        assert_eq!(v["baselines"]["candle_transformers"]["status"], "measured");
        assert_eq!(v["baselines"]["llama_cpp"]["status"], "unavailable");
        assert_eq!(v["vs_candle_transformers"]["prefill_200"], 2.0);
        assert_eq!(v["vs_candle_transformers"]["decode_b1"], 2.0);
        assert_eq!(v["vs_candle_transformers"]["decode_b16_batched"], 2.0);
        assert!(v["vs_llama_cpp"].is_null());
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.starts_with("{\"prefill_tok_s\":{\"200\":1.0,\"1536\":2.0},\"decode_tok_s\":{\"1\":3.0,\"4\":4.0,\"16\":5.0,\"32\":6.0,\"128\":9.0},\"speedup_16\":7.0,\"model_error\":0.1"), "{s}");
        let t = r.table();
        assert!(t.contains("decode batch 128"), "{t}");
        assert!(t.contains("llama.cpp: not measured: not installed"), "{t}");
        assert!(t.contains("batch 16 vs their batched 16 2.00"), "{t}");
        assert!(!t.contains("124"), "no constant llama.cpp figures: {t}");
    }

    #[test]
    fn quick_bench_on_the_tiny_random_model() {
        let r = run_decode_bench(&DecodeBenchOptions {
            random_weights: Some("tiny:3".parse().unwrap()),
            quick: true,
            batches: vec![1, 4, 16],
            ..DecodeBenchOptions::default()
        })
        .unwrap();
        assert_eq!(r.model_error_check.eval_batches, vec![4, 16]);
        assert!(r.model_error_check.eval_iterations > 0);
        assert!(r.decode_tok_s.get(16).is_some_and(|x| x > 0.0));
        let b = r.baselines.as_ref().unwrap();
        assert!(b.candle_transformers.figures().is_some(), "{b:?}");
        assert!(r.vs_candle_transformers.is_some());
        assert!(r.gpu.is_none() && r.gpu_unavailable.is_some());
    }
}
