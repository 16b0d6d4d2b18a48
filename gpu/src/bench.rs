//! `edgemu bench decode`: prefill and continuous-batching decode throughput of
//! the real backend, the speedup of batching over one-at-a-time decoding, and
//! how well a profile measured in the same run predicts iteration times.
//!
//! Figures (all from engine-reported, wall-clock-measured durations):
//! * `prefill_tok_s["200"|"1536"]`: one prompt of that many tokens (real text,
//!   tokenized), after a warm-up prefill.
//! * `decode_tok_s["1"|"4"|"16"|"32"]`: that many requests (prompts of 40–88
//!   tokens) submitted together to a [`BatchEngine`]; tokens produced by decode
//!   iterations with the full batch divided by those iterations' time.
//! * `speedup_16`: the 16 requests run one after another (each alone, prefill +
//!   decode) versus together, total time over total time.
//! * `model_error`: a profile is measured ([`crate::profile::profile_backend`],
//!   batches 1/4/16/32 × lengths 64/256) and its predicted step time compared
//!   with every measured full-batch decode iteration above: mean |pred − real| /
//!   real.
//!
//! The llama.cpp reference (llama-cpp-python 0.3.36, 2 threads, same GGUF, on
//! the 2-core development machine) is included for the ratios.

use std::path::PathBuf;

use serde::Serialize;

use crate::backend::RealBackend;
use crate::engine::{BatchEngine, EngineConfig, Request};
use crate::error::Result;
use crate::model::{KvDtype, WeightLayout};
use crate::profile::{profile_backend, Profile, ProfileOptions};

/// llama.cpp decode at batch 1 on the reference machine, tok/s.
pub const LLAMA_CPP_DECODE_B1: f64 = 124.0;
/// llama.cpp prefill of a 199-token prompt on the reference machine, tok/s.
pub const LLAMA_CPP_PREFILL_199: f64 = 315.0;

/// Options of [`run_decode_bench`].
#[derive(Debug, Clone)]
pub struct DecodeBenchOptions {
    /// GGUF file (`None` → default lookup).
    pub model: Option<PathBuf>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Fewer decode steps (8 instead of 32) for a fast run.
    pub quick: bool,
    /// Weight layout (`None` → per device default).
    pub layout: Option<WeightLayout>,
}

