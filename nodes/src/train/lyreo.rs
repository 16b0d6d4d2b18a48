//! `edgemu train lyreo`: PPO training of the learned LYREO family on the
//! slotted serving harness (virtual time, paper §IV-B, Table I).
//!
//! One *training run* per seed: fresh nets (seeded), `N` episodes of `T`
//! slots, each on its own scenario seed (`1000·seed + episode`: new
//! topology, users and requests). Per episode the sampling policy records
//! every decision ([`Rollout`]); the per-slot reward comes from the
//! episode's outcome (paper eq. 30, divided by `U` to keep values O(1)):
//!
//! `r_{t+1} = −ν Σ_{i completed in t} D_i^tot − Σ_s Z_s(t) Y_s(t) − ϱ Υ(t)`
//!
//! - the latency of a request is credited in the slot in which it
//!   completes (`slot + ⌊D^tot/Δ⌋`) — the delayed feedback; the curves'
//!   `reward` column puts requests finishing after `T` on the last slot, as
//!   the paper does ([`slot_rewards`]);
//! - `Z_s(t)` is the queue before slot `t`'s update, `Y_s(t)` its deviation;
//! - `Υ(t)` = servers whose peak KV exceeded 90 % of `M_s` in the slot plus
//!   requests of the slot rejected as never fitting, `ϱ = 1`.
//!
//! Variants: Ly-PPO uses `r` as is; LYREO (and its ablations) fits the LSTM
//! return predictor on windows of `H = 20` slots and learns from the
//! redistributed reward ([`ReturnPredictor::redistribute_windows`]); PPO
//! replaces `Σ Z Y` by a fixed penalty `κ Σ_s Y_s` with `κ = 10` and sees no
//! queues; LYREO-NoLB drops the load-balancing term; LYREO-Count computes
//! `Y`, `Z` from active requests (`backlog/32`) instead of memory-time.
//!
//! PPO: GAE (γ = 0.98, λ = 0.95) over slots, clipped surrogate (clip 0.2),
//! minibatch 256, grad-norm 0.5, through the factorized actor (see
//! `edgemu_policies::lyreo::learned`); the critic regresses the slot returns.
//!
//! **Deviations from the paper**, each because the paper's recipe did not
//! learn here (issue 8's review; the README's LYREO section has the numbers):
//! - *Warm start.* Before PPO, one Least-Loaded episode is recorded through
//!   the network's inputs ([`LearnedPolicy::imitating`]): the actor input
//!   normalization is fitted on it (stored in the weights), the actor is
//!   behaviour-cloned on its decisions (cross-entropy, [`behaviour_clone`])
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
//!   ([`reward_terms`]); each decision also gets that weight times the
//!   standardized discounted return (γλ) of its server's share from its
//!   slot on, centred within the slot ([`server_advantages`]): the latency
//!   of everyone on that server, so the wait a decision imposes on others
//!   is credited to it. Measured in the README's LYREO section.
//! - *Data.* 4 096 sampled decisions of the 32 000 per episode, 4 epochs
//!   (Table I: 10; the cost per episode stays ≈ the same).
//! - *Files.* Each seed's run writes `<policy>-seed<N>.safetensors`,
//!   `-seed<N>-curves.csv` and `-seed<N>.json` as soon as it ends, so seeds
//!   can run in separate processes into one folder; [`aggregate`] (also
//!   `--aggregate`) combines whatever seeds are there into the across-seed
//!   curves (mean, Student-t 95 % interval, min/max per episode), the plots
//!   and `<policy>.safetensors` (the seed with the best held-out check).
//! - *Model selection.* Every [`TrainConfig::eval_every`] episodes (and
//!   after the warm start) the greedy policy runs on held-out scenario seeds
//!   and the best weights so far are kept; those are saved, not the last.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_policies::lyreo::learned::{
    count_workload, Decision, ACTOR_INPUT, CRITIC_INPUT, CRITIC_TIME,
};
use edgemu_policies::lyreo::{LearnedModel, LearnedPolicy, PolicySpec, Rollout, Variant};
use edgemu_policies::nn::loss::log_softmax;
use edgemu_policies::nn::{clip_grad_norm, Adam, MlpGrads};
use edgemu_policies::rl::{gae, ReturnPredictor, ReturnPredictorConfig};
use edgemu_serving::{run_episode, run_episode_with, EpisodeOutcome, LyapunovQueues, Scenario};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(Args, Debug, Clone)]
pub struct TrainLyreoArgs {
    /// lyreo, ly-ppo, ppo, lyreo-count or lyreo-nolb.
    #[arg(long, default_value = "lyreo")]
    pub policy: String,
    /// PPO episodes per seed (after the warm start).
    #[arg(long, default_value_t = 30)]
    pub episodes: usize,
    /// Training seeds, comma-separated (one independent run each).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Slots per episode T.
    #[arg(long, default_value_t = 800)]
    pub slots: u64,
    /// Users U.
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// Evaluate the greedy policy on the held-out seeds every N episodes
    /// (0: only after the warm start and at the end).
    #[arg(long, default_value_t = 5)]
    pub eval_every: usize,
    /// Held-out scenario seeds for that evaluation.
    #[arg(long, value_delimiter = ',', default_value = "7001,7002")]
    pub eval_seeds: Vec<u64>,
    /// Weight of the per-request advantage next to the slot's (0: the
    /// paper's slot credit only).
    #[arg(long, default_value_t = 0.0)]
    pub request_credit: f32,
    /// Weight of the per-(slot, server) advantage next to the slot's (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub server_credit: f32,
    /// PPO learning rate (after the warm start).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f32,
    /// Truncation H of the return predictor's windows (LYREO family).
    #[arg(long, default_value_t = 20)]
    pub horizon: usize,
    /// Sampled decisions per episode fed to the PPO update.
    #[arg(long, default_value_t = 4096)]
    pub decisions: usize,
    /// PPO epochs over them per episode.
    #[arg(long, default_value_t = 4)]
    pub epochs: usize,
    /// Behaviour-cloning epochs of the warm start (0: no warm start, only
    /// the normalization is fitted).
    #[arg(long, default_value_t = 8)]
    pub bc_epochs: usize,
    /// Share of each GPU's M_s that is the KV budget during training and its
    /// held-out checks (1.0 = the literal 10/20/24 GB, where Z stays 0; 0.01
    /// is where the Lyapunov term is live, see the README's LYREO section).
    #[arg(long, default_value_t = 1.0)]
    pub kv_budget_share: f64,
    /// ν, the weight of latency against the load-balancing term Z_s·Y_s in the reward
    /// (the experiment's `--nu`). Weights trained at one ν are the policy for that ν: a ν
    /// sweep trains one set per value.
    #[arg(long, default_value_t = 0.5)]
    pub nu: f64,
    /// Output folder (weights, curves.csv, convergence.csv).
    #[arg(long, default_value = "results/train-lyreo")]
    pub out: PathBuf,
    /// Train nothing: aggregate the per-seed files already in `--out`
    /// (`<policy>-seed<N>-curves.csv`, `-seed<N>.json`, `-seed<N>.safetensors`,
    /// written by runs of any seeds) into the across-seed curves, plots and
    /// the best seed's `<policy>.safetensors`.
    #[arg(long)]
    pub aggregate: bool,
    /// A tiny run (2 episodes of 50 slots, 12 users, one seed) to check the pipeline.
    #[arg(long)]
    pub quick: bool,
}

