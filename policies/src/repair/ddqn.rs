//! The PriorityFEC Double-DQN repair scheduler (paper §IV-D, §V-B).
//!
//! [`DdqnNet`] is the Q-network: 15 normalized transport features
//! ([`RepairObservation::features`]) → 64 → 64 → 4 Q-values (ReLU hidden,
//! identity output, 5 444 parameters), in [`RepairAction`] index order. The
//! decision is the feasible action with the largest Q-value; a decision
//! allocates nothing. Weights are a [`WeightsFile`] of kind `repair-ddqn`,
//! version 1, tensors `q.0.weight` `[64, 15]`, `q.0.bias` `[64]`,
//! `q.1.weight` `[64, 64]`, `q.1.bias` `[64]`, `q.2.weight` `[4, 64]`,
//! `q.2.bias` `[4]`, optional `obs_mean`/`obs_std` of length 15 (see
//! `policies/README.md`). Training (on the handoff harness) uses
//! [`crate::rl::DdqnLearner`] with [`DdqnNet::learner_config`] and turns
//! the result into a net with [`DdqnNet::from_mlp`].

use std::path::Path;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{ActionMask, RepairAction, RepairObservation, RepairScheduler, N_ACTIONS, N_FEATURES};
use crate::nn::{Activation, Expected, Mlp, MlpScratch, PolicyError, WeightsFile};
use crate::rl::DdqnConfig;
use edgemu_assets::Asset;

/// `kind` metadata of the DDQN weights file.
pub const DDQN_KIND: &str = "repair-ddqn";
/// Weights format version this build reads and writes.
pub const DDQN_VERSION: u32 = 1;
/// Layer widths of the Q-network.
pub const DDQN_SIZES: [usize; 4] = [N_FEATURES, 64, 64, N_ACTIONS];
/// Tensor-name prefix of the Q-network in the weights file.
const PREFIX: &str = "q";

/// The Q-network with its observation normalization.
#[derive(Debug, Clone)]
pub struct DdqnNet {
    mlp: Mlp,
    obs_mean: [f32; N_FEATURES],
    obs_std: [f32; N_FEATURES],
    notes: String,
    scratch: MlpScratch,
}

impl DdqnNet {
    /// A randomly initialised network (He uniform), seeded.
    pub fn random(seed: u64) -> DdqnNet {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mlp = Mlp::new(
            &DDQN_SIZES,
            Activation::Relu,
            Activation::Identity,
            &mut rng,
        );
        DdqnNet::wrap(mlp)
    }

    fn wrap(mlp: Mlp) -> DdqnNet {
        DdqnNet {
            scratch: mlp.scratch(),
            mlp,
            obs_mean: [0.0; N_FEATURES],
            obs_std: [1.0; N_FEATURES],
            notes: String::new(),
        }
    }

    /// Wraps a trained network (e.g. [`crate::rl::DdqnLearner::online`]);
    /// its shape and activations must be the DDQN's.
    pub fn from_mlp(mlp: Mlp) -> Result<DdqnNet, PolicyError> {
        if mlp.sizes() != DDQN_SIZES
            || mlp.hidden_activation() != Activation::Relu
            || mlp.output_activation() != Activation::Identity
        {
            return Err(PolicyError::Invalid(format!(
                "a repair DDQN is {DDQN_SIZES:?} ReLU/identity, got {:?} {:?}/{:?}",
                mlp.sizes(),
                mlp.hidden_activation(),
                mlp.output_activation()
            )));
        }
        Ok(DdqnNet::wrap(mlp))
    }

    /// The learner settings of the paper (§V-B) for this network.
    pub fn learner_config(seed: u64) -> DdqnConfig {
        DdqnConfig {
            sizes: DDQN_SIZES.to_vec(),
            seed,
            ..DdqnConfig::default()
        }
    }

    pub fn mlp(&self) -> &Mlp {
        &self.mlp
    }

    pub fn num_params(&self) -> usize {
        self.mlp.num_params()
    }

    /// Sets the observation normalization `(x − mean) / std`.
    pub fn set_normalization(
        &mut self,
        mean: [f32; N_FEATURES],
        std: [f32; N_FEATURES],
    ) -> Result<(), PolicyError> {
        if mean.iter().chain(&std).any(|v| !v.is_finite()) || std.iter().any(|&s| s <= 0.0) {
            return Err(PolicyError::Invalid(
                "normalization must be finite with positive std".into(),
            ));
        }
        self.obs_mean = mean;
        self.obs_std = std;
        Ok(())
    }

    /// Whether the observation normalization is the identity (mean 0, std
    /// 1), as for every network the trainer produces: only such a network
    /// can be fine-tuned on raw features.
    pub fn normalization_is_identity(&self) -> bool {
        self.obs_mean.iter().all(|&m| m == 0.0) && self.obs_std.iter().all(|&s| s == 1.0)
    }

    pub fn set_notes(&mut self, notes: &str) {
        self.notes = notes.to_string();
    }

