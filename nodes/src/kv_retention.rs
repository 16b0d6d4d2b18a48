//! `edgemu profile-kv --retention PROFILE`: the PriorityFEC paper's held-out
//! check of a KV-utility profile (Fig. 2c).
//!
//! On evaluation contexts (disjoint from the profile's profiling set: the
//! split asks for the profile's profiling contexts first), each context is
//! prefilled except its last `w` = 64 tokens, and its cache cut into the
//! profile's cells (layer group × position bin). At each retention level
//! (20/40/60/80 % of the cells) two caches are built: the highest-utility
//! cells kept, or as many cells chosen at random (seeded), every other row
//! zeroed (the handoff's zero-fill rebuild). Then the last `w` context tokens
//! are fed (teacher forcing) to the full cache and both pruned ones in one
//! batch, and we count the positions where a pruned cache's argmax equals the
//! full cache's. The paper reports 55.2 % (utility) vs 44.0 % (random) at 40 %.

use std::ops::Range;

use anyhow::{Context as _, Result};
use edgemu_gpu::handoff_quality::{rebuild, PartialBlock};
use edgemu_gpu::kv_transfer::export;
use edgemu_gpu::kv_utility::{layer_group, position_bin, KvUtilityProfile};
use edgemu_gpu::model::llama::{Llama, Phase, SeqInput};
use edgemu_gpu::KvDtype;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Retention levels of Fig. 2c.
pub const LEVELS: [f64; 4] = [0.2, 0.4, 0.6, 0.8];
/// Teacher-forced positions per context.
pub const WINDOW: usize = 64;

/// Top-1 agreement per level: `(utility-kept, random-kept)`, the mean over
/// contexts and each context's value (`per_context[level][context]`), so the
/// printout can give a confidence interval and the paired difference.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    pub levels: Vec<f64>,
    pub utility: Vec<f64>,
    pub random: Vec<f64>,
    pub utility_per_context: Vec<Vec<f64>>,
    pub random_per_context: Vec<Vec<f64>>,
    pub contexts: usize,
}

impl Retention {
    /// Mean and 95 % CI (Student t over contexts) of utility-kept,
    /// random-kept and their paired difference at level index `l`.
    pub fn intervals(&self, l: usize) -> [Option<(f64, f64, f64)>; 3] {
        use edgemu_stats::mean_ci95;
        let u = &self.utility_per_context[l];
        let r = &self.random_per_context[l];
        let d: Vec<f64> = u.iter().zip(r).map(|(a, b)| a - b).collect();
        [mean_ci95(u), mean_ci95(r), mean_ci95(&d)]
    }
}

/// The cells of `profile`, highest utility first (ties by index).
fn ranked_cells(profile: &KvUtilityProfile) -> Vec<(usize, usize)> {
    let mut cells: Vec<(usize, usize)> = (0..profile.settings.layer_groups)
        .flat_map(|g| (0..profile.settings.position_bins).map(move |b| (g, b)))
        .collect();
    cells.sort_by(|a, b| profile.cells[b.0][b.1].total_cmp(&profile.cells[a.0][a.1]));
    cells
}

