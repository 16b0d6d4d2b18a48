//! [`RepairStepper`]: a PriorityFEC handoff one repair decision at a time,
//! the decision given from outside — the core of the `KvRepair` Gymnasium
//! environment.
//!
//! [`RepairStepper::reset`] draws an episode from [`EpisodeRanges`] with a
//! seed (blocks and utilities, channel, rate, RTT, ρ, realization seed: the
//! training episodes of [`crate::train::env`]), and runs the co-simulation
//! ([`HandoffPair`]) until the sender's first decision epoch.
//! [`RepairStepper::step`] answers it and runs to the next epoch, or to the
//! deadline. The sender, links and receiver are the experiment's own, with
//! the `priorityfec` scheme (utility order, ACK-sliding RLC, the paper's
//! masks), so an action sequence gives the same handoff as a scheduler that
//! chose it.
//!
//! **Reward** (paper §IV-C3): `r_t = J_{t+1} − J_t + F(x_{t+1}) − F(x_t)`
//! with `J` the receiver's recovered utility (ground truth) at each epoch,
//! `F` the shaping potential ([`shaping_potential`]) and, after the last
//! epoch, `J` at the deadline and `F = 0`: the rewards of an episode sum to
//! its recovered utility minus `F(x_0)`, as the DDQN trainer's
//! ([`crate::train::transitions`]).

use edgemu_policies::repair::{
    ActionMask, DeficitHeuristic, RepairAction, RepairObservation, RepairScheduler,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::HandoffError;
use crate::harness::{run_handoff, HandoffPair, RunOptions};
use crate::scenario::HandoffScenario;
use crate::scheme::{scheme, SchemeSpec};
use crate::sender::{shaping_potential, PotentialWeights};
use crate::train::env::{draw_episode, Episode, EpisodeRanges};

/// What episodes a [`RepairStepper`] draws and how it shapes rewards.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepairEnvOptions {
    pub ranges: EpisodeRanges,
    pub potential: PotentialWeights,
}

/// What one decision gave.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RepairStep {
    /// The next decision epoch's observation (the last one's once done).
    pub obs: RepairObservation,
    /// The next epoch's feasible actions (none once done).
    pub mask: ActionMask,
    /// The shaped reward of the decision (module doc; 0 from `reset`).
    pub reward: f64,
    /// The deadline has passed; the handoff is over.
    pub done: bool,
    /// The receiver's recovered utility `J` so far (at the deadline once
    /// done).
    pub recovered_utility: f64,
    /// The action was masked: the sender took the first allowed one.
    pub mask_violation: bool,
}

/// One handoff episode stepped a decision at a time.
pub struct RepairStepper {
    opts: RepairEnvOptions,
    spec: &'static SchemeSpec,
    episode: Option<(Episode, HandoffPair)>,
    /// `J` and `F` at the pending epoch.
    j: f64,
    f: f64,
    last: RepairStep,
}

impl RepairStepper {
    pub fn new(opts: RepairEnvOptions) -> Result<Self, HandoffError> {
        Ok(RepairStepper {
            opts,
            spec: scheme("priorityfec")?,
            episode: None,
            j: 0.0,
            f: 0.0,
            last: RepairStep::default(),
        })
    }

    pub fn options(&self) -> &RepairEnvOptions {
        &self.opts
    }

    /// The episode drawn by the last reset.
    pub fn scenario(&self) -> Option<&HandoffScenario> {
        self.episode.as_ref().map(|(e, _)| &e.scenario)
    }

    /// The channel realization seed of the episode drawn by the last reset.
    pub fn realization_seed(&self) -> Option<u64> {
        self.episode.as_ref().map(|(e, _)| e.seed)
    }

