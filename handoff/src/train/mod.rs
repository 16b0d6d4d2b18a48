//! Double-DQN training of PriorityFEC's repair scheduler on the handoff
//! harness (paper §IV-D, §V-B): `edgemu train repair` drives this.
//!
//! **Loop.** An episode is one [`run_handoff`] of a drawn training episode
//! ([`env`]) under the `priorityfec` scheme with the ε-greedy
//! [`explore::ExploringScheduler`] and `record_decisions`; its decisions and
//! the harness's per-epoch J^KV become transitions ([`transitions`]) that
//! the [`DdqnLearner`] stores, taking one minibatch update every 16.
//! Before the first episode the replay is seeded with the transitions of
//! [`TrainConfig::seed_episodes`] deficit-heuristic episodes (no imitation
//! loss). Paper settings: Huber loss, target sync every 500 updates, γ = 1,
//! Adam 1e-4, gradient-norm clip 5, learn every 16, ε from 0.25 to 0.05
//! linearly over the first 80 % of the episodes (per episode), then 0.05.
//!
//! **n-step targets** ([`TrainConfig::n_step`], [`transitions`]): the
//! n-step returns are those of the episode that produced them — ε-greedy or,
//! in the seeded replay, the heuristic — with no off-policy correction, so
//! over their window they estimate the behaviour policy's return, not the
//! greedy one's; with ε ≤ 0.25 the two are close, and it is what made the
//! DDQN beat the heuristic here (docs/experiments/priorityfec.md).
//!
//! **Checkpoints.** Every [`TrainConfig::eval_every`] episodes (and after the
//! last) the greedy policy runs `priorityfec` and the `deficit-heuristic`
//! scheme on the evaluation scenario — the paper's main channel, SmolLM2's
//! layout (2 880 blocks) with [`crate::placeholder_utilities`] or a
//! measured profile's, at every deadline of [`TrainConfig::eval_rhos`] —
//! on the same held-out realization seeds (never used for training:
//! training seeds come from the trainer's RNG, evaluation seeds are
//! `EVAL_SEED_BASE + i`; each seed runs at every ρ). The final network is
//! the result, or with [`TrainConfig::keep_best`] the checkpoint with the
//! best mean over those seeds and deadlines; either way
//! [`TrainConfig::final_seeds`] realizations from [`FINAL_SEED_BASE`],
//! disjoint from the training and checkpoint seeds, test it against the
//! heuristic (paired).
//!
//! Everything is seeded from [`TrainConfig::seed`]; single-threaded, so a
//! training is reproducible bit for bit.

pub mod env;
pub mod explore;
pub mod output;
pub mod transitions;

use edgemu_policies::repair::ddqn::DdqnNet;
use edgemu_policies::repair::{DeficitHeuristic, RepairScheduler};
use edgemu_policies::rl::{DdqnConfig, DdqnLearner};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::blocks::{placeholder_utilities, BlockLayout};
use crate::error::HandoffError;
use crate::harness::{run_handoff, synthetic_payload, RunOptions};
use crate::scenario::HandoffScenario;
use crate::scheme::scheme;
use crate::sender::PotentialWeights;
use env::{draw_episode, EpisodeRanges};
use explore::ExploringScheduler;

/// Evaluation realization seeds are `EVAL_SEED_BASE + i`.
pub const EVAL_SEED_BASE: u64 = 0xE7A1_0000;
/// Seeds of the final held-out evaluation, `FINAL_SEED_BASE + i`: disjoint
/// from the training seeds and from the checkpoint seeds, so the reported
/// comparison is on seeds no choice was made on.
pub const FINAL_SEED_BASE: u64 = 0xF1A1_0000;

/// Epochs per transition of the n-step target (a little over one RTT of
/// decisions, ≈ 25 epochs, at the paper setting; see [`transitions`]).
pub const DEFAULT_N_STEP: usize = 32;

/// Deadlines of the evaluations: those of `edgemu experiment priorityfec`'s
/// grid, so the kept checkpoint is chosen for all of them (chosen at 0.8
/// alone, a network that won there lost at 1.0 by over-repairing —
/// docs/experiments/priorityfec.md).
pub const DEFAULT_EVAL_RHOS: [f64; 4] = [0.6, 0.8, 1.0, 1.2];

