//! Training episodes (paper §V-B): synthetic utility-ranked blocks on
//! randomized channels. No QA data and no measured profile: the policy only
//! sees normalized transport features, so what it must learn is how utility
//! falls along the send order and how losses come in bursts.
//!
//! **Blocks.** SmolLM2's block size (12 288 B, 9 fragments) and 96 token
//! blocks per layer (1 536 tokens), with a random number of layers in
//! [`EpisodeRanges::layers`] (default 6–12: 576–1 152 blocks, 5 184–10 368
//! source packets, ≈ 4–8 RTTs of serialization at 100 Mb/s). The evaluation
//! handoff (30 layers, 25 920 packets) is 2.5–5× longer; the features are
//! ratios (budget, slots, window, progress), so the policy transfers across
//! sizes, and shorter episodes give several times more episodes per minute
//! of the 10-minute training budget. Utility of block `b` is
//! `exp(σ·z_b) · (1 + a·e^(−j/4) + a·e^(−(J−1−j)/4))` with `z_b` standard
//! normal, σ ∈ [0.3, 1.2] and `a` ∈ [0, 3] per episode: a heavy-tailed,
//! position-shaped profile, so the priority order spreads utility from a few
//! very valuable blocks down to a long flat tail (as the paper's Fig. 2), and
//! each episode differs.
//!
//! **Channel** around the paper's GE (0.001, 0.5, 0.02, 0.1) (mean loss
//! 8.4 %): εG ∈ [0.0005, 0.003], εB ∈ [0.3, 0.7], pGB ∈ [0.01, 0.04],
//! pBG ∈ [0.06, 0.2] (stationary mean loss ≈ 1.5 %–28 %, bursts of 5–17
//! packets on average); rate drawn from {50, 100, 200} Mb/s; RTT uniform in
//! [14, 26] ms; ρ uniform in [0.55, 1.25] (covers 0.6–1.2).
//!
//! **Measured utilities** ([`EpisodeRanges::profile`], `edgemu train repair
//! --profile`): instead of the synthetic shape, an episode takes a random
//! run of consecutive layers of a measured per-block utility profile (the
//! full model's layout, `token_blocks` blocks per layer) and multiplies each
//! block by `exp(σ·z_b)`, σ ∈ [0, 0.5]: the policy trains on the utility
//! shape it is evaluated on, with some per-context spread.

use std::sync::Arc;

use edgemu_links::time::NS_PER_MS;
use edgemu_links::{paper_channel, LossSpec};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::blocks::BlockLayout;
use crate::error::HandoffError;
use crate::harness::shared_payload;
use crate::scenario::HandoffScenario;

/// Ranges the episodes are drawn from.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeRanges {
    /// Layers of the synthetic layout (inclusive).
    pub layers: (u32, u32),
    /// Token blocks (of 16 tokens) per layer.
    pub token_blocks: u32,
    pub eps_g: (f64, f64),
    pub eps_b: (f64, f64),
    pub p_gb: (f64, f64),
    pub p_bg: (f64, f64),
    pub rates_bps: Vec<u64>,
    pub rtt_ms: (f64, f64),
    pub rho: (f64, f64),
    /// Measured per-block utilities of the full layout (layer-major,
    /// `token_blocks` per layer); `None`: the synthetic shape.
    pub profile: Option<Arc<[f64]>>,
}

impl Default for EpisodeRanges {
    fn default() -> Self {
        EpisodeRanges {
            layers: (6, 12),
            token_blocks: 96,
            eps_g: (0.0005, 0.003),
            eps_b: (0.3, 0.7),
            p_gb: (0.01, 0.04),
            p_bg: (0.06, 0.2),
            rates_bps: vec![50_000_000, 100_000_000, 200_000_000],
            rtt_ms: (14.0, 26.0),
            rho: (0.55, 1.25),
            profile: None,
        }
    }
}

