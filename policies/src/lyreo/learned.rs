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
//! [`SlotObservation::pair_features`] plus [`CONTEXT_FEATURES`] features of
//! what this slot's earlier requests already put on `s` and of the request on
//! `s` (so the policy sees `x_{<i}` and the load in the units that decide the
//! latency; see [`context_features`]). The same weights serve any number of
//! servers. The critic `V_φ(s_t)` scores the slot from [`CRITIC_INPUT`]
//! aggregate floats (see [`critic_features`]). Both are four fully connected
//! layers (three hidden of 64, tanh), the paper's shape.
//!
//! **Normalization.** Raw features differ by orders of magnitude (a
//! request's placed memory-time is ≈ 1e-4, its decode time ≈ 2 s), so the
//! actor input is standardized with `obs_mean`/`obs_std`, which the trainer
//! fits on its first (Least-Loaded) rollout ([`LearnedModel::fit_normalization`])
//! and which travel in the weights file.
//!
//! **Variants** ([`Variant`]) differ in what the features show and in the
//! reward they were trained on (the trainer in `edgemu-nodes` defines the
//! rewards): LYREO and Ly-PPO see the Lyapunov queues `Z_s`; PPO and
//! LYREO-NoLB see `Z = 0` (no virtual queues); LYREO-Count replaces the
//! memory-time workload `η_s` by active requests (`backlog / 32`) in its
//! features and keeps its own count-based virtual queues.
//!
//! **Weights** ([`WeightsFile`], kind [`WEIGHTS_KIND`], version 2): tensors
//! `actor.{0,1,2,3}.{weight,bias}` with shapes `[64,21] [64] [64,64] [64]
//! [64,64] [64] [1,64] [1]` and `critic.{0..3}.{weight,bias}` with
//! `[64,19] [64] [64,64] [64] [64,64] [64] [1,64] [1]`; metadata `obs_mean`
//! and `obs_std` (21 floats each) normalize the actor input
//! `(x − mean) / std` before the network; `notes` starts with
//! `variant=<name>`. The critic input is not normalized (its features are
//! scaled to about [0, 1]). Version 1 files (13-input actor, 18-input
//! critic, identity normalization) are refused with a version error.
//!
//! At evaluation the policy is greedy (argmax per request); in training it
//! samples and records every decision in a shared [`Rollout`].
//!
//! **Guard.** A network is only trusted on inputs like those it was trained
//! on. The normalization is the training data's mean and spread, so a
//! normalized feature far outside it — a server much slower than any GPU
//! class it saw, a queue far longer — marks the decision off-distribution.
//! The greedy policy then places that request where Least-Loaded would
//! ([`GUARD_Z`], counted by [`SchedulingPolicy::fallbacks`]); sampling and
//! imitating policies (training) are never guarded.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{LeastLoaded, LyapunovQueues, SchedulingPolicy, SlotObservation, PAIR_FEATURES};
use crate::nn::loss::{log_softmax, sample_categorical};
use crate::nn::{Activation, Expected, Mlp, MlpScratch, PolicyError, WeightsFile};
use crate::shipped;
use edgemu_assets::{Asset, Embedded};

