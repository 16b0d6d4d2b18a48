//! `edgemu profile-kv`: measure the KV-utility profile of the model on a
//! profiling set of real ShareGPT contexts (core: `edgemu_gpu::kv_utility`,
//! contexts: `edgemu_data::contexts`) and write it as JSON.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_assets::Asset;
use edgemu_data::contexts::{build, ContextConfig};
use edgemu_gpu::kv_utility::{profile, ProfileSettings};
use edgemu_gpu::model::{load, parse_device};
use edgemu_tokenizer::resolve_model_path;

#[derive(Args, Debug, Clone)]
pub struct ProfileKvArgs {
    /// Where to write the profile (JSON; the heatmap goes beside it). The
    /// shipped profiles are compiled into the binary: writing
    /// `gpu/profiles/smollm2-135m-kvu.json` in a checkout and building again
    /// replaces the built-in default.
    #[arg(long, required_unless_present = "retention")]
    pub out: Option<PathBuf>,
    /// The GGUF model (default: the fetched SmolLM2-135M).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Number of profiling contexts.
    #[arg(long, default_value_t = 16)]
    pub contexts: usize,
    /// Context length in tokens.
    #[arg(long, default_value_t = 1536)]
    pub context_tokens: usize,
    /// Seed of the profiling/evaluation split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 6)]
    pub layer_groups: usize,
    #[arg(long, default_value_t = 8)]
    pub position_bins: usize,
    /// How a cell is removed when measuring it: zero-fill (its K and V zeroed,
    /// as the handoff's zero-fill rebuild does) or mask (its rows masked out of
    /// attention, as `experiment priorityfec --mode mask` does). The retention
    /// check uses the rebuild the profile was measured with.
    #[arg(long, default_value = "zero-fill")]
    pub rebuild: String,
    /// A small run for checking by hand: 2 contexts of 512 tokens.
    #[arg(long)]
    pub quick: bool,
    /// Instead of profiling: the held-out retention check (Fig. 2c) of this
    /// profile (a file, or `built-in:smollm2-135m-kvu` /
    /// `built-in:smollm2-135m-kvu-mask`) on `--contexts` evaluation contexts.
    #[arg(long, value_parser = edgemu_gpu::shipped_profiles::parse_profile)]
    pub retention: Option<Asset>,
}

