//! The learned LYREO family (paper §IV-B, §V): LYREO, Ly-PPO, PPO,
//! LYREO-Count and LYREO-NoLB — one network shape, five ways of training it.
//!
//! **Factorization.** The paper's action is the whole slot's assignment
//! `x(t)`; a joint categorical over `S^|Q|` assignments is intractable, so
//! the actor factorizes it into one categorical per request, decided in
//! order: `π(x | s) = Π_i π(s_i | s, x_{<i})`. Request `i`'s logits are
//! `ℓ_s = f_θ(φ(i, s))` for every server `s`, where `f_θ` is an MLP with one
//! output scoring a (request, server) pair and `φ` is the
//! [`ACTOR_INPUT`]-float pair vector: the 12
//! [`SlotObservation::pair_features`] plus the predicted memory-time this
//! slot's earlier requests already put on `s` (so the policy sees `x_{<i}`).
//! The same weights serve any number of servers. The critic `V_φ(s_t)` scores
//! the slot from [`CRITIC_INPUT`] aggregate floats (see [`critic_features`]).
//! Both are four fully connected layers (three hidden of 64, tanh), the
//! paper's shape.
//!
//! **Variants** ([`Variant`]) differ in what the features show and in the
//! reward they were trained on (the trainer in `edgemu-nodes` defines the
//! rewards): LYREO and Ly-PPO see the Lyapunov queues `Z_s`; PPO and
//! LYREO-NoLB see `Z = 0` (no virtual queues); LYREO-Count replaces the
//! memory-time workload `η_s` by active requests (`backlog / 32`) in its
//! features and keeps its own count-based virtual queues.
//!
//! **Weights** ([`WeightsFile`], kind [`WEIGHTS_KIND`], version 1): tensors
//! `actor.{0,1,2,3}.{weight,bias}` with shapes `[64,13] [64] [64,64] [64]
//! [64,64] [64] [1,64] [1]` and `critic.{0..3}.{weight,bias}` with
//! `[64,18] [64] [64,64] [64] [64,64] [64] [1,64] [1]`; metadata `obs_mean`
//! and `obs_std` (13 floats each) normalize the actor input
//! `(x − mean) / std` before the network; `notes` starts with
//! `variant=<name>`. The critic input is not normalized (its features are
//! already scaled to about [0, 1]).
//!
//! At evaluation the policy is greedy (argmax per request); in training it
//! samples and records every decision in a shared [`Rollout`].

use std::path::Path;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{LeastLoaded, SchedulingPolicy, SlotObservation, PAIR_FEATURES};
use crate::nn::loss::{log_softmax, sample_categorical};
use crate::nn::{Activation, Expected, Mlp, MlpScratch, PolicyError, WeightsFile};

/// `kind` metadata of a learned LYREO policy file.
pub const WEIGHTS_KIND: &str = "lyreo-actor-critic";
/// Weights format version.
pub const WEIGHTS_VERSION: u32 = 1;
/// Actor input: the pair features plus this slot's placed memory-time.
pub const ACTOR_INPUT: usize = PAIR_FEATURES + 1;
/// Critic input (see [`critic_features`]).
pub const CRITIC_INPUT: usize = 18;
/// Hidden width of both nets.
pub const HIDDEN: usize = 64;

/// Which learned scheme a network belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Lyreo,
    LyPpo,
    Ppo,
    LyreoCount,
    LyreoNolb,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Lyreo,
        Variant::LyPpo,
        Variant::Ppo,
        Variant::LyreoCount,
        Variant::LyreoNolb,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Lyreo => "lyreo",
            Variant::LyPpo => "ly-ppo",
            Variant::Ppo => "ppo",
            Variant::LyreoCount => "lyreo-count",
            Variant::LyreoNolb => "lyreo-nolb",
        }
    }

    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// Sees (and is rewarded through) Lyapunov virtual queues.
    pub fn uses_queues(self) -> bool {
        !matches!(self, Variant::Ppo | Variant::LyreoNolb)
    }

    /// Learns from LSTM-redistributed rewards.
    pub fn redistributes(self) -> bool {
        matches!(
            self,
            Variant::Lyreo | Variant::LyreoCount | Variant::LyreoNolb
        )
    }

    /// Workload = active requests instead of KV memory-time.
    pub fn counts(self) -> bool {
        self == Variant::LyreoCount
    }

    /// The shipped weights file of this variant.
    pub fn default_weights(self) -> std::path::PathBuf {
        crate::nn::shipped_weights_dir().join(format!("{}.safetensors", self.name()))
    }
}