/// Settings of one training job.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub variant: Variant,
    pub episodes: usize,
    pub seeds: Vec<u64>,
    pub slots: u64,
    pub users: usize,
    /// Decisions per episode fed to the update.
    pub decisions_per_update: usize,
    pub epochs: usize,
    pub minibatch: usize,
    pub clip: f32,
    pub lr: f32,
    pub gamma: f32,
    pub lambda: f32,
    /// Entropy bonus on the actor.
    pub entropy_coef: f32,
    /// Weight of the per-request advantage next to the slot's.
    pub request_credit: f32,
    /// Weight of the per-(slot, server) advantage next to the slot's.
    pub server_credit: f32,
    pub horizon: usize,
    /// Passes over the episode's windows per episode (return predictor).
    pub predictor_epochs: usize,
    /// Windows per return-predictor step.
    pub predictor_minibatch: usize,
    pub rho: f64,
    pub ppo_penalty: f64,
    /// Behaviour-cloning epochs over the warm-start episode (0: no warm start).
    pub bc_epochs: usize,
    /// Decisions of the warm-start episode behaviour cloning uses.
    pub bc_decisions: usize,
    pub bc_lr: f32,
    /// Greedy evaluation every N episodes (0: after the warm start and at the end only).
    pub eval_every: usize,
    /// Held-out scenario seeds of the greedy evaluation.
    pub eval_seeds: Vec<u64>,
    /// Share of each M_s that is the KV budget (`Scenario::kv_budget_share`).
    pub kv_budget_share: f64,
    /// Latency weight of the reward (`Scenario::nu`).
    pub nu: f64,
}

impl TrainConfig {
    pub fn new(variant: Variant) -> TrainConfig {
        TrainConfig {
            variant,
            episodes: 30,
            seeds: vec![1, 2, 3],
            slots: 800,
            users: 40,
            decisions_per_update: 4096,
            epochs: 4,
            minibatch: 256,
            clip: 0.2,
            lr: 1e-4,
            gamma: 0.98,
            lambda: 0.95,
            entropy_coef: 0.01,
            request_credit: 0.0,
            server_credit: 0.0,
            horizon: 20,
            predictor_epochs: 4,
            predictor_minibatch: 8,
            rho: 1.0,
            ppo_penalty: 10.0,
            bc_epochs: 8,
            bc_decisions: 8192,
            bc_lr: 1e-3,
            eval_every: 5,
            eval_seeds: vec![7001, 7002],
            kv_budget_share: 1.0,
            nu: 0.5,
        }
    }

    fn scenario(&self, seed: u64, episode: usize) -> Scenario {
        let mut s = Scenario::paper_default(seed.wrapping_mul(1000).wrapping_add(episode as u64));
        s.slots = self.slots;
        s.users = self.users;
        s.kv_budget_share = self.kv_budget_share;
        s.nu = self.nu;
        s
    }

    /// The warm-start episode's scenario (not one of the PPO episodes').
    fn warm_scenario(&self, seed: u64) -> Scenario {
        self.scenario(seed, 999)
    }

    fn eval_scenario(&self, seed: u64) -> Scenario {
        let mut s = Scenario::paper_default(seed);
        s.slots = self.slots;
        s.users = self.users;
        s.kv_budget_share = self.kv_budget_share;
        s.nu = self.nu;
        s
    }
}

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

struct Trainer {
    cfg: TrainConfig,
    model: LearnedModel,
    adam_actor: Adam,
    adam_critic: Adam,
    predictor: Option<ReturnPredictor>,
    rng: ChaCha8Rng,
    /// Multiplies the learning reward so returns are O(1).
    reward_scale: f32,
    best: Option<(f64, Option<usize>, LearnedModel)>,
    /// Wall seconds per phase of this seed's run (where the time goes).
    phases: PhaseTimes,
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

/// Per-slot reward of eq. 30 (divided by U) for `variant`, latency of
/// requests finishing after `T` lumped on the last slot (the curves').
pub fn slot_rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome) -> Vec<f32> {
    rewards(cfg, sc, o, true)
}

/// The reward the learner sees: [`slot_rewards`] without the drain lump
/// (latency of requests finishing after `T` falls outside the truncated
/// episode; the bootstrap value stands for it).
pub fn learning_rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome) -> Vec<f32> {
    rewards(cfg, sc, o, false)
}

fn rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome, lump_drain: bool) -> Vec<f32> {
    let s_n = sc.servers;
    reward_terms(cfg, sc, o, lump_drain)
        .chunks(s_n.max(1))
        .map(|row| row.iter().sum::<f64>() as f32)
        .collect()
}

/// Eq. 30's reward split by server, `[T, S]` row-major (f64): server `s`'s
/// part of slot `t` is `−(ν Σ_{i on s completed in t} D_i + Z_s Y_s + ϱ Υ_s)
/// / U` (the variant's load-balancing term; `Υ_s`: `s` over 90 % KV in the
/// slot plus its rejected requests of the slot). Each slot's row sums to
/// the slot's reward.
pub fn reward_terms(
    cfg: &TrainConfig,
    sc: &Scenario,
    o: &EpisodeOutcome,
    lump_drain: bool,
) -> Vec<f64> {
    let t_len = sc.slots as usize;
    let s_n = sc.servers;
    let slot_s = sc.slot_ns as f64 / 1e9;
    let mut lat = vec![0.0f64; t_len * s_n];
    let mut upsilon = vec![0.0f64; t_len * s_n];
    for r in &o.requests {
        let s = r.server.min(s_n.saturating_sub(1));
        if r.rejected {
            upsilon[(r.slot as usize).min(t_len - 1) * s_n + s] += 1.0;
            continue;
        }
        let e2e = r.e2e_ns as f64 / 1e9;
        let done = r.slot as usize + (e2e / slot_s) as usize;
        if done < t_len {
            lat[done * s_n + s] += e2e;
        } else if lump_drain {
            lat[(t_len - 1) * s_n + s] += e2e;
        }
    }
    let mut lb = vec![0.0f64; t_len * s_n];
    let mut count_q = LyapunovQueues::new(s_n, sc.epsilon);
    for t in 0..t_len {
        let rows = &o.server_slots[t * s_n..(t + 1) * s_n];
        for (s, row) in rows.iter().enumerate() {
            if row.report.load.high_kv {
                upsilon[t * s_n + s] += 1.0;
            }
        }
        let out = &mut lb[t * s_n..(t + 1) * s_n];
        match cfg.variant {
            Variant::LyreoNolb => {}
            Variant::Ppo => {
                for (l, r) in out.iter_mut().zip(rows) {
                    *l = cfg.ppo_penalty * r.y;
                }
            }
            Variant::LyreoCount => {
                let w: Vec<f64> = rows
                    .iter()
                    .map(|r| count_workload(r.report.load.backlog))
                    .collect();
                let z_before = count_q.z().to_vec();
                let y = count_q.update(&w);
                for ((l, z), y) in out.iter_mut().zip(&z_before).zip(&y) {
                    *l = z * y;
                }
            }
            _ => {
                for (s, (l, r)) in out.iter_mut().zip(rows).enumerate() {
                    let z_prev = if t == 0 {
                        0.0
                    } else {
                        o.server_slots[(t - 1) * s_n + s].z
                    };
                    *l = z_prev * r.y;
                }
            }
        }
    }
    (0..t_len * s_n)
        .map(|k| (-sc.nu * lat[k] - lb[k] - cfg.rho * upsilon[k]) / sc.users as f64)
        .collect()
}

/// Per-(slot, server) credit of every decision: `G_{t,s} = Σ_k (γλ)^k
/// r_{t+k,s}` is server `s`'s discounted share of the reward from slot `t`
/// on (what the requests on `s` cost, the decision's own and the wait it
/// imposes on the others there); a decision of slot `t` sent to `a` gets
/// `G_{t,a}` minus the mean of `G_{t,a_j}` over its slot's decisions (only
/// which server, not which slot, is credited).
fn server_advantages(ro: &Rollout, terms: &[f64], s_n: usize, discount: f64) -> Vec<f32> {
    let t_len = terms.len() / s_n.max(1);
    let mut g = vec![0.0f64; terms.len()];
    for t in (0..t_len).rev() {
        for s in 0..s_n {
            let next = if t + 1 < t_len {
                g[(t + 1) * s_n + s]
            } else {
                0.0
            };
            g[t * s_n + s] = terms[t * s_n + s] + discount * next;
        }
    }
    let credit = |d: &Decision| -> Option<f64> {
        let t = d.slot as usize;
        (t < t_len && d.action < s_n).then(|| g[t * s_n + d.action])
    };
    let mut slot_sum: HashMap<u64, (f64, usize)> = HashMap::new();
    for d in &ro.decisions {
        if let Some(x) = credit(d) {
            let e = slot_sum.entry(d.slot).or_insert((0.0, 0));
            e.0 += x;
            e.1 += 1;
        }
    }
    ro.decisions
        .iter()
        .map(|d| match (credit(d), slot_sum.get(&d.slot)) {
            (Some(x), Some(&(sum, n))) => (x - sum / n as f64) as f32,
            _ => 0.0,
        })
        .collect()
}