/// `kind` metadata of a learned LYREO policy file.
pub const WEIGHTS_KIND: &str = "lyreo-actor-critic";
/// Weights format version (2: the 21-input actor with fitted normalization).
pub const WEIGHTS_VERSION: u32 = 2;
/// Per-pair features beyond [`PAIR_FEATURES`] (see [`context_features`]).
pub const CONTEXT_FEATURES: usize = 9;
/// Actor input: the pair features plus the slot context.
pub const ACTOR_INPUT: usize = PAIR_FEATURES + CONTEXT_FEATURES;
/// Critic input (see [`critic_features`]).
pub const CRITIC_INPUT: usize = 19;
/// Index in the critic input of the remaining-episode share `(T − t)/T`,
/// which only the trainer knows (0 at inference, where the critic is unused).
pub const CRITIC_TIME: usize = 18;
/// Hidden width of both nets.
pub const HIDDEN: usize = 64;
/// A decision is off-distribution when any normalized input of any server's
/// row lies further than this many training standard deviations from the
/// training mean; the guarded greedy policy then takes Least-Loaded's choice.
/// The inputs are heavy-tailed: on the paper's setting (U = 40, S = 8,
/// moderate mix, the setting the shipped weights were trained in) a bound
/// of 8 moved 3–7 % of the shipped variants' decisions and 16 still
/// 0.2–0.7 %; at 32 none. A CPU server in a GPU class's place lies ≈ 100
/// out (its decode step alone).
pub const GUARD_Z: f32 = 32.0;

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

    /// The shipped weights file of this variant (compiled in).
    pub fn shipped_weights(self) -> &'static Embedded {
        match self {
            Variant::Lyreo => &shipped::LYREO,
            Variant::LyPpo => &shipped::LY_PPO,
            Variant::Ppo => &shipped::PPO,
            Variant::LyreoCount => &shipped::LYREO_COUNT,
            Variant::LyreoNolb => &shipped::LYREO_NOLB,
        }
    }

    /// The weights this variant runs with by default: built in, or the file
    /// of `$EDGEMU_WEIGHTS_DIR` (see [`crate::shipped`]).
    pub fn default_weights(self) -> Asset {
        shipped::shipped(self.shipped_weights())
    }

    /// Whether this variant's default weights can be read: always for the
    /// built-in set; under `$EDGEMU_WEIGHTS_DIR`, whether the folder has them.
    pub fn has_default_weights(self) -> bool {
        self.default_weights().is_available()
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

    /// Standardizes one raw row of [`ACTOR_INPUT`] features in place.
    pub fn normalize_row(&self, row: &mut [f32]) {
        for (k, v) in row.iter_mut().enumerate() {
            *v = (*v - self.obs_mean[k]) / self.obs_std[k];
        }
    }

    /// Fits `obs_mean`/`obs_std` to raw actor rows (`[N, ACTOR_INPUT]`,
    /// as a rollout under identity normalization records them); a feature
    /// that never varies keeps std 1.
    pub fn fit_normalization(&mut self, rows: &[f32]) {
        let n = rows.len() / ACTOR_INPUT;
        if n == 0 {
            return;
        }
        for k in 0..ACTOR_INPUT {
            let col = rows.iter().skip(k).step_by(ACTOR_INPUT).map(|&x| x as f64);
            let mean = col.clone().sum::<f64>() / n as f64;
            let var = col.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
            let std = var.sqrt();
            self.obs_mean[k] = mean as f32;
            self.obs_std[k] = if std.is_finite() && std > 1e-12 * (1.0 + mean.abs()) {
                std as f32
            } else {
                1.0
            };
        }
    }

    /// The actor's logit for one (request, server) row of [`ACTOR_INPUT`]
    /// raw features; normalizes the row in place with `obs_mean`/`obs_std`
    /// first (the row then holds what the network saw, for training).
    pub fn actor_logit(&self, row: &mut [f32], scratch: &mut MlpScratch) -> f32 {
        self.normalize_row(row);
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

    /// [`LearnedModel::load`] from a file or the built-in weights.
    pub fn from_source(src: &Asset, variant: Variant) -> Result<LearnedModel, PolicyError> {
        Self::from_bytes(&shipped::read_weights(src)?, &src.label(), variant)
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
            s.load.eta = count_workload(s.load.backlog);
        }
        o.z = count_z.to_vec();
    } else if !variant.uses_queues() {
        o.z.iter_mut().for_each(|z| *z = 0.0);
    }
    o
}

/// What this slot's earlier decisions put on each server, as the actor's
/// context features and Least-Loaded's bookkeeping see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotPlacement {
    /// The variant's workload placed per server (memory-time share, or
    /// `1/32` per request for LYREO-Count).
    pub workload: Vec<f64>,
    /// Requests placed per server.
    pub count: Vec<f64>,
    /// Prefill seconds placed per server, `Σ l_in / v_pre`.
    pub prefill_s: Vec<f64>,
    /// Least-Loaded's load per server: `η_s` + queued KV / `M_s` + the
    /// predicted memory-time of the requests placed on it this slot.
    pub ll_load: Vec<f64>,
}

impl SlotPlacement {
    /// Empty placement at the start of a slot (`obs` unmodified: raw `η`).
    pub fn start(obs: &SlotObservation) -> SlotPlacement {
        let n = obs.servers.len();
        SlotPlacement {
            workload: vec![0.0; n],
            count: vec![0.0; n],
            prefill_s: vec![0.0; n],
            ll_load: obs.servers.iter().map(LeastLoaded::server_load).collect(),
        }
    }