    /// Q-values of the four actions, in [`RepairAction`] index order.
    pub fn q_values(&mut self, features: &[f32; N_FEATURES]) -> [f32; N_ACTIONS] {
        let mut x = [0.0f32; N_FEATURES];
        for i in 0..N_FEATURES {
            x[i] = (features[i] - self.obs_mean[i]) / self.obs_std[i];
        }
        let mut q = [0.0f32; N_ACTIONS];
        self.mlp.forward(&x, &mut q, &mut self.scratch);
        q
    }

    /// The feasible action with the largest Q-value (lowest index on ties);
    /// `None` when the mask allows nothing.
    pub fn greedy(
        &mut self,
        features: &[f32; N_FEATURES],
        mask: ActionMask,
    ) -> Option<RepairAction> {
        let q = self.q_values(features);
        let mut best: Option<(usize, f32)> = None;
        for (i, &v) in q.iter().enumerate() {
            if mask.0[i] && best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        best.and_then(|(i, _)| RepairAction::from_index(i))
    }

    /// What a `repair-ddqn` file must hold.
    pub fn expected() -> Expected {
        Expected::new(DDQN_KIND, DDQN_VERSION)
            .with_mlp(
                PREFIX,
                &Mlp::zeros(&DDQN_SIZES, Activation::Relu, Activation::Identity),
            )
            .with_obs_dim(N_FEATURES)
    }

    /// The network as a weights file.
    pub fn to_weights(&self) -> WeightsFile {
        let mut w = WeightsFile::new(DDQN_KIND, DDQN_VERSION);
        w.insert_mlp(PREFIX, &self.mlp);
        let identity = self.obs_mean == [0.0; N_FEATURES] && self.obs_std == [1.0; N_FEATURES];
        if !identity {
            w.obs_mean = self.obs_mean.to_vec();
            w.obs_std = self.obs_std.to_vec();
        }
        w.notes = self.notes.clone();
        w
    }

    /// Builds the network from a validated weights file.
    pub fn from_weights(w: &WeightsFile) -> Result<DdqnNet, PolicyError> {
        let mut mlp = Mlp::zeros(&DDQN_SIZES, Activation::Relu, Activation::Identity);
        w.fill_mlp(PREFIX, &mut mlp)?;
        let mut net = DdqnNet::wrap(mlp);
        if !w.obs_mean.is_empty() {
            let mut m = [0.0; N_FEATURES];
            let mut s = [1.0; N_FEATURES];
            if w.obs_mean.len() != N_FEATURES || w.obs_std.len() != N_FEATURES {
                return Err(PolicyError::Invalid(
                    "obs_mean/obs_std must have 15 values".into(),
                ));
            }
            m.copy_from_slice(&w.obs_mean);
            s.copy_from_slice(&w.obs_std);
            net.set_normalization(m, s)?;
        }
        net.notes = w.notes.clone();
        Ok(net)
    }

    /// Loads and validates a `repair-ddqn` safetensors file.
    pub fn load(path: &Path) -> Result<DdqnNet, PolicyError> {
        DdqnNet::from_weights(&WeightsFile::load(path, &DdqnNet::expected())?)
    }

    /// Loads and validates a file or the built-in weights.
    pub fn from_source(src: &Asset) -> Result<DdqnNet, PolicyError> {
        DdqnNet::from_bytes(&crate::shipped::read_weights(src)?, &src.label())
    }

    /// Loads from bytes (a `policy.swap` payload); `label` names them in errors.
    pub fn from_bytes(bytes: &[u8], label: &Path) -> Result<DdqnNet, PolicyError> {
        DdqnNet::from_weights(&WeightsFile::from_bytes(
            bytes,
            label,
            &DdqnNet::expected(),
        )?)
    }

    pub fn save(&self, path: &Path) -> Result<(), PolicyError> {
        self.to_weights().save(path)
    }
}

/// PriorityFEC's learned repair scheduler: the greedy feasible action of a
/// [`DdqnNet`].
#[derive(Debug, Clone)]
pub struct DdqnScheduler {
    net: DdqnNet,
}

impl DdqnScheduler {
    pub fn new(net: DdqnNet) -> DdqnScheduler {
        DdqnScheduler { net }
    }

    pub fn load(path: &Path) -> Result<DdqnScheduler, PolicyError> {
        Ok(DdqnScheduler::new(DdqnNet::load(path)?))
    }

    pub fn net(&self) -> &DdqnNet {
        &self.net
    }

    /// Replaces the network (a validated swap).
    pub fn set_net(&mut self, net: DdqnNet) {
        self.net = net;
    }
}

impl RepairScheduler for DdqnScheduler {
    fn name(&self) -> &str {
        "priorityfec-ddqn"
    }

    /// The feasible action with the largest Q-value; with an empty mask it
    /// answers `Source` and the sender applies its fallback.
    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        self.net
            .greedy(&obs.features, mask)
            .unwrap_or(RepairAction::Source)
    }
}

/// Decision latency of [`DdqnScheduler::decide`] over `calls` decisions on
/// seeded random observations and masks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionLatency {
    pub calls: usize,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The slowest call (a preempted thread shows up here and in the mean).
    pub max_us: f64,
}

