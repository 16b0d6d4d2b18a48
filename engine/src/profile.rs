//! Server cost profiles for the modeled backend.
//!
//! A [`Profile`] gives the prefill rate and the per-iteration decode time as a
//! piecewise-linear function of KV occupancy, one curve per measured batch size
//! (linear interpolation between curves; one curve means batch-independent).
//!
//! # File format
//!
//! JSON (any extension but `.toml`) or TOML (`.toml`), same fields:
//!
//! ```json
//! {
//!   "name": "rtx4090",
//!   "source": "built-in: LYREO paper GPU class …",
//!   "kv_capacity_bytes": 24000000000,
//!   "kv_bytes_per_token": 16384,
//!   "prefill_tok_s": 8000.0,
//!   "prefill_overhead_s": 0.0,
//!   "decode": [
//!     { "batch": 1, "points": [ { "kv_bytes": 0, "step_s": 0.0055 },
//!                               { "kv_bytes": 24000000000, "step_s": 0.0293 } ] }
//!   ]
//! }
//! ```
//!
//! `decode[*].points` are sorted by `kv_bytes`; beyond the last point the last
//! segment's slope is extrapolated (never below the last value), before the first
//! the first value holds. Prefill of `n` tokens takes
//! `prefill_overhead_s + n / prefill_tok_s`.
//!
//! # Built-in GPU classes
//!
//! The LYREO paper's servers (Llama-3.2-1B, α = 16 KB/token): RTX 3080 / 3090 /
//! 4090 with 10 / 20 / 24 GB and prefill 2 500 / 4 000 / 8 000 tok/s. The paper
//! profiles decode throughput as non-increasing in KV occupancy without giving
//! numbers; the built-ins use a memory-bound roofline: an iteration reads the
//! BF16 weights (2.47 GB) and the occupied KV once at the card's memory bandwidth
//! (760 / 936 / 1008 GB/s), plus 3 ms of launch/sampling overhead.
//!
//! `edgemu_gpu::profile::run_profile` measures a profile on the real backend.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// One occupancy point of a decode curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub kv_bytes: u64,
    pub step_s: f64,
}

/// Per-iteration time versus occupancy at one batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeCurve {
    pub batch: usize,
    pub points: Vec<CurvePoint>,
}

/// A server's cost model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub source: String,
    pub kv_capacity_bytes: u64,
    pub kv_bytes_per_token: u64,
    pub prefill_tok_s: f64,
    #[serde(default)]
    pub prefill_overhead_s: f64,
    pub decode: Vec<DecodeCurve>,
}

fn interp_curve(points: &[CurvePoint], occ: u64) -> f64 {
    let x = occ as f64;
    match points {
        [] => 0.0,
        [p] => p.step_s,
        _ => {
            if x <= points[0].kv_bytes as f64 {
                return points[0].step_s;
            }
            for w in points.windows(2) {
                let (a, b) = (w[0], w[1]);
                if x <= b.kv_bytes as f64 {
                    let span = (b.kv_bytes - a.kv_bytes) as f64;
                    let f = if span > 0.0 {
                        (x - a.kv_bytes as f64) / span
                    } else {
                        1.0
                    };
                    return a.step_s + f * (b.step_s - a.step_s);
                }
            }
            let n = points.len();
            let (a, b) = (points[n - 2], points[n - 1]);
            let span = (b.kv_bytes - a.kv_bytes) as f64;
            let slope = if span > 0.0 {
                (b.step_s - a.step_s) / span
            } else {
                0.0
            };
            b.step_s + slope.max(0.0) * (x - b.kv_bytes as f64)
        }
    }
}