/// Count-based workload of a server (LYREO-Count): active requests / 32.
pub fn count_workload(backlog: usize) -> f64 {
    backlog as f64 / 32.0
}

/// A trained (or training) actor-critic pair.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedModel {
    pub variant: Variant,
    pub actor: Mlp,
    pub critic: Mlp,
    pub obs_mean: Vec<f32>,
    pub obs_std: Vec<f32>,
}

impl LearnedModel {
    /// Fresh nets, seeded; identity normalization.
    pub fn new(variant: Variant, seed: u64) -> LearnedModel {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let actor = Mlp::new(
            &actor_sizes(),
            Activation::Tanh,
            Activation::Identity,
            &mut rng,
        );
        let critic = Mlp::new(
            &critic_sizes(),
            Activation::Tanh,
            Activation::Identity,
            &mut rng,
        );
        LearnedModel {
            variant,
            actor,
            critic,
            obs_mean: vec![0.0; ACTOR_INPUT],
            obs_std: vec![1.0; ACTOR_INPUT],
        }
    }

    fn expected() -> Expected {
        let a = Mlp::zeros(&actor_sizes(), Activation::Tanh, Activation::Identity);
        let c = Mlp::zeros(&critic_sizes(), Activation::Tanh, Activation::Identity);
        Expected::new(WEIGHTS_KIND, WEIGHTS_VERSION)
            .with_mlp("actor", &a)
            .with_mlp("critic", &c)
            .with_obs_dim(ACTOR_INPUT)
    }

    pub fn to_weights(&self, notes: &str) -> WeightsFile {
        let mut w = WeightsFile::new(WEIGHTS_KIND, WEIGHTS_VERSION);
        w.insert_mlp("actor", &self.actor);
        w.insert_mlp("critic", &self.critic);
        w.obs_mean = self.obs_mean.clone();
        w.obs_std = self.obs_std.clone();
        w.notes = format!("variant={}; {notes}", self.variant.name());
        w
    }

    /// The actor's logit for one (request, server) row of [`ACTOR_INPUT`]
    /// raw features; normalizes the row in place with `obs_mean`/`obs_std`
    /// first (the row then holds what the network saw, for training).
    pub fn actor_logit(&self, row: &mut [f32], scratch: &mut MlpScratch) -> f32 {
        for (k, v) in row.iter_mut().enumerate() {
            *v = (*v - self.obs_mean[k]) / self.obs_std[k];
        }
        let mut y = [0.0f32];
        self.actor.forward(row, &mut y, scratch);
        y[0]
    }

    pub fn save(&self, path: &Path, notes: &str) -> Result<(), PolicyError> {
        self.to_weights(notes).save(path)
    }

    /// Loads and validates a file (names, shapes, dtype, finite values,
    /// kind, version, normalization length; `std > 0`).
    pub fn load(path: &Path, variant: Variant) -> Result<LearnedModel, PolicyError> {
        let w = WeightsFile::load(path, &Self::expected())?;
        Self::from_weights(w, path, variant)
    }

    /// [`LearnedModel::load`] from safetensors bytes (a `policy.swap`
    /// payload); `label` names them in errors.
    pub fn from_bytes(
        bytes: &[u8],
        label: &Path,
        variant: Variant,
    ) -> Result<LearnedModel, PolicyError> {
        let w = WeightsFile::from_bytes(bytes, label, &Self::expected())?;
        Self::from_weights(w, label, variant)
    }