/// GAE over a *truncated* episode: no step ends it, the step after the
/// last is valued `last_value` (`V(s_T)`, bootstrapped). Returns
/// (advantages, value targets).
pub fn truncated_gae(
    rewards: &[f32],
    values: &[f32],
    last_value: f32,
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    gae(
        rewards,
        values,
        &vec![false; rewards.len()],
        last_value,
        gamma,
        lambda,
    )
}

/// Per-request advantage `−(D_i − mean D of its slot)` (seconds) for every
/// decision, 0 for a rejected or unknown request.
fn request_advantages(ro: &Rollout, o: &EpisodeOutcome) -> Vec<f32> {
    let e2e: HashMap<u64, f64> = o
        .requests
        .iter()
        .filter(|r| !r.rejected)
        .map(|r| (r.id, r.e2e_ns as f64 / 1e9))
        .collect();
    let mut slot_sum: HashMap<u64, (f64, usize)> = HashMap::new();
    for d in &ro.decisions {
        if let Some(&x) = e2e.get(&d.request) {
            let e = slot_sum.entry(d.slot).or_insert((0.0, 0));
            e.0 += x;
            e.1 += 1;
        }
    }
    ro.decisions
        .iter()
        .map(|d| match (e2e.get(&d.request), slot_sum.get(&d.slot)) {
            (Some(&x), Some(&(sum, n))) => -(x - sum / n as f64) as f32,
            _ => 0.0,
        })
        .collect()
}

fn standardize(v: &mut [f32]) {
    let n = v.len().max(1) as f32;
    let mean = v.iter().sum::<f32>() / n;
    let std = (v.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n).sqrt();
    v.iter_mut().for_each(|a| *a = (*a - mean) / (std + 1e-8));
}

/// Behaviour cloning: `epochs` passes of cross-entropy on the recorded
/// decisions (inputs already normalized as the model sees them), Adam at
/// `lr`, minibatch `minibatch`. Returns the share of decisions whose greedy
/// choice is the recorded action afterwards.
pub fn behaviour_clone(
    model: &mut LearnedModel,
    decisions: &[&Decision],
    epochs: usize,
    minibatch: usize,
    lr: f32,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let mut adam = Adam::new(lr);
    let mut g = MlpGrads::zero_like(&model.actor);
    let mut order: Vec<usize> = (0..decisions.len()).collect();
    let mut logits = Vec::new();
    let mut logp = Vec::new();
    for _ in 0..epochs {
        order.shuffle(rng);
        for chunk in order.chunks(minibatch.max(1)) {
            g.zero();
            let m = chunk.len() as f32;
            for &k in chunk {
                let d = decisions[k];
                let ns = d.inputs.len() / ACTOR_INPUT;
                let tapes: Vec<_> = (0..ns)
                    .map(|s| {
                        model
                            .actor
                            .forward_train(&d.inputs[s * ACTOR_INPUT..(s + 1) * ACTOR_INPUT])
                    })
                    .collect();
                logits.clear();
                logits.extend(tapes.iter().map(|t| t.output()[0]));
                logp.resize(ns, 0.0);
                log_softmax(&logits, None, &mut logp);
                for (s, tape) in tapes.iter().enumerate() {
                    let onehot = if s == d.action { 1.0 } else { 0.0 };
                    let dz = (logp[s].exp() - onehot) / m;
                    model.actor.backward(tape, &[dz], &mut g);
                }
            }
            clip_grad_norm(&mut g, 1.0);
            adam.step(&mut model.actor, &g);
        }
    }
    let mut scratch = model.actor.scratch();
    let mut hits = 0usize;
    for d in decisions {
        let ns = d.inputs.len() / ACTOR_INPUT;
        let mut best = (f32::NEG_INFINITY, 0);
        for s in 0..ns {
            let mut y = [0.0f32];
            model.actor.forward(
                &d.inputs[s * ACTOR_INPUT..(s + 1) * ACTOR_INPUT],
                &mut y,
                &mut scratch,
            );
            if y[0] > best.0 {
                best = (y[0], s);
            }
        }
        hits += usize::from(best.1 == d.action);
    }
    hits as f64 / decisions.len().max(1) as f64
}

/// Mean over `seeds` of the greedy mean latency of `model`.
fn evaluate(cfg: &TrainConfig, model: &LearnedModel) -> Result<f64> {
    let spec = PolicySpec::parse("least-loaded").context("batching spec")?;
    let mut acc = 0.0;
    for &seed in &cfg.eval_seeds {
        let sc = cfg.eval_scenario(seed);
        let policy = LearnedPolicy::greedy(Arc::new(model.clone()));
        let o = run_episode_with(&sc, &spec, Box::new(policy)).context("evaluation episode")?;
        acc += o.summary.lat_mean_s;
    }
    Ok(acc / cfg.eval_seeds.len().max(1) as f64)
}

/// Least-Loaded's mean latency on the held-out seeds.
fn evaluate_ll(cfg: &TrainConfig) -> Result<f64> {
    let spec = PolicySpec::parse("least-loaded").context("least-loaded")?;
    let mut acc = 0.0;
    for &seed in &cfg.eval_seeds {
        acc += run_episode(&cfg.eval_scenario(seed), &spec)
            .context("least-loaded evaluation")?
            .summary
            .lat_mean_s;
    }
    Ok(acc / cfg.eval_seeds.len().max(1) as f64)
}