pub fn run(args: &ProfileKvArgs) -> Result<()> {
    if !args.quick && args.contexts == 0 {
        anyhow::bail!("--contexts 0: profiling and the retention check need at least one context");
    }
    if let Some(p) = &args.retention {
        let n = if args.quick { 2 } else { args.contexts };
        return crate::kv_retention::run_check(p, args.model.as_deref(), n, args.seed).map(|_| ());
    }
    let out = args
        .out
        .clone()
        .context("name where the profile goes with --out")?;
    let started = Instant::now();
    let path = resolve_model_path(args.model.as_deref()).context("finding the model")?;
    let device = parse_device("cpu")?;
    let lm = load(&path, &device, None).context("loading the model")?;
    let chat = lm
        .chat
        .as_ref()
        .context("the model has no ChatML chat template")?;
    let data = edgemu_data::locate().context("finding the ShareGPT data")?;
    let convs = edgemu_data::sharegpt::load(&data).context("reading ShareGPT")?;
    let (n, tokens) = if args.quick {
        (2, 512)
    } else {
        (args.contexts, args.context_tokens)
    };
    let sets = build(
        &convs,
        &lm.tokenizer,
        chat,
        &ContextConfig {
            tokens,
            profiling: n,
            evaluation: 0,
            seed: args.seed,
        },
    )
    .context("building contexts")?;
    let ctxs: Vec<Vec<u32>> = sets.profiling.into_iter().map(|c| c.tokens).collect();
    let settings = ProfileSettings {
        layer_groups: args.layer_groups,
        position_bins: args.position_bins,
        window: 64,
        rebuild: crate::experiment::priorityfec::missing_rows(&args.rebuild)
            .context("--rebuild")?,
    };
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let t0 = Instant::now();
    let p = profile(&lm.model, &name, &ctxs, &settings, |i| {
        eprintln!(
            "context {}/{} done after {:.1} s",
            i + 1,
            n,
            t0.elapsed().as_secs_f64()
        );
    })
    .context("profiling")?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    p.save(&out).context("writing the profile")?;
    let images = write_heatmap(&p, &out).context("drawing the utility heatmap")?;
    println!(
        "KV-utility profile of {name}: {n} contexts × {tokens} tokens, window 64, total variation"
    );
    println!(
        "layer groups  (mean TV → u_L): {}",
        fmt(&p.layer_distance, &p.layer_utility)
    );
    println!(
        "position bins (mean TV → u_P): {}",
        fmt(&p.position_distance, &p.position_utility)
    );
    for i in &images {
        println!("wrote {}", i.display());
    }
    println!(
        "wrote {}; profiling {:.1} s, total {:.1} s",
        out.display(),
        t0.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn fmt(dist: &[f64], util: &[f64]) -> String {
    dist.iter()
        .zip(util)
        .map(|(d, u)| format!("{d:.4}→{u:.3}"))
        .collect::<Vec<_>>()
        .join("  ")
}

/// The layer-group × position-bin utility cells as a plot grid (rows: layer ranges,
/// columns: token ranges).
fn heatmap_grid(p: &edgemu_gpu::kv_utility::KvUtilityProfile) -> crate::plots::Grid {
    use edgemu_gpu::kv_utility::{layer_group, position_bin};
    let (groups, bins) = (p.settings.layer_groups, p.settings.position_bins);
    let rows = (0..groups)
        .map(|g| {
            let r = layer_group(g, groups, p.model.n_layers);
            format!("L{}-{}", r.start, r.end.saturating_sub(1))
        })
        .collect();
    let cols = (0..bins)
        .map(|b| {
            let r = position_bin(b, bins, p.context_tokens);
            format!("{}-{}", r.start, r.end.saturating_sub(1))
        })
        .collect();
    crate::plots::Grid {
        rows,
        cols,
        values: p.cells.clone(),
    }
}

/// Writes `<profile stem>-heatmap.png` and `.svg` beside the profile JSON.
pub fn write_heatmap(
    p: &edgemu_gpu::kv_utility::KvUtilityProfile,
    json: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    let dir = json
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let stem = json
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "kv-utility".into());
    let labels = crate::plots::Labels::new(
        format!(
            "KV utility of {} (cells {}, largest 1)",
            p.model.name,
            match p.settings.rebuild {
                edgemu_gpu::MissingRows::ZeroFill => "zeroed",
                edgemu_gpu::MissingRows::Mask => "masked",
            }
        ),
        "token positions",
        "layers",
    );
    Ok(crate::plots::heatmap(
        dir,
        &format!("{stem}-heatmap"),
        crate::plots::Formats::default(),
        &labels,
        &heatmap_grid(p),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heatmap_beside_the_profile() {
        let p: edgemu_gpu::kv_utility::KvUtilityProfile = serde_json::from_value(serde_json::json!({
            "format": "edgemu-kv-utility/1",
            "model": {"name": "m.gguf", "n_layers": 30, "n_kv_heads": 3, "head_dim": 64, "vocab_size": 10},
            "settings": {"layer_groups": 3, "position_bins": 4, "window": 64},
            "contexts": 2, "context_tokens": 512,
            "layer_distance": [0.1, 0.2, 0.3], "position_distance": [0.1, 0.1, 0.1, 0.1],
            "layer_utility": [0.2, 0.3, 0.5], "position_utility": [0.25, 0.25, 0.25, 0.25],
            "cells": [[1.0, 0.5, 0.2, 0.1], [0.3, 0.2, 0.1, 0.0], [0.9, 0.4, 0.2, 0.05]]
        }))
        .expect("profile JSON");
        let dir = std::env::temp_dir().join(format!("edgemu-pkv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = write_heatmap(&p, &dir.join("kv-utility.json")).unwrap();
        assert_eq!(
            files,
            vec![
                dir.join("kv-utility-heatmap.png"),
                dir.join("kv-utility-heatmap.svg")
            ]
        );
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(
            svg.contains("L20-29") && svg.contains("384-511"),
            "labels missing"
        );
    }
}