    fn from_weights(
        w: WeightsFile,
        path: &Path,
        variant: Variant,
    ) -> Result<LearnedModel, PolicyError> {
        let mut m = LearnedModel::new(variant, 0);
        w.fill_mlp("actor", &mut m.actor)?;
        w.fill_mlp("critic", &mut m.critic)?;
        if w.obs_mean.len() == ACTOR_INPUT {
            if w.obs_std.iter().any(|s| s.is_nan() || *s <= 0.0) {
                return Err(PolicyError::Metadata {
                    file: path.to_path_buf(),
                    what: "obs_std must be > 0".into(),
                });
            }
            m.obs_mean = w.obs_mean;
            m.obs_std = w.obs_std;
        }
        Ok(m)
    }
}

pub fn actor_sizes() -> [usize; 5] {
    [ACTOR_INPUT, HIDDEN, HIDDEN, HIDDEN, 1]
}

pub fn critic_sizes() -> [usize; 5] {
    [CRITIC_INPUT, HIDDEN, HIDDEN, HIDDEN, 1]
}

/// Rewrites an observation's workload and queues as `variant` sees them:
/// `z` from `queues` (or 0 without queues); with counts, `η` from backlog.
fn variant_view(variant: Variant, obs: &SlotObservation, count_z: &[f64]) -> SlotObservation {
    let mut o = obs.clone();
    if variant.counts() {
        for s in &mut o.servers {
            s.eta = count_workload(s.backlog);
        }
        o.z = count_z.to_vec();
    } else if !variant.uses_queues() {
        o.z.iter_mut().for_each(|z| *z = 0.0);
    }
    o
}

/// The slot-level critic input: mean over requests of (l_in, l_out, upload)
/// features (3), mean over servers of the 9 server features (capacity,
/// prefill, decode, occupancy, reserved, waiting, η, high-KV, Z), max over
/// servers of the 6 state features (occupancy … Z).
pub fn critic_features(obs: &SlotObservation, out: &mut [f32; CRITIC_INPUT]) {
    *out = [0.0; CRITIC_INPUT];
    let (nr, ns) = (obs.requests.len(), obs.servers.len());
    let mut f = [0.0f32; PAIR_FEATURES];
    for r in 0..nr {
        obs.pair_features(r, 0, &mut f);
        for k in 0..3 {
            out[k] += f[k] / nr as f32;
        }
    }
    if nr == 0 {
        // Server features need a request row; use an empty one.
        return;
    }
    for s in 0..ns {
        obs.pair_features(0, s, &mut f);
        for k in 0..9 {
            out[3 + k] += f[3 + k] / ns as f32;
        }
        for k in 0..6 {
            out[12 + k] = out[12 + k].max(f[6 + k]);
        }
    }
}

/// One recorded decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub slot: u64,
    /// `[S, ACTOR_INPUT]`, normalized.
    pub inputs: Vec<f32>,
    pub action: usize,
    pub logp: f32,
}

/// What a sampling policy records over an episode.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollout {
    pub decisions: Vec<Decision>,
    /// One critic input per slot.
    pub critic_inputs: Vec<[f32; CRITIC_INPUT]>,
    /// Mean over the slot's decisions of the chosen pair's actor input (the
    /// action summary the return predictor reads).
    pub action_summaries: Vec<[f32; ACTOR_INPUT]>,
    /// The variant's own count-based `Y_s` per slot (LYREO-Count), from the
    /// backlog reports it observed; empty otherwise.
    pub count_y: Vec<Vec<f64>>,
    pub count_z: Vec<Vec<f64>>,
}

/// A learned scheduling policy: greedy for evaluation, sampling (with a
/// recorder) for training.
pub struct LearnedPolicy {
    model: Arc<LearnedModel>,
    rng: Option<ChaCha8Rng>,
    recorder: Option<Arc<Mutex<Rollout>>>,
    scratch: MlpScratch,
    logits: Vec<f32>,
    logp: Vec<f32>,
    inputs: Vec<f32>,
    placed: Vec<f64>,
    count_z: Vec<f64>,
    epsilon: f64,
}

impl LearnedPolicy {
    pub fn greedy(model: Arc<LearnedModel>) -> LearnedPolicy {
        LearnedPolicy {
            scratch: model.actor.scratch(),
            model,
            rng: None,
            recorder: None,
            logits: Vec::new(),
            logp: Vec::new(),
            inputs: Vec::new(),
            placed: Vec::new(),
            count_z: Vec::new(),
            epsilon: 0.0,
        }
    }

