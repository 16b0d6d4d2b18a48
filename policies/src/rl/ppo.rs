//! PPO actor-critic with action masks (LYREO §IV-B; Table I: clip 0.2,
//! lr 3e-4, 10 epochs).
//!
//! The actor maps an observation to logits over actions, the critic to a
//! state value; both are [`Mlp`]s (the paper: four fully connected layers
//! each). The actor loss is the clipped surrogate
//! `−min(ρ A, clip(ρ, 1 − c, 1 + c) A)` with `ρ = π(a|s) / π_old(a|s)`, minus
//! an optional entropy bonus; the critic loss is `½ (V(s) − R)²`. Advantages
//! come with the samples (from [`gae`] or from returns the caller computed,
//! e.g. from redistributed rewards) and are normalised per update.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::nn::loss::{entropy, log_softmax, masked_argmax, sample_categorical};
use crate::nn::{clip_grad_norm, Activation, Adam, Mlp, MlpGrads, MlpScratch};

#[derive(Debug, Clone, PartialEq)]
pub struct PpoConfig {
    /// Actor widths, observation first, actions last.
    pub actor_sizes: Vec<usize>,
    /// Critic widths, observation first, 1 last.
    pub critic_sizes: Vec<usize>,
    pub hidden: Activation,
    pub clip: f32,
    pub lr: f32,
    pub epochs: usize,
    pub minibatch: usize,
    pub value_coef: f32,
    pub entropy_coef: f32,
    pub max_grad_norm: f32,
    pub gamma: f32,
    pub lambda: f32,
    pub normalize_advantages: bool,
    pub seed: u64,
}

impl PpoConfig {
    /// Four fully connected layers per net (three hidden of `hidden`), the
    /// paper's Table I optimiser settings.
    pub fn new(obs: usize, actions: usize, hidden: usize) -> PpoConfig {
        PpoConfig {
            actor_sizes: vec![obs, hidden, hidden, hidden, actions],
            critic_sizes: vec![obs, hidden, hidden, hidden, 1],
            hidden: Activation::Tanh,
            clip: 0.2,
            lr: 3e-4,
            epochs: 10,
            minibatch: 64,
            value_coef: 0.5,
            entropy_coef: 0.0,
            max_grad_norm: 0.5,
            gamma: 0.98,
            lambda: 0.95,
            normalize_advantages: true,
            seed: 0,
        }
    }
}

/// One decision with what the update needs.
#[derive(Debug, Clone, PartialEq)]
pub struct PpoSample {
    pub obs: Vec<f32>,
    /// Feasible actions (the same mask the action was drawn under).
    pub mask: Vec<bool>,
    pub action: usize,
    /// `log π_old(action | obs)`.
    pub logp: f32,
    pub advantage: f32,
    /// Target for the critic.
    pub ret: f32,
}

/// Means over one update.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PpoStats {
    pub policy_loss: f32,
    pub value_loss: f32,
    pub entropy: f32,
    pub approx_kl: f32,
    pub clip_fraction: f32,
}

/// Generalised advantage estimation over one trajectory: `values[t]` is
/// `V(s_t)`, `dones[t]` ends the episode after step `t`, `last_value` is
/// `V(s_T)` for bootstrapping. Returns (advantages, returns = adv + V).
pub fn gae(
    rewards: &[f32],
    values: &[f32],
    dones: &[bool],
    last_value: f32,
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    let n = rewards.len();
    assert!(values.len() == n && dones.len() == n, "gae: lengths differ");
    let mut adv = vec![0.0; n];
    let mut next_adv = 0.0;
    let mut next_value = last_value;
    for t in (0..n).rev() {
        let cont = if dones[t] { 0.0 } else { 1.0 };
        let delta = rewards[t] + gamma * next_value * cont - values[t];
        next_adv = delta + gamma * lambda * cont * next_adv;
        adv[t] = next_adv;
        next_value = values[t];
    }
    let ret = adv.iter().zip(values).map(|(a, v)| a + v).collect();
    (adv, ret)
}

#[derive(Debug, Clone)]
pub struct PpoLearner {
    cfg: PpoConfig,
    actor: Mlp,
    critic: Mlp,
    adam_actor: Adam,
    adam_critic: Adam,
    rng: ChaCha8Rng,
    scratch_a: MlpScratch,
    scratch_c: MlpScratch,
    logits: Vec<f32>,
    logp: Vec<f32>,
    value: [f32; 1],
}