impl Trainer {
    fn new(cfg: &TrainConfig, seed: u64) -> Trainer {
        Trainer {
            model: LearnedModel::new(cfg.variant, seed),
            adam_actor: Adam::new(cfg.lr),
            adam_critic: Adam::new(cfg.lr),
            predictor: None,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7a1),
            reward_scale: 1.0,
            best: None,
            phases: PhaseTimes::default(),
            cfg: cfg.clone(),
        }
    }

    /// Per-slot critic inputs with the remaining-episode share filled in.
    fn critic_inputs(ro: &Rollout) -> Vec<[f32; CRITIC_INPUT]> {
        let t_len = ro.critic_inputs.len();
        ro.critic_inputs
            .iter()
            .enumerate()
            .map(|(t, c)| {
                let mut c = *c;
                c[CRITIC_TIME] = (t_len - t) as f32 / t_len as f32;
                c
            })
            .collect()
    }

    fn values(&self, inputs: &[[f32; CRITIC_INPUT]]) -> Vec<f32> {
        let mut scratch = self.model.critic.scratch();
        inputs
            .iter()
            .map(|c| {
                let mut y = [0.0f32];
                self.model.critic.forward(c, &mut y, &mut scratch);
                y[0]
            })
            .collect()
    }

    /// Records one Least-Loaded episode through the network's inputs, fits
    /// the input normalization and the reward scale on it, clones it into
    /// the actor and fits the critic to its returns.
    fn warm_start(&mut self, seed: u64) -> Result<()> {
        let sc = self.cfg.warm_scenario(seed);
        let spec = PolicySpec::parse("least-loaded").context("batching spec")?;
        let rollout = Arc::new(Mutex::new(Rollout::default()));
        let teacher = LearnedPolicy::imitating(Arc::new(self.model.clone()), rollout.clone());
        let o = run_episode_with(&sc, &spec, Box::new(teacher)).context("warm-start episode")?;
        let mut ro = std::mem::take(&mut *rollout.lock().unwrap_or_else(|p| p.into_inner()));
        // The model had identity normalization: the recorded rows are raw.
        let raw: Vec<f32> = ro
            .decisions
            .iter()
            .flat_map(|d| d.inputs.iter().copied())
            .collect();
        self.model.fit_normalization(&raw);
        for d in &mut ro.decisions {
            for row in d.inputs.chunks_mut(ACTOR_INPUT) {
                self.model.normalize_row(row);
            }
        }
        let r = learning_rewards(&self.cfg, &sc, &o);
        let mean_abs = r.iter().map(|x| x.abs()).sum::<f32>() / r.len().max(1) as f32;
        if mean_abs > 0.0 && mean_abs.is_finite() {
            self.reward_scale = (1.0 - self.cfg.gamma) / mean_abs;
        }
        if self.cfg.bc_epochs > 0 {
            let mut picks: Vec<&Decision> = ro.decisions.iter().collect();
            picks.shuffle(&mut self.rng);
            picks.truncate(self.cfg.bc_decisions);
            let acc = behaviour_clone(
                &mut self.model,
                &picks,
                self.cfg.bc_epochs,
                64,
                self.cfg.bc_lr,
                &mut self.rng,
            );
            tracing::info!(
                "warm start: greedy agrees with Least-Loaded on {acc:.3} of its decisions"
            );
            // The critic: a few rounds of fitting GAE targets.
            let inputs = Self::critic_inputs(&ro);
            let r: Vec<f32> = r.iter().map(|x| x * self.reward_scale).collect();
            let mut adam = Adam::new(1e-3);
            for _ in 0..5 {
                let v = self.values(&inputs);
                let last = *v.last().unwrap_or(&0.0);
                let (_, ret) = truncated_gae(&r, &v, last, self.cfg.gamma, self.cfg.lambda);
                self.fit_critic(&inputs, &ret, 4, &mut adam);
            }
        }
        Ok(())
    }

    fn fit_critic(
        &mut self,
        inputs: &[[f32; CRITIC_INPUT]],
        targets: &[f32],
        epochs: usize,
        adam: &mut Adam,
    ) {
        let mut gc = MlpGrads::zero_like(&self.model.critic);
        let mut slots: Vec<usize> = (0..targets.len()).collect();
        for _ in 0..epochs {
            slots.shuffle(&mut self.rng);
            for chunk in slots.chunks(64) {
                gc.zero();
                let m = chunk.len() as f32;
                for &t in chunk {
                    let tape = self.model.critic.forward_train(&inputs[t]);
                    let v = tape.output()[0];
                    self.model
                        .critic
                        .backward(&tape, &[(v - targets[t]) / m], &mut gc);
                }
                clip_grad_norm(&mut gc, 0.5);
                adam.step(&mut self.model.critic, &gc);
            }
        }
    }

    /// Evaluates the greedy policy on the held-out seeds and keeps the best.
    fn consider(&mut self, after: Option<usize>) -> Result<f64> {
        let t0 = Instant::now();
        let lat = evaluate(&self.cfg, &self.model)?;
        self.phases.eval_s += t0.elapsed().as_secs_f64();
        if self.best.as_ref().is_none_or(|b| lat < b.0) {
            self.best = Some((lat, after, self.model.clone()));
        }
        Ok(lat)
    }

    fn episode(&mut self, seed: u64, e: usize) -> Result<CurvePoint> {
        let t0 = Instant::now();
        let sc = self.cfg.scenario(seed, e);
        let spec = PolicySpec::parse("least-loaded").context("batching spec")?;
        let rollout = Arc::new(Mutex::new(Rollout::default()));
        let policy = LearnedPolicy::sampling(
            Arc::new(self.model.clone()),
            sc.seed ^ 0xac7,
            rollout.clone(),
        );
        let o = run_episode_with(&sc, &spec, Box::new(policy)).context("training episode")?;
        let ro = std::mem::take(&mut *rollout.lock().unwrap_or_else(|p| p.into_inner()));
        let t1 = Instant::now();
        self.phases.rollout_s += (t1 - t0).as_secs_f64();
        let rewards = slot_rewards(&self.cfg, &sc, &o);
        let learn: Vec<f32> = learning_rewards(&self.cfg, &sc, &o)
            .iter()
            .map(|r| r * self.reward_scale)
            .collect();
        let t_len = rewards.len();
        if ro.critic_inputs.len() != t_len {
            bail!(
                "rollout has {} slots, episode {t_len}",
                ro.critic_inputs.len()
            );
        }
        let inputs = Self::critic_inputs(&ro);
        let values = self.values(&inputs);
        let learn_r = if self.cfg.variant.redistributes() {
            self.redistribute(&sc, &ro, &inputs, &learn)
        } else {
            learn
        };
        let last = *values.last().unwrap_or(&0.0);
        let (adv, ret) = truncated_gae(&learn_r, &values, last, self.cfg.gamma, self.cfg.lambda);
        let mut credits = Vec::new();
        if self.cfg.request_credit > 0.0 {
            credits.push((self.cfg.request_credit, request_advantages(&ro, &o)));
        }
        if self.cfg.server_credit > 0.0 {
            let terms = reward_terms(&self.cfg, &sc, &o, false);
            let discount = f64::from(self.cfg.gamma * self.cfg.lambda);
            credits.push((
                self.cfg.server_credit,
                server_advantages(&ro, &terms, sc.servers, discount),
            ));
        }
        let t2 = Instant::now();
        self.phases.credit_s += (t2 - t1).as_secs_f64();
        self.update(&ro, &inputs, &adv, &ret, &credits);
        self.phases.update_s += t2.elapsed().as_secs_f64();
        let due = self.cfg.eval_every > 0 && (e + 1).is_multiple_of(self.cfg.eval_every);
        let eval_lat_s = if due || e + 1 == self.cfg.episodes {
            Some(self.consider(Some(e))?)
        } else {
            None
        };
        Ok(CurvePoint {
            seed,
            episode: e,
            lat_mean_s: o.summary.lat_mean_s,
            z_mean: o.summary.z_mean,
            lb_dev: o.summary.lb_dev,
            high_kv: o.summary.high_kv,
            reward: rewards.iter().map(|&r| r as f64).sum(),
            eval_lat_s,
        })
    }

    /// LYREO's reward redistribution: the predictor reads per slot the
    /// critic input and the share of the slot's requests sent to each
    /// server (the action), is fitted on windows of `H` slots (undiscounted
    /// window returns, no bootstrap) and spreads each window's return.
    fn redistribute(
        &mut self,
        sc: &Scenario,
        ro: &Rollout,
        inputs: &[[f32; CRITIC_INPUT]],
        learn: &[f32],
    ) -> Vec<f32> {
        let s_n = sc.servers;
        let t_len = inputs.len();
        let cfg = &self.cfg;
        let p = self.predictor.get_or_insert_with(|| {
            let mut pc = ReturnPredictorConfig::new(CRITIC_INPUT + s_n, cfg.horizon);
            pc.gamma = 1.0;
            pc.seed = sc.seed ^ 0x4e7;
            ReturnPredictor::new(pc)
        });
        let mut counts = vec![0.0f32; t_len * s_n];
        let mut per_slot = vec![0.0f32; t_len];
        for d in &ro.decisions {
            let t = d.slot as usize;
            if t < t_len && d.action < s_n {
                counts[t * s_n + d.action] += 1.0;
                per_slot[t] += 1.0;
            }
        }
        let d = CRITIC_INPUT + s_n;
        let mut feats = Vec::with_capacity(t_len * d);
        for t in 0..t_len {
            feats.extend_from_slice(&inputs[t]);
            let n = per_slot[t].max(1.0);
            feats.extend(counts[t * s_n..(t + 1) * s_n].iter().map(|c| c / n));
        }
        let mut windows = p.windows(&feats, learn, &[], true);
        for _ in 0..cfg.predictor_epochs {
            windows.shuffle(&mut self.rng);
            for chunk in windows.chunks(cfg.predictor_minibatch.max(1)) {
                p.train_step(chunk);
            }
        }
        // Back in time order for the redistribution.
        let windows = p.windows(&feats, learn, &[], true);
        p.redistribute_windows(&windows)
    }

    fn update(
        &mut self,
        ro: &Rollout,
        critic_inputs: &[[f32; CRITIC_INPUT]],
        slot_adv: &[f32],
        slot_ret: &[f32],
        credits: &[(f32, Vec<f32>)],
    ) {
        let cfg = &self.cfg;
        let mut idx: Vec<usize> = (0..ro.decisions.len()).collect();
        idx.shuffle(&mut self.rng);
        idx.truncate(cfg.decisions_per_update);
        let mut adv: Vec<f32> = idx
            .iter()
            .map(|&i| slot_adv[ro.decisions[i].slot as usize])
            .collect();
        standardize(&mut adv);
        for (w, per_decision) in credits {
            let mut ra: Vec<f32> = idx.iter().map(|&i| per_decision[i]).collect();
            standardize(&mut ra);
            for (a, r) in adv.iter_mut().zip(&ra) {
                *a += w * r;
            }
        }
        let mut ga = MlpGrads::zero_like(&self.model.actor);
        let mut gc = MlpGrads::zero_like(&self.model.critic);
        let mut order: Vec<usize> = (0..idx.len()).collect();
        let mut slots: Vec<usize> = (0..slot_ret.len()).collect();
        let mut logits = Vec::new();
        let mut logp = Vec::new();
        let mut dl = Vec::new();
        let mb = cfg.minibatch.max(1);
        for _ in 0..cfg.epochs {
            order.shuffle(&mut self.rng);
            for chunk in order.chunks(mb) {
                ga.zero();
                let m = chunk.len() as f32;
                for &k in chunk {
                    let d = &ro.decisions[idx[k]];
                    let ns = d.inputs.len() / ACTOR_INPUT;
                    let tapes: Vec<_> = (0..ns)
                        .map(|s| {
                            self.model
                                .actor
                                .forward_train(&d.inputs[s * ACTOR_INPUT..(s + 1) * ACTOR_INPUT])
                        })
                        .collect();
                    logits.clear();
                    logits.extend(tapes.iter().map(|t| t.output()[0]));
                    logp.resize(ns, 0.0);
                    log_softmax(&logits, None, &mut logp);
                    let ratio = (logp[d.action] - d.logp).exp();
                    let a_hat = adv[k];
                    let clipped = ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip);
                    let g_lp = if ratio * a_hat <= clipped * a_hat {
                        -ratio * a_hat
                    } else {
                        0.0
                    };
                    let ent: f32 = -logp.iter().map(|l| l.exp() * l).sum::<f32>();
                    dl.clear();
                    for (j, lp) in logp.iter().enumerate() {
                        let p = lp.exp();
                        let onehot = if j == d.action { 1.0 } else { 0.0 };
                        // d(−c·H)/dz_j = c·p_j (log p_j + H).
                        let d_ent = cfg.entropy_coef * p * (lp + ent);
                        dl.push((g_lp * (onehot - p) + d_ent) / m);
                    }
                    for (s, tape) in tapes.iter().enumerate() {
                        self.model.actor.backward(tape, &dl[s..s + 1], &mut ga);
                    }
                }
                clip_grad_norm(&mut ga, 0.5);
                self.adam_actor.step(&mut self.model.actor, &ga);
            }
            slots.shuffle(&mut self.rng);
            for chunk in slots.chunks(mb) {
                gc.zero();
                let m = chunk.len() as f32;
                for &t in chunk {
                    let tape = self.model.critic.forward_train(&critic_inputs[t]);
                    let v = tape.output()[0];
                    self.model
                        .critic
                        .backward(&tape, &[(v - slot_ret[t]) / m], &mut gc);
                }
                clip_grad_norm(&mut gc, 0.5);
                self.adam_critic.step(&mut self.model.critic, &gc);
            }
        }
    }
}

