//! Measuring a server [`Profile`] on the real backend: prefill rate and
//! fixed overhead from two prompt lengths, and the decode iteration time over
//! a grid of batch sizes and context lengths (occupancies). The profile type,
//! its file format and the built-in GPU classes are
//! [`edgemu_engine::profile`]'s.

use edgemu_engine::backend::{Backend, DecodeItem, PrefillItem};
use edgemu_engine::profile::{CurvePoint, DecodeCurve, Profile};

use crate::backend::RealBackend;
use crate::error::Result;

/// What [`run_profile`] measures.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// GGUF file (`None` → the default lookup, see `edgemu_tokenizer::model_path`).
    pub model: Option<std::path::PathBuf>,
    /// Seeded random weights instead of the file (same shapes and types).
    pub random_weights: Option<crate::model::RandomWeights>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Weight layout (`None` → per device default).
    pub layout: Option<crate::model::WeightLayout>,
    /// Batch sizes of the grid.
    pub batch_sizes: Vec<usize>,
    /// Context lengths per sequence of the grid (occupancy = batch × length × α).
    pub context_lens: Vec<usize>,
    /// Timed decode iterations per grid point (after one warm-up).
    pub steps: usize,
    /// KV capacity written into the profile.
    pub kv_capacity_bytes: u64,
    /// KV dtype for accounting.
    pub kv_dtype: crate::model::KvDtype,
    /// Profile name.
    pub name: String,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            model: None,
            random_weights: None,
            device: "cpu".into(),
            layout: None,
            batch_sizes: vec![1, 4, 8, 16, 32],
            context_lens: vec![64, 256, 512, 1024],
            steps: 3,
            kv_capacity_bytes: 4 * 1024 * 1024 * 1024,
            kv_dtype: crate::model::KvDtype::F32,
            name: "measured".into(),
        }
    }
}

/// Loads the model and measures a profile (see [`profile_backend`]).
pub fn run_profile(opts: &ProfileOptions, progress: &dyn Fn(usize, usize)) -> Result<Profile> {
    let source = crate::model::ModelSource::new(opts.model.clone(), opts.random_weights);
    let device = crate::model::parse_device(&opts.device)?;
    let lm = source.load(&device, opts.layout)?;
    let eos = lm.tokenizer.eos_id();
    let mut backend = RealBackend::new(lm.model, opts.kv_dtype, eos);
    let mut p = profile_backend(&mut backend, opts, progress)?;
    p.source = format!(
        "measured on {} ({}), {}",
        opts.device,
        backend.model().layout().label(),
        source.label()
    );
    Ok(p)
}

/// Runs of each prefill length in [`profile_backend`]; the median is used.
const PREFILL_RUNS: usize = 3;

/// Measures prefill (two prompt lengths → rate and fixed overhead) and, for every
/// (batch, context length) of the grid, the mean decode iteration time with
/// synthetic caches of that length.
pub fn profile_backend(
    backend: &mut RealBackend,
    opts: &ProfileOptions,
    progress: &dyn Fn(usize, usize),
) -> Result<Profile> {
    let total = 2 + opts.batch_sizes.len() * opts.context_lens.len();
    let mut done = 0;
    let alpha = backend.kv_bytes_per_token();
    // Prefill: t(n) = a + n / r from n = 32 and a longer prompt (one warm-up
    // first), each the median of three runs. The longer one starts at 256
    // tokens and doubles until it takes 4× the short one (or the context is
    // full): on a GPU both 32 and 256 tokens take a few launch-bound
    // milliseconds, and the rate from their difference was noise (an H200
    // printed 68 million and 726 000 tok/s where prefilling 1 536 tokens runs
    // at ≈ 33 000); on a CPU 256 tokens already take ≈ 8× 32.
    let max_prompt = backend.model().config().max_seq_len.saturating_sub(64);
    let mut time_prefill = |n: usize, seq: u64| -> Result<f64> {
        let mut runs = [0.0f64; PREFILL_RUNS];
        for r in runs.iter_mut() {
            let s = backend.prefill(&[PrefillItem {
                seq,
                tokens: None,
                len: n,
            }])?;
            backend.release(seq);
            *r = s.duration_s;
        }
        runs.sort_unstable_by(f64::total_cmp);
        Ok(runs[PREFILL_RUNS / 2])
    };
    time_prefill(16, u64::MAX)?;
    let n1 = 32usize;
    let t1 = time_prefill(n1, u64::MAX)?;
    done += 1;
    progress(done, total);
    let mut n2 = 256usize.min(max_prompt).max(n1 + 1);
    let mut t2 = time_prefill(n2, u64::MAX)?;
    while t2 < 4.0 * t1 && n2 * 2 <= max_prompt {
        n2 *= 2;
        t2 = time_prefill(n2, u64::MAX)?;
    }
    done += 1;
    progress(done, total);
    let rate = if t2 > t1 {
        (n2 - n1) as f64 / (t2 - t1)
    } else {
        n2 as f64 / t2.max(1e-9)
    };
    let overhead = (t1 - n1 as f64 / rate).max(0.0);
    let mut curves = Vec::new();
    let mut batches = opts.batch_sizes.clone();
    batches.sort_unstable();
    batches.dedup();
    let mut lens = opts.context_lens.clone();
    lens.sort_unstable();
    lens.dedup();
    for &b in &batches {
        let mut points = Vec::new();
        for &l in &lens {
            let seqs: Vec<u64> = (0..b as u64).map(|i| 1_000_000 + i).collect();
            for &s in &seqs {
                backend.insert_synthetic(s, l)?;
            }
            let items: Vec<DecodeItem> = seqs
                .iter()
                .map(|&seq| DecodeItem { seq, token: 100 })
                .collect();
            let occ = alpha * (b * l) as u64;
            backend.decode(&items, occ)?; // warm-up
            let mut sum = 0.0;
            for _ in 0..opts.steps.max(1) {
                sum += backend.decode(&items, occ)?.duration_s;
            }
            for &s in &seqs {
                backend.release(s);
            }
            points.push(CurvePoint {
                kv_bytes: occ,
                step_s: sum / opts.steps.max(1) as f64,
            });
            done += 1;
            progress(done, total);
        }
        curves.push(DecodeCurve { batch: b, points });
    }
    let p = Profile {
        name: opts.name.clone(),
        source: String::new(),
        kv_capacity_bytes: opts.kv_capacity_bytes,
        kv_bytes_per_token: alpha,
        prefill_tok_s: rate,
        prefill_overhead_s: overhead,
        decode: curves,
    };
    p.validate("measured profile")?;
    Ok(p)
}
