//! `edgemu generate`: greedy tokens of a batch of synthetic prompts, printed as
//! JSON — to compare devices (`cpu` against `cuda:0`) on the same weights.

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_gpu::generate::{generate, GenerateOptions};
use edgemu_gpu::model::ModelSource;

use crate::bench::decode::ModelArgs;

#[derive(Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub weights: ModelArgs,
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
        source: ModelSource::new(args.weights.model.clone(), args.weights.random_weights),
        device: args.weights.device.clone(),
        layout: args.weights.layout,
        batch: args.batch,
        prompt_len: args.prompt_len,
        new_tokens: args.tokens,
    };
    let g = generate(&opts).context("generating")?;
    println!("{}", serde_json::to_string(&g)?);
    Ok(())
}