/// Trains one variant over every seed; `tick` is called after each episode.
pub fn train(cfg: &TrainConfig, mut tick: impl FnMut(&CurvePoint)) -> Result<Vec<SeedRun>> {
    check(cfg)?;
    let ll_eval = evaluate_ll(cfg)?;
    cfg.seeds
        .iter()
        .map(|&seed| train_seed(cfg, seed, ll_eval, &mut tick))
        .collect()
}

fn check(cfg: &TrainConfig) -> Result<()> {
    if cfg.episodes == 0 || cfg.seeds.is_empty() || cfg.slots == 0 || cfg.users == 0 {
        bail!("episodes, seeds, slots and users must be > 0");
    }
    if cfg.eval_seeds.is_empty() {
        bail!("at least one evaluation seed is needed");
    }
    if !(cfg.kv_budget_share > 0.0 && cfg.kv_budget_share <= 1.0) {
        bail!(
            "--kv-budget-share must be in (0, 1], not {}",
            cfg.kv_budget_share
        );
    }
    if !(cfg.nu.is_finite() && cfg.nu > 0.0) {
        bail!("--nu must be a positive number, not {}", cfg.nu);
    }
    Ok(())
}

/// One seed's run: warm start, its evaluation, `cfg.episodes` PPO episodes.
fn train_seed(
    cfg: &TrainConfig,
    seed: u64,
    ll_eval: f64,
    tick: &mut impl FnMut(&CurvePoint),
) -> Result<SeedRun> {
    let mut tr = Trainer::new(cfg, seed);
    let t0 = Instant::now();
    tr.warm_start(seed)
        .with_context(|| format!("seed {seed}, warm start"))?;
    tr.phases.warm_start_s = t0.elapsed().as_secs_f64();
    let warm_eval = tr
        .consider(None)
        .with_context(|| format!("seed {seed}, evaluating the warm start"))?;
    let mut curve = Vec::new();
    for e in 0..cfg.episodes {
        let p = tr
            .episode(seed, e)
            .with_context(|| format!("seed {seed}, episode {e}"))?;
        tick(&p);
        curve.push(p);
    }
    let (lat, after, model) = tr.best.take().context("no evaluation ran")?;
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

const CURVES_HEADER: &str =
    "seed,episode,lat_mean_s,z_mean,lb_dev,high_kv,reward,eval_greedy_lat_s\n";

fn curve_rows(curve: &[CurvePoint], out: &mut String) {
    for p in curve {
        let eval = p.eval_lat_s.map(|x| x.to_string()).unwrap_or_default();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            p.seed, p.episode, p.lat_mean_s, p.z_mean, p.lb_dev, p.high_kv, p.reward, eval
        ));
    }
}

/// Reads what [`curve_rows`] wrote (after [`CURVES_HEADER`]).
fn parse_curve(text: &str, file: &Path) -> Result<Vec<CurvePoint>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let at = || format!("{} line {}", file.display(), n + 1);
        if f.len() != 8 {
            bail!("{}: {} fields, expected 8", at(), f.len());
        }
        let num = |k: usize| -> Result<f64> {
            f[k].parse::<f64>()
                .with_context(|| format!("{}: field {} `{}`", at(), k + 1, f[k]))
        };
        out.push(CurvePoint {
            seed: f[0].parse().with_context(|| format!("{}: seed", at()))?,
            episode: f[1].parse().with_context(|| format!("{}: episode", at()))?,
            lat_mean_s: num(2)?,
            z_mean: num(3)?,
            lb_dev: num(4)?,
            high_kv: num(5)?,
            reward: num(6)?,
            eval_lat_s: if f[7].is_empty() { None } else { Some(num(7)?) },
        });
    }
    Ok(out)
}

/// What a seed's run leaves next to its weights and curve
/// (`<policy>-seed<N>.json`), for the across-seed aggregation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeedSummary {
    pub seed: u64,
    /// Held-out greedy mean latency of the kept weights.
    pub best_eval_s: f64,
    /// The PPO episode after which they were taken (`None`: the warm start).
    pub taken_after: Option<usize>,
    /// Held-out greedy mean latency right after the warm start.
    pub warm_eval_s: f64,
    /// Least-Loaded on the same held-out seeds.
    pub ll_eval_s: f64,
    pub eval_seeds: Vec<u64>,
    pub wall_s: f64,
    /// Where `wall_s` went.
    #[serde(default)]
    pub phases: PhaseTimes,
    pub command: String,
}

/// The across-seed statistics of one value per episode: mean, Student-t
/// 95 % interval, min and max over the seeds that reached the episode.
fn across(v: &[f64]) -> (f64, f64, f64, f64, f64) {
    let (m, lo, hi) = edgemu_stats::mean_ci95(v).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (m, lo, hi, min, max)
}

