//! Offline KV-utility profile (PriorityFEC §III): how much each layer group and
//! each relative-position bin of a context's KV cache matters to the model.
//!
//! **Measure.** For a context of `n` tokens the last `w` (= 64) are the query
//! window. The first `n − w` tokens are prefilled once into a base cache. Then,
//! for the full cache and for every variant — the K and V of one layer group
//! zeroed over the whole prefix, or the K and V of every layer zeroed over one
//! relative-position bin of the prefix — the `w` window tokens are fed one at a
//! time (teacher forcing) and the next-token distribution at each of the `w`
//! positions is kept. The distance of a variant is the mean over the `w`
//! positions of the **total variation** distance ½·Σ|p − q| between its
//! distribution and the full cache's (bounded in [0, 1], symmetric, defined even
//! where one distribution has zeros, unlike KL). All variants of a context run
//! together as one batch per window position, so each context costs one
//! prefill of `n − w` tokens and `w` batched decode steps.
//!
//! **Profile.** The layer-group marginal `u_L[g]` and the position-bin marginal
//! `u_P[b]` are the mean distances over the profiling contexts, each normalized
//! to sum to 1 (per model, so profiles of different models are comparable).
//! The utility of cell (g, b) is the product `u_L[g] · u_P[b]` (the two
//! ablations are measured separately, so their product is the separable
//! estimate of a cell's importance), rescaled so the largest cell is 1.
//!
//! Layer groups are contiguous equal splits of the layers (the last group takes
//! the remainder); position bins are equal splits of relative position
//! `t / (n − w)` over the prefix.
//!
//! The profile file is JSON carrying the model's identity ([`ModelIdentity`]);
//! [`KvUtilityProfile::load`] refuses a file whose identity differs from the
//! model it is used with. The shipped profiles are compiled in
//! ([`crate::shipped_profiles`]) and load through the same checks. The file
//! format and those checks are `edgemu_engine::kv_profile` (candle-free, for
//! what only reads profiles), re-exported here.

use candle_core::Device;

use crate::error::{CandleContext, GpuError, Result};
use crate::kv_transfer::{export, import, KvBlock, MissingRows, PresenceMask};
use crate::model::config::{KvDtype, LlamaConfig};
use crate::model::kv::SeqKv;
use crate::model::llama::{Llama, Phase, SeqInput};

pub use edgemu_engine::kv_profile::{
    layer_group, position_bin, KvUtilityProfile, ModelIdentity, ProfileSettings, PROFILE_FORMAT,
};

/// The identity of a model config under `name` (what a profile measured on
/// it carries).
pub fn model_identity(name: &str, c: &LlamaConfig) -> ModelIdentity {
    ModelIdentity {
        name: name.to_string(),
        n_layers: c.n_layers,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        vocab_size: c.vocab_size,
    }
}

/// A cache rebuilt from `blocks` (an F32 export of all `n` tokens of every
/// layer) with the rows `remove(layer, token)` removed as `mode` says
/// (zeroed, or masked out of attention).
fn ablated_copy(
    blocks: &[KvBlock],
    n: usize,
    config: &LlamaConfig,
    device: &Device,
    mode: MissingRows,
    remove: impl Fn(usize, usize) -> bool,
) -> Result<SeqKv> {
    let mut presence = PresenceMask::all(config.n_layers, config.n_kv_heads, n);
    for l in 0..config.n_layers {
        for t in 0..n {
            if remove(l, t) {
                for h in 0..config.n_kv_heads {
                    presence.set(l, h, t, false);
                }
            }
        }
    }
    import(config, device, n, blocks, Some(&presence), mode)
}