    /// Least-Loaded's choice now (lowest load, ties to the lowest index).
    pub fn least_loaded(&self) -> usize {
        let mut best = 0;
        for s in 1..self.ll_load.len() {
            if self.ll_load[s] < self.ll_load[best] {
                best = s;
            }
        }
        best
    }

    /// Records request `r` of `obs` placed on `s`; `workload` is the
    /// variant's own workload of it.
    pub fn place(&mut self, obs: &SlotObservation, r: usize, s: usize, workload: f64) {
        self.workload[s] += workload;
        self.count[s] += 1.0;
        self.prefill_s[s] += obs.requests[r].input_len as f64 / obs.servers[s].prefill_tok_s;
        self.ll_load[s] += LeastLoaded::request_workload(obs, r, s);
    }
}

/// The [`CONTEXT_FEATURES`] raw features of request `r` on server `s` given
/// this slot's placement so far (`obs` raw, as the scheduler sent it):
/// the variant's placed workload, placed requests, placed prefill seconds,
/// the backlog, the request's own prefill `l_in/v_pre` and decode
/// `l_out·t_dec` seconds on `s`, its predicted memory-time on `s`,
/// Least-Loaded's load of `s` and that load minus the lowest over servers
/// (0 on Least-Loaded's choice). Raw units; the model's normalization scales them.
pub fn context_features(
    obs: &SlotObservation,
    r: usize,
    s: usize,
    placed: &SlotPlacement,
    min_ll: f64,
    out: &mut [f32],
) {
    let q = &obs.requests[r];
    let v = &obs.servers[s];
    let vals = [
        placed.workload[s],
        placed.count[s],
        placed.prefill_s[s],
        v.load.backlog as f64,
        q.input_len as f64 / v.prefill_tok_s,
        q.output_len as f64 * v.decode_step_empty_s,
        LeastLoaded::request_workload(obs, r, s),
        placed.ll_load[s],
        placed.ll_load[s] - min_ll,
    ];
    for (o, x) in out.iter_mut().zip(vals) {
        *o = x as f32;
    }
}

/// The slot-level critic input: mean over requests of (l_in, l_out, upload)
/// features (3), mean over servers of the 9 server features (capacity,
/// prefill, decode, occupancy, reserved, waiting, η, high-KV, Z), max over
/// servers of the 6 state features (occupancy … Z), and at [`CRITIC_TIME`]
/// 0 (the trainer writes the remaining-episode share there).
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
    /// The request's id ([`super::RequestObs::id`]).
    pub request: u64,
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
    /// Mean over the slot's decisions of the chosen pair's actor input.
    pub action_summaries: Vec<[f32; ACTOR_INPUT]>,
    /// The variant's own count-based `Y_s` per slot (LYREO-Count), from the
    /// backlog reports it observed; empty otherwise.
    pub count_y: Vec<Vec<f64>>,
    pub count_z: Vec<Vec<f64>>,
}

/// A learned scheduling policy: greedy for evaluation, sampling (with a
/// recorder) for training, or imitating (acts as Least-Loaded, records what
/// the network saw: behaviour-cloning data).
pub struct LearnedPolicy {
    model: Arc<LearnedModel>,
    rng: Option<ChaCha8Rng>,
    imitate: bool,
    recorder: Option<Arc<Mutex<Rollout>>>,
    scratch: MlpScratch,
    logits: Vec<f32>,
    logp: Vec<f32>,
    inputs: Vec<f32>,
    /// LYREO-Count's count-based virtual queues.
    count_q: Option<LyapunovQueues>,
    /// Off-distribution bound on normalized inputs (greedy only).
    guard_z: Option<f32>,
    /// Requests the guard placed with Least-Loaded.
    fallbacks: u64,
}

impl LearnedPolicy {
    /// The evaluation policy: argmax per request, guarded ([`GUARD_Z`]).
    pub fn greedy(model: Arc<LearnedModel>) -> LearnedPolicy {
        let mut p = LearnedPolicy::unguarded(model);
        p.guard_z = Some(GUARD_Z);
        p
    }

    /// Argmax per request whatever the inputs: the network alone.
    pub fn unguarded(model: Arc<LearnedModel>) -> LearnedPolicy {
        LearnedPolicy {
            scratch: model.actor.scratch(),
            model,
            rng: None,
            imitate: false,
            recorder: None,
            logits: Vec::new(),
            logp: Vec::new(),
            inputs: Vec::new(),
            count_q: None,
            guard_z: None,
            fallbacks: 0,
        }
    }

