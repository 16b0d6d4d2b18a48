//! Double DQN with action masks (PriorityFEC §IV-D).
//!
//! The online network `Q_θ` both evaluates the executed action and selects
//! the next one among the feasible actions; the target network `Q_θ̄`
//! evaluates that selection:
//! `y = r + γ · Q_θ̄(x', argmax_{u' ∈ U(x')} Q_θ(x', u'))`, and `y = r` when
//! the transition ends the episode (or no action is feasible next). The loss
//! is the minibatch mean of `Huber(Q_θ(x, u) − y)`. Paper settings (§V-B) are
//! the defaults: γ = 1, Adam 1e-4, gradient-norm clip 5, learn every 16
//! transitions, target sync every 500 updates, ε from 0.25 to 0.05.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::replay::ReplayBuffer;
use crate::nn::loss::masked_argmax;
use crate::nn::{
    clip_grad_norm, huber, huber_grad, Activation, Adam, Mlp, MlpGrads, MlpScratch, WeightsFile,
};

#[derive(Debug, Clone, PartialEq)]
pub struct DdqnConfig {
    /// Layer widths, input first (the paper: 15, 64, 64, 4).
    pub sizes: Vec<usize>,
    pub gamma: f32,
    pub lr: f32,
    pub grad_clip: f32,
    pub huber_delta: f32,
    pub batch: usize,
    /// One gradient update per this many observed transitions.
    pub learn_every: usize,
    /// Copy the online net into the target net every this many updates.
    pub target_sync: u64,
    pub replay_capacity: usize,
    /// No update before the replay holds this many transitions.
    pub min_replay: usize,
    pub eps_start: f32,
    pub eps_end: f32,
    /// ε falls linearly from `eps_start` to `eps_end` over this many
    /// exploratory decisions ([`DdqnLearner::act`] calls).
    pub eps_decay_steps: u64,
    pub seed: u64,
}

impl Default for DdqnConfig {
    fn default() -> Self {
        DdqnConfig {
            sizes: vec![15, 64, 64, 4],
            gamma: 1.0,
            lr: 1e-4,
            grad_clip: 5.0,
            huber_delta: 1.0,
            batch: 64,
            learn_every: 16,
            target_sync: 500,
            replay_capacity: 100_000,
            min_replay: 64,
            eps_start: 0.25,
            eps_end: 0.05,
            eps_decay_steps: 250_000,
            seed: 0,
        }
    }
}

/// One decision's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub obs: Vec<f32>,
    pub action: usize,
    pub reward: f32,
    pub next_obs: Vec<f32>,
    /// Feasible actions at `next_obs` (ignored when `done`).
    pub next_mask: Vec<bool>,
    pub done: bool,
}

#[derive(Debug, Clone)]
pub struct DdqnLearner {
    cfg: DdqnConfig,
    online: Mlp,
    target: Mlp,
    adam: Adam,
    grads: MlpGrads,
    replay: ReplayBuffer<Transition>,
    rng: ChaCha8Rng,
    scratch: MlpScratch,
    q: Vec<f32>,
    q_next: Vec<f32>,
    batch_idx: Vec<usize>,
    observed: u64,
    acts: u64,
    updates: u64,
}

impl DdqnLearner {
    pub fn new(cfg: DdqnConfig) -> DdqnLearner {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let online = Mlp::new(&cfg.sizes, Activation::Relu, Activation::Identity, &mut rng);
        DdqnLearner::with_net(cfg, online, rng)
    }

    /// Starts from given weights (e.g. a pretrained network).
    pub fn from_net(cfg: DdqnConfig, online: Mlp) -> DdqnLearner {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        DdqnLearner::with_net(cfg, online, rng)
    }

    fn with_net(cfg: DdqnConfig, online: Mlp, rng: ChaCha8Rng) -> DdqnLearner {
        let out = online.output_dim();
        DdqnLearner {
            target: online.clone(),
            adam: Adam::new(cfg.lr),
            grads: MlpGrads::zero_like(&online),
            replay: ReplayBuffer::new(cfg.replay_capacity),
            scratch: online.scratch(),
            q: vec![0.0; out],
            q_next: vec![0.0; out],
            batch_idx: Vec::with_capacity(cfg.batch),
            online,
            rng,
            cfg,
            observed: 0,
            acts: 0,
            updates: 0,
        }
    }