impl EpisodeRanges {
    /// The evaluation setting itself (paper §V-A main channel: GE (0.001,
    /// 0.5, 0.02, 0.1), 100 Mb/s, 20 ms RTT) with ρ drawn around the
    /// evaluated 0.8 (uniform in [0.7, 0.9]) and `layers` layers: the
    /// randomized default spends most of its episodes on channels, rates and
    /// deadlines the evaluation never sees (at 200 Mb/s the bandwidth-delay
    /// product, ≈ 360 frames, exceeds K, so the window dynamics differ).
    pub fn paper_setting(layers: u32) -> Self {
        let ge = paper_channel::GE;
        let rtt_ms = paper_channel::RTT_NS as f64 / NS_PER_MS as f64;
        EpisodeRanges {
            layers: (layers, layers),
            eps_g: (ge.eps_g, ge.eps_g),
            eps_b: (ge.eps_b, ge.eps_b),
            p_gb: (ge.p_gb, ge.p_gb),
            p_bg: (ge.p_bg, ge.p_bg),
            rates_bps: vec![paper_channel::RATE_BPS],
            rtt_ms: (rtt_ms, rtt_ms),
            rho: (0.7, 0.9),
            ..EpisodeRanges::default()
        }
    }

    /// Tiny episodes (a few hundred packets) for tests and `--quick`.
    pub fn tiny() -> Self {
        EpisodeRanges {
            layers: (1, 2),
            token_blocks: 6,
            ..EpisodeRanges::default()
        }
    }
}

/// One drawn episode: its scenario and the realization seed of its channel.
#[derive(Debug, Clone)]
pub struct Episode {
    pub scenario: HandoffScenario,
    pub seed: u64,
}

fn uniform(rng: &mut ChaCha8Rng, (lo, hi): (f64, f64)) -> f64 {
    if hi > lo {
        rng.random_range(lo..hi)
    } else {
        lo
    }
}

/// Standard normal by Box–Muller (rand_distr is not a dependency).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Synthetic utilities for `layout` (see the module docs).
pub fn synthetic_utilities(layout: &BlockLayout, rng: &mut ChaCha8Rng) -> Vec<f64> {
    let sigma = uniform(rng, (0.3, 1.2));
    let a = uniform(rng, (0.0, 3.0));
    let bpl = layout.blocks_per_layer();
    let last = f64::from(bpl.saturating_sub(1));
    (0..layout.n_blocks())
        .map(|b| {
            let j = f64::from(b % bpl);
            let pos = 1.0 + a * (-j / 4.0).exp() + a * (-(last - j) / 4.0).exp();
            (sigma * normal(rng)).exp() * pos
        })
        .collect()
}

