//! PPO training of the learned LYREO family on the slotted serving harness
//! (virtual time, paper §IV-B, Table I): `edgemu train lyreo` drives this
//! and writes its files.
//!
//! One *training run* per seed: fresh nets (seeded), `N` episodes of `T`
//! slots, each on its own scenario seed (`1000·seed + episode`: new
//! topology, users and requests). Per episode the sampling policy records
//! every decision ([`Rollout`](edgemu_policies::lyreo::Rollout)); the per-slot reward comes from the
//! episode's outcome (paper eq. 30, divided by `U` to keep values O(1)):
//!
//! `r_{t+1} = −ν Σ_{i completed in t} D_i^tot − Σ_s Z_s(t) Y_s(t) − ϱ Υ(t)`
//!
//! - the latency of a request is credited in the slot in which it
//!   completes (`slot + ⌊D^tot/Δ⌋`) — the delayed feedback; the curves'
//!   `reward` column puts requests finishing after `T` on the last slot, as
//!   the paper does ([`rewards::slot_rewards`]);
//! - `Z_s(t)` is the queue before slot `t`'s update, `Y_s(t)` its deviation;
//! - `Υ(t)` = servers whose peak KV exceeded 90 % of `M_s` in the slot plus
//!   requests of the slot rejected as never fitting, `ϱ = 1`.
//!
//! Variants: Ly-PPO uses `r` as is; LYREO (and its ablations) fits the LSTM
//! return predictor on windows of `H = 20` slots and learns from the
//! redistributed reward
//! ([`ReturnPredictor::redistribute_windows`](edgemu_policies::rl::ReturnPredictor::redistribute_windows)); PPO
//! replaces `Σ Z Y` by a fixed penalty `κ Σ_s Y_s` with `κ = 10` and sees no
//! queues; LYREO-NoLB drops the load-balancing term; LYREO-Count computes
//! `Y`, `Z` from active requests (`backlog/32`) instead of memory-time.
//!
//! PPO: GAE (γ = 0.98, λ = 0.95) over slots, clipped surrogate (clip 0.2),
//! minibatch 256, grad-norm 0.5, through the factorized actor (see
//! `edgemu_policies::lyreo::learned`); the critic regresses the slot returns.
//!
//! **Deviations from the paper**, each because the paper's recipe did not
//! learn here (docs/experiments/lyreo.md has the numbers):
//! - *Warm start.* Before PPO, one Least-Loaded episode is recorded through
//!   the network's inputs
//!   ([`LearnedPolicy::imitating`](edgemu_policies::lyreo::LearnedPolicy::imitating)): the actor input
//!   normalization is fitted on it (stored in the weights), the actor is
//!   behaviour-cloned on its decisions (cross-entropy, [`behaviour_clone()`])
//!   and the critic fitted to its returns. PPO then runs at lr 1e-4 (Table I:
//!   3e-4) with an entropy bonus 0.01.
//! - *Truncation, not termination.* Slot `T` ends the episode by time limit:
//!   no `done`, the last step bootstraps from `V(s_{T−1})`; latency of
//!   requests finishing after `T` stays out of the learning reward (it is in
//!   the curves), the critic sees the remaining share `(T − t)/T`, and the
//!   learning reward is scaled so that returns are O(1) (scale fixed from
//!   the warm-start episode).
//! - *Per-request credit* (optional, off by default). All decisions of a
//!   slot share the slot's advantage (SNR ≈ 0.01 per decision with 40 of
//!   them); with [`TrainConfig::request_credit`] `> 0` each decision's
//!   advantage is the standardized slot advantage plus that weight times the
//!   standardized *request* advantage `−(D_i − mean D of its slot)`. Measured
//!   with weight 1: the held-out greedy latency rose steadily (each request
//!   is rewarded for its own latency, not for the wait it imposes on
//!   others), so the default is 0.
//! - *Per-(slot, server) credit* (optional, [`TrainConfig::server_credit`],
//!   off by default): eq. 30's reward splits exactly by server
//!   ([`rewards::reward_terms`]); each decision also gets that weight times the
//!   standardized discounted return (γλ) of its server's share from its
//!   slot on, centred within the slot ([`advantages::server_advantages`]): the latency
//!   of everyone on that server, so the wait a decision imposes on others
//!   is credited to it. Measured in docs/experiments/lyreo.md.
//! - *Data.* 4 096 sampled decisions of the 32 000 per episode, 4 epochs
//!   (Table I: 10; the cost per episode stays ≈ the same).
//! - *Model selection.* Every [`TrainConfig::eval_every`] episodes (and
//!   after the warm start) the greedy policy runs on held-out scenario seeds
//!   and the best weights so far are kept; those are saved, not the last.
//!
//! Files: [`config`] (settings and scenarios), [`rewards`] (eq. 30),
//! [`advantages`] (GAE, credits), [`behaviour_clone()`], [`evaluate`]
//! (held-out checks), `trainer` (one seed's learner); this module runs the
//! seeds. Everything is seeded: the same settings give the same weights, bit
//! for bit.

