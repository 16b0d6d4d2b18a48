//! Greedy generation for a batch of synthetic prompts: what `edgemu generate`
//! prints, and what the GPU check compares between `cpu` and `cuda:N` for the
//! same random model and seed.
//!
//! Sequence `i` gets a deterministic prompt of `prompt_len + i` token ids (so
//! the batch mixes lengths and positions); all prompts are prefilled in one
//! forward pass and then decoded together, one token per sequence per pass,
//! through the same selective-batching forward pass the engine uses. No
//! end-of-sequence stop: every sequence yields exactly `new_tokens` tokens.

use serde::Serialize;

use crate::error::Result;
use crate::model::{ModelSource, Phase, SeqInput, WeightLayout};

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub source: ModelSource,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// `None` → the device's default layout.
    pub layout: Option<WeightLayout>,
    /// Number of sequences.
    pub batch: usize,
    /// Prompt length of the first sequence (sequence `i` has `prompt_len + i`).
    pub prompt_len: usize,
    /// Tokens generated per sequence.
    pub new_tokens: usize,
}

/// The generated tokens and where they came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Generated {
    pub model: String,
    pub device: String,
    pub layout: String,
    /// One row per sequence.
    pub tokens: Vec<Vec<u32>>,
}

/// The deterministic prompt of sequence `i` (ids in `3..vocab`, avoiding the specials).
pub fn synthetic_prompt(i: usize, len: usize, vocab: usize) -> Vec<u32> {
    let span = vocab.saturating_sub(3).max(1) as u64;
    (0..len as u64)
        .map(|j| (3 + (i as u64 * 7919 + j * 31 + 11) % span) as u32)
        .collect()
}

/// Runs the generation (see the module doc).
pub fn generate(opts: &GenerateOptions) -> Result<Generated> {
    let device = crate::model::parse_device(&opts.device)?;
    let lm = opts.source.load(&device, opts.layout)?;
    let m = &lm.model;
    let vocab = m.config().vocab_size;
    let prompts: Vec<Vec<u32>> = (0..opts.batch)
        .map(|i| synthetic_prompt(i, opts.prompt_len.max(1) + i, vocab))
        .collect();
    let mut kvs = prompts
        .iter()
        .map(|p| m.new_kv(p.len() + opts.new_tokens))
        .collect::<Result<Vec<_>>>()?;
    let mut tokens: Vec<Vec<u32>> = vec![Vec::with_capacity(opts.new_tokens); opts.batch];
    if opts.batch > 0 && opts.new_tokens > 0 {
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .zip(&prompts)
            .map(|(kv, p)| SeqInput { tokens: p, kv })
            .collect();
        let mut next = m.greedy(&mut batch, Phase::Prefill)?;
        for (row, t) in tokens.iter_mut().zip(&next) {
            row.push(*t);
        }
        for _ in 1..opts.new_tokens {
            let last = next.clone();
            let mut batch: Vec<SeqInput<'_>> = kvs
                .iter_mut()
                .zip(&last)
                .map(|(kv, t)| SeqInput {
                    tokens: std::slice::from_ref(t),
                    kv,
                })
                .collect();
            next = m.greedy(&mut batch, Phase::Decode)?;
            for (row, t) in tokens.iter_mut().zip(&next) {
                row.push(*t);
            }
        }
    }
    Ok(Generated {
        model: opts.source.label(),
        device: opts.device.clone(),
        layout: m.layout().label(),
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RandomWeights, WeightFormat};

    fn opts(seed: u64, layout: Option<WeightLayout>) -> GenerateOptions {
        GenerateOptions {
            source: ModelSource::Random(RandomWeights {
                arch: crate::model::RandomArch::Tiny,
                seed,
            }),
            device: "cpu".into(),
            layout,
            batch: 3,
            prompt_len: 5,
            new_tokens: 8,
        }
    }

    #[test]
    fn tokens_are_reproducible_by_seed() {
        let a = generate(&opts(7, None)).unwrap();
        assert_eq!(a.tokens.len(), 3);
        assert!(a.tokens.iter().all(|r| r.len() == 8));
        assert_eq!(
            a,
            generate(&opts(7, None)).unwrap(),
            "same seed, same tokens"
        );
        let b = generate(&opts(8, None)).unwrap();
        assert_ne!(
            a.tokens, b.tokens,
            "another seed, other weights, other tokens"
        );
        // The F32 layout (what the CPU/CUDA equality check uses) too.
        let f32 = Some(WeightLayout::uniform(WeightFormat::F32));
        assert_eq!(
            generate(&opts(7, f32)).unwrap().tokens,
            generate(&opts(7, f32)).unwrap().tokens
        );
    }

    #[test]
    fn batched_rows_equal_sequences_alone() {
        let o = opts(11, None);
        let all = generate(&o).unwrap();
        let lm = o.source.load(&candle_core::Device::Cpu, None).unwrap();
        for (i, row) in all.tokens.iter().enumerate() {
            let p = synthetic_prompt(i, o.prompt_len + i, lm.model.config().vocab_size);
            assert_eq!(&lm.model.generate_alone(&p, o.new_tokens).unwrap(), row);
        }
    }
}
