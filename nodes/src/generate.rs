//! `edgemu generate`: greedy tokens of a batch of synthetic prompts, printed as
//! JSON — to compare devices (`cpu` against `cuda:0`) on the same weights.

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_gpu::generate::{generate, GenerateOptions};
use edgemu_gpu::model::{ModelSource, RandomWeights, WeightLayout};
use std::path::PathBuf;

use crate::bench::decode::parse_layout;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    /// `cpu`, or `cuda:N` with a build that has the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// GGUF file (default lookup as for `bench decode`).
    #[arg(long, conflicts_with = "random_weights")]
    pub model: Option<PathBuf>,
    /// Seeded random weights: `[ARCH:]SEED` with ARCH `smollm2-135m` (default) or `tiny`.
    #[arg(long, value_name = "[ARCH:]SEED")]
    pub random_weights: Option<RandomWeights>,
    /// Weight layout as PREFILL,DECODE (default: chosen per device).
    #[arg(long, value_parser = parse_layout)]
    pub layout: Option<WeightLayout>,
    /// Number of sequences decoded together.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Prompt length of sequence 0 (sequence i has this + i tokens).
    #[arg(long, default_value_t = 16)]
    pub prompt_len: usize,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
}

pub fn run(args: &GenerateArgs) -> Result<()> {
    let opts = GenerateOptions {
        source: ModelSource::new(args.model.clone(), args.random_weights),
        device: args.device.clone(),
        layout: args.layout,
        batch: args.batch,
        prompt_len: args.prompt_len,
        new_tokens: args.tokens,
    };
    let g = generate(&opts).context("generating")?;
    println!("{}", serde_json::to_string(&g)?);
    Ok(())
}