impl Profile {
    /// Time of one decode iteration of `batch` sequences holding `occupancy_bytes`.
    pub fn step_time(&self, batch: usize, occupancy_bytes: u64) -> f64 {
        let c = &self.decode;
        if c.is_empty() || batch == 0 {
            return 0.0;
        }
        if c.len() == 1 || batch <= c[0].batch {
            return interp_curve(&c[0].points, occupancy_bytes);
        }
        for w in c.windows(2) {
            if batch <= w[1].batch {
                let ta = interp_curve(&w[0].points, occupancy_bytes);
                let tb = interp_curve(&w[1].points, occupancy_bytes);
                let f = (batch - w[0].batch) as f64 / (w[1].batch - w[0].batch) as f64;
                return ta + f * (tb - ta);
            }
        }
        let n = c.len();
        let ta = interp_curve(&c[n - 2].points, occupancy_bytes);
        let tb = interp_curve(&c[n - 1].points, occupancy_bytes);
        let slope = (tb - ta) / (c[n - 1].batch - c[n - 2].batch) as f64;
        tb + slope.max(0.0) * (batch - c[n - 1].batch) as f64
    }

    /// Time to prefill `tokens` tokens.
    pub fn prefill_time(&self, tokens: usize) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        self.prefill_overhead_s + tokens as f64 / self.prefill_tok_s
    }

    /// Aggregate decode throughput (tokens/s) at a batch size and occupancy.
    pub fn decode_tok_s(&self, batch: usize, occupancy_bytes: u64) -> f64 {
        let t = self.step_time(batch, occupancy_bytes);
        if t > 0.0 {
            batch as f64 / t
        } else {
            f64::INFINITY
        }
    }

    /// Checks the profile is usable; `label` names it in errors.
    pub fn validate(&self, label: &str) -> Result<()> {
        let bad = |msg: String| EngineError::Profile {
            path: label.to_string(),
            msg,
        };
        if !(self.prefill_tok_s.is_finite() && self.prefill_tok_s > 0.0) {
            return Err(bad(format!(
                "prefill_tok_s must be > 0, got {}",
                self.prefill_tok_s
            )));
        }
        if !(self.prefill_overhead_s.is_finite() && self.prefill_overhead_s >= 0.0) {
            return Err(bad("prefill_overhead_s must be ≥ 0".into()));
        }
        if self.kv_bytes_per_token == 0 || self.kv_capacity_bytes == 0 {
            return Err(bad(
                "kv_bytes_per_token and kv_capacity_bytes must be > 0".into()
            ));
        }
        if self.decode.is_empty() {
            return Err(bad("decode has no curves".into()));
        }
        let mut last_batch = 0;
        for (i, c) in self.decode.iter().enumerate() {
            if c.batch <= last_batch {
                return Err(bad(format!(
                    "decode[{i}]: batch sizes must be increasing and ≥ 1"
                )));
            }
            last_batch = c.batch;
            if c.points.is_empty() {
                return Err(bad(format!(
                    "decode[{i}] (batch {}) has no points",
                    c.batch
                )));
            }
            let mut last = None;
            for (j, p) in c.points.iter().enumerate() {
                if !(p.step_s.is_finite() && p.step_s > 0.0) {
                    return Err(bad(format!("decode[{i}].points[{j}]: step_s must be > 0")));
                }
                if last.is_some_and(|l| p.kv_bytes <= l) {
                    return Err(bad(format!(
                        "decode[{i}].points[{j}]: kv_bytes must increase"
                    )));
                }
                last = Some(p.kv_bytes);
            }
        }
        Ok(())
    }

    /// Reads a profile (TOML if the extension is `.toml`, else JSON) and validates it.
    pub fn load(path: &Path) -> Result<Self> {
        let label = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let p: Profile = if path.extension().is_some_and(|e| e == "toml") {
            toml::from_str(&text).map_err(|e| EngineError::Profile {
                path: label.clone(),
                msg: e.to_string(),
            })?
        } else {
            serde_json::from_str(&text).map_err(|e| EngineError::Profile {
                path: label.clone(),
                msg: e.to_string(),
            })?
        };
        p.validate(&label)?;
        Ok(p)
    }

    /// Writes the profile (TOML if the extension is `.toml`, else pretty JSON).
    pub fn save(&self, path: &Path) -> Result<()> {
        let label = path.display().to_string();
        let text = if path.extension().is_some_and(|e| e == "toml") {
            toml::to_string_pretty(self).map_err(|e| EngineError::Profile {
                path: label.clone(),
                msg: e.to_string(),
            })?
        } else {
            serde_json::to_string_pretty(self).map_err(|e| EngineError::Profile {
                path: label.clone(),
                msg: e.to_string(),
            })?
        };
        std::fs::write(path, text).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A built-in GPU class: `rtx3080`, `rtx3090` or `rtx4090`.
    pub fn builtin(name: &str) -> Result<Self> {
        let (cap_gb, prefill, bw_gb_s) = match name.to_ascii_lowercase().as_str() {
            "rtx3080" => (10u64, 2500.0, 760.0),
            "rtx3090" => (20, 4000.0, 936.0),
            "rtx4090" => (24, 8000.0, 1008.0),
            _ => return Err(EngineError::UnknownProfile(name.to_string())),
        };
        const WEIGHTS_GB: f64 = 2.47; // Llama-3.2-1B, BF16
        const OVERHEAD_S: f64 = 0.003;
        let cap = cap_gb * 1_000_000_000;
        let t = |kv: u64| OVERHEAD_S + (WEIGHTS_GB * 1e9 + kv as f64) / (bw_gb_s * 1e9);
        Ok(Profile {
            name: name.to_ascii_lowercase(),
            source: format!(
                "built-in: LYREO paper GPU class ({cap_gb} GB, prefill {prefill} tok/s); decode = \
                 memory-bound roofline at {bw_gb_s} GB/s over 2.47 GB weights + KV, + 3 ms"
            ),
            kv_capacity_bytes: cap,
            kv_bytes_per_token: 16_384,
            prefill_tok_s: prefill,
            prefill_overhead_s: 0.0,
            decode: vec![DecodeCurve {
                batch: 1,
                points: vec![
                    CurvePoint {
                        kv_bytes: 0,
                        step_s: t(0),
                    },
                    CurvePoint {
                        kv_bytes: cap,
                        step_s: t(cap),
                    },
                ],
            }],
        })
    }
}

