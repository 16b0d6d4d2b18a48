//! `edgemu bench decode` and `edgemu profile`: the gpu crate's real-backend
//! measurements, with a progress bar and errors that say how to get the model.

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_gpu::bench::{run_decode_bench_with_progress, DecodeBenchOptions};
use edgemu_gpu::model::{RandomWeights, WeightFormat, WeightLayout};
use edgemu_gpu::profile::{run_profile, ProfileOptions};
use std::path::PathBuf;

/// Which weights and where: the options `bench decode`, `profile` and
/// `generate` share.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// `cpu`, or `cuda:N` with a build that has the `cuda` feature.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// GGUF file (default: $EDGEMU_GGUF, else SmolLM2-135M-Instruct.Q4_1.gguf in $EDGEMU_MODEL_DIR or the cache's models/; `edgemu fetch model` fetches it).
    #[arg(long, conflicts_with = "random_weights")]
    pub model: Option<PathBuf>,
    /// Seeded random weights instead of the GGUF: `[ARCH:]SEED`, ARCH `smollm2-135m`
    /// (default; SmolLM2-135M's shapes and quantized types, same time per token) or `tiny`.
    #[arg(long, value_name = "[ARCH:]SEED")]
    pub random_weights: Option<RandomWeights>,
    /// Weight layout as PREFILL,DECODE (keep, q4_0, q8_0, f32, f16, q8_cpu, q8_int); default: chosen per device.
    #[arg(long, value_parser = parse_layout)]
    pub layout: Option<WeightLayout>,
}

#[derive(Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Fewer decode steps (figures are noisier).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub weights: ModelArgs,
    /// Decode batch sizes, comma-separated (e.g. 1,4,16,32,64,128 on a GPU).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,32")]
    pub batches: Vec<usize>,
    /// Skip the baselines (candle-transformers, llama.cpp).
    #[arg(long)]
    pub no_baselines: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Where to write the profile (.json or .toml).
    pub out: PathBuf,
    #[command(flatten)]
    pub weights: ModelArgs,
    /// A small grid (batch 1, 8, 32; context 64, 512; 2 steps).
    #[arg(long)]
    pub quick: bool,
}

pub(crate) fn parse_layout(v: &str) -> Result<WeightLayout, String> {
    let (p, d) = v.split_once(',').unwrap_or((v, v));
    match (WeightFormat::parse(p), WeightFormat::parse(d)) {
        (Some(prefill), Some(decode)) => Ok(WeightLayout { prefill, decode }),
        _ => Err(format!(
            "bad layout `{v}`: use PREFILL,DECODE with formats keep, q4_0, q8_0, f32, f16, q8_cpu, q8_int"
        )),
    }
}

fn bar(message: &'static str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(message);
    pb
}

pub fn run(args: &DecodeArgs) -> Result<()> {
    let opts = DecodeBenchOptions {
        model: args.weights.model.clone(),
        random_weights: args.weights.random_weights,
        device: args.weights.device.clone(),
        quick: args.quick,
        layout: args.weights.layout,
        batches: args.batches.clone(),
        baselines: !args.no_baselines,
    };
    let pb = bar("bench decode");
    let progress = |done: usize, total: usize| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    };
    let report = run_decode_bench_with_progress(&opts, &progress).context("decode benchmark")?;
    pb.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

pub fn profile(args: &ProfileArgs) -> Result<()> {
    let mut opts = ProfileOptions {
        model: args.weights.model.clone(),
        random_weights: args.weights.random_weights,
        device: args.weights.device.clone(),
        layout: args.weights.layout,
        ..ProfileOptions::default()
    };
    if args.quick {
        opts.batch_sizes = vec![1, 8, 32];
        opts.context_lens = vec![64, 512];
        opts.steps = 2;
    }
    let pb = bar("profile");
    let progress = |done: usize, total: usize| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    };
    let p = run_profile(&opts, &progress).context("profiling the real backend")?;
    pb.finish_and_clear();
    p.save(&args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "wrote {} ({} decode curves, prefill {:.0} tok/s)",
        args.out.display(),
        p.decode.len(),
        p.prefill_tok_s
    );
    Ok(())
}