    pub fn config(&self) -> &DdqnConfig {
        &self.cfg
    }
    pub fn online(&self) -> &Mlp {
        &self.online
    }
    pub fn target(&self) -> &Mlp {
        &self.target
    }
    pub fn updates(&self) -> u64 {
        self.updates
    }
    pub fn replay_len(&self) -> usize {
        self.replay.len()
    }

    /// The current exploration rate.
    pub fn epsilon(&self) -> f32 {
        let c = &self.cfg;
        if c.eps_decay_steps == 0 {
            return c.eps_end;
        }
        if self.acts >= c.eps_decay_steps {
            return c.eps_end;
        }
        let f = self.acts as f32 / c.eps_decay_steps as f32;
        c.eps_start + (c.eps_end - c.eps_start) * f
    }

    /// Q-values of the online network.
    pub fn q_values(&mut self, obs: &[f32]) -> &[f32] {
        self.online.forward(obs, &mut self.q, &mut self.scratch);
        &self.q
    }

    /// The feasible action with the largest online Q-value; `None` when the
    /// mask allows nothing.
    pub fn greedy(&mut self, obs: &[f32], mask: &[bool]) -> Option<usize> {
        self.online.forward(obs, &mut self.q, &mut self.scratch);
        masked_argmax(&self.q, Some(mask))
    }

    /// ε-greedy over the feasible actions (advances the ε schedule).
    pub fn act(&mut self, obs: &[f32], mask: &[bool]) -> Option<usize> {
        let eps = self.epsilon();
        self.acts += 1;
        if self.rng.random::<f32>() < eps {
            let n = mask.iter().filter(|&&m| m).count();
            if n == 0 {
                return None;
            }
            let k = self.rng.random_range(0..n);
            return mask
                .iter()
                .enumerate()
                .filter(|(_, &m)| m)
                .nth(k)
                .map(|(i, _)| i);
        }
        self.greedy(obs, mask)
    }

    /// Adds transitions to the replay without learning (the paper seeds the
    /// replay with deficit-heuristic trajectories; no imitation loss).
    pub fn seed_replay(&mut self, transitions: impl IntoIterator<Item = Transition>) {
        for t in transitions {
            self.replay.push(t);
        }
    }

    /// Stores one transition and, every `learn_every` transitions once the
    /// replay is warm, takes one gradient step; returns its loss if it did.
    pub fn observe(&mut self, t: Transition) -> Option<f32> {
        self.replay.push(t);
        self.observed += 1;
        if self
            .observed
            .is_multiple_of(self.cfg.learn_every.max(1) as u64)
            && self.replay.len() >= self.cfg.min_replay
        {
            Some(self.update())
        } else {
            None
        }
    }

    /// One minibatch update; returns the mean Huber loss.
    pub fn update(&mut self) -> f32 {
        if self.replay.is_empty() {
            return 0.0;
        }
        let mut idx = std::mem::take(&mut self.batch_idx);
        self.replay
            .sample_indices(self.cfg.batch.max(1), &mut self.rng, &mut idx);
        self.grads.zero();
        let n = idx.len() as f32;
        let mut loss = 0.0;
        let mut d_out = vec![0.0; self.online.output_dim()];
        for &i in &idx {
            let Some(tr) = self.replay.get(i) else {
                continue;
            };
            let y = double_dqn_target(
                tr,
                &self.online,
                &self.target,
                self.cfg.gamma,
                &mut self.q_next,
                &mut self.scratch,
            );
            let tape = self.online.forward_train(&tr.obs);
            let Some(&q) = tape.output().get(tr.action) else {
                continue;
            };
            let err = q - y;
            loss += huber(err, self.cfg.huber_delta);
            d_out.iter_mut().for_each(|d| *d = 0.0);
            d_out[tr.action] = huber_grad(err, self.cfg.huber_delta) / n;
            self.online.backward(&tape, &d_out, &mut self.grads);
        }
        self.batch_idx = idx;
        clip_grad_norm(&mut self.grads, self.cfg.grad_clip);
        self.adam.step(&mut self.online, &self.grads);
        self.updates += 1;
        if self.cfg.target_sync > 0 && self.updates.is_multiple_of(self.cfg.target_sync) {
            self.target.copy_from(&self.online);
        }
        loss / n
    }

    /// The online network as a weights file (`q.*` tensors) of `kind`.
    pub fn to_weights(&self, kind: &str, version: u32) -> WeightsFile {
        let mut w = WeightsFile::new(kind, version);
        w.insert_mlp("q", &self.online);
        w
    }
}

