//! One seed's PPO learner: warm start (Least-Loaded recorded, normalization
//! and reward scale fitted, behaviour cloning, critic fit), then per episode
//! a sampling rollout on the harness, rewards, the LYREO family's return
//! redistribution, GAE and credits, and the clipped-surrogate update of the
//! factorized actor and the critic; held-out checks keep the best weights.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use edgemu_policies::lyreo::learned::{Decision, ACTOR_INPUT, CRITIC_INPUT, CRITIC_TIME};
use edgemu_policies::lyreo::{LearnedModel, LearnedPolicy, PolicySpec, Rollout};
use edgemu_policies::nn::loss::log_softmax;
use edgemu_policies::nn::{clip_grad_norm, Adam, MlpGrads};
use edgemu_policies::rl::{ReturnPredictor, ReturnPredictorConfig};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::train::advantages::{request_advantages, server_advantages, standardize, truncated_gae};
use crate::train::behaviour_clone::behaviour_clone;
use crate::train::evaluate::evaluate;
use crate::train::rewards::{learning_rewards, reward_terms, slot_rewards};
use crate::train::{during, CurvePoint, PhaseTimes, TrainConfig};
use crate::{run_episode_with, Scenario, ServingError};

/// One seed's learner: the model, its optimizers, the return predictor and
/// the best held-out weights so far.
pub(crate) struct Trainer {
    cfg: TrainConfig,
    model: LearnedModel,
    adam_actor: Adam,
    adam_critic: Adam,
    predictor: Option<ReturnPredictor>,
    rng: ChaCha8Rng,
    /// Multiplies the learning reward so returns are O(1).
    reward_scale: f32,
    pub(crate) best: Option<(f64, Option<usize>, LearnedModel)>,
    /// Wall seconds per phase of this seed's run (where the time goes).
    pub(crate) phases: PhaseTimes,
}

impl Trainer {
    pub(crate) fn new(cfg: &TrainConfig, seed: u64) -> Trainer {
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
    /// the actor and fits the critic to its returns. Returns the share of the
    /// episode's decisions the cloned greedy actor agrees with (`None`
    /// without behaviour cloning).
    pub(crate) fn warm_start(&mut self, seed: u64) -> Result<Option<f64>, ServingError> {
        let sc = self.cfg.warm_scenario(seed);
        let spec = PolicySpec::parse("least-loaded").map_err(|e| during("batching spec", e))?;
        let rollout = Arc::new(Mutex::new(Rollout::default()));
        let teacher = LearnedPolicy::imitating(Arc::new(self.model.clone()), rollout.clone());
        let o = run_episode_with(&sc, &spec, Box::new(teacher))
            .map_err(|e| during("warm-start episode", e))?;
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
        let mut agreement = None;
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
            agreement = Some(acc);
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
        Ok(agreement)
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
    pub(crate) fn consider(&mut self, after: Option<usize>) -> Result<f64, ServingError> {
        let t0 = Instant::now();
        let lat = evaluate(&self.cfg, &self.model)?;
        self.phases.eval_s += t0.elapsed().as_secs_f64();
        if self.best.as_ref().is_none_or(|b| lat < b.0) {
            self.best = Some((lat, after, self.model.clone()));
        }
        Ok(lat)
    }

    pub(crate) fn episode(&mut self, seed: u64, e: usize) -> Result<CurvePoint, ServingError> {
        let t0 = Instant::now();
        let sc = self.cfg.scenario(seed, e);
        let spec = PolicySpec::parse("least-loaded").map_err(|e| during("batching spec", e))?;
        let rollout = Arc::new(Mutex::new(Rollout::default()));
        let policy = LearnedPolicy::sampling(
            Arc::new(self.model.clone()),
            sc.seed ^ 0xac7,
            rollout.clone(),
        );
        let o = run_episode_with(&sc, &spec, Box::new(policy))
            .map_err(|e| during("training episode", e))?;
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
            return Err(ServingError::Train(format!(
                "rollout has {} slots, episode {t_len}",
                ro.critic_inputs.len()
            )));
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
