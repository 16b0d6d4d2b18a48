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
//! - **`sharegpt`**: real conversations (ShareGPT V3, the file
//!   `scripts/fetch-data.sh` fetches, read through `edgemu-data`): the first
//!   user turn is the prompt, the first assistant turn after it the answer,
//!   both tokenized with SmolLM2's tokenizer (from the model's GGUF) and
//!   truncated to the configured limits. The first [`SHAREGPT_POOL`]
//!   conversations that have both turns form the pool; each request draws
//!   one uniformly (seeded). The pool is the head of the file rather than a
//!   sample of all 94 k conversations so that starting a user costs a second,
//!   not a full parse and tokenization of 125 MB.

use std::ops::ControlFlow;
use std::sync::Arc;

use edgemu_data::{Conversation, Role};
use edgemu_tokenizer::Tokenizer;
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
    /// Measured `(input, output)` pairs, drawn uniformly.
    Empirical { pairs: Arc<Vec<(u32, u32)>> },
}

/// Conversations read from the head of the ShareGPT file for the pool.
pub const SHAREGPT_POOL: usize = 2000;

/// `(first user turn, first assistant turn after it)` token counts of each
/// conversation that has both, truncated to `max_input` / `max_output`
/// (a turn that tokenizes to nothing counts as 1 token).
pub fn sharegpt_pairs(
    conversations: impl IntoIterator<Item = Conversation>,
    tokenizer: &Tokenizer,
    max_input: u32,
    max_output: u32,
) -> Vec<(u32, u32)> {
    let len = |text: &str, max: u32| (tokenizer.encode(text).len() as u32).clamp(1, max.max(1));
    conversations
        .into_iter()
        .filter_map(|c| {
            let user = c.turns.iter().position(|t| t.from == Role::User)?;
            let answer = c.turns[user + 1..]
                .iter()
                .find(|t| t.from == Role::Assistant)?;
            Some((
                len(&c.turns[user].text, max_input),
                len(&answer.text, max_output),
            ))
        })
        .collect()
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
            "sharegpt" => Workload::sharegpt(MAX_LEN, MAX_LEN),
            _ => Err(ServingError::UnknownWorkload {
                name: name.to_string(),
                valid: WORKLOADS.join(", "),
            }),
        }
    }

    /// The `sharegpt` workload with lengths truncated to `max_input` /
    /// `max_output` tokens: needs the ShareGPT file (`edgemu_data::locate`)
    /// and the model's GGUF for its tokenizer; says which one is missing.
    pub fn sharegpt(max_input: u32, max_output: u32) -> Result<Self, ServingError> {
        let unavailable = |why: String| ServingError::WorkloadUnavailable {
            name: "sharegpt".to_string(),
            why,
        };
        let data = edgemu_data::locate().map_err(|e| unavailable(e.to_string()))?;
        let model = edgemu_tokenizer::resolve_model_path(None).map_err(|e| {
            unavailable(format!(
                "its lengths are counted with SmolLM2's tokenizer: {e}"
            ))
        })?;
        Workload::sharegpt_at(&data, &model, max_input, max_output)
    }

    /// [`Workload::sharegpt`] from the ShareGPT JSON at `data` and the GGUF
    /// at `model`; built once per process for the same files and limits (the
    /// users of a run share the pool).
    pub fn sharegpt_at(
        data: &std::path::Path,
        model: &std::path::Path,
        max_input: u32,
        max_output: u32,
    ) -> Result<Self, ServingError> {
        // Every user of a run builds the same pool: build it once per process.
        type Key = (std::path::PathBuf, std::path::PathBuf, u32, u32);
        static POOLS: std::sync::OnceLock<std::sync::Mutex<Vec<(Key, Workload)>>> =
            std::sync::OnceLock::new();
        let pools = POOLS.get_or_init(Default::default);
        let key: Key = (
            data.to_path_buf(),
            model.to_path_buf(),
            max_input,
            max_output,
        );
        if let Some((_, w)) = pools
            .lock()
            .ok()
            .and_then(|p| p.iter().find(|(k, _)| *k == key).cloned())
        {
            return Ok(w);
        }
        let w = Workload::build_sharegpt(data, model, max_input, max_output)?;
        if let Ok(mut p) = pools.lock() {
            p.push((key, w.clone()));
        }
        Ok(w)
    }

    fn build_sharegpt(
        data: &std::path::Path,
        model: &std::path::Path,
        max_input: u32,
        max_output: u32,
    ) -> Result<Self, ServingError> {
        let unavailable = |why: String| ServingError::WorkloadUnavailable {
            name: "sharegpt".to_string(),
            why,
        };
        let gguf = edgemu_tokenizer::GgufMetadata::open(model)
            .map_err(|e| unavailable(format!("{}: {e}", model.display())))?;
        let tokenizer = Tokenizer::from_gguf(&gguf)
            .map_err(|e| unavailable(format!("tokenizer of {}: {e}", model.display())))?;
        let mut head = Vec::with_capacity(SHAREGPT_POOL);
        edgemu_data::sharegpt::for_each(data, |c| {
            head.push(c);
            if head.len() >= SHAREGPT_POOL {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(|e| unavailable(e.to_string()))?;
        Workload::from_pairs(sharegpt_pairs(head, &tokenizer, max_input, max_output)).ok_or_else(
            || {
                unavailable(format!(
                    "{} has no conversation with a user and an assistant turn",
                    data.display()
                ))
            },
        )
    }

    /// An empirical workload; `None` when `pairs` is empty.
    pub fn from_pairs(pairs: Vec<(u32, u32)>) -> Option<Self> {
        (!pairs.is_empty()).then(|| Workload::Empirical {
            pairs: Arc::new(pairs),
        })
    }

    /// One request's `(input, output)` lengths.
    pub fn sample(&self, rng: &mut impl Rng) -> (u32, u32) {
        match *self {
            Workload::Empirical { ref pairs } => pairs[rng.random_range(0..pairs.len())],
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
    }

    #[test]
    fn sharegpt_pairs_take_the_first_user_and_assistant_turns_truncated() {
        let tok = edgemu_tokenizer::tiny::tokenizer();
        let convs = edgemu_data::builtin::conversations();
        let pairs = sharegpt_pairs(convs.clone(), &tok, 4096, 4096);
        assert_eq!(pairs.len(), convs.len());
        // builtin_2 starts with a system turn: its prompt is the user turn.
        let c = &convs[2];
        assert_eq!(pairs[2].0 as usize, tok.encode(&c.turns[1].text).len());
        assert_eq!(pairs[2].1 as usize, tok.encode(&c.turns[2].text).len());
        let short = sharegpt_pairs(convs, &tok, 5, 3);
        assert!(short
            .iter()
            .all(|&(i, o)| (1..=5).contains(&i) && (1..=3).contains(&o)));
        let w = Workload::from_pairs(short.clone()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..50 {
            assert!(short.contains(&w.sample(&mut rng)));
        }
        assert!(Workload::from_pairs(Vec::new()).is_none());
    }

    #[test]
    fn sharegpt_without_its_files_names_them() {
        let nowhere = std::path::Path::new("/nonexistent/ShareGPT.json");
        let model = std::path::Path::new("/nonexistent/model.gguf");
        let e = Workload::sharegpt_at(nowhere, model, 64, 64)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sharegpt") && e.contains("/nonexistent/model.gguf"),
            "{e}"
        );
    }

    #[test]
    fn sharegpt_from_the_real_file() {
        let (Ok(data), Ok(model)) = (
            edgemu_data::locate(),
            edgemu_tokenizer::resolve_model_path(None),
        ) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI must have the ShareGPT file and the model"
            );
            eprintln!(
                "skipped: ShareGPT file or model absent (scripts/fetch-data.sh, fetch-model.sh)"
            );
            return;
        };
        let w = Workload::sharegpt_at(&data, &model, 512, 256).unwrap();
        let Workload::Empirical { pairs } = &w else {
            panic!("{w:?}")
        };
        assert!(pairs.len() > SHAREGPT_POOL / 2, "{}", pairs.len());
        assert!(pairs
            .iter()
            .all(|&(i, o)| (1..=512).contains(&i) && (1..=256).contains(&o)));
    }
}