/// Top-1 agreement of caches keeping `keep` cells, per keep-set, on one context.
fn agreement(
    model: &Llama,
    profile: &KvUtilityProfile,
    context: &[u32],
    keeps: &[Vec<(usize, usize)>],
) -> Result<Vec<f64>> {
    let c = model.config().clone();
    let prefix = context.len() - WINDOW;
    let base = model.prefilled(&context[..prefix], context.len())?;
    let blocks = export(&base, 0..c.n_layers, 0..prefix, KvDtype::Bf16)?;
    let (groups, bins) = (
        profile.settings.layer_groups,
        profile.settings.position_bins,
    );
    let mut kvs = vec![base];
    for keep in keeps {
        let parts: Vec<PartialBlock> = blocks
            .iter()
            .map(|b| {
                let row = c.head_dim * 2;
                let half = b.k.len();
                let mut present: Vec<Range<usize>> = Vec::new();
                let g = (0..groups)
                    .find(|&g| layer_group(g, groups, c.n_layers).contains(&b.layer))
                    .unwrap_or(groups - 1);
                for bin in 0..bins {
                    if !keep.contains(&(g, bin)) {
                        continue;
                    }
                    let r = position_bin(bin, bins, prefix);
                    for h in 0..c.n_kv_heads {
                        let span = (h * prefix + r.start) * row..(h * prefix + r.end) * row;
                        present.push(span.clone());
                        present.push(half + span.start..half + span.end);
                    }
                }
                let mut p = PartialBlock::complete(b);
                p.present = present;
                p
            })
            .collect();
        kvs.push(rebuild(
            &c,
            model.device(),
            prefix,
            &parts,
            profile.settings.rebuild,
        )?);
    }
    let mut hits = vec![0usize; keeps.len()];
    for step in 0..WINDOW {
        let tok = &context[prefix + step..prefix + step + 1];
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .map(|kv| SeqInput { tokens: tok, kv })
            .collect();
        let logits = model.forward(&mut batch, Phase::Decode)?;
        let am: Vec<u32> = logits
            .argmax(candle_core::D::Minus1)
            .and_then(|t| t.to_dtype(candle_core::DType::U32))
            .and_then(|t| t.to_vec1::<u32>())
            .context("retention argmax")?;
        for (i, h) in hits.iter_mut().enumerate() {
            if am[i + 1] == am[0] {
                *h += 1;
            }
        }
    }
    Ok(hits.iter().map(|&h| h as f64 / WINDOW as f64).collect())
}

/// Runs the check on `contexts` (each longer than [`WINDOW`] + bins tokens).
pub fn retention(
    model: &Llama,
    profile: &KvUtilityProfile,
    contexts: &[Vec<u32>],
    seed: u64,
    mut progress: impl FnMut(usize),
) -> Result<Retention> {
    let ranked = ranked_cells(profile);
    let n = ranked.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut utility = vec![0.0; LEVELS.len()];
    let mut random = vec![0.0; LEVELS.len()];
    let mut utility_per_context = vec![Vec::new(); LEVELS.len()];
    let mut random_per_context = vec![Vec::new(); LEVELS.len()];
    for (i, ctx) in contexts.iter().enumerate() {
        anyhow::ensure!(
            ctx.len() > WINDOW + profile.settings.position_bins,
            "context {i} has {} tokens, too few for the retention check",
            ctx.len()
        );
        let mut keeps = Vec::new();
        for &level in &LEVELS {
            let k = ((level * n as f64).round() as usize).clamp(1, n);
            keeps.push(ranked[..k].to_vec());
            let mut shuffled = ranked.clone();
            shuffled.shuffle(&mut rng);
            keeps.push(shuffled[..k].to_vec());
        }
        let a = agreement(model, profile, ctx, &keeps)?;
        for l in 0..LEVELS.len() {
            utility[l] += a[2 * l] / contexts.len() as f64;
            random[l] += a[2 * l + 1] / contexts.len() as f64;
            utility_per_context[l].push(a[2 * l]);
            random_per_context[l].push(a[2 * l + 1]);
        }
        progress(i);
    }
    Ok(Retention {
        levels: LEVELS.to_vec(),
        utility,
        random,
        utility_per_context,
        random_per_context,
        contexts: contexts.len(),
    })
}