/// Measures decision latency (for `edgemu bench handoff`; meaningful in a
/// release build). Each call is timed on its own with `Instant`.
pub fn measure_decision_latency(net: DdqnNet, calls: usize, seed: u64) -> DecisionLatency {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let inputs: Vec<(RepairObservation, ActionMask)> = (0..1024)
        .map(|_| {
            let mut obs = RepairObservation::default();
            obs.features
                .iter_mut()
                .for_each(|f| *f = rng.random::<f32>());
            let mut m = [false; N_ACTIONS];
            m.iter_mut().for_each(|b| *b = rng.random::<f32>() < 0.8);
            m[0] |= !m.iter().any(|&b| b);
            (obs, ActionMask(m))
        })
        .collect();
    let mut sched = DdqnScheduler::new(net);
    let mut ns = Vec::with_capacity(calls);
    let mut sink = 0usize;
    for i in 0..calls {
        let (obs, mask) = &inputs[i % inputs.len()];
        let t0 = Instant::now();
        let a = sched.decide(obs, *mask);
        ns.push(t0.elapsed().as_nanos() as u64);
        sink = sink.wrapping_add(a.index());
    }
    std::hint::black_box(sink);
    if ns.is_empty() {
        return DecisionLatency {
            calls,
            mean_us: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            max_us: 0.0,
        };
    }
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    ns.sort_unstable();
    let sorted: Vec<f64> = ns.iter().map(|&n| n as f64).collect();
    let q = |p: f64| edgemu_stats::percentile(&sorted, p).unwrap_or(0.0) / 1e3;
    DecisionLatency {
        calls,
        mean_us: mean / 1e3,
        p50_us: q(50.0),
        p99_us: q(99.0),
        max_us: q(100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_has_the_papers_shape() {
        let net = DdqnNet::random(1);
        assert_eq!(net.num_params(), 5444);
        assert_eq!(net.mlp().sizes(), &DDQN_SIZES);
    }

    #[test]
    fn decide_is_the_masked_argmax_of_q() {
        let mut sched = DdqnScheduler::new(DdqnNet::random(3));
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        for _ in 0..200 {
            let mut obs = RepairObservation::default();
            obs.features
                .iter_mut()
                .for_each(|f| *f = rng.random::<f32>());
            let mut m = [false; N_ACTIONS];
            m.iter_mut().for_each(|b| *b = rng.random::<bool>());
            if !m.iter().any(|&b| b) {
                continue;
            }
            let mask = ActionMask(m);
            let a = sched.decide(&obs, mask);
            assert!(mask.allows(a));
            let q = sched.net.q_values(&obs.features);
            for (i, &allowed) in m.iter().enumerate() {
                if allowed {
                    assert!(q[a.index()] >= q[i]);
                }
            }
        }
        assert_eq!(
            sched.decide(&RepairObservation::default(), ActionMask([false; 4])),
            RepairAction::Source
        );
    }

    #[test]
    fn weights_round_trip_with_normalization() {
        let mut net = DdqnNet::random(5);
        net.set_normalization([0.5; N_FEATURES], [2.0; N_FEATURES])
            .unwrap();
        net.set_notes("seed 5");
        let dir = std::env::temp_dir().join(format!("edgemu-ddqn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("repair-ddqn.safetensors");
        net.save(&path).unwrap();
        let mut back = DdqnNet::load(&path).unwrap();
        let f = [0.3; N_FEATURES];
        assert_eq!(back.q_values(&f), net.q_values(&f));
        assert_eq!(back.to_weights(), net.to_weights());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn rejects_other_kinds_and_shapes() {
        let mut w = DdqnNet::random(1).to_weights();
        w.kind = "lyreo-ppo".into();
        let e = DdqnNet::from_bytes(&w.to_bytes().unwrap(), Path::new("w.st")).unwrap_err();
        assert!(e.to_string().contains("kind is `lyreo-ppo`"), "{e}");
        let mut w = DdqnNet::random(1).to_weights();
        w.insert("q.2.weight", vec![5, 64], vec![0.0; 320]);
        let e = DdqnNet::from_bytes(&w.to_bytes().unwrap(), Path::new("w.st")).unwrap_err();
        assert!(e.to_string().contains("q.2.weight"), "{e}");
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let small = Mlp::new(
            &[15, 8, 4],
            Activation::Relu,
            Activation::Identity,
            &mut rng,
        );
        assert!(DdqnNet::from_mlp(small).is_err());
    }

    #[test]
    fn learner_output_becomes_a_scheduler() {
        let learner = crate::rl::DdqnLearner::new(DdqnNet::learner_config(7));
        let net = DdqnNet::from_mlp(learner.online().clone()).unwrap();
        assert_eq!(net.num_params(), 5444);
    }

    /// Decision latency over 100k calls; run in release:
    /// `cargo test --release -p edgemu-policies ddqn_decision_latency -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn ddqn_decision_latency() {
        let l = measure_decision_latency(DdqnNet::random(1), 100_000, 1);
        println!(
            "DDQN decision latency over {} calls: mean {:.3} us, P50 {:.3} us, P99 {:.3} us, max {:.1} us",
            l.calls, l.mean_us, l.p50_us, l.p99_us, l.max_us
        );
    }
}