    /// Samples from the policy (seeded) and records every decision.
    pub fn sampling(
        model: Arc<LearnedModel>,
        seed: u64,
        recorder: Arc<Mutex<Rollout>>,
    ) -> LearnedPolicy {
        let mut p = LearnedPolicy::greedy(model);
        p.rng = Some(ChaCha8Rng::seed_from_u64(seed));
        p.recorder = Some(recorder);
        p
    }

    fn update_count_queues(&mut self, obs: &SlotObservation) -> Option<Vec<f64>> {
        let n = obs.servers.len();
        if self.count_z.len() != n {
            self.count_z = vec![0.0; n];
        }
        self.epsilon = obs.epsilon;
        if obs.slot == 0 {
            return None;
        }
        // The reports describe the previous slot: apply its deviations.
        let w: Vec<f64> = obs
            .servers
            .iter()
            .map(|s| count_workload(s.backlog))
            .collect();
        let mean = w.iter().sum::<f64>() / n.max(1) as f64;
        let y: Vec<f64> = w.iter().map(|x| (x - mean) * (x - mean)).collect();
        for (z, y) in self.count_z.iter_mut().zip(&y) {
            *z = (*z + y - self.epsilon).max(0.0);
        }
        Some(y)
    }
}

impl SchedulingPolicy for LearnedPolicy {
    fn name(&self) -> &str {
        self.model.variant.name()
    }

    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
        out.clear();
        let variant = self.model.variant;
        let count_y = if variant.counts() {
            self.update_count_queues(obs)
        } else {
            None
        };
        let view = variant_view(variant, obs, &self.count_z);
        let ns = view.servers.len();
        if ns == 0 {
            out.resize(view.requests.len(), 0);
            return;
        }
        self.placed.clear();
        self.placed.resize(ns, 0.0);
        self.logits.resize(ns, 0.0);
        self.logp.resize(ns, 0.0);
        let mut summary = [0.0f32; ACTOR_INPUT];
        let mut f = [0.0f32; PAIR_FEATURES];
        let mut decisions = Vec::new();
        for r in 0..view.requests.len() {
            self.inputs.clear();
            for s in 0..ns {
                view.pair_features(r, s, &mut f);
                let start = self.inputs.len();
                self.inputs.extend_from_slice(&f);
                self.inputs.push(self.placed[s] as f32);
                let row = &mut self.inputs[start..];
                self.logits[s] = self.model.actor_logit(row, &mut self.scratch);
            }
            let a = match self.rng.as_mut() {
                Some(rng) => {
                    log_softmax(&self.logits, None, &mut self.logp);
                    let probs: Vec<f32> = self.logp.iter().map(|l| l.exp()).collect();
                    sample_categorical(&probs, rng).min(ns - 1)
                }
                None => {
                    let mut best = 0;
                    for s in 1..ns {
                        if self.logits[s] > self.logits[best] {
                            best = s;
                        }
                    }
                    best
                }
            };
            let w = if variant.counts() {
                1.0 / 32.0
            } else {
                LeastLoaded::request_workload(&view, r, a)
            };
            let row = &self.inputs[a * ACTOR_INPUT..(a + 1) * ACTOR_INPUT];
            for (acc, v) in summary.iter_mut().zip(row) {
                *acc += v / view.requests.len() as f32;
            }
            self.placed[a] += w;
            if self.recorder.is_some() {
                decisions.push(Decision {
                    slot: obs.slot,
                    inputs: self.inputs.clone(),
                    action: a,
                    logp: self.logp[a],
                });
            }
            out.push(a);
        }
        if let Some(rec) = &self.recorder {
            let mut c = [0.0f32; CRITIC_INPUT];
            critic_features(&view, &mut c);
            // A poisoned lock only means a panicking trainer thread; keep going.
            let mut rec = rec.lock().unwrap_or_else(|e| e.into_inner());
            rec.decisions.extend(decisions);
            rec.critic_inputs.push(c);
            rec.action_summaries.push(summary);
            if variant.counts() {
                rec.count_y.push(count_y.unwrap_or_else(|| vec![0.0; ns]));
                rec.count_z.push(self.count_z.clone());
            }
        }
    }
}