/// Every seed's points (`<policy>-curves.csv`) and the across-seed curves
/// (`<policy>-convergence.csv`: per episode the number of seeds, then for
/// the sampling policy's mean latency and mean virtual-queue length the
/// mean, 95 % interval and min/max over seeds, and the mean held-out greedy
/// latency where every seed evaluated).
fn curves_csv(curves: &[Vec<CurvePoint>]) -> (String, String) {
    let mut a = String::from(CURVES_HEADER);
    for c in curves {
        curve_rows(c, &mut a);
    }
    let mut b = String::from(
        "episode,seeds,lat_mean_s,lat_ci_lo_s,lat_ci_hi_s,lat_min_s,lat_max_s,\
         z_mean,z_ci_lo,z_ci_hi,z_min,z_max,eval_greedy_lat_mean_s\n",
    );
    let eps = curves.iter().map(Vec::len).max().unwrap_or(0);
    for e in 0..eps {
        let at: Vec<&CurvePoint> = curves.iter().filter_map(|c| c.get(e)).collect();
        let lat: Vec<f64> = at.iter().map(|p| p.lat_mean_s).collect();
        let z: Vec<f64> = at.iter().map(|p| p.z_mean).collect();
        let (lm, llo, lhi, lmin, lmax) = across(&lat);
        let (zm, zlo, zhi, zmin, zmax) = across(&z);
        let evals: Vec<f64> = at.iter().filter_map(|p| p.eval_lat_s).collect();
        let eval = if evals.len() == at.len() {
            (evals.iter().sum::<f64>() / evals.len() as f64).to_string()
        } else {
            String::new()
        };
        b.push_str(&format!(
            "{e},{},{lm},{llo},{lhi},{lmin},{lmax},{zm},{zlo},{zhi},{zmin},{zmax},{eval}\n",
            at.len()
        ));
    }
    (a, b)
}

/// Fig. 2 as images: mean latency and mean virtual-queue length per episode,
/// the mean over seeds as the line and its Student-t 95 % interval as the band.
fn convergence_plots(
    out: &Path,
    variant: Variant,
    curves: &[Vec<CurvePoint>],
) -> Result<Vec<PathBuf>> {
    use crate::plots::{lines_with_ci, CiPoint, CiSeries, Formats, Labels};
    let eps = curves.iter().map(Vec::len).max().unwrap_or(0);
    let series = |f: fn(&CurvePoint) -> f64| CiSeries {
        label: format!(
            "{} (mean; band: 95 % CI over {} seeds)",
            variant.name(),
            curves.len()
        ),
        points: (0..eps)
            .filter_map(|e| {
                let v: Vec<f64> = curves.iter().filter_map(|c| c.get(e)).map(f).collect();
                CiPoint::from_samples(e as f64, &v)
            })
            .collect(),
    };
    let mut files = lines_with_ci(
        out,
        &format!("{}-convergence-latency", variant.name()),
        Formats::default(),
        &Labels::new(
            format!("{} training: mean end-to-end latency", variant.name()),
            "episode",
            "mean latency (s)",
        ),
        &[series(|p| p.lat_mean_s)],
    )?;
    files.extend(lines_with_ci(
        out,
        &format!("{}-convergence-z", variant.name()),
        Formats::default(),
        &Labels::new(
            format!("{} training: mean virtual-queue length Z", variant.name()),
            "episode",
            "mean Z",
        ),
        &[series(|p| p.z_mean)],
    )?);
    Ok(files)
}

fn taken_after(after: Option<usize>) -> String {
    match after {
        Some(e) => format!("after PPO episode {e}"),
        None => "after the warm start".into(),
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `<policy>-seed<N>`: the stem of one seed's files.
fn seed_stem(variant: Variant, seed: u64) -> String {
    format!("{}-seed{seed}", variant.name())
}

/// Writes one seed's weights, curve and summary into `out`.
fn write_seed(
    out: &Path,
    cfg: &TrainConfig,
    r: &SeedRun,
    wall_s: f64,
    command: &str,
) -> Result<()> {
    let stem = seed_stem(cfg.variant, r.seed);
    let notes = format!(
        "{command}; seed {}; held-out greedy {:.4} s {} (warm start {:.4} s, Least-Loaded {:.4} s, seeds {:?})",
        r.seed,
        r.best_eval.0,
        taken_after(r.best_eval.1),
        r.warm_eval,
        r.ll_eval,
        cfg.eval_seeds
    );
    r.model
        .save(&out.join(format!("{stem}.safetensors")), &notes)
        .context("saving weights")?;
    let mut c = String::from(CURVES_HEADER);
    curve_rows(&r.curve, &mut c);
    write(&out.join(format!("{stem}-curves.csv")), &c)?;
    let summary = SeedSummary {
        seed: r.seed,
        best_eval_s: r.best_eval.0,
        taken_after: r.best_eval.1,
        warm_eval_s: r.warm_eval,
        ll_eval_s: r.ll_eval,
        eval_seeds: cfg.eval_seeds.clone(),
        wall_s,
        phases: r.phases.clone(),
        command: command.to_string(),
    };
    write(
        &out.join(format!("{stem}.json")),
        &serde_json::to_string_pretty(&summary)?,
    )
}

/// Every seed of `variant` found in `out` (by its `.json`), in seed order,
/// with its curve.
fn read_seeds(out: &Path, variant: Variant) -> Result<Vec<(SeedSummary, Vec<CurvePoint>)>> {
    let prefix = format!("{}-seed", variant.name());
    let mut found = Vec::new();
    let dir = std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))?;
    for entry in dir {
        let name = entry
            .with_context(|| format!("reading {}", out.display()))?
            .file_name();
        let name = name.to_string_lossy();
        let Some(seed) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = out.join(name.as_ref());
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let summary: SeedSummary =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let cpath = out.join(format!("{}-curves.csv", seed_stem(variant, seed)));
        let ctext = std::fs::read_to_string(&cpath)
            .with_context(|| format!("reading {}", cpath.display()))?;
        found.push((summary, parse_curve(&ctext, &cpath)?));
    }
    found.sort_by_key(|(s, _)| s.seed);
    Ok(found)
}