/// `layout.n_layers` consecutive layers of the measured profile `p`, each
/// block times `exp(σ·z_b)` (module docs).
pub fn profile_utilities(
    p: &[f64],
    layout: &BlockLayout,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<f64>, HandoffError> {
    let bpl = layout.blocks_per_layer() as usize;
    let n = layout.n_blocks() as usize;
    if bpl == 0 || p.len() < n || !p.len().is_multiple_of(bpl) {
        return Err(HandoffError::Config(format!(
            "a utility profile of {} blocks cannot supply {} layers of {bpl} blocks",
            p.len(),
            layout.n_layers
        )));
    }
    let profile_layers = p.len() / bpl;
    let first = rng.random_range(0..=profile_layers - layout.n_layers as usize);
    let sigma = uniform(rng, (0.0, 0.5));
    Ok(p[first * bpl..first * bpl + n]
        .iter()
        .map(|u| u.max(0.0) * (sigma * normal(rng)).exp())
        .collect())
}

/// Draws one training episode.
pub fn draw_episode(r: &EpisodeRanges, rng: &mut ChaCha8Rng) -> Result<Episode, HandoffError> {
    let layers = rng.random_range(r.layers.0..=r.layers.1.max(r.layers.0));
    let layout = BlockLayout::smollm2(r.token_blocks * 16)?;
    let layout = BlockLayout::new(
        layers,
        layout.n_tokens,
        layout.tokens_per_block,
        layout.block_bytes,
    )?;
    let utilities: Arc<[f64]> = match &r.profile {
        None => synthetic_utilities(&layout, rng).into(),
        Some(p) => profile_utilities(p, &layout, rng)?.into(),
    };
    let loss = LossSpec::GilbertElliott {
        eps_g: uniform(rng, r.eps_g),
        eps_b: uniform(rng, r.eps_b),
        p_gb: uniform(rng, r.p_gb),
        p_bg: uniform(rng, r.p_bg),
    };
    let rate = if r.rates_bps.is_empty() {
        100_000_000
    } else {
        r.rates_bps[rng.random_range(0..r.rates_bps.len())]
    };
    let rtt_ns = (uniform(rng, r.rtt_ms) * 1e6) as u64;
    let rho = uniform(rng, r.rho);
    let seed: u64 = rng.random();
    let payload = shared_payload(&layout);
    Ok(Episode {
        scenario: HandoffScenario::symmetric(layout, utilities, payload, rate, rtt_ns, loss, rho),
        seed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn episodes_stay_in_their_ranges_and_repeat_by_seed() {
        let r = EpisodeRanges::default();
        let mut a = ChaCha8Rng::seed_from_u64(4);
        let mut b = ChaCha8Rng::seed_from_u64(4);
        for _ in 0..3 {
            let e = draw_episode(&r, &mut a).unwrap();
            let f = draw_episode(&r, &mut b).unwrap();
            assert_eq!(e.seed, f.seed);
            assert_eq!(e.scenario.utilities, f.scenario.utilities);
            let s = &e.scenario;
            assert!((6..=12).contains(&s.layout.n_layers));
            assert!(r.rates_bps.contains(&s.rate_bps));
            assert!(s.rho >= 0.55 && s.rho < 1.25);
            let rtt = (s.forward.delay_ns * 2) as f64 / 1e6;
            assert!((13.9..26.1).contains(&rtt), "rtt {rtt}");
            assert!(s.utilities.iter().all(|u| u.is_finite() && *u > 0.0));
            let LossSpec::GilbertElliott { eps_b, p_bg, .. } = s.forward.loss else {
                panic!("GE expected");
            };
            assert!((0.3..0.7).contains(&eps_b) && (0.06..0.2).contains(&p_bg));
        }
    }

    #[test]
    fn paper_setting_episodes_are_the_evaluation_channel() {
        let r = EpisodeRanges::paper_setting(30);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..3 {
            let s = draw_episode(&r, &mut rng).unwrap().scenario;
            assert_eq!(s.layout.n_layers, 30);
            assert_eq!(s.rate_bps, 100_000_000);
            assert_eq!(s.forward.delay_ns, 10_000_000);
            assert!((0.7..0.9).contains(&s.rho));
            assert_eq!(s.forward.loss, paper_channel::ge_loss());
        }
    }

    #[test]
    fn profile_episodes_take_consecutive_layers_of_the_profile() {
        // 30 layers × 96 blocks; block utility 2^layer, so the drawn window
        // of layers shows in the per-layer geometric means (log2 ≈ layer;
        // the σ·z noise averages to ±0.1 over 96 blocks).
        let p: Arc<[f64]> = (0..30 * 96).map(|b| f64::from(b / 96).exp2()).collect();
        let r = EpisodeRanges {
            profile: Some(Arc::clone(&p)),
            ..EpisodeRanges::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..6 {
            let e = draw_episode(&r, &mut rng).unwrap();
            let s = &e.scenario;
            assert!((6..=12).contains(&s.layout.n_layers));
            let log_means: Vec<f64> = s
                .utilities
                .chunks(96)
                .map(|c| c.iter().map(|u| u.log2()).sum::<f64>() / 96.0)
                .collect();
            let first = log_means[0].round();
            assert!(first >= 0.0 && first + log_means.len() as f64 <= 30.0);
            for (i, m) in log_means.iter().enumerate() {
                assert!((m - first - i as f64).abs() < 0.3, "layer {i}: {m}");
            }
            firsts.insert(first as i64);
        }
        assert!(firsts.len() > 1, "the layer window never moved");
        // A profile too small for the layout is an error, not a panic.
        let small = EpisodeRanges {
            profile: Some(p[..96 * 3].into()),
            ..EpisodeRanges::default()
        };
        assert!(draw_episode(&small, &mut rng).is_err());
    }
}