    /// Samples from the policy (seeded) and records every decision.
    pub fn sampling(
        model: Arc<LearnedModel>,
        seed: u64,
        recorder: Arc<Mutex<Rollout>>,
    ) -> LearnedPolicy {
        let mut p = LearnedPolicy::unguarded(model);
        p.rng = Some(ChaCha8Rng::seed_from_u64(seed));
        p.recorder = Some(recorder);
        p
    }

    /// Acts exactly as [`LeastLoaded`] and records every decision with the
    /// network's inputs and log-probabilities (the teacher for behaviour
    /// cloning, and the rollout normalization is fitted on).
    pub fn imitating(model: Arc<LearnedModel>, recorder: Arc<Mutex<Rollout>>) -> LearnedPolicy {
        let mut p = LearnedPolicy::unguarded(model);
        p.imitate = true;
        p.recorder = Some(recorder);
        p
    }

    /// LYREO-Count's own queues: the reports describe the previous slot,
    /// so from slot 1 on its count-based deviations are applied (and
    /// returned).
    fn update_count_queues(&mut self, obs: &SlotObservation) -> Option<Vec<f64>> {
        let n = obs.servers.len();
        let q = self
            .count_q
            .get_or_insert_with(|| LyapunovQueues::new(n, obs.epsilon));
        if q.z().len() != n || q.epsilon() != obs.epsilon {
            *q = LyapunovQueues::new(n, obs.epsilon);
        }
        if obs.slot == 0 {
            return None;
        }
        let w: Vec<f64> = obs
            .servers
            .iter()
            .map(|s| count_workload(s.load.backlog))
            .collect();
        Some(q.update(&w))
    }

    fn count_z(&self) -> &[f64] {
        self.count_q.as_ref().map(|q| q.z()).unwrap_or(&[])
    }
}

impl SchedulingPolicy for LearnedPolicy {
    fn name(&self) -> &str {
        self.model.variant.name()
    }

    fn fallbacks(&self) -> u64 {
        self.fallbacks
    }

    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
        out.clear();
        let variant = self.model.variant;
        let count_y = if variant.counts() {
            self.update_count_queues(obs)
        } else {
            None
        };
        let view = variant_view(variant, obs, self.count_z());
        let ns = view.servers.len();
        if ns == 0 {
            out.resize(view.requests.len(), 0);
            return;
        }
        let mut placed = SlotPlacement::start(obs);
        self.logits.resize(ns, 0.0);
        self.logp.resize(ns, 0.0);
        let mut summary = [0.0f32; ACTOR_INPUT];
        let mut f = [0.0f32; PAIR_FEATURES];
        let mut decisions = Vec::new();
        for r in 0..view.requests.len() {
            self.inputs.clear();
            let ll = placed.least_loaded();
            let min_ll = placed.ll_load[ll];
            let mut off_distribution = false;
            for s in 0..ns {
                view.pair_features(r, s, &mut f);
                let start = self.inputs.len();
                self.inputs.extend_from_slice(&f);
                self.inputs.resize(start + ACTOR_INPUT, 0.0);
                context_features(
                    obs,
                    r,
                    s,
                    &placed,
                    min_ll,
                    &mut self.inputs[start + PAIR_FEATURES..],
                );
                let row = &mut self.inputs[start..];
                self.logits[s] = self.model.actor_logit(row, &mut self.scratch);
                if let Some(z) = self.guard_z {
                    // NaN counts as outside too.
                    off_distribution |= row.iter().any(|x| x.is_nan() || x.abs() > z);
                }
            }
            if self.rng.is_some() || self.recorder.is_some() {
                log_softmax(&self.logits, None, &mut self.logp);
            }
            let a = match self.rng.as_mut() {
                _ if self.imitate => ll,
                None if off_distribution => {
                    self.fallbacks += 1;
                    ll
                }
                Some(rng) => {
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
            placed.place(obs, r, a, w);
            if self.recorder.is_some() {
                decisions.push(Decision {
                    slot: obs.slot,
                    request: obs.requests[r].id,
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
                rec.count_z.push(self.count_z().to_vec());
            }
        }
    }
}