/// The Double-DQN target of one transition: the online net selects the next
/// action among the feasible ones, the target net evaluates it.
fn double_dqn_target(
    tr: &Transition,
    online: &Mlp,
    target: &Mlp,
    gamma: f32,
    q: &mut [f32],
    scratch: &mut MlpScratch,
) -> f32 {
    if tr.done {
        return tr.reward;
    }
    online.forward(&tr.next_obs, q, scratch);
    let Some(a) = masked_argmax(q, Some(&tr.next_mask)) else {
        return tr.reward;
    };
    target.forward(&tr.next_obs, q, scratch);
    tr.reward + gamma * q[a]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two states. In A (obs [1, 0]) action 1 is masked; action 0 leads to B
    /// with reward 0, actions 2 and 3 end with reward 0.3. In B (obs [0, 1])
    /// action 3 is masked; action 2 ends with reward 1, others with 0.
    /// With γ = 1 the optimum is 0 in A (worth 1) and 2 in B.
    fn chain_step(state: usize, a: usize) -> (f32, Option<usize>) {
        match (state, a) {
            (0, 0) => (0.0, Some(1)),
            (0, _) => (0.3, None),
            (1, 2) => (1.0, None),
            _ => (0.0, None),
        }
    }
    const OBS: [[f32; 2]; 2] = [[1.0, 0.0], [0.0, 1.0]];
    const MASK: [[bool; 4]; 2] = [[true, false, true, true], [true, true, true, false]];

    fn train(seed: u64, episodes: usize) -> DdqnLearner {
        let cfg = DdqnConfig {
            sizes: vec![2, 16, 16, 4],
            lr: 3e-3,
            batch: 32,
            learn_every: 2,
            target_sync: 25,
            min_replay: 32,
            eps_start: 1.0,
            eps_end: 0.1,
            eps_decay_steps: 1500,
            seed,
            ..DdqnConfig::default()
        };
        let mut l = DdqnLearner::new(cfg);
        for _ in 0..episodes {
            let mut s = 0;
            loop {
                let a = l.act(&OBS[s], &MASK[s]).unwrap();
                assert!(MASK[s][a], "act chose a masked action");
                let (r, next) = chain_step(s, a);
                let ns = next.unwrap_or(s);
                l.observe(Transition {
                    obs: OBS[s].to_vec(),
                    action: a,
                    reward: r,
                    next_obs: OBS[ns].to_vec(),
                    next_mask: MASK[ns].to_vec(),
                    done: next.is_none(),
                });
                match next {
                    Some(n) => s = n,
                    None => break,
                }
            }
        }
        l
    }

    #[test]
    fn learns_the_two_state_chain() {
        let mut l = train(3, 1500);
        assert_eq!(l.greedy(&OBS[0], &MASK[0]), Some(0));
        assert_eq!(l.greedy(&OBS[1], &MASK[1]), Some(2));
        let q = l.q_values(&OBS[0]).to_vec();
        assert!((q[0] - 1.0).abs() < 0.15, "Q(A, 0) = {}", q[0]);
        assert!((q[2] - 0.3).abs() < 0.15, "Q(A, 2) = {}", q[2]);
        assert!(l.updates() > 100);
    }

    #[test]
    fn same_seed_same_network() {
        let (a, b) = (train(9, 200), train(9, 200));
        assert!(a.updates() > 0);
        assert_eq!(a.online(), b.online());
    }

    #[test]
    fn greedy_respects_masks_and_empty_mask() {
        let mut l = DdqnLearner::new(DdqnConfig {
            sizes: vec![2, 4, 4],
            ..DdqnConfig::default()
        });
        for m in 0..4 {
            let mut mask = [false; 4];
            mask[m] = true;
            assert_eq!(l.greedy(&[0.5, 0.5], &mask), Some(m));
            assert!(l.act(&[0.5, 0.5], &mask) == Some(m));
        }
        assert_eq!(l.greedy(&[0.5, 0.5], &[false; 4]), None);
    }

    #[test]
    fn epsilon_decays_linearly() {
        let mut l = DdqnLearner::new(DdqnConfig {
            sizes: vec![2, 4, 4],
            eps_decay_steps: 10,
            ..DdqnConfig::default()
        });
        assert_eq!(l.epsilon(), 0.25);
        for _ in 0..5 {
            l.act(&[0.0, 0.0], &[true; 4]);
        }
        assert!((l.epsilon() - 0.15).abs() < 1e-6);
        for _ in 0..50 {
            l.act(&[0.0, 0.0], &[true; 4]);
        }
        assert_eq!(l.epsilon(), 0.05);
    }
}