/// Batch sizes to fit a profile on when its error is to be measured on the
/// `measured` batch sizes: batch 1, the geometric midpoint of each pair of
/// neighbouring measured sizes, and 1.5× the largest, leaving out any measured
/// size — so every measured size except 1 is held out (interpolated, never a
/// fitted grid point). For 1, 4, 16, 32: 1, 2, 8, 23, 48.
pub fn held_out_fit_batches(measured: &[usize]) -> Vec<usize> {
    let mut m: Vec<usize> = measured.iter().copied().filter(|&b| b > 0).collect();
    m.sort_unstable();
    m.dedup();
    let mut fit = vec![1];
    for w in m.windows(2) {
        let mid = ((w[0] * w[1]) as f64).sqrt().round() as usize;
        if mid > w[0] && mid < w[1] {
            fit.push(mid);
        }
    }
    if let Some(&max) = m.last() {
        fit.push((max * 3).div_ceil(2).max(2));
    }
    fit.sort_unstable();
    fit.dedup();
    fit.retain(|b| *b == 1 || !m.contains(b));
    fit
}

/// Mean relative error |predicted − measured| / measured of a profile's step
/// time over `(batch, occupancy bytes, measured step seconds)` samples
/// (samples with a non-positive time are skipped); `None` without samples.
pub fn mean_relative_error(profile: &Profile, samples: &[(usize, u64, f64)]) -> Option<f64> {
    let errs: Vec<f64> = samples
        .iter()
        .filter(|s| s.2 > 0.0)
        .map(|&(b, occ, real)| (profile.step_time(b, occ) - real).abs() / real)
        .collect();
    (!errs.is_empty()).then(|| errs.iter().sum::<f64>() / errs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_decrease_with_occupancy() {
        for n in ["rtx3080", "rtx3090", "rtx4090"] {
            let p = Profile::builtin(n).unwrap();
            p.validate(n).unwrap();
            let lo = p.decode_tok_s(8, 0);
            let hi = p.decode_tok_s(8, p.kv_capacity_bytes);
            assert!(hi < lo, "{n}");
        }
        let p = Profile::builtin("rtx4090").unwrap();
        assert_eq!(p.kv_capacity_bytes, 24_000_000_000);
        assert_eq!(p.prefill_tok_s, 8000.0);
        assert!((p.prefill_time(800) - 0.1).abs() < 1e-12);
        assert!(Profile::builtin("h100").is_err());
    }

    #[test]
    fn interpolation_by_hand() {
        let p = Profile {
            name: "t".into(),
            source: String::new(),
            kv_capacity_bytes: 1000,
            kv_bytes_per_token: 10,
            prefill_tok_s: 100.0,
            prefill_overhead_s: 0.5,
            decode: vec![
                DecodeCurve {
                    batch: 1,
                    points: vec![
                        CurvePoint {
                            kv_bytes: 0,
                            step_s: 1.0,
                        },
                        CurvePoint {
                            kv_bytes: 100,
                            step_s: 2.0,
                        },
                    ],
                },
                DecodeCurve {
                    batch: 5,
                    points: vec![
                        CurvePoint {
                            kv_bytes: 0,
                            step_s: 3.0,
                        },
                        CurvePoint {
                            kv_bytes: 100,
                            step_s: 5.0,
                        },
                    ],
                },
            ],
        };
        p.validate("t").unwrap();
        assert!((p.step_time(1, 50) - 1.5).abs() < 1e-12);
        assert!((p.step_time(5, 50) - 4.0).abs() < 1e-12);
        assert!((p.step_time(3, 50) - 2.75).abs() < 1e-12); // halfway 1.5 → 4.0
        assert!((p.step_time(1, 200) - 3.0).abs() < 1e-12); // extrapolated
        assert!((p.step_time(9, 0) - 5.0).abs() < 1e-12); // batch extrapolated
        assert!((p.prefill_time(100) - 1.5).abs() < 1e-12);
        let dir = std::env::temp_dir();
        for ext in ["json", "toml"] {
            let f = dir.join(format!(
                "edgemu-engine-profile-test-{}.{ext}",
                std::process::id()
            ));
            p.save(&f).unwrap();
            assert_eq!(Profile::load(&f).unwrap(), p);
            let _ = std::fs::remove_file(&f);
        }
    }

    #[test]
    fn fit_grid_holds_out_the_measured_batches() {
        assert_eq!(held_out_fit_batches(&[1, 4, 16, 32]), vec![1, 2, 8, 23, 48]);
        let f = held_out_fit_batches(&[1, 4, 16, 32, 64, 128]);
        assert_eq!(f, vec![1, 2, 8, 23, 45, 91, 192]);
        for b in [4, 16, 32, 64, 128] {
            assert!(!f.contains(&b));
        }
        assert_eq!(held_out_fit_batches(&[16]), vec![1, 24]);
    }

    #[test]
    fn relative_error_by_hand() {
        let p = Profile::builtin("rtx4090").unwrap();
        let t = p.step_time(4, 0);
        let e = mean_relative_error(&p, &[(4, 0, t), (4, 0, t / 2.0), (4, 0, 0.0)]).unwrap();
        assert!((e - 0.5).abs() < 1e-12, "{e}"); // 0 and 100 %, the zero-time sample skipped
        assert!(mean_relative_error(&p, &[]).is_none());
    }

    #[test]
    fn invalid_profiles_are_errors() {
        let mut p = Profile::builtin("rtx3090").unwrap();
        p.decode[0].points[1].kv_bytes = 0;
        assert!(p
            .validate("x")
            .unwrap_err()
            .to_string()
            .contains("kv_bytes must increase"));
        let f = std::env::temp_dir().join(format!(
            "edgemu-engine-bad-profile-{}.json",
            std::process::id()
        ));
        std::fs::write(&f, "{\"name\": 3}").unwrap();
        let e = Profile::load(&f).unwrap_err().to_string();
        assert!(e.contains(&f.display().to_string()), "{e}");
        let _ = std::fs::remove_file(&f);
    }
}