impl Default for DecodeBenchOptions {
    fn default() -> Self {
        DecodeBenchOptions {
            model: None,
            device: "cpu".into(),
            quick: false,
            layout: None,
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

/// Decode figures by batch size.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeFigures {
    #[serde(rename = "1")]
    pub b1: f64,
    #[serde(rename = "4")]
    pub b4: f64,
    #[serde(rename = "16")]
    pub b16: f64,
    #[serde(rename = "32")]
    pub b32: f64,
}

/// The llama.cpp reference and our ratios to it.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    pub llama_cpp_decode_b1_tok_s: f64,
    pub llama_cpp_prefill_199_tok_s: f64,
    /// Our batch-1 decode / llama.cpp's (aim ≥ 0.5).
    pub decode_b1_ratio: f64,
    /// Our 200-token prefill / llama.cpp's (aim ≥ 1).
    pub prefill_200_ratio: f64,
    /// Our batch-16 aggregate / llama.cpp's single stream (aim ≥ 2).
    pub decode_b16_ratio: f64,
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
    pub device: String,
    pub layout: String,
    pub decode_steps: usize,
    pub reference: Reference,
    /// 1-minute load average when the bench ended (Linux), for context.
    pub load_average: Option<f64>,
    /// The profile measured for `model_error`.
    #[serde(skip)]
    pub profile: Option<Profile>,
}

impl DecodeBenchReport {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let r = &self.reference;
        let mut s = String::new();
        s.push_str(&format!(
            "device {}  layout {}  decode steps {}\n",
            self.device, self.layout, self.decode_steps
        ));
        s.push_str(&format!(
            "prefill  200 tok: {:8.1} tok/s   (llama.cpp 199 tok: {:.0}; ratio {:.2})\n",
            self.prefill_tok_s.p200, r.llama_cpp_prefill_199_tok_s, r.prefill_200_ratio
        ));
        s.push_str(&format!(
            "prefill 1536 tok: {:8.1} tok/s\n",
            self.prefill_tok_s.p1536
        ));
        for (b, v) in [
            (1, self.decode_tok_s.b1),
            (4, self.decode_tok_s.b4),
            (16, self.decode_tok_s.b16),
            (32, self.decode_tok_s.b32),
        ] {
            s.push_str(&format!("decode batch {b:>2}:  {v:8.1} tok/s aggregate\n"));
        }
        s.push_str(&format!(
            "llama.cpp decode batch 1: {:.0} tok/s; ours/theirs: batch 1 {:.2}, batch 16 {:.2}\n",
            r.llama_cpp_decode_b1_tok_s, r.decode_b1_ratio, r.decode_b16_ratio
        ));
        s.push_str(&format!(
            "batch 16 vs one-after-another: {:.2}x total, {:.2}x decode only\n",
            self.speedup_16, self.speedup_16_decode
        ));
        s.push_str(&format!(
            "modeled vs real step time: {:.1} % mean abs error\n",
            self.model_error * 100.0
        ));
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

fn text_tokens(tok: &crate::tokenizer::Tokenizer, n: usize) -> Vec<u32> {
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

/// [`run_decode_bench`] with a `(done, total)` progress callback.
pub fn run_decode_bench_with_progress(
    opts: &DecodeBenchOptions,
    progress: &dyn Fn(usize, usize),
) -> Result<DecodeBenchReport> {
    let path = crate::model::resolve_model_path(opts.model.as_deref())?;
    let device = crate::model::parse_device(&opts.device)?;
    let lm = crate::model::load(&path, &device, opts.layout)?;
    let tokenizer = lm.tokenizer;
    let layout = lm.model.layout();
    let backend = RealBackend::new(lm.model, KvDtype::F32, None);
    let mut engine = BatchEngine::new(
        backend,
        EngineConfig {
            kv_capacity_bytes: 16 * 1024 * 1024 * 1024,
            max_batch: 64,
            ..EngineConfig::default()
        },
    );
    let steps = if opts.quick { 8 } else { 32 };
    let total_parts = 10;
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
    prefill(32, 1, &mut engine)?; // warm-up
    let p200 = prefill(200, 2, &mut engine)?;
    tick();
    let p1536 = prefill(1536, 3, &mut engine)?;
    tick();

    // Continuous-batching decode at 1, 4, 16, 32.
    let prompts: Vec<Vec<u32>> = (0..32)
        .map(|i| {
            let mut p = text_tokens(&tokenizer, 40 + (i * 3) % 49);
            p[0] = 100 + i as u32; // distinct prompts
            p
        })
        .collect();
    let mut runs = Vec::new();
    for (k, &b) in [1usize, 4, 16, 32].iter().enumerate() {
        runs.push(run_batch(
            &mut engine,
            &prompts[..b],
            steps,
            1000 * (k as u64 + 1),
        )?);
        tick();
    }

    // The same 16 requests one after another.
    let (mut seq_total, mut seq_decode) = (0.0, 0.0);
    for (i, p) in prompts[..16].iter().enumerate() {
        let r = run_batch(
            &mut engine,
            std::slice::from_ref(p),
            steps,
            10_000 + i as u64,
        )?;
        seq_total += r.total_s;
        seq_decode += r.decode_s;
    }
    tick();
    let b16 = &runs[2];
    let speedup_16 = seq_total / b16.total_s.max(1e-9);
    let speedup_16_decode = seq_decode / b16.decode_s.max(1e-9);

    // Profile, then its error on the measured iterations.
    let popts = ProfileOptions {
        batch_sizes: vec![1, 4, 16, 32],
        context_lens: vec![64, 256],
        steps: if opts.quick { 2 } else { 3 },
        ..ProfileOptions::default()
    };
    let profile = profile_backend(engine.backend_mut(), &popts, &|_, _| {})?;
    tick();
    let mut errs = Vec::new();
    for r in &runs {
        for &(b, occ, real) in &r.steps {
            if real > 0.0 {
                errs.push((profile.step_time(b, occ) - real).abs() / real);
            }
        }
    }
    let model_error = if errs.is_empty() {
        0.0
    } else {
        errs.iter().sum::<f64>() / errs.len() as f64
    };
    tick();

    let decode = DecodeFigures {
        b1: runs[0].tok_s,
        b4: runs[1].tok_s,
        b16: runs[2].tok_s,
        b32: runs[3].tok_s,
    };
    let reference = Reference {
        llama_cpp_decode_b1_tok_s: LLAMA_CPP_DECODE_B1,
        llama_cpp_prefill_199_tok_s: LLAMA_CPP_PREFILL_199,
        decode_b1_ratio: decode.b1 / LLAMA_CPP_DECODE_B1,
        prefill_200_ratio: p200 / LLAMA_CPP_PREFILL_199,
        decode_b16_ratio: decode.b16 / LLAMA_CPP_DECODE_B1,
    };
    tick();
    Ok(DecodeBenchReport {
        prefill_tok_s: PrefillFigures { p200, p1536 },
        decode_tok_s: decode,
        speedup_16,
        model_error,
        speedup_16_decode,
        device: opts.device.clone(),
        layout: layout.label(),
        decode_steps: steps,
        reference,
        load_average: load_average(),
        profile: Some(profile),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let r = DecodeBenchReport {
            prefill_tok_s: PrefillFigures {
                p200: 1.0,
                p1536: 2.0,
            },
            decode_tok_s: DecodeFigures {
                b1: 3.0,
                b4: 4.0,
                b16: 5.0,
                b32: 6.0,
            },
            speedup_16: 7.0,
            model_error: 0.1,
            speedup_16_decode: 8.0,
            device: "cpu".into(),
            layout: "x".into(),
            decode_steps: 8,
            reference: Reference {
                llama_cpp_decode_b1_tok_s: 124.0,
                llama_cpp_prefill_199_tok_s: 315.0,
                decode_b1_ratio: 0.0,
                prefill_200_ratio: 0.0,
                decode_b16_ratio: 0.0,
            },
            load_average: None,
            profile: None,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["prefill_tok_s"]["200"], 1.0);
        assert_eq!(v["prefill_tok_s"]["1536"], 2.0);
        for (k, x) in [("1", 3.0), ("4", 4.0), ("16", 5.0), ("32", 6.0)] {
            assert_eq!(v["decode_tok_s"][k], x);
        }
        assert_eq!(v["speedup_16"], 7.0);
        assert_eq!(v["model_error"], 0.1);
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.starts_with("{\"prefill_tok_s\":{\"200\":1.0,\"1536\":2.0},\"decode_tok_s\":{\"1\":3.0,\"4\":4.0,\"16\":5.0,\"32\":6.0},\"speedup_16\":7.0,\"model_error\":0.1"), "{s}");
        assert!(r.table().contains("decode batch 16"));
    }
}