/// What a training run does.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub episodes: u32,
    pub seed: u64,
    /// Deficit-heuristic episodes whose transitions seed the replay.
    pub seed_episodes: u32,
    pub ranges: EpisodeRanges,
    /// Evaluate every this many episodes (0: only at the end).
    pub eval_every: u32,
    /// Held-out realizations per evaluation.
    pub eval_seeds: u32,
    /// Realizations of the final evaluation (`FINAL_SEED_BASE + i`) of the
    /// final network; 0: none.
    pub final_seeds: u32,
    /// The evaluation handoff (paper channel); its ρ is set to each of
    /// [`Self::eval_rhos`] in turn.
    pub eval_scenario: HandoffScenario,
    pub learner: DdqnConfig,
    /// Keep the checkpoint with the best mean on the checkpoint seeds
    /// instead of the last network (validation on those seeds; the final
    /// evaluation's seeds are disjoint from them, so it stays a held-out
    /// test).
    pub keep_best: bool,
    /// Coding window limit K of the training episodes and the evaluation
    /// handoffs (`None`: the scenario default).
    pub k: Option<u16>,
    /// Weights of the shaping potential F (paper §IV-C3) in the reward.
    pub potential: PotentialWeights,
    /// Deadlines ρ of the evaluation handoffs (checkpoints and the final
    /// evaluation): every seed at every ρ, the checkpoint's mean over all.
    pub eval_rhos: Vec<f64>,
    /// Epochs of reward per transition before the target bootstraps
    /// ([`transitions`] module docs; 1: the paper's one-step target).
    pub n_step: usize,
    /// Start from this network instead of a random one (fine-tuning; with
    /// no episodes, only evaluated). Its normalization must be the identity.
    pub init: Option<DdqnNet>,
}

/// The evaluation handoff on `layout` without a measured profile: the
/// paper's channel at ρ = 0.8, placeholder utilities, a stand-in payload.
fn placeholder_evaluation(layout: BlockLayout) -> HandoffScenario {
    HandoffScenario::paper(
        layout,
        placeholder_utilities(&layout).into(),
        synthetic_payload(&layout, 1),
        0.8,
    )
}

impl TrainConfig {
    /// The full training: SmolLM2's layout with placeholder utilities for
    /// evaluation, the default episode ranges.
    pub fn standard(episodes: u32, seed: u64) -> Result<TrainConfig, HandoffError> {
        let layout = BlockLayout::smollm2(1536)?;
        Ok(TrainConfig {
            episodes,
            seed,
            seed_episodes: 4,
            ranges: EpisodeRanges::default(),
            eval_every: 20,
            eval_seeds: 4,
            final_seeds: 0,
            eval_scenario: placeholder_evaluation(layout),
            learner: DdqnNet::learner_config(seed),
            init: None,
            potential: PotentialWeights::default(),
            n_step: DEFAULT_N_STEP,
            eval_rhos: DEFAULT_EVAL_RHOS.to_vec(),
            k: None,
            keep_best: false,
        })
    }

    /// Seconds-long settings (tiny episodes, a small evaluation handoff at
    /// ρ = 0.8 only) for tests and `--quick`.
    pub fn quick(episodes: u32, seed: u64) -> Result<TrainConfig, HandoffError> {
        let layout = BlockLayout::smollm2(160)?;
        let layout = BlockLayout::new(3, layout.n_tokens, 16, layout.block_bytes)?;
        Ok(TrainConfig {
            episodes,
            seed,
            seed_episodes: 1,
            ranges: EpisodeRanges::tiny(),
            eval_every: episodes.div_ceil(2).max(1),
            eval_seeds: 2,
            final_seeds: 0,
            eval_scenario: placeholder_evaluation(layout),
            learner: DdqnConfig {
                min_replay: 32,
                ..DdqnNet::learner_config(seed)
            },
            init: None,
            potential: PotentialWeights::default(),
            n_step: DEFAULT_N_STEP,
            eval_rhos: vec![0.8],
            k: None,
            keep_best: false,
        })
    }