/// `edgemu profile-kv --retention PROFILE`: loads the model and `profile`,
/// builds `n` evaluation contexts of the profile's length, prints both curves
/// next to the paper's.
pub fn run_check(
    profile_source: &edgemu_assets::Asset,
    model: Option<&std::path::Path>,
    n: usize,
    split_seed: u64,
) -> Result<Retention> {
    use edgemu_data::contexts::{build, ContextConfig};
    use edgemu_gpu::kv_utility::model_identity;
    use edgemu_gpu::model::{load, parse_device};
    use edgemu_tokenizer::resolve_model_path;
    let t0 = std::time::Instant::now();
    let path = resolve_model_path(model).context("finding the model")?;
    let lm = load(&path, &parse_device("cpu")?, None).context("loading the model")?;
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let profile = KvUtilityProfile::load(profile_source, &model_identity(&name, lm.model.config()))
        .with_context(|| format!("loading {}", profile_source.label().display()))?;
    let chat = lm
        .chat
        .as_ref()
        .context("the model has no ChatML chat template")?;
    let data = edgemu_data::locate().context("finding the ShareGPT data")?;
    let convs = edgemu_data::sharegpt::load(&data).context("reading ShareGPT")?;
    let sets = build(
        &convs,
        &lm.tokenizer,
        chat,
        &ContextConfig {
            tokens: profile.context_tokens,
            profiling: profile.contexts,
            evaluation: n,
            seed: split_seed,
        },
    )
    .context("building evaluation contexts")?;
    let ctxs: Vec<Vec<u32>> = sets.evaluation.into_iter().map(|c| c.tokens).collect();
    let r = retention(&lm.model, &profile, &ctxs, split_seed, |i| {
        eprintln!(
            "retention: context {}/{n} done after {:.1} s",
            i + 1,
            t0.elapsed().as_secs_f64()
        )
    })?;
    println!(
        "held-out retention check (Fig. 2c): {} evaluation contexts × {} tokens, teacher-forced top-1 agreement with the full cache over the last {WINDOW} tokens",
        r.contexts, profile.context_tokens
    );
    println!(
        "mean ± 95 % CI over contexts (Student t); difference = utility − random on the same context (paper at 40 %: 55.2 % vs 44.0 %)"
    );
    println!("retention   utility-kept      random-kept       difference");
    let fmt = |ci: Option<(f64, f64, f64)>| match ci {
        Some((m, lo, hi)) => format!("{:>5.1} ± {:>4.1} %", 100.0 * m, 100.0 * (hi - lo) / 2.0),
        None => "—".to_string(),
    };
    for i in 0..r.levels.len() {
        let [u, rnd, d] = r.intervals(i);
        println!(
            "{:>8.0} %   {:<16}  {:<16}  {}",
            100.0 * r.levels[i],
            fmt(u),
            fmt(rnd),
            fmt(d)
        );
    }
    println!("took {:.1} s", t0.elapsed().as_secs_f64());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_gpu::kv_utility::{model_identity, ProfileSettings, PROFILE_FORMAT};
    use edgemu_gpu::model::{load_tiny, parse_device};

    #[test]
    fn full_retention_agrees_and_ranking_follows_utility() {
        let lm = load_tiny(7, &parse_device("cpu").unwrap(), None).unwrap();
        let c = lm.model.config().clone();
        let profile = KvUtilityProfile {
            format: PROFILE_FORMAT.into(),
            model: model_identity("tiny", &c),
            settings: ProfileSettings {
                layer_groups: 1,
                position_bins: 4,
                window: WINDOW,
                ..ProfileSettings::default()
            },
            contexts: 1,
            context_tokens: 96,
            layer_distance: vec![1.0],
            position_distance: vec![0.1, 0.4, 0.2, 0.3],
            layer_utility: vec![1.0],
            position_utility: vec![0.1, 0.4, 0.2, 0.3],
            cells: vec![vec![0.25, 1.0, 0.5, 0.75]],
        };
        assert_eq!(ranked_cells(&profile), vec![(0, 1), (0, 3), (0, 2), (0, 0)]);
        let ctx: Vec<u32> = (0..96u32).map(|i| 3 + (i * 37) % 200).collect();
        let all = ranked_cells(&profile);
        let a = agreement(&lm.model, &profile, &ctx, &[all]).unwrap();
        assert_eq!(a, vec![1.0]);
    }

    #[test]
    fn intervals_pair_the_two_curves_per_context() {
        let r = Retention {
            levels: vec![0.4],
            utility: vec![0.5],
            random: vec![0.3],
            utility_per_context: vec![vec![0.4, 0.6]],
            random_per_context: vec![vec![0.3, 0.3]],
            contexts: 2,
        };
        let [u, rnd, d] = r.intervals(0);
        let (m, lo, hi) = u.unwrap();
        assert!((m - 0.5).abs() < 1e-12);
        // t(1) = 12.706, s = 0.1414, half = 12.706 · 0.1414 / √2 = 1.2706
        assert!((hi - m - 1.2706).abs() < 1e-9 && (m - lo - 1.2706).abs() < 1e-9);
        assert_eq!(rnd.unwrap(), (0.3, 0.3, 0.3));
        let (dm, ..) = d.unwrap();
        assert!((dm - 0.2).abs() < 1e-12);
    }
}
