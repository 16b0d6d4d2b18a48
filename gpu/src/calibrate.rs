//! A real server's own profile: what it measures of itself when its model
//! loads, so that schedulers plan with this machine's speed instead of the
//! GPU class a cluster file names.
//!
//! A short [`profile_backend`] run — prefill rate and overhead, decode
//! iteration times at two batch sizes and two context lengths
//! ([`CALIBRATION_BATCHES`], [`CALIBRATION_CONTEXTS`]) — gives the speed;
//! the KV capacity `M_s` stays the one the server is given (its class, or the
//! file's). A measured profile is cached per model and machine in
//! `<cache>/profiles/` (the project's cache directory,
//! [`edgemu_assets::cache_dir`]) under a key of the model's shape and
//! weight layout, the KV dtype, the CPU model and the thread count, so a
//! later run on the same machine starts at once; delete the file to measure
//! again. A cache file that cannot be read or is not a valid profile is
//! measured over, never trusted.

use std::path::Path;

use edgemu_engine::{Backend, Profile};

use crate::backend::RealBackend;
use crate::error::Result;
use crate::model::KvDtype;
use crate::profile::{profile_backend, ProfileOptions};

/// Largest cache file read back as a profile.
const MAX_CACHED_PROFILE_BYTES: u64 = 1 << 20;

/// Batch sizes of the calibration grid.
pub const CALIBRATION_BATCHES: [usize; 2] = [1, 8];
/// Context lengths (tokens per sequence) of the calibration grid.
pub const CALIBRATION_CONTEXTS: [usize; 2] = [64, 512];

/// What a measured profile depends on besides the code: the model's shape
/// and weight layout, the KV dtype, the CPU and the threads it may use.
pub fn machine_key(backend: &RealBackend, kv_dtype: KvDtype) -> String {
    let c = backend.model().config();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let threads = rayon::current_num_threads();
    let raw = format!(
        "l{}-h{}-kv{}-d{}-v{}-{}-{:?}-{cpu}-t{threads}",
        c.n_layers,
        c.hidden_size,
        c.n_kv_heads,
        c.head_dim,
        c.vocab_size,
        backend.model().layout().label(),
        kv_dtype,
    );
    raw.chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// How a server got its profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Calibration {
    /// Read from the cache file.
    Cached,
    /// Measured now (and written to the cache when there is one).
    Measured,
}

/// The profile `backend` serves with: its measured speed and `class`'s KV
/// capacity (see the module doc). `cache` is the cache directory
/// ([`edgemu_assets::cache_dir`]); `None` measures without caching.
pub fn calibrate(
    backend: &mut RealBackend,
    kv_dtype: KvDtype,
    class: &Profile,
    cache: Option<&Path>,
) -> Result<(Profile, Calibration)> {
    let key = machine_key(backend, kv_dtype);
    let file = cache.map(|d| d.join("profiles").join(format!("{key}.json")));
    // A cache file is read only if it is a plain file of profile size (a
    // measured profile is a few KiB); anything else is measured over.
    let readable = |f: &Path| {
        std::fs::metadata(f).is_ok_and(|m| m.is_file() && m.len() <= MAX_CACHED_PROFILE_BYTES)
    };
    let cached = file
        .as_deref()
        .filter(|f| readable(f))
        .and_then(|f| Profile::load(f).ok());
    if let Some(p) = cached {
        if p.kv_bytes_per_token == backend.kv_bytes_per_token() {
            return Ok((with_capacity(p, class), Calibration::Cached));
        }
    }
    let opts = ProfileOptions {
        batch_sizes: CALIBRATION_BATCHES.to_vec(),
        context_lens: CALIBRATION_CONTEXTS.to_vec(),
        steps: 2,
        kv_capacity_bytes: class.kv_capacity_bytes,
        kv_dtype,
        name: format!("measured ({})", class.name),
        ..ProfileOptions::default()
    };
    let mut p = profile_backend(backend, &opts, &|_, _| {})?;
    p.source = format!("measured at load on this machine ({key})");
    // serde_json's float parsing may differ from the measured value in the
    // last bit; serve with the figures a later run reads back from the cache.
    let p = serde_json::to_string(&p)
        .ok()
        .and_then(|t| serde_json::from_str::<Profile>(&t).ok())
        .unwrap_or(p);
    if let Some(f) = &file {
        // A cache that cannot be written only costs the next run a
        // calibration: log it and go on.
        // Written beside and renamed into place, so a server starting at
        // the same time never reads half a file.
        let dir = f.parent().unwrap_or(Path::new("."));
        let tmp = f.with_extension(format!("{}.json.tmp", std::process::id()));
        let written = std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| p.save(&tmp).map_err(|e| e.to_string()))
            .and_then(|()| std::fs::rename(&tmp, f).map_err(|e| e.to_string()));
        if let Err(e) = written {
            tracing::warn!(file = %f.display(), error = %e, "measured profile not cached");
        }
    }
    Ok((with_capacity(p, class), Calibration::Measured))
}

fn with_capacity(mut p: Profile, class: &Profile) -> Profile {
    p.kv_capacity_bytes = class.kv_capacity_bytes;
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{load_tiny, parse_device};

    fn tiny_backend() -> RealBackend {
        let device = parse_device("cpu").expect("cpu");
        let lm = load_tiny(3, &device, None).expect("tiny model");
        let eos = lm.tokenizer.eos_id();
        RealBackend::new(lm.model, KvDtype::F32, eos)
    }

    #[test]
    fn measures_once_then_reads_the_cache_with_the_class_capacity() {
        let dir = std::env::temp_dir().join(format!("edgemu-calibrate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut b = tiny_backend();
        let class = Profile::builtin("rtx3080").expect("class");
        let (p, how) = calibrate(&mut b, KvDtype::F32, &class, Some(&dir)).expect("measure");
        assert_eq!(how, Calibration::Measured);
        assert_eq!(p.kv_capacity_bytes, class.kv_capacity_bytes);
        assert_eq!(p.kv_bytes_per_token, b.kv_bytes_per_token());
        assert!(p.prefill_tok_s.is_finite() && p.prefill_tok_s > 0.0);
        assert_eq!(p.decode.len(), CALIBRATION_BATCHES.len());
        let (q, how) = calibrate(&mut b, KvDtype::F32, &class, Some(&dir)).expect("cached");
        assert_eq!(how, Calibration::Cached);
        assert_eq!(q, p);
        // Another class's capacity applies to the same measured speed.
        let big = Profile::builtin("rtx4090").expect("class");
        let (r, _) = calibrate(&mut b, KvDtype::F32, &big, Some(&dir)).expect("cached");
        assert_eq!(r.kv_capacity_bytes, big.kv_capacity_bytes);
        assert_eq!(r.prefill_tok_s, p.prefill_tok_s);
        // A corrupt cache file is measured over.
        let file = dir
            .join("profiles")
            .join(format!("{}.json", machine_key(&b, KvDtype::F32)));
        std::fs::write(&file, b"{ not a profile").expect("write");
        let (_, how) = calibrate(&mut b, KvDtype::F32, &class, Some(&dir)).expect("remeasure");
        assert_eq!(how, Calibration::Measured);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