    /// Checks what `train` cannot work with: the evaluation deadlines (at
    /// least one, each in (0, 100], none twice — the same seeds twice would
    /// count as twice the evidence) and `keep_best` without checkpoint seeds.
    /// `train` calls it; a front end may call it first to fail early.
    pub fn validate(&self) -> Result<(), HandoffError> {
        if self.eval_rhos.is_empty() {
            return Err(HandoffError::Config(
                "no evaluation deadline rho given".into(),
            ));
        }
        for (i, r) in self.eval_rhos.iter().enumerate() {
            if !(r.is_finite() && *r > 0.0 && *r <= 100.0) {
                return Err(HandoffError::Config(format!(
                    "evaluation deadline rho {r} is not in (0, 100]"
                )));
            }
            if self.eval_rhos[..i].contains(r) {
                return Err(HandoffError::Config(format!(
                    "evaluation deadline rho {r} is given twice"
                )));
            }
        }
        if self.keep_best && self.eval_seeds == 0 {
            return Err(HandoffError::Config(
                "keeping the best checkpoint needs checkpoint seeds (eval_seeds > 0)".into(),
            ));
        }
        Ok(())
    }

    /// ε of episode `e` (0-based): 0.25 → 0.05 over the first 80 %.
    pub fn epsilon(&self, e: u32) -> f32 {
        let (hi, lo) = (self.learner.eps_start, self.learner.eps_end);
        let span = (0.8 * f64::from(self.episodes)).max(1.0);
        let f = (f64::from(e) / span).min(1.0) as f32;
        hi + (lo - hi) * f
    }
}

/// One row of the training curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveRow {
    pub episode: u32,
    pub epsilon: f32,
    /// Mean one-step shaped reward per decision (the n-step transitions'
    /// windows overlap, so their rewards are not what is averaged).
    pub mean_reward: f64,
    /// Recovered utility of the training episode.
    pub recovered_utility: f64,
    /// Mean Huber loss of the updates in the episode (NaN if none).
    pub loss: f64,
    pub transitions: usize,
    pub updates: u64,
}

/// One checkpoint: recovered utility on the held-out seeds, per seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Episodes trained before it.
    pub episode: u32,
    /// The deadline of each entry (every seed at every ρ of
    /// [`TrainConfig::eval_rhos`], ρ by ρ); the vectors below are parallel.
    pub rho: Vec<f64>,
    /// The realization seed of each entry, as its index `i` (seed
    /// `base + i`): the same index at two deadlines is the same channel draw.
    pub seed: Vec<u64>,
    pub ddqn: Vec<f64>,
    pub heuristic: Vec<f64>,
    /// Repair packets sent, per seed.
    pub ddqn_repairs: Vec<u32>,
    pub heuristic_repairs: Vec<u32>,
    /// Received repairs that were not innovative (every one of them, on the
    /// paper channel with K = 256, a repair whose whole span the receiver
    /// had already decoded past), per seed.
    pub ddqn_redundant: Vec<u32>,
    pub heuristic_redundant: Vec<u32>,
}

impl Evaluation {
    pub fn ddqn_mean(&self) -> f64 {
        mean(&self.ddqn)
    }
    pub fn heuristic_mean(&self) -> f64 {
        mean(&self.heuristic)
    }
    /// Paired differences DDQN − heuristic, per seed.
    pub fn differences(&self) -> Vec<f64> {
        self.ddqn
            .iter()
            .zip(&self.heuristic)
            .map(|(d, h)| d - h)
            .collect()
    }