impl PpoLearner {
    pub fn new(cfg: PpoConfig) -> PpoLearner {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let actor = Mlp::new(&cfg.actor_sizes, cfg.hidden, Activation::Identity, &mut rng);
        let critic = Mlp::new(
            &cfg.critic_sizes,
            cfg.hidden,
            Activation::Identity,
            &mut rng,
        );
        PpoLearner::from_nets(cfg, actor, critic)
    }

    /// Starts from given networks (e.g. loaded weights).
    pub fn from_nets(cfg: PpoConfig, actor: Mlp, critic: Mlp) -> PpoLearner {
        let n = actor.output_dim();
        PpoLearner {
            adam_actor: Adam::new(cfg.lr),
            adam_critic: Adam::new(cfg.lr),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5050),
            scratch_a: actor.scratch(),
            scratch_c: critic.scratch(),
            logits: vec![0.0; n],
            logp: vec![0.0; n],
            value: [0.0],
            actor,
            critic,
            cfg,
        }
    }

    pub fn config(&self) -> &PpoConfig {
        &self.cfg
    }
    pub fn actor(&self) -> &Mlp {
        &self.actor
    }
    pub fn critic(&self) -> &Mlp {
        &self.critic
    }

    /// `V(obs)`.
    pub fn value(&mut self, obs: &[f32]) -> f32 {
        self.critic
            .forward(obs, &mut self.value, &mut self.scratch_c);
        self.value[0]
    }

    /// Samples an action from the masked policy: (action, log-prob, value);
    /// `None` when the mask allows nothing.
    pub fn act(&mut self, obs: &[f32], mask: &[bool]) -> Option<(usize, f32, f32)> {
        if !mask.iter().any(|&m| m) {
            return None;
        }
        self.actor
            .forward(obs, &mut self.logits, &mut self.scratch_a);
        log_softmax(&self.logits, Some(mask), &mut self.logp);
        let probs: Vec<f32> = self.logp.iter().map(|l| l.exp()).collect();
        let a = sample_categorical(&probs, &mut self.rng);
        let lp = self.logp[a];
        Some((a, lp, self.value(obs)))
    }

    /// The most probable feasible action.
    pub fn greedy(&mut self, obs: &[f32], mask: &[bool]) -> Option<usize> {
        self.actor
            .forward(obs, &mut self.logits, &mut self.scratch_a);
        masked_argmax(&self.logits, Some(mask))
    }

    /// `epochs` passes of shuffled minibatches over `samples`.
    pub fn update(&mut self, samples: &[PpoSample]) -> PpoStats {
        let mut stats = PpoStats::default();
        if samples.is_empty() {
            return stats;
        }
        let mut adv: Vec<f32> = samples.iter().map(|s| s.advantage).collect();
        if self.cfg.normalize_advantages && adv.len() > 1 {
            let n = adv.len() as f32;
            let mean = adv.iter().sum::<f32>() / n;
            let std = (adv.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n).sqrt();
            adv.iter_mut().for_each(|a| *a = (*a - mean) / (std + 1e-8));
        }
        let mut order: Vec<usize> = (0..samples.len()).collect();
        let mut ga = MlpGrads::zero_like(&self.actor);
        let mut gc = MlpGrads::zero_like(&self.critic);
        let n_actions = self.actor.output_dim();
        let mut logp = vec![0.0; n_actions];
        let mut d_logits = vec![0.0; n_actions];
        let mut count = 0usize;
        for _ in 0..self.cfg.epochs {
            order.shuffle(&mut self.rng);
            for chunk in order.chunks(self.cfg.minibatch.max(1)) {
                ga.zero();
                gc.zero();
                let m = chunk.len() as f32;
                for &i in chunk {
                    let s = &samples[i];
                    let a_hat = adv[i];
                    // Actor.
                    let tape = self.actor.forward_train(&s.obs);
                    log_softmax(tape.output(), Some(&s.mask), &mut logp);
                    let lp = logp[s.action];
                    let ratio = (lp - s.logp).exp();
                    let clipped = ratio.clamp(1.0 - self.cfg.clip, 1.0 + self.cfg.clip);
                    let unclipped_active = ratio * a_hat <= clipped * a_hat;
                    let surr = if unclipped_active {
                        ratio * a_hat
                    } else {
                        clipped * a_hat
                    };
                    let probs: Vec<f32> = logp.iter().map(|l| l.exp()).collect();
                    let ent = entropy(&probs);
                    // d(−surr)/d logp_a = −ρ A when the unclipped term is the min.
                    let g_lp = if unclipped_active {
                        -ratio * a_hat
                    } else {
                        0.0
                    };
                    for j in 0..n_actions {
                        let onehot = if j == s.action { 1.0 } else { 0.0 };
                        let mut d = g_lp * (onehot - probs[j]);
                        if probs[j] > 0.0 {
                            // d(−c·H)/dz_j = c·p_j (log p_j + H).
                            d += self.cfg.entropy_coef * probs[j] * (logp[j] + ent);
                        }
                        d_logits[j] = d / m;
                    }
                    self.actor.backward(&tape, &d_logits, &mut ga);
                    // Critic.
                    let ctape = self.critic.forward_train(&s.obs);
                    let v = ctape.output()[0];
                    let dv = self.cfg.value_coef * (v - s.ret) / m;
                    self.critic.backward(&ctape, &[dv], &mut gc);

                    stats.policy_loss += -surr;
                    stats.value_loss += 0.5 * (v - s.ret).powi(2);
                    stats.entropy += ent;
                    stats.approx_kl += s.logp - lp;
                    if (ratio - 1.0).abs() > self.cfg.clip {
                        stats.clip_fraction += 1.0;
                    }
                    count += 1;
                }
                clip_grad_norm(&mut ga, self.cfg.max_grad_norm);
                clip_grad_norm(&mut gc, self.cfg.max_grad_norm);
                self.adam_actor.step(&mut self.actor, &ga);
                self.adam_critic.step(&mut self.critic, &gc);
            }
        }
        let c = count.max(1) as f32;
        stats.policy_loss /= c;
        stats.value_loss /= c;
        stats.entropy /= c;
        stats.approx_kl /= c;
        stats.clip_fraction /= c;
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gae_matches_hand_computation() {
        // γ = 0.5, λ = 1: advantages are discounted returns minus values.
        let (adv, ret) = gae(&[1.0, 1.0], &[0.0, 0.0], &[false, true], 10.0, 0.5, 1.0);
        assert_eq!(ret, vec![1.5, 1.0]);
        assert_eq!(adv, vec![1.5, 1.0]);
        let (adv, _) = gae(&[0.0], &[1.0], &[false], 2.0, 0.5, 0.9);
        assert_eq!(adv, vec![0.0]);
    }

    /// Contextual bandit: three one-hot contexts, four actions, reward 1 for
    /// action == context, else 0; action 3 is always masked.
    fn train(seed: u64, iterations: usize) -> PpoLearner {
        let mut cfg = PpoConfig::new(3, 4, 16);
        cfg.lr = 3e-3;
        cfg.minibatch = 32;
        cfg.epochs = 4;
        cfg.entropy_coef = 0.01;
        cfg.seed = seed;
        let mut ppo = PpoLearner::new(cfg);
        let mask = vec![true, true, true, false];
        for it in 0..iterations {
            let mut batch = Vec::new();
            for k in 0..96 {
                let ctx = (k + it) % 3;
                let mut obs = vec![0.0; 3];
                obs[ctx] = 1.0;
                let (a, logp, v) = ppo.act(&obs, &mask).unwrap();
                assert!(a != 3, "sampled a masked action");
                let r = if a == ctx { 1.0 } else { 0.0 };
                batch.push(PpoSample {
                    obs,
                    mask: mask.clone(),
                    action: a,
                    logp,
                    advantage: r - v,
                    ret: r,
                });
            }
            ppo.update(&batch);
        }
        ppo
    }

    #[test]
    fn learns_a_contextual_bandit() {
        let mut ppo = train(1, 30);
        let mask = [true, true, true, false];
        for ctx in 0..3 {
            let mut obs = [0.0; 3];
            obs[ctx] = 1.0;
            assert_eq!(ppo.greedy(&obs, &mask), Some(ctx));
            assert!(
                (ppo.value(&obs) - 1.0).abs() < 0.3,
                "V = {}",
                ppo.value(&obs)
            );
        }
    }

    #[test]
    fn same_seed_same_policy() {
        assert_eq!(train(4, 4).actor(), train(4, 4).actor());
    }
}
