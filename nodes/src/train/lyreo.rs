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
//! - *Data.* 4 096 sampled decisions of the 32 000 per episode, 4 epochs
//!   (Table I: 10; the cost per episode stays ≈ the same).
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
use edgemu_serving::{run_episode, run_episode_with, EpisodeOutcome, Scenario};
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
    /// PPO learning rate (after the warm start).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f32,
    /// Behaviour-cloning epochs of the warm start (0: no warm start, only
    /// the normalization is fitted).
    #[arg(long, default_value_t = 8)]
    pub bc_epochs: usize,
    /// Output folder (weights, curves.csv, convergence.csv).
    #[arg(long, default_value = "results/train-lyreo")]
    pub out: PathBuf,
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
        }
    }

    fn scenario(&self, seed: u64, episode: usize) -> Scenario {
        let mut s = Scenario::paper_default(seed.wrapping_mul(1000).wrapping_add(episode as u64));
        s.slots = self.slots;
        s.users = self.users;
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
    /// Least-Loaded on the same held-out seeds.
    pub ll_eval: f64,
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
    let t_len = sc.slots as usize;
    let s_n = sc.servers;
    let slot_s = sc.slot_ns as f64 / 1e9;
    let mut lat = vec![0.0f64; t_len];
    let mut upsilon = vec![0.0f64; t_len];
    for r in &o.requests {
        if r.rejected {
            upsilon[(r.slot as usize).min(t_len - 1)] += 1.0;
            continue;
        }
        let e2e = r.e2e_ns as f64 / 1e9;
        let done = r.slot as usize + (e2e / slot_s) as usize;
        if done < t_len {
            lat[done] += e2e;
        } else if lump_drain {
            lat[t_len - 1] += e2e;
        }
    }
    let mut lb = vec![0.0f64; t_len];
    let mut count_z = vec![0.0f64; s_n];
    for t in 0..t_len {
        let rows = &o.server_slots[t * s_n..(t + 1) * s_n];
        for row in rows {
            if row.report.high_kv {
                upsilon[t] += 1.0;
            }
        }
        lb[t] = match cfg.variant {
            Variant::LyreoNolb => 0.0,
            Variant::Ppo => cfg.ppo_penalty * rows.iter().map(|r| r.y).sum::<f64>(),
            Variant::LyreoCount => {
                let w: Vec<f64> = rows
                    .iter()
                    .map(|r| count_workload(r.report.backlog))
                    .collect();
                let mean = w.iter().sum::<f64>() / s_n as f64;
                let mut acc = 0.0;
                for (z, x) in count_z.iter_mut().zip(&w) {
                    let y = (x - mean) * (x - mean);
                    acc += *z * y;
                    *z = (*z + y - sc.epsilon).max(0.0);
                }
                acc
            }
            _ => {
                let prev = if t == 0 {
                    None
                } else {
                    Some(&o.server_slots[(t - 1) * s_n..t * s_n])
                };
                rows.iter()
                    .enumerate()
                    .map(|(s, r)| prev.map(|p| p[s].z).unwrap_or(0.0) * r.y)
                    .sum()
            }
        };
    }
    (0..t_len)
        .map(|t| ((-sc.nu * lat[t] - lb[t] - cfg.rho * upsilon[t]) / sc.users as f64) as f32)
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
        let lat = evaluate(&self.cfg, &self.model)?;
        if self.best.as_ref().is_none_or(|b| lat < b.0) {
            self.best = Some((lat, after, self.model.clone()));
        }
        Ok(lat)
    }

    fn episode(&mut self, seed: u64, e: usize) -> Result<CurvePoint> {
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
        let req_adv = request_advantages(&ro, &o);
        self.update(&ro, &inputs, &adv, &ret, &req_adv);
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
        req_adv: &[f32],
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
        if cfg.request_credit > 0.0 {
            let mut ra: Vec<f32> = idx.iter().map(|&i| req_adv[i]).collect();
            standardize(&mut ra);
            for (a, r) in adv.iter_mut().zip(&ra) {
                *a += cfg.request_credit * r;
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
    if cfg.episodes == 0 || cfg.seeds.is_empty() || cfg.slots == 0 || cfg.users == 0 {
        bail!("episodes, seeds, slots and users must be > 0");
    }
    if cfg.eval_seeds.is_empty() {
        bail!("at least one evaluation seed is needed");
    }
    let ll_eval = evaluate_ll(cfg)?;
    let mut runs = Vec::new();
    for &seed in &cfg.seeds {
        let mut tr = Trainer::new(cfg, seed);
        tr.warm_start(seed)
            .with_context(|| format!("seed {seed}, warm start"))?;
        tr.consider(None)
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
        runs.push(SeedRun {
            seed,
            model,
            curve,
            best_eval: (lat, after),
            ll_eval,
        });
    }
    Ok(runs)
}

fn curves_csv(runs: &[SeedRun]) -> (String, String) {
    let mut a =
        String::from("seed,episode,lat_mean_s,z_mean,lb_dev,high_kv,reward,eval_greedy_lat_s\n");
    for r in runs {
        for p in &r.curve {
            let eval = p.eval_lat_s.map(|x| x.to_string()).unwrap_or_default();
            a.push_str(&format!(
                "{},{},{},{},{},{},{},{}\n",
                p.seed, p.episode, p.lat_mean_s, p.z_mean, p.lb_dev, p.high_kv, p.reward, eval
            ));
        }
    }
    let mut b = String::from("episode,lat_mean_s,lat_min_s,lat_max_s,z_mean,z_min,z_max\n");
    let eps = runs.iter().map(|r| r.curve.len()).min().unwrap_or(0);
    for e in 0..eps {
        let lat: Vec<f64> = runs.iter().map(|r| r.curve[e].lat_mean_s).collect();
        let z: Vec<f64> = runs.iter().map(|r| r.curve[e].z_mean).collect();
        let st = |v: &[f64]| {
            (
                v.iter().sum::<f64>() / v.len() as f64,
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            )
        };
        let (lm, ll, lh) = st(&lat);
        let (zm, zl, zh) = st(&z);
        b.push_str(&format!("{e},{lm},{ll},{lh},{zm},{zl},{zh}\n"));
    }
    (a, b)
}

/// Fig. 2 as images: mean latency and mean virtual-queue length per episode,
/// the mean over seeds as the line and the min–max over seeds as the band.
fn convergence_plots(out: &Path, variant: Variant, runs: &[SeedRun]) -> Result<Vec<PathBuf>> {
    use crate::plots::{lines_with_ci, CiPoint, CiSeries, Formats, Labels};
    let eps = runs.iter().map(|r| r.curve.len()).min().unwrap_or(0);
    let series = |f: fn(&CurvePoint) -> f64| CiSeries {
        label: format!(
            "{} (mean; band: min–max over {} seeds)",
            variant.name(),
            runs.len()
        ),
        points: (0..eps)
            .map(|e| {
                let v: Vec<f64> = runs.iter().map(|r| f(&r.curve[e])).collect();
                CiPoint {
                    x: e as f64,
                    mean: v.iter().sum::<f64>() / v.len() as f64,
                    lo: v.iter().copied().fold(f64::INFINITY, f64::min),
                    hi: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                }
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

/// The seed whose kept weights had the lowest held-out greedy latency.
fn best(runs: &[SeedRun]) -> Option<&SeedRun> {
    runs.iter()
        .min_by(|a, b| a.best_eval.0.total_cmp(&b.best_eval.0))
}

fn taken_after(r: &SeedRun) -> String {
    match r.best_eval.1 {
        Some(e) => format!("after PPO episode {e}"),
        None => "after the warm start".into(),
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn run(a: &TrainLyreoArgs) -> Result<()> {
    let variant = Variant::parse(&a.policy.to_ascii_lowercase()).with_context(|| {
        format!(
            "--policy `{}`: not a learned policy (lyreo, ly-ppo, ppo, lyreo-count, lyreo-nolb)",
            a.policy
        )
    })?;
    let mut cfg = TrainConfig::new(variant);
    cfg.episodes = a.episodes;
    cfg.seeds = a.seeds.clone();
    cfg.slots = a.slots;
    cfg.users = a.users;
    cfg.eval_every = a.eval_every;
    cfg.eval_seeds = a.eval_seeds.clone();
    cfg.request_credit = a.request_credit;
    cfg.lr = a.lr;
    cfg.bc_epochs = a.bc_epochs;
    if a.quick {
        cfg.episodes = 2;
        cfg.seeds.truncate(1);
        cfg.slots = 50;
        cfg.users = 12;
        cfg.eval_seeds.truncate(1);
    }
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
    let start = Instant::now();
    let runs = train(&cfg, |p| {
        pb.set_message(format!(
            "seed {} ep {}: lat {:.3} s, Z {:.4}",
            p.seed, p.episode, p.lat_mean_s, p.z_mean
        ));
        pb.inc(1);
    })?;
    pb.finish();
    let (curves, conv) = curves_csv(&runs);
    write(
        &a.out.join(format!("{}-curves.csv", variant.name())),
        &curves,
    )?;
    write(
        &a.out.join(format!("{}-convergence.csv", variant.name())),
        &conv,
    )?;
    for r in &runs {
        let notes = format!(
            "edgemu train lyreo --policy {} --episodes {} --slots {} --users {}; seed {}; \
             held-out greedy {:.4} s {} (Least-Loaded {:.4} s, seeds {:?})",
            variant.name(),
            cfg.episodes,
            cfg.slots,
            cfg.users,
            r.seed,
            r.best_eval.0,
            taken_after(r),
            r.ll_eval,
            cfg.eval_seeds
        );
        r.model
            .save(
                &a.out
                    .join(format!("{}-seed{}.safetensors", variant.name(), r.seed)),
                &notes,
            )
            .context("saving weights")?;
    }
    if let Some(b) = best(&runs) {
        let path = a.out.join(format!("{}.safetensors", variant.name()));
        let notes = format!(
            "edgemu train lyreo --policy {} --episodes {} --slots {} --users {} --seeds {:?}; \
             best seed {}: held-out greedy {:.4} s {} (Least-Loaded {:.4} s, seeds {:?})",
            variant.name(),
            cfg.episodes,
            cfg.slots,
            cfg.users,
            cfg.seeds,
            b.seed,
            b.best_eval.0,
            taken_after(b),
            b.ll_eval,
            cfg.eval_seeds
        );
        b.model.save(&path, &notes).context("saving weights")?;
        for r in &runs {
            println!(
                "{} seed {}: held-out greedy {:.4} s {} vs Least-Loaded {:.4} s",
                variant.name(),
                r.seed,
                r.best_eval.0,
                taken_after(r),
                r.ll_eval
            );
        }
        println!(
            "{}: best seed {} -> {} ({:.0} s); curves in {}",
            variant.name(),
            b.seed,
            path.display(),
            start.elapsed().as_secs_f64(),
            a.out.display()
        );
    }
    // After the weights: a plot that cannot be drawn loses nothing already written.
    match convergence_plots(&a.out, variant, &runs) {
        Ok(files) => println!(
            "convergence plots: {} files in {}",
            files.len(),
            a.out.display()
        ),
        Err(e) => eprintln!("warning: convergence plots not drawn: {e:#}"),
    }
    Ok(())
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
        // Exercise the optional per-request credit too.
        c.request_credit = 1.0;
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

    #[test]
    fn convergence_plots_are_drawn_from_the_curves() {
        let mut cfg = tiny(Variant::LyPpo);
        cfg.seeds = vec![3, 4];
        let runs = train(&cfg, |_| {}).unwrap();
        let dir = std::env::temp_dir().join(format!("edgemu-conv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = convergence_plots(&dir, Variant::LyPpo, &runs).unwrap();
        assert_eq!(files.len(), 4, "latency and Z, PNG and SVG: {files:?}");
        let svg = std::fs::read_to_string(dir.join("ly-ppo-convergence-latency.svg")).unwrap();
        assert!(svg.contains("mean latency (s)") && svg.contains("2 seeds"));
        std::fs::remove_dir_all(&dir).ok();
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
            LeastLoaded, RequestObs, SchedulingPolicy, ServerObs, SlotObservation,
        };
        use rand::Rng;
        let server = |eta: f64, v_pre: f64| ServerObs {
            capacity_bytes: 1_000_000,
            kv_bytes_per_token: 1000,
            prefill_tok_s: v_pre,
            decode_step_empty_s: 0.01,
            decode_step_full_s: 0.02,
            bandwidth_hz: 1e7,
            occupancy_bytes: 0,
            reserved_bytes: 0,
            waiting_kv_bytes: 0,
            backlog: 0,
            eta,
            peak_bytes: 0,
            high_kv: false,
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