pub mod advantages;
pub mod behaviour_clone;
pub mod config;
pub mod evaluate;
pub mod rewards;
mod trainer;

use std::time::Instant;

use edgemu_policies::lyreo::LearnedModel;

pub use behaviour_clone::behaviour_clone;
pub use config::TrainConfig;
pub use evaluate::{evaluate, evaluate_ll};

use crate::ServingError;
use trainer::Trainer;

/// One episode's point of the convergence curves.
#[derive(Debug, Clone, PartialEq)]
pub struct CurvePoint {
    pub seed: u64,
    pub episode: usize,
    pub lat_mean_s: f64,
    pub z_mean: f64,
    pub lb_dev: f64,
    pub high_kv: f64,
    pub reward: f64,
    /// Greedy mean latency on the held-out seeds after this episode's
    /// update, where evaluated.
    pub eval_lat_s: Option<f64>,
}

/// What one seed's run produced.
pub struct SeedRun {
    pub seed: u64,
    /// The best weights by held-out greedy evaluation.
    pub model: LearnedModel,
    pub curve: Vec<CurvePoint>,
    /// Held-out greedy mean latency of `model`, and the episode after
    /// which it was taken (`None`: right after the warm start).
    pub best_eval: (f64, Option<usize>),
    /// Held-out greedy mean latency right after the warm start.
    pub warm_eval: f64,
    /// Least-Loaded on the same held-out seeds.
    pub ll_eval: f64,
    pub phases: PhaseTimes,
}

/// What a run reports as it goes.
pub enum Progress<'a> {
    /// `seed`'s warm start cloned Least-Loaded: its greedy actor agrees on
    /// `agreement` of the recorded decisions.
    WarmStart { seed: u64, agreement: f64 },
    /// A PPO episode ended.
    Episode(&'a CurvePoint),
}

/// Wall seconds of a seed's run by phase.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseTimes {
    /// Warm start: the Least-Loaded episode, behaviour cloning, critic fit.
    pub warm_start_s: f64,
    /// Sampling episodes on the harness (the actor's forward passes).
    pub rollout_s: f64,
    /// Rewards, return-predictor fitting and redistribution, GAE, credits.
    pub credit_s: f64,
    /// PPO epochs (actor and critic).
    pub update_s: f64,
    /// Greedy episodes on the held-out seeds.
    pub eval_s: f64,
}

/// Wraps `e` with where in the run it happened.
pub(crate) fn during(what: impl Into<String>, e: impl Into<ServingError>) -> ServingError {
    ServingError::During {
        during: what.into(),
        source: Box::new(e.into()),
    }
}

/// Trains one variant over every seed; `tick` is called after each episode.
pub fn train(
    cfg: &TrainConfig,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Vec<SeedRun>, ServingError> {
    cfg.check()?;
    let ll_eval = evaluate_ll(cfg)?;
    cfg.seeds
        .iter()
        .map(|&seed| train_seed(cfg, seed, ll_eval, &mut progress))
        .collect()
}

/// One seed's run: warm start, its evaluation, `cfg.episodes` PPO episodes.
/// `ll_eval` is Least-Loaded's held-out latency ([`evaluate_ll`]), reported
/// next to the run's.
pub fn train_seed(
    cfg: &TrainConfig,
    seed: u64,
    ll_eval: f64,
    progress: &mut impl FnMut(Progress<'_>),
) -> Result<SeedRun, ServingError> {
    let mut tr = Trainer::new(cfg, seed);
    let t0 = Instant::now();
    let agreement = tr
        .warm_start(seed)
        .map_err(|e| during(format!("seed {seed}, warm start"), e))?;
    tr.phases.warm_start_s = t0.elapsed().as_secs_f64();
    if let Some(agreement) = agreement {
        progress(Progress::WarmStart { seed, agreement });
    }
    let warm_eval = tr
        .consider(None)
        .map_err(|e| during(format!("seed {seed}, evaluating the warm start"), e))?;
    let mut curve = Vec::new();
    for e in 0..cfg.episodes {
        let p = tr
            .episode(seed, e)
            .map_err(|err| during(format!("seed {seed}, episode {e}"), err))?;
        progress(Progress::Episode(&p));
        curve.push(p);
    }
    let (lat, after, model) = tr
        .best
        .take()
        .ok_or_else(|| ServingError::Train(format!("seed {seed}: no evaluation ran")))?;
    Ok(SeedRun {
        seed,
        model,
        curve,
        best_eval: (lat, after),
        warm_eval,
        ll_eval,
        phases: tr.phases,
    })
}

#[cfg(test)]
mod tests;