    /// The number of distinct seeds (entries are seeds × deadlines).
    pub fn seeds(&self) -> usize {
        let mut s = self.seed.clone();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    /// The distinct deadlines, in order.
    pub fn rhos(&self) -> Vec<f64> {
        let mut r: Vec<f64> = Vec::new();
        for &x in &self.rho {
            if !r.contains(&x) {
                r.push(x);
            }
        }
        r
    }

    /// The entries at deadline `rho`.
    pub fn at_rho(&self, rho: f64) -> Evaluation {
        let keep = |i: &usize| self.rho.get(*i) == Some(&rho);
        let pick_f = |v: &[f64]| -> Vec<f64> { (0..v.len()).filter(keep).map(|i| v[i]).collect() };
        let pick_u = |v: &[u32]| -> Vec<u32> { (0..v.len()).filter(keep).map(|i| v[i]).collect() };
        Evaluation {
            episode: self.episode,
            rho: pick_f(&self.rho),
            seed: (0..self.seed.len())
                .filter(keep)
                .map(|i| self.seed[i])
                .collect(),
            ddqn: pick_f(&self.ddqn),
            heuristic: pick_f(&self.heuristic),
            ddqn_repairs: pick_u(&self.ddqn_repairs),
            heuristic_repairs: pick_u(&self.heuristic_repairs),
            ddqn_redundant: pick_u(&self.ddqn_redundant),
            heuristic_redundant: pick_u(&self.heuristic_redundant),
        }
    }

    /// Seeds where the DDQN recovered more / less utility than the heuristic.
    pub fn wins_losses(&self) -> (usize, usize) {
        let w = self.ddqn.iter().zip(&self.heuristic);
        (
            w.clone().filter(|(d, h)| d > h).count(),
            w.filter(|(d, h)| d < h).count(),
        )
    }
}

fn mean(v: &[f64]) -> f64 {
    edgemu_stats::mean(v).unwrap_or(0.0)
}

/// What a training produced.
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    pub net: DdqnNet,
    pub curve: Vec<CurveRow>,
    pub evaluations: Vec<Evaluation>,
    /// The final network on [`TrainConfig::final_seeds`] seeds from
    /// [`FINAL_SEED_BASE`] (`None` when 0).
    pub final_evaluation: Option<Evaluation>,
    pub seeded_transitions: usize,
    pub updates: u64,
}