fn softmax(row: &[f32]) -> Vec<f64> {
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = row.iter().map(|&x| (x as f64 - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

fn total_variation(p: &[f64], q: &[f64]) -> f64 {
    0.5 * p.iter().zip(q).map(|(a, b)| (a - b).abs()).sum::<f64>()
}

/// Distances of one context: `(per layer group, per position bin)`.
pub fn context_distances(
    model: &Llama,
    context: &[u32],
    settings: &ProfileSettings,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let c = model.config().clone();
    let w = settings.window;
    if settings.layer_groups == 0
        || settings.layer_groups > c.n_layers
        || settings.position_bins == 0
        || w == 0
        || context.len() < w + settings.position_bins
    {
        return Err(GpuError::Engine(format!(
            "kv profile: {} layer groups over {} layers, {} bins, window {w}, context of {} tokens do not fit",
            settings.layer_groups,
            c.n_layers,
            settings.position_bins,
            context.len()
        )));
    }
    let prefix = context.len() - w;
    let base = model.prefilled(&context[..prefix], context.len())?;
    // Variant 0 is the full cache; then layer groups; then position bins.
    // Exported once; every variant is imported from the same blocks.
    let n = base.len();
    let blocks = export(&base, 0..c.n_layers, 0..n, KvDtype::F32)?;
    drop(base);
    let ablate = |remove: &dyn Fn(usize, usize) -> bool| {
        ablated_copy(&blocks, n, &c, model.device(), settings.rebuild, remove)
    };
    let mut kvs = vec![ablate(&|_, _| false)?];
    for g in 0..settings.layer_groups {
        let r = layer_group(g, settings.layer_groups, c.n_layers);
        kvs.push(ablate(&|l, _| r.contains(&l))?);
    }
    for b in 0..settings.position_bins {
        let r = position_bin(b, settings.position_bins, prefix);
        kvs.push(ablate(&|_, t| r.contains(&t))?);
    }
    drop(blocks);
    let mut dist = vec![0f64; kvs.len()];
    for step in 0..w {
        let tok = &context[prefix + step..prefix + step + 1];
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .map(|kv| SeqInput { tokens: tok, kv })
            .collect();
        let logits = model
            .forward(&mut batch, Phase::Decode)?
            .to_dtype(candle_core::DType::F32)
            .and_then(|t| t.to_vec2::<f32>())
            .ctx("kv profile logits")?;
        let full = softmax(&logits[0]);
        for (i, row) in logits.iter().enumerate().skip(1) {
            dist[i] += total_variation(&full, &softmax(row)) / w as f64;
        }
    }
    let g = settings.layer_groups;
    Ok((dist[1..1 + g].to_vec(), dist[1 + g..].to_vec()))
}

fn normalized(v: &[f64]) -> Vec<f64> {
    let s: f64 = v.iter().sum();
    if s > 0.0 {
        v.iter().map(|x| x / s).collect()
    } else {
        vec![1.0 / v.len() as f64; v.len()]
    }
}

/// Profiles `model` (identified as `name`) on `contexts` (all of one length).
/// `progress(i)` is called after context `i`.
pub fn profile(
    model: &Llama,
    name: &str,
    contexts: &[Vec<u32>],
    settings: &ProfileSettings,
    mut progress: impl FnMut(usize),
) -> Result<KvUtilityProfile> {
    let Some(first) = contexts.first() else {
        return Err(GpuError::Engine("kv profile: no contexts".into()));
    };
    let mut layer = vec![0f64; settings.layer_groups];
    let mut pos = vec![0f64; settings.position_bins];
    for (i, ctx) in contexts.iter().enumerate() {
        let (l, p) = context_distances(model, ctx, settings)?;
        layer
            .iter_mut()
            .zip(&l)
            .for_each(|(a, b)| *a += b / contexts.len() as f64);
        pos.iter_mut()
            .zip(&p)
            .for_each(|(a, b)| *a += b / contexts.len() as f64);
        progress(i);
    }
    let (ul, up) = (normalized(&layer), normalized(&pos));
    let mut cells: Vec<Vec<f64>> = ul
        .iter()
        .map(|a| up.iter().map(|b| a * b).collect())
        .collect();
    let max = cells.iter().flatten().copied().fold(0.0, f64::max);
    if max > 0.0 {
        cells.iter_mut().flatten().for_each(|x| *x /= max);
    }
    Ok(KvUtilityProfile {
        format: PROFILE_FORMAT.into(),
        model: model_identity(name, model.config()),
        settings: *settings,
        contexts: contexts.len(),
        context_tokens: first.len(),
        layer_distance: layer,
        position_distance: pos,
        layer_utility: ul,
        position_utility: up,
        cells,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{load_tiny, WeightLayout};
    use edgemu_assets::Asset;

    fn tiny() -> Llama {
        load_tiny(
            3,
            &Device::Cpu,
            Some(WeightLayout::for_device(&Device::Cpu)),
        )
        .unwrap()
        .model
    }

    fn ctx(seed: u32) -> Vec<u32> {
        (0..48u32).map(|i| 3 + (seed * 31 + i * 17) % 200).collect()
    }

    #[test]
    fn profile_is_normalized_and_round_trips() {
        let m = tiny();
        let s = ProfileSettings {
            layer_groups: 2,
            position_bins: 4,
            window: 8,
            rebuild: MissingRows::ZeroFill,
        };
        let p = profile(&m, "tiny", &[ctx(1), ctx(2)], &s, |_| {}).unwrap();
        assert!((p.layer_utility.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!((p.position_utility.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(p.cells.iter().flatten().copied().fold(0.0, f64::max), 1.0);
        // Zeroing something moves the distribution.
        assert!(
            p.layer_distance.iter().all(|&d| d > 0.0),
            "{:?}",
            p.layer_distance
        );
        let dir = std::env::temp_dir().join(format!("edgemu-kvu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.json");
        p.save(&path).unwrap();
        let id = model_identity("tiny", m.config());
        let back = KvUtilityProfile::load(&Asset::File(path.clone()), &id).unwrap();
        // serde_json's default float parsing may differ in the last bit.
        assert_eq!((&back.model, back.settings), (&p.model, p.settings));
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(back.cells.iter().zip(&p.cells).all(|(a, b)| close(a, b)));
        let other = ModelIdentity { n_layers: 30, ..id };
        let e = KvUtilityProfile::load(&Asset::File(path.clone()), &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not for") && e.contains("p.json"), "{e}");
        std::fs::write(&path, "{\"format\": 3").unwrap();
        assert!(KvUtilityProfile::load(&Asset::File(path.clone()), &other).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn full_cache_copy_has_zero_distance() {
        // The full-cache variant equals itself: distances come only from zeroing.
        let m = tiny();
        let c = ctx(5);
        for rebuild in [MissingRows::ZeroFill, MissingRows::Mask] {
            let s = ProfileSettings {
                layer_groups: 1,
                position_bins: 1,
                window: 4,
                rebuild,
            };
            let (l, p) = context_distances(&m, &c, &s).unwrap();
            // One group = all layers, one bin = all tokens: both remove the whole prefix.
            assert!((l[0] - p[0]).abs() < 1e-9, "{rebuild:?}: {l:?} {p:?}");
            assert!(l[0] > 0.0, "{rebuild:?}: removing the prefix moved nothing");
        }
    }

    #[test]
    fn masking_and_zeroing_a_cell_are_different_ablations() {
        let m = tiny();
        let c = ctx(3);
        let mut s = ProfileSettings {
            layer_groups: 2,
            position_bins: 2,
            window: 6,
            rebuild: MissingRows::ZeroFill,
        };
        let zero = context_distances(&m, &c, &s).unwrap();
        s.rebuild = MissingRows::Mask;
        let mask = context_distances(&m, &c, &s).unwrap();
        assert!(mask.0.iter().chain(&mask.1).all(|&d| d > 0.0), "{mask:?}");
        let differs = |a: &[f64], b: &[f64]| a.iter().zip(b).any(|(x, y)| (x - y).abs() > 1e-9);
        assert!(
            differs(&zero.0, &mask.0) && differs(&zero.1, &mask.1),
            "{zero:?} {mask:?}"
        );
    }

    #[test]
    fn profiles_without_a_rebuild_setting_are_zero_fill() {
        let s: ProfileSettings =
            serde_json::from_str(r#"{"layer_groups": 6, "position_bins": 8, "window": 64}"#)
                .unwrap();
        assert_eq!(s.rebuild, MissingRows::ZeroFill);
        assert_eq!(s, ProfileSettings::default());
    }

    #[test]
    fn groups_and_bins_cover_everything() {
        let r: Vec<_> = (0..6).flat_map(|g| layer_group(g, 6, 30)).collect();
        assert_eq!(r, (0..30).collect::<Vec<_>>());
        let r: Vec<_> = (0..8).flat_map(|b| position_bin(b, 8, 1472)).collect();
        assert_eq!(r, (0..1472).collect::<Vec<_>>());
    }
}