    /// The episode `seed` gives (the same for a stepper and
    /// [`RepairStepper::evaluate`]).
    pub fn draw(opts: &RepairEnvOptions, seed: u64) -> Result<Episode, HandoffError> {
        draw_episode(&opts.ranges, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    /// Draws the episode of `seed` and runs it to the first decision epoch.
    pub fn reset(&mut self, seed: u64) -> Result<RepairStep, HandoffError> {
        let ep = Self::draw(&self.opts, seed)?;
        // The fallback never decides here: every epoch is answered.
        let mut pair = HandoffPair::new(
            &ep.scenario,
            self.spec,
            Box::new(DeficitHeuristic),
            ep.seed,
            false,
        )?;
        pair.tx.defer_decisions();
        self.episode = Some((ep, pair));
        self.j = 0.0;
        self.f = 0.0;
        let mut first = self.advance()?;
        first.reward = 0.0;
        Ok(first)
    }

    /// Answers the pending epoch with `action` and runs to the next.
    pub fn step(&mut self, action: RepairAction) -> Result<RepairStep, HandoffError> {
        let Some((_, pair)) = self.episode.as_mut() else {
            return Err(HandoffError::Config("step before reset".into()));
        };
        let Some((_, mask)) = pair.tx.pending_decision() else {
            return Err(HandoffError::Config(
                "the handoff is over: reset before stepping again".into(),
            ));
        };
        pair.tx.apply_decision(Some(action));
        let mut s = self.advance()?;
        s.mask_violation = !mask.allows(action);
        Ok(s)
    }

    /// The last step's result.
    pub fn last(&self) -> &RepairStep {
        &self.last
    }

    /// Drives to the next epoch or the deadline; the reward is against the
    /// held `J`, `F`.
    fn advance(&mut self) -> Result<RepairStep, HandoffError> {
        let Some((_, pair)) = self.episode.as_mut() else {
            return Err(HandoffError::Config("step before reset".into()));
        };
        let pending = pair.drive();
        let j = pair.rx.recovered_utility();
        let s = match pair.tx.pending_decision() {
            Some((obs, mask)) if pending => {
                let f = shaping_potential(&obs, &self.opts.potential);
                let reward = j - self.j + f - self.f;
                self.j = j;
                self.f = f;
                RepairStep {
                    obs,
                    mask,
                    reward,
                    done: false,
                    recovered_utility: j,
                    mask_violation: false,
                }
            }
            _ => {
                let reward = j - self.j - self.f;
                self.j = j;
                self.f = 0.0;
                RepairStep {
                    obs: self.last.obs,
                    mask: ActionMask::default(),
                    reward,
                    done: true,
                    recovered_utility: j,
                    mask_violation: false,
                }
            }
        };
        self.last = s;
        Ok(s)
    }

    /// Recovered utility of whole handoffs of the episodes of `seeds`, each
    /// scheduled by a fresh scheduler from `make` (the harness evaluation of
    /// a policy on the stepper's episodes).
    pub fn evaluate(
        opts: &RepairEnvOptions,
        make: &mut dyn FnMut() -> Box<dyn RepairScheduler>,
        seeds: &[u64],
    ) -> Result<Vec<f64>, HandoffError> {
        let spec = scheme("priorityfec")?;
        seeds
            .iter()
            .map(|&seed| {
                let ep = Self::draw(opts, seed)?;
                let run = run_handoff(&ep.scenario, spec, make(), ep.seed, RunOptions::default())?;
                Ok(run.report.recovered_utility)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_policies::repair::{FixedRate, RepairScheduler};
    use std::sync::Arc;

    fn opts() -> RepairEnvOptions {
        RepairEnvOptions {
            ranges: EpisodeRanges::tiny(),
            ..RepairEnvOptions::default()
        }
    }

    /// Steps an episode with `sched` choosing every action.
    fn stepped(seed: u64, sched: &mut dyn RepairScheduler) -> (Vec<RepairStep>, usize) {
        let mut st = RepairStepper::new(opts()).unwrap();
        let mut s = st.reset(seed).unwrap();
        let mut steps = vec![s];
        while !s.done {
            let a = sched.decide(&s.obs, s.mask);
            s = st.step(a).unwrap();
            steps.push(s);
        }
        assert!(st.step(RepairAction::Source).is_err(), "past the end");
        let n = steps.len() - 1;
        (steps, n)
    }

    #[test]
    fn a_stepped_episode_is_the_harness_run_of_the_same_policy() {
        for seed in 0..6 {
            for make in [
                (|| Box::new(DeficitHeuristic) as Box<dyn RepairScheduler>) as fn() -> _,
                || Box::new(FixedRate::default()),
            ] {
                let (steps, n) = stepped(seed, &mut *make());
                assert!(n > 0, "seed {seed}: no decision");
                let whole = RepairStepper::evaluate(&opts(), &mut || make(), &[seed]).unwrap()[0];
                let last = steps.last().unwrap();
                assert!(last.done);
                assert_eq!(last.recovered_utility, whole, "seed {seed}");
                // The shaped rewards telescope to J_end − F(x_0).
                let f0 = shaping_potential(&steps[0].obs, &PotentialWeights::default());
                let sum: f64 = steps.iter().map(|s| s.reward).sum();
                assert!((sum - (whole - f0)).abs() < 1e-9, "seed {seed}: {sum}");
            }
        }
    }

    #[test]
    fn the_shared_payload_gives_the_same_handoff_as_a_seeded_one() {
        use crate::harness::synthetic_payload;
        for seed in 0..4 {
            let ep = RepairStepper::draw(&opts(), seed).unwrap();
            let spec = scheme("priorityfec").unwrap();
            let run = |payload| {
                let mut sc = ep.scenario.clone();
                sc.payload = payload;
                run_handoff(
                    &sc,
                    spec,
                    Box::new(DeficitHeuristic),
                    ep.seed,
                    RunOptions::default(),
                )
                .unwrap()
                .report
            };
            let own = synthetic_payload(&ep.scenario.layout, ep.seed ^ 0xABCD);
            assert_ne!(own, ep.scenario.payload);
            let (a, b) = (run(own), run(Arc::clone(&ep.scenario.payload)));
            assert_eq!(a, b, "seed {seed}");
        }
    }

    #[test]
    fn reset_is_reproducible_and_masked_actions_are_flagged() {
        let mut a = RepairStepper::new(opts()).unwrap();
        let mut b = RepairStepper::new(opts()).unwrap();
        assert!(a.step(RepairAction::Source).is_err(), "step before reset");
        let (x, y) = (a.reset(11).unwrap(), b.reset(11).unwrap());
        assert_eq!(x, y);
        assert_eq!(a.realization_seed(), b.realization_seed());
        // Repair before anything is sent is masked (empty window).
        assert!(!x.mask.allows(RepairAction::Repair16));
        let s = a.step(RepairAction::Repair16).unwrap();
        assert!(s.mask_violation);
        let t = b.step(RepairAction::Source).unwrap();
        assert!(!t.mask_violation);
        assert_eq!(
            s.obs, t.obs,
            "the sender replaced it with the first allowed"
        );
        let mut c = RepairStepper::new(opts()).unwrap();
        c.reset(12).unwrap();
        assert_ne!(
            c.scenario().unwrap().utilities,
            a.scenario().unwrap().utilities
        );
    }
}
