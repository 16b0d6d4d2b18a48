//! The settings of a training job and the scenarios they give: PPO episode
//! `e` of seed `s` runs on scenario seed `1000·s + e`, the warm start on
//! `1000·s + 999`, the held-out checks on the evaluation seeds themselves;
//! every scenario is the paper's default with the job's `T`, `U`, KV budget
//! share and `ν`.

use edgemu_policies::lyreo::Variant;

use crate::{Scenario, ServingError};

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

    /// A run of every phase in a second or two (one seed, two short
    /// episodes, the optional credits on): the tests' configuration.
    pub fn smoke(variant: Variant) -> TrainConfig {
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

    /// The scenario of PPO episode `episode` of `seed`'s run.
    pub(crate) fn scenario(&self, seed: u64, episode: usize) -> Scenario {
        let mut s = Scenario::paper_default(seed.wrapping_mul(1000).wrapping_add(episode as u64));
        s.slots = self.slots;
        s.users = self.users;
        s.kv_budget_share = self.kv_budget_share;
        s.nu = self.nu;
        s
    }

    /// The warm-start episode's scenario (not one of the PPO episodes').
    pub(crate) fn warm_scenario(&self, seed: u64) -> Scenario {
        self.scenario(seed, 999)
    }

    /// The held-out scenario of evaluation seed `seed`.
    pub(crate) fn eval_scenario(&self, seed: u64) -> Scenario {
        let mut s = Scenario::paper_default(seed);
        s.slots = self.slots;
        s.users = self.users;
        s.kv_budget_share = self.kv_budget_share;
        s.nu = self.nu;
        s
    }
    /// Refuses settings a run cannot use.
    pub fn check(&self) -> Result<(), ServingError> {
        let bad = |msg: String| Err(ServingError::Train(msg));
        if self.episodes == 0 || self.seeds.is_empty() || self.slots == 0 || self.users == 0 {
            return bad("episodes, seeds, slots and users must be > 0".into());
        }
        if self.eval_seeds.is_empty() {
            return bad("at least one evaluation seed is needed".into());
        }
        if !(self.kv_budget_share > 0.0 && self.kv_budget_share <= 1.0) {
            return bad(format!(
                "kv_budget_share must be in (0, 1], not {}",
                self.kv_budget_share
            ));
        }
        if !(self.nu.is_finite() && self.nu > 0.0) {
            return bad(format!("nu must be a positive number, not {}", self.nu));
        }
        Ok(())
    }
}