/// Progress events for a caller's progress bar.
#[derive(Debug, Clone)]
pub enum Progress<'a> {
    Episode(&'a CurveRow),
    Evaluation(&'a Evaluation),
    /// The final held-out evaluation.
    Final(&'a Evaluation),
}

/// Greedy DDQN against the deficit heuristic on the evaluation scenario, on
/// the checkpoint seeds `EVAL_SEED_BASE + i`.
pub fn evaluate(
    cfg: &TrainConfig,
    net: &DdqnNet,
    episode: u32,
) -> Result<Evaluation, HandoffError> {
    evaluate_on(cfg, net, episode, EVAL_SEED_BASE, cfg.eval_seeds)
}

/// Greedy DDQN against the deficit heuristic on the evaluation scenario, on
/// the paired realization seeds `base + i`, `i < seeds`.
pub fn evaluate_on(
    cfg: &TrainConfig,
    net: &DdqnNet,
    episode: u32,
    base: u64,
    seeds: u32,
) -> Result<Evaluation, HandoffError> {
    let pfec = scheme("priorityfec")?;
    let heur = scheme("deficit-heuristic")?;
    let mut scenario = cfg.eval_scenario.clone();
    if let Some(k) = cfg.k {
        scenario.k = k;
    }
    let mut ev = Evaluation {
        episode,
        rho: Vec::new(),
        seed: Vec::new(),
        ddqn: Vec::new(),
        heuristic: Vec::new(),
        ddqn_repairs: Vec::new(),
        heuristic_repairs: Vec::new(),
        ddqn_redundant: Vec::new(),
        heuristic_redundant: Vec::new(),
    };
    let redundant =
        |r: &crate::HandoffReport| r.repairs_received.saturating_sub(r.innovative_repairs);
    for (rho, i) in cfg
        .eval_rhos
        .iter()
        .flat_map(|&r| (0..u64::from(seeds)).map(move |i| (r, i)))
    {
        let seed = base + i;
        scenario.rho = rho;
        let sched = edgemu_policies::repair::ddqn::DdqnScheduler::new(net.clone());
        let d = run_handoff(
            &scenario,
            pfec,
            pfec.scheduler(Some(Box::new(sched)))?,
            seed,
            RunOptions::default(),
        )?;
        let h = run_handoff(
            &scenario,
            heur,
            heur.scheduler(None)?,
            seed,
            RunOptions::default(),
        )?;
        ev.rho.push(rho);
        ev.seed.push(i);
        ev.ddqn.push(d.report.recovered_utility);
        ev.heuristic.push(h.report.recovered_utility);
        ev.ddqn_repairs.push(d.sender.repair_sent);
        ev.heuristic_repairs.push(h.sender.repair_sent);
        ev.ddqn_redundant.push(redundant(&d.report));
        ev.heuristic_redundant.push(redundant(&h.report));
    }
    Ok(ev)
}

/// The next training episode, with [`TrainConfig::k`] applied.
fn episode(cfg: &TrainConfig, rng: &mut ChaCha8Rng) -> Result<env::Episode, HandoffError> {
    let mut ep = draw_episode(&cfg.ranges, rng)?;
    if let Some(k) = cfg.k {
        ep.scenario.k = k;
    }
    Ok(ep)
}

fn net_of(learner: &DdqnLearner) -> Result<DdqnNet, HandoffError> {
    DdqnNet::from_mlp(learner.online().clone())
        .map_err(|e| HandoffError::Config(format!("learner network: {e}")))
}

/// Trains (see the module docs), calling `progress` after every episode and
/// evaluation.
pub fn train(
    cfg: &TrainConfig,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<TrainOutcome, HandoffError> {
    let spec = scheme("priorityfec")?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let lcfg = DdqnConfig {
        seed: cfg.seed,
        ..cfg.learner.clone()
    };
    cfg.validate()?;
    if cfg.n_step > 1 && lcfg.gamma != 1.0 {
        return Err(HandoffError::Config(format!(
            "an {}-step target sums undiscounted rewards; it needs gamma = 1, not {}",
            cfg.n_step, lcfg.gamma
        )));
    }
    let mut learner = match &cfg.init {
        None => DdqnLearner::new(lcfg),
        Some(net) if net.normalization_is_identity() => {
            DdqnLearner::from_net(lcfg, net.mlp().clone())
        }
        Some(_) => {
            return Err(HandoffError::Config(
                "the initial network has an observation normalization; the trainer works on raw features".into(),
            ))
        }
    };
    let record = RunOptions {
        record_decisions: true,
        ..RunOptions::default()
    };

    let mut seeded = 0;
    for _ in 0..cfg.seed_episodes {
        let ep = episode(cfg, &mut rng)?;
        let sched: Box<dyn RepairScheduler> = Box::new(DeficitHeuristic);
        let run = run_handoff(
            &ep.scenario,
            spec,
            spec.scheduler(Some(sched))?,
            ep.seed,
            record,
        )?;
        let t = transitions::transitions(&run, &cfg.potential, cfg.n_step);
        seeded += t.len();
        learner.seed_replay(t);
    }

    // The best checkpoint so far (mean on the checkpoint seeds), with
    // `keep_best`.
    let mut best: Option<(f64, DdqnNet)> = None;
    let mut curve = Vec::with_capacity(cfg.episodes as usize);
    let mut evaluations = Vec::new();
    for e in 0..cfg.episodes {
        let ep = episode(cfg, &mut rng)?;
        let eps = cfg.epsilon(e);
        let sched = ExploringScheduler::new(net_of(&learner)?, eps, rng.random());
        let run = run_handoff(
            &ep.scenario,
            spec,
            spec.scheduler(Some(Box::new(sched)))?,
            ep.seed,
            record,
        )?;
        let one_step = transitions::one_step_rewards(&run, &cfg.potential);
        let t = transitions::n_step_transitions(&run, &one_step, cfg.n_step);
        let n = t.len();
        let reward: f64 = one_step.iter().sum();
        let (mut loss, mut updates) = (0.0, 0u32);
        for tr in t {
            if let Some(l) = learner.observe(tr) {
                loss += f64::from(l);
                updates += 1;
            }
        }
        let row = CurveRow {
            episode: e + 1,
            epsilon: eps,
            mean_reward: if n > 0 { reward / n as f64 } else { 0.0 },
            recovered_utility: run.report.recovered_utility,
            loss: if updates > 0 {
                loss / f64::from(updates)
            } else {
                f64::NAN
            },
            transitions: n,
            updates: learner.updates(),
        };
        progress(Progress::Episode(&row));
        curve.push(row);
        let last = e + 1 == cfg.episodes;
        let due = last || (cfg.eval_every > 0 && (e + 1) % cfg.eval_every == 0);
        // No checkpoint seeds: nothing to evaluate (or to keep) at a checkpoint.
        if due && cfg.eval_seeds > 0 {
            let net = net_of(&learner)?;
            let ev = evaluate(cfg, &net, e + 1)?;
            progress(Progress::Evaluation(&ev));
            if cfg.keep_best && best.as_ref().is_none_or(|(m, _)| ev.ddqn_mean() >= *m) {
                best = Some((ev.ddqn_mean(), net));
            }
            evaluations.push(ev);
        }
    }
    if cfg.episodes == 0 && cfg.eval_seeds > 0 {
        let ev = evaluate(cfg, &net_of(&learner)?, 0)?;
        progress(Progress::Evaluation(&ev));
        evaluations.push(ev);
    }
    let net = match best {
        Some((_, net)) => net,
        None => net_of(&learner)?,
    };
    let final_evaluation = if cfg.final_seeds > 0 {
        let ev = evaluate_on(cfg, &net, cfg.episodes, FINAL_SEED_BASE, cfg.final_seeds)?;
        progress(Progress::Final(&ev));
        Some(ev)
    } else {
        None
    };
    Ok(TrainOutcome {
        net,
        curve,
        evaluations,
        final_evaluation,
        seeded_transitions: seeded,
        updates: learner.updates(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(seed: u64) -> TrainConfig {
        TrainConfig {
            eval_seeds: 1,
            ..TrainConfig::quick(3, seed).unwrap()
        }
    }

    #[test]
    fn same_seed_same_weights_bytes() {
        let a = train(&tiny(5), |_| {}).unwrap();
        let b = train(&tiny(5), |_| {}).unwrap();
        assert!(a.updates > 0, "no update happened");
        let (wa, wb) = (
            a.net.to_weights().to_bytes().unwrap(),
            b.net.to_weights().to_bytes().unwrap(),
        );
        assert_eq!(wa, wb);
        let c = train(&tiny(6), |_| {}).unwrap();
        assert_ne!(wa, c.net.to_weights().to_bytes().unwrap());
        assert_eq!(a.curve.len(), 3);
        assert_eq!(a.evaluations.last().map(|e| e.episode), Some(3));
    }

    #[test]
    fn final_evaluation_is_on_its_own_seeds_with_the_configured_k() {
        let cfg = TrainConfig {
            final_seeds: 2,
            k: Some(8),
            ..tiny(5)
        };
        let out = train(&cfg, |_| {}).unwrap();
        let fin = out.final_evaluation.expect("final evaluation");
        assert_eq!((fin.ddqn.len(), fin.heuristic.len()), (2, 2));
        assert_eq!(fin.ddqn_redundant.len(), 2);
        assert_eq!(fin.differences().len(), 2);
        // The same network on the checkpoint seeds and K: a different draw.
        let ev = evaluate(
            &TrainConfig {
                k: None,
                ..cfg.clone()
            },
            &out.net,
            3,
        )
        .unwrap();
        assert_ne!(ev.heuristic[0], fin.heuristic[0]);
        // No final evaluation unless asked for.
        assert!(train(&tiny(5), |_| {}).unwrap().final_evaluation.is_none());
    }

    #[test]
    fn n_step_needs_gamma_one_and_one_step_still_trains() {
        let mut cfg = tiny(5);
        cfg.learner.gamma = 0.99;
        let e = train(&cfg, |_| {}).expect_err("n-step with gamma 0.99");
        assert!(e.to_string().contains("gamma"), "{e}");
        cfg.n_step = 1;
        let one = train(&cfg, |_| {}).expect("one-step with gamma 0.99");
        assert!(one.updates > 0);
        // The target's horizon changes what is learned.
        let a = train(&tiny(5), |_| {}).unwrap();
        let b = train(
            &TrainConfig {
                n_step: 1,
                ..tiny(5)
            },
            |_| {},
        )
        .unwrap();
        assert_ne!(
            a.net.to_weights().to_bytes().unwrap(),
            b.net.to_weights().to_bytes().unwrap()
        );
    }

    #[test]
    fn evaluations_run_every_seed_at_every_rho() {
        let cfg = TrainConfig {
            eval_rhos: vec![0.7, 1.1],
            eval_seeds: 2,
            ..tiny(5)
        };
        let net = DdqnNet::random(3);
        let ev = evaluate(&cfg, &net, 0).unwrap();
        assert_eq!(ev.rho, vec![0.7, 0.7, 1.1, 1.1]);
        assert_eq!(ev.rhos(), vec![0.7, 1.1]);
        // Two channel draws, each at both deadlines.
        assert_eq!(ev.seed, vec![0, 1, 0, 1]);
        assert_eq!(ev.seeds(), 2);
        let (lo, hi) = (ev.at_rho(0.7), ev.at_rho(1.1));
        assert_eq!((lo.ddqn.len(), hi.heuristic_repairs.len()), (2, 2));
        // The same seeds at a later deadline: never less utility for the
        // heuristic (paired draws).
        for (a, b) in lo.heuristic.iter().zip(&hi.heuristic) {
            assert!(b >= a, "{a} at 0.7 vs {b} at 1.1");
        }
        // Each ρ alone is that ρ's own evaluation.
        let one = evaluate(
            &TrainConfig {
                eval_rhos: vec![1.1],
                ..cfg.clone()
            },
            &net,
            0,
        )
        .unwrap();
        assert_eq!(one, hi);
        let line = output::summary(&ev);
        assert!(
            line.contains("rho = 0.7/1.1") && line.contains("by rho: 0.7 "),
            "{line}"
        );
        let csv = output::per_seed_csv(&ev);
        let seeds: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| &l[..l.find(',').unwrap() + 2])
            .collect();
        assert_eq!(seeds, vec!["0.7,0", "0.7,1", "1.1,0", "1.1,1"]);
        // No deadline: an error, not an empty evaluation.
        let none = TrainConfig {
            eval_rhos: Vec::new(),
            ..tiny(5)
        };
        assert!(train(&none, |_| {}).is_err());
        // The same deadline twice would count its seeds twice.
        let twice = TrainConfig {
            eval_rhos: vec![0.8, 1.0, 0.8],
            ..tiny(5)
        };
        let e = train(&twice, |_| {}).unwrap_err().to_string();
        assert!(e.contains("0.8 is given twice"), "{e}");
        let bad = TrainConfig {
            eval_rhos: vec![f64::NAN],
            ..tiny(5)
        };
        assert!(train(&bad, |_| {}).is_err());
        // Keeping the best checkpoint needs checkpoints to score.
        let blind = TrainConfig {
            eval_seeds: 0,
            keep_best: true,
            ..tiny(5)
        };
        assert!(train(&blind, |_| {}).is_err());
        // Without checkpoint seeds there are no (empty) checkpoints.
        let out = train(
            &TrainConfig {
                eval_seeds: 0,
                ..tiny(5)
            },
            |_| {},
        )
        .unwrap();
        assert!(out.evaluations.is_empty());
    }

    /// The curve's reward is the mean one-step reward per decision, whatever
    /// n: the n-step windows overlap, so their sum would count each reward
    /// up to n times.
    #[test]
    fn curve_reward_is_per_decision_for_any_n() {
        let one = train(
            &TrainConfig {
                n_step: 1,
                ..tiny(5)
            },
            |_| {},
        )
        .unwrap();
        let many = train(
            &TrainConfig {
                n_step: 32,
                ..tiny(5)
            },
            |_| {},
        )
        .unwrap();
        // The first episode is the same run (the network has not learned
        // from different targets yet when its actions are drawn).
        assert_eq!(one.curve[0].transitions, many.curve[0].transitions);
        assert_eq!(one.curve[0].mean_reward, many.curve[0].mean_reward);
    }

    #[test]
    fn epsilon_schedule() {
        let c = TrainConfig::quick(10, 0).unwrap();
        assert_eq!(c.epsilon(0), 0.25);
        assert!((c.epsilon(4) - 0.15).abs() < 1e-6);
        assert!((c.epsilon(8) - 0.05).abs() < 1e-6);
        assert!((c.epsilon(9) - 0.05).abs() < 1e-6);
    }
}