/// The across-seed curves, plots and the best seed's weights as
/// `<policy>.safetensors` (the seed whose kept weights had the lowest
/// held-out greedy latency), from the per-seed files in `out`.
pub fn aggregate(out: &Path, variant: Variant) -> Result<()> {
    let seeds = read_seeds(out, variant)?;
    if seeds.is_empty() {
        bail!(
            "no {}-seed<N>.json in {}: nothing to aggregate",
            variant.name(),
            out.display()
        );
    }
    let curves: Vec<Vec<CurvePoint>> = seeds.iter().map(|(_, c)| c.clone()).collect();
    let (all, conv) = curves_csv(&curves);
    write(&out.join(format!("{}-curves.csv", variant.name())), &all)?;
    write(
        &out.join(format!("{}-convergence.csv", variant.name())),
        &conv,
    )?;
    for (s, _) in &seeds {
        let p = &s.phases;
        println!(
            "{} seed {}: held-out greedy {:.4} s {} (warm start {:.4} s) vs Least-Loaded {:.4} s; \
             {:.0} s (warm start {:.0}, rollouts {:.0}, credit {:.0}, PPO updates {:.0}, checks {:.0})",
            variant.name(),
            s.seed,
            s.best_eval_s,
            taken_after(s.taken_after),
            s.warm_eval_s,
            s.ll_eval_s,
            s.wall_s,
            p.warm_start_s,
            p.rollout_s,
            p.credit_s,
            p.update_s,
            p.eval_s
        );
    }
    let warm: Vec<f64> = seeds.iter().map(|(s, _)| s.warm_eval_s).collect();
    let kept: Vec<f64> = seeds.iter().map(|(s, _)| s.best_eval_s).collect();
    let last: Vec<f64> = curves
        .iter()
        .filter_map(|c| c.iter().rev().find_map(|p| p.eval_lat_s))
        .collect();
    let show = |v: &[f64]| match edgemu_stats::mean_ci95(v) {
        Some((m, lo, hi)) => format!("{m:.4} s [{lo:.4}, {hi:.4}]"),
        None => "–".into(),
    };
    println!(
        "{}: held-out greedy over {} seeds (mean [95 % CI]): warm start {}, last check {}, kept {}; Least-Loaded {:.4} s",
        variant.name(),
        seeds.len(),
        show(&warm),
        show(&last),
        show(&kept),
        seeds[0].0.ll_eval_s
    );
    let best = seeds
        .iter()
        .min_by(|a, b| a.0.best_eval_s.total_cmp(&b.0.best_eval_s))
        .map(|(s, _)| s.seed)
        .context("no seed")?;
    let from = out.join(format!("{}.safetensors", seed_stem(variant, best)));
    let to = out.join(format!("{}.safetensors", variant.name()));
    std::fs::copy(&from, &to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    println!(
        "{}: best seed {best} -> {}; curves in {}",
        variant.name(),
        to.display(),
        out.display()
    );
    // After the weights: a plot that cannot be drawn loses nothing already written.
    match convergence_plots(out, variant, &curves) {
        Ok(files) => println!(
            "convergence plots: {} files in {}",
            files.len(),
            out.display()
        ),
        Err(e) => eprintln!("warning: convergence plots not drawn: {e:#}"),
    }
    Ok(())
}

pub fn run(a: &TrainLyreoArgs) -> Result<()> {
    let variant = Variant::parse(&a.policy.to_ascii_lowercase()).with_context(|| {
        format!(
            "--policy `{}`: not a learned policy (lyreo, ly-ppo, ppo, lyreo-count, lyreo-nolb)",
            a.policy
        )
    })?;
    if a.aggregate {
        return aggregate(&a.out, variant);
    }
    let mut cfg = TrainConfig::new(variant);
    cfg.episodes = a.episodes;
    cfg.seeds = a.seeds.clone();
    cfg.slots = a.slots;
    cfg.users = a.users;
    cfg.eval_every = a.eval_every;
    cfg.eval_seeds = a.eval_seeds.clone();
    cfg.request_credit = a.request_credit;
    cfg.server_credit = a.server_credit;
    cfg.lr = a.lr;
    cfg.horizon = a.horizon;
    cfg.decisions_per_update = a.decisions;
    cfg.epochs = a.epochs;
    cfg.bc_epochs = a.bc_epochs;
    cfg.kv_budget_share = a.kv_budget_share;
    cfg.nu = a.nu;
    if a.quick {
        cfg.episodes = 2;
        cfg.seeds.truncate(1);
        cfg.slots = 50;
        cfg.users = 12;
        cfg.eval_seeds.truncate(1);
    }
    check(&cfg)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let total = (cfg.episodes * cfg.seeds.len()) as u64;
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} episodes {elapsed_precise} (eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_prefix(format!("train {}", variant.name()));
    let command = format!(
        "edgemu train lyreo --policy {} --episodes {} --slots {} --users {} --eval-every {} \
         --lr {} --horizon {} --decisions {} --epochs {} --request-credit {} --server-credit {} --kv-budget-share {} --nu {}",
        variant.name(),
        cfg.episodes,
        cfg.slots,
        cfg.users,
        cfg.eval_every,
        cfg.lr,
        cfg.horizon,
        cfg.decisions_per_update,
        cfg.epochs,
        cfg.request_credit,
        cfg.server_credit,
        cfg.kv_budget_share,
        cfg.nu
    );
    let ll_eval = evaluate_ll(&cfg)?;
    // Seed by seed, each written as soon as it is done: another process can
    // train other seeds into the same folder, and `--aggregate` (or the end
    // of this run) combines whatever is there.
    for &seed in &cfg.seeds {
        let start = Instant::now();
        let r = train_seed(&cfg, seed, ll_eval, &mut |p: &CurvePoint| {
            pb.set_message(format!(
                "seed {} ep {}: lat {:.3} s, Z {:.4}",
                p.seed, p.episode, p.lat_mean_s, p.z_mean
            ));
            pb.inc(1);
        })?;
        write_seed(&a.out, &cfg, &r, start.elapsed().as_secs_f64(), &command)?;
    }
    pb.finish();
    aggregate(&a.out, variant)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(variant: Variant) -> TrainConfig {
        let mut c = TrainConfig::new(variant);
        c.episodes = 2;
        c.seeds = vec![3];
        c.slots = 12;
        c.users = 4;
        c.decisions_per_update = 32;
        c.epochs = 2;
        c.minibatch = 16;
        c.horizon = 4;
        c.predictor_epochs = 1;
        c.bc_epochs = 2;
        c.bc_decisions = 32;
        c.eval_every = 1;
        c.eval_seeds = vec![5];
        // Exercise the optional per-request and per-server credits too.
        c.request_credit = 1.0;
        c.server_credit = 1.0;
        c
    }

    /// Every tensor's little-endian bytes, in name order. (Whole-file bytes
    /// are not compared: `WeightsFile::to_bytes` hands safetensors its
    /// metadata as a `HashMap`, whose header order varies run to run.)
    fn bytes(v: Variant) -> Vec<u8> {
        let runs = train(&tiny(v), |_| {}).unwrap();
        tensor_bytes(&runs[0].model)
    }

    fn tensor_bytes(m: &LearnedModel) -> Vec<u8> {
        let w = m.to_weights("t");
        let mut out = Vec::new();
        for name in w.tensor_names() {
            out.extend(name.as_bytes());
            out.extend(
                w.tensor(name)
                    .unwrap()
                    .1
                    .iter()
                    .flat_map(|x| x.to_le_bytes()),
            );
        }
        out
    }

    /// Two seeds trained by separate calls into one folder, then
    /// aggregated: the across-seed CSV has both seeds' points and the
    /// 95 % interval, the plots are drawn and the best seed's weights load.
    #[test]
    fn per_seed_files_aggregate_into_curves_plots_and_best_weights() {
        let dir = std::env::temp_dir().join(format!("edgemu-conv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut evals = Vec::new();
        for seed in [3, 4] {
            let mut cfg = tiny(Variant::LyPpo);
            cfg.seeds = vec![seed];
            let runs = train(&cfg, |_| {}).unwrap();
            evals.push((runs[0].best_eval.0, seed));
            write_seed(&dir, &cfg, &runs[0], 1.0, "test").unwrap();
        }
        aggregate(&dir, Variant::LyPpo).unwrap();
        let seeds = read_seeds(&dir, Variant::LyPpo).unwrap();
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[0].1.len(), 2, "two episodes read back");
        let conv = std::fs::read_to_string(dir.join("ly-ppo-convergence.csv")).unwrap();
        let row: Vec<f64> = conv
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(row[1], 2.0, "two seeds at episode 0");
        let lat = [seeds[0].1[0].lat_mean_s, seeds[1].1[0].lat_mean_s];
        assert!((row[2] - (lat[0] + lat[1]) / 2.0).abs() < 1e-12);
        assert!(row[3] <= row[5] && row[5] <= row[2] && row[2] <= row[6] && row[6] <= row[4]);
        for f in ["latency", "z"] {
            for ext in ["png", "svg"] {
                assert!(dir.join(format!("ly-ppo-convergence-{f}.{ext}")).exists());
            }
        }
        let svg = std::fs::read_to_string(dir.join("ly-ppo-convergence-latency.svg")).unwrap();
        assert!(svg.contains("mean latency (s)") && svg.contains("2 seeds"));
        let best = evals.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap().1;
        assert_eq!(
            std::fs::read(dir.join("ly-ppo.safetensors")).unwrap(),
            std::fs::read(dir.join(format!("ly-ppo-seed{best}.safetensors"))).unwrap()
        );
        LearnedModel::load(&dir.join("ly-ppo.safetensors"), Variant::LyPpo).unwrap();
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The per-server reward terms sum to the slot rewards, and the
    /// per-(slot, server) credit has zero mean within every slot.
    #[test]
    fn server_terms_sum_to_the_slot_reward_and_credit_is_centred_per_slot() {
        let cfg = tiny(Variant::Lyreo);
        let sc = cfg.scenario(1, 0);
        let model = LearnedModel::new(Variant::Lyreo, 1);
        let rec = Arc::new(Mutex::new(Rollout::default()));
        let policy = LearnedPolicy::sampling(Arc::new(model), 9, rec.clone());
        let spec = PolicySpec::parse("least-loaded").unwrap();
        let o = run_episode_with(&sc, &spec, Box::new(policy)).unwrap();
        let terms = reward_terms(&cfg, &sc, &o, true);
        let slot = slot_rewards(&cfg, &sc, &o);
        for (t, r) in slot.iter().enumerate() {
            let sum: f64 = terms[t * sc.servers..(t + 1) * sc.servers].iter().sum();
            assert!((sum - f64::from(*r)).abs() < 1e-5, "slot {t}: {sum} vs {r}");
        }
        let ro = rec.lock().unwrap().clone();
        let adv = server_advantages(&ro, &terms, sc.servers, 0.9);
        assert_eq!(adv.len(), ro.decisions.len());
        let mut per_slot: HashMap<u64, f32> = HashMap::new();
        for (d, a) in ro.decisions.iter().zip(&adv) {
            *per_slot.entry(d.slot).or_default() += a;
        }
        assert!(per_slot.values().all(|s| s.abs() < 1e-4), "{per_slot:?}");
        assert!(adv.iter().any(|a| *a != 0.0));
    }

    #[test]
    fn training_is_reproducible_by_seed() {
        for v in [Variant::Lyreo, Variant::LyPpo] {
            let a = bytes(v);
            assert_eq!(a, bytes(v), "{}: identical weight bytes", v.name());
            assert_ne!(
                a,
                tensor_bytes(&LearnedModel::new(v, 3)),
                "training changed the weights"
            );
        }
    }

    #[test]
    fn nu_and_budget_reach_every_scenario_and_bad_values_are_refused() {
        let mut c = tiny(Variant::Lyreo);
        c.nu = 2.0;
        c.kv_budget_share = 0.005;
        for s in [c.scenario(3, 1), c.warm_scenario(3), c.eval_scenario(5)] {
            assert_eq!((s.nu, s.kv_budget_share), (2.0, 0.005));
        }
        assert!(check(&c).is_ok());
        for bad in [0.0, -1.0, f64::NAN] {
            c.nu = bad;
            let e = check(&c).unwrap_err().to_string();
            assert!(e.contains("--nu"), "{e}");
        }
    }

    /// γ = 0.5, λ = 1, a 3-step episode cut by the time limit: the last
    /// step bootstraps from V(s_T) = 8 instead of ending.
    #[test]
    fn truncation_bootstraps_the_last_step() {
        let r = [1.0, 2.0, 4.0];
        let v = [0.0, 0.0, 0.0];
        let (adv, ret) = truncated_gae(&r, &v, 8.0, 0.5, 1.0);
        // G_2 = 4 + .5·8 = 8; G_1 = 2 + .5·8 = 6; G_0 = 1 + .5·6 = 4.
        assert_eq!(ret, vec![4.0, 6.0, 8.0]);
        assert_eq!(adv, ret);
        // With values: δ_2 = 4 + .5·8 − 2 = 6, δ_1 = 2 + .5·2 − 1 = 2,
        // δ_0 = 1 + .5·1 − 3 = −1.5; A_1 = 2 + .5·6 = 5; A_0 = −1.5 + .5·5 = 1.
        let (adv, _) = truncated_gae(&r, &[3.0, 1.0, 2.0], 8.0, 0.5, 1.0);
        assert_eq!(adv, vec![1.0, 5.0, 6.0]);
    }

    /// A crafted 3-server state: behaviour cloning on Least-Loaded's
    /// decisions over varied loads makes the greedy network choose what
    /// Least-Loaded chooses.
    #[test]
    fn behaviour_cloning_makes_greedy_equal_least_loaded() {
        use edgemu_policies::lyreo::{
            LeastLoaded, RequestObs, SchedulingPolicy, ServerObs, SlotLoad, SlotObservation,
        };
        use rand::Rng;
        let server = |eta: f64, v_pre: f64| ServerObs {
            capacity_bytes: 1_000_000,
            kv_bytes_per_token: 1000,
            prefill_tok_s: v_pre,
            decode_step_empty_s: 0.01,
            decode_step_full_s: 0.02,
            bandwidth_hz: 1e7,
            load: SlotLoad {
                eta,
                ..SlotLoad::default()
            },
        };
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let state = |rng: &mut ChaCha8Rng, slot: u64| SlotObservation {
            slot,
            slot_s: 1.0,
            requests: (0..4)
                .map(|i| RequestObs {
                    id: slot * 10 + i,
                    user: i as usize,
                    input_len: rng.random_range(10..200),
                    output_len: rng.random_range(10..200),
                    solo_rate_bps: vec![1e6; 3],
                })
                .collect(),
            servers: vec![
                server(rng.random_range(0.0..0.6), 1000.0),
                server(rng.random_range(0.0..0.6), 2000.0),
                server(rng.random_range(0.0..0.6), 4000.0),
            ],
            z: vec![0.0; 3],
            epsilon: 0.01,
            nu: 0.5,
        };
        let mut model = LearnedModel::new(Variant::Lyreo, 1);
        let rec = Arc::new(Mutex::new(Rollout::default()));
        let mut teacher = LearnedPolicy::imitating(Arc::new(model.clone()), rec.clone());
        let mut out = Vec::new();
        for t in 0..150 {
            teacher.assign(&state(&mut rng, t), &mut out);
        }
        let mut ro = std::mem::take(&mut *rec.lock().unwrap());
        let raw: Vec<f32> = ro.decisions.iter().flat_map(|d| d.inputs.clone()).collect();
        model.fit_normalization(&raw);
        assert!(model.obs_std.iter().all(|s| *s > 0.0));
        for d in &mut ro.decisions {
            for row in d.inputs.chunks_mut(ACTOR_INPUT) {
                model.normalize_row(row);
            }
        }
        let picks: Vec<&Decision> = ro.decisions.iter().collect();
        let acc = behaviour_clone(&mut model, &picks, 30, 32, 3e-3, &mut rng);
        assert!(acc > 0.97, "training agreement {acc}");
        let model = Arc::new(model);
        let (mut agree, mut total) = (0, 0);
        for t in 1000..1020 {
            let o = state(&mut rng, t);
            let (mut ll, mut net) = (Vec::new(), Vec::new());
            LeastLoaded::new().assign(&o, &mut ll);
            LearnedPolicy::greedy(model.clone()).assign(&o, &mut net);
            agree += ll.iter().zip(&net).filter(|(a, b)| a == b).count();
            total += ll.len();
        }
        assert!(
            agree * 100 >= total * 95,
            "{agree}/{total} held-out decisions agree"
        );
    }

    #[test]
    fn training_keeps_the_best_evaluated_weights_and_writes_eval_points() {
        let runs = train(&tiny(Variant::Lyreo), |_| {}).unwrap();
        let r = &runs[0];
        assert!(r.curve.iter().all(|p| p.eval_lat_s.is_some()));
        let evals: Vec<f64> = r.curve.iter().filter_map(|p| p.eval_lat_s).collect();
        assert!(
            evals.iter().all(|&e| r.best_eval.0 <= e),
            "{:?} {evals:?}",
            r.best_eval
        );
        assert!(r.ll_eval > 0.0);
        assert!(
            r.model.obs_std.iter().any(|s| *s != 1.0),
            "normalization fitted"
        );
    }

    #[test]
    fn rewards_have_one_value_per_slot_and_are_not_positive() {
        let cfg = tiny(Variant::Ppo);
        let sc = cfg.scenario(1, 0);
        let spec = PolicySpec::parse("least-loaded").unwrap();
        let o = edgemu_serving::run_episode(&sc, &spec).unwrap();
        let r = slot_rewards(&cfg, &sc, &o);
        assert_eq!(r.len(), 12);
        assert!(r.iter().all(|x| *x <= 0.0));
        let total: f64 = o.requests.iter().map(|q| q.e2e_ns as f64 / 1e9).sum();
        let credited: f64 = -r.iter().map(|x| *x as f64).sum::<f64>() * 4.0 / 0.5;
        assert!(credited >= total * 0.999, "every latency is credited once");
        // The learning reward leaves the drain lump out.
        let l = learning_rewards(&cfg, &sc, &o);
        assert!(l[..11] == r[..11] && l[11] >= r[11]);
    }
}
