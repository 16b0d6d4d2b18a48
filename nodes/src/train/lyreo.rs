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
//!   completes (`slot + ⌊D^tot/Δ⌋`; requests finishing after `T` on the
//!   last step, as the paper does) — the delayed feedback;
//! - `Z_s(t)` is the queue before slot `t`'s update, `Y_s(t)` its deviation;
//! - `Υ(t)` = servers whose peak KV exceeded 90 % of `M_s` in the slot plus
//!   requests of the slot rejected as never fitting, `ϱ = 1`.
//!
//! Variants: Ly-PPO uses `r` as is; LYREO (and its ablations) fits the LSTM
//! return predictor on windows of `H = 20` slots (truncated returns with
//! value bootstrapping) and learns from `r'_t = g_t − g_{t−1}`; PPO replaces
//! `Σ Z Y` by a fixed penalty `κ Σ_s Y_s` with `κ = 10` and sees no queues;
//! LYREO-NoLB drops the load-balancing term; LYREO-Count computes `Y`, `Z`
//! from active requests (`backlog/32`) instead of memory-time.
//!
//! PPO: GAE (γ = 0.98, λ = 0.95) over slots; every decision of a slot gets
//! the slot's advantage; up to 2 048 decisions per episode (a seeded
//! subsample: an episode has 32 000) feed 10 epochs of clipped-surrogate
//! updates (clip 0.2, Adam lr 3·10⁻⁴, minibatch 256, grad-norm 0.5) through
//! the factorized actor (see `edgemu_policies::lyreo::learned`); the critic
//! regresses the slot returns.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_policies::lyreo::learned::{count_workload, ACTOR_INPUT};
use edgemu_policies::lyreo::{LearnedModel, LearnedPolicy, PolicySpec, Rollout, Variant};
use edgemu_policies::nn::loss::log_softmax;
use edgemu_policies::nn::{clip_grad_norm, Adam, MlpGrads};
use edgemu_policies::rl::{gae, ReturnPredictor, ReturnPredictorConfig};
use edgemu_serving::{run_episode_with, EpisodeOutcome, Scenario};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[derive(Args, Debug, Clone)]
pub struct TrainLyreoArgs {
    /// lyreo, ly-ppo, ppo, lyreo-count or lyreo-nolb.
    #[arg(long, default_value = "lyreo")]
    pub policy: String,
    /// Episodes per seed.
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
    pub horizon: usize,
    pub predictor_steps: usize,
    pub rho: f64,
    pub ppo_penalty: f64,
}

impl TrainConfig {
    pub fn new(variant: Variant) -> TrainConfig {
        TrainConfig {
            variant,
            episodes: 30,
            seeds: vec![1, 2, 3],
            slots: 800,
            users: 40,
            decisions_per_update: 2048,
            epochs: 10,
            minibatch: 256,
            clip: 0.2,
            lr: 3e-4,
            gamma: 0.98,
            lambda: 0.95,
            horizon: 20,
            predictor_steps: 10,
            rho: 1.0,
            ppo_penalty: 10.0,
        }
    }

    fn scenario(&self, seed: u64, episode: usize) -> Scenario {
        let mut s = Scenario::paper_default(seed.wrapping_mul(1000).wrapping_add(episode as u64));
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
}

/// What one seed's run produced.
pub struct SeedRun {
    pub seed: u64,
    pub model: LearnedModel,
    pub curve: Vec<CurvePoint>,
}

struct Trainer {
    cfg: TrainConfig,
    model: LearnedModel,
    adam_actor: Adam,
    adam_critic: Adam,
    predictor: Option<ReturnPredictor>,
    rng: ChaCha8Rng,
}

/// Per-slot reward of eq. 30 (divided by U) for `variant`.
pub fn slot_rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome) -> Vec<f32> {
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
        let done = (r.slot as usize + (e2e / slot_s) as usize).min(t_len - 1);
        lat[done] += e2e;
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

impl Trainer {
    fn new(cfg: &TrainConfig, seed: u64) -> Trainer {
        let predictor = cfg.variant.redistributes().then(|| {
            let mut p = ReturnPredictorConfig::new(
                edgemu_policies::lyreo::learned::CRITIC_INPUT + ACTOR_INPUT,
                cfg.horizon,
            );
            p.gamma = cfg.gamma;
            p.seed = seed ^ 0x4e7;
            ReturnPredictor::new(p)
        });
        Trainer {
            model: LearnedModel::new(cfg.variant, seed),
            adam_actor: Adam::new(cfg.lr),
            adam_critic: Adam::new(cfg.lr),
            predictor,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7a1),
            cfg: cfg.clone(),
        }
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
        let t_len = rewards.len();
        if ro.critic_inputs.len() != t_len {
            bail!(
                "rollout has {} slots, episode {t_len}",
                ro.critic_inputs.len()
            );
        }
        let mut scratch = self.model.critic.scratch();
        let mut values: Vec<f32> = ro
            .critic_inputs
            .iter()
            .map(|c| {
                let mut y = [0.0f32];
                self.model.critic.forward(c, &mut y, &mut scratch);
                y[0]
            })
            .collect();
        let learn_r = match self.predictor.as_mut() {
            Some(p) => {
                let d = ACTOR_INPUT + ro.critic_inputs[0].len();
                let mut feats = Vec::with_capacity(t_len * d);
                for t in 0..t_len {
                    feats.extend_from_slice(&ro.critic_inputs[t]);
                    feats.extend_from_slice(&ro.action_summaries[t]);
                }
                let windows = p.windows(&feats, &rewards, &values, true);
                for _ in 0..self.cfg.predictor_steps {
                    p.train_step(&windows);
                }
                let mut out = Vec::with_capacity(t_len);
                for w in &windows {
                    out.extend(p.redistribute(&w.features));
                }
                out
            }
            None => rewards.clone(),
        };
        let mut dones = vec![false; t_len];
        dones[t_len - 1] = true;
        let (adv, ret) = gae(
            &learn_r,
            &values,
            &dones,
            0.0,
            self.cfg.gamma,
            self.cfg.lambda,
        );
        self.update(&ro, &adv, &ret);
        values.clear();
        Ok(CurvePoint {
            seed,
            episode: e,
            lat_mean_s: o.summary.lat_mean_s,
            z_mean: o.summary.z_mean,
            lb_dev: o.summary.lb_dev,
            high_kv: o.summary.high_kv,
            reward: rewards.iter().map(|&r| r as f64).sum(),
        })
    }

    fn update(&mut self, ro: &Rollout, slot_adv: &[f32], slot_ret: &[f32]) {
        let cfg = &self.cfg;
        let mut idx: Vec<usize> = (0..ro.decisions.len()).collect();
        idx.shuffle(&mut self.rng);
        idx.truncate(cfg.decisions_per_update);
        let mut adv: Vec<f32> = idx
            .iter()
            .map(|&i| slot_adv[ro.decisions[i].slot as usize])
            .collect();
        let n = adv.len().max(1) as f32;
        let mean = adv.iter().sum::<f32>() / n;
        let std = (adv.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n).sqrt();
        adv.iter_mut().for_each(|a| *a = (*a - mean) / (std + 1e-8));
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
                    if g_lp == 0.0 {
                        continue;
                    }
                    dl.clear();
                    for (j, lp) in logp.iter().enumerate() {
                        let onehot = if j == d.action { 1.0 } else { 0.0 };
                        dl.push(g_lp * (onehot - lp.exp()) / m);
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
                    let tape = self.model.critic.forward_train(&ro.critic_inputs[t]);
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
    let mut runs = Vec::new();
    for &seed in &cfg.seeds {
        let mut tr = Trainer::new(cfg, seed);
        let mut curve = Vec::new();
        for e in 0..cfg.episodes {
            let p = tr
                .episode(seed, e)
                .with_context(|| format!("seed {seed}, episode {e}"))?;
            tick(&p);
            curve.push(p);
        }
        runs.push(SeedRun {
            seed,
            model: tr.model,
            curve,
        });
    }
    Ok(runs)
}

fn curves_csv(runs: &[SeedRun]) -> (String, String) {
    let mut a = String::from("seed,episode,lat_mean_s,z_mean,lb_dev,high_kv,reward\n");
    for r in runs {
        for p in &r.curve {
            a.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                p.seed, p.episode, p.lat_mean_s, p.z_mean, p.lb_dev, p.high_kv, p.reward
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

/// The seed whose last episode had the lowest mean latency.
fn best(runs: &[SeedRun]) -> Option<&SeedRun> {
    runs.iter().min_by(|a, b| {
        let l = |r: &SeedRun| r.curve.last().map(|p| p.lat_mean_s).unwrap_or(f64::MAX);
        l(a).total_cmp(&l(b))
    })
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
    if a.quick {
        cfg.episodes = 2;
        cfg.seeds.truncate(1);
        cfg.slots = 50;
        cfg.users = 12;
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
            "edgemu train lyreo --policy {} --episodes {} --slots {} --users {}; seed {}",
            variant.name(),
            cfg.episodes,
            cfg.slots,
            cfg.users,
            r.seed
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
            "edgemu train lyreo --policy {} --episodes {} --slots {} --users {} --seeds {:?}; best seed {}",
            variant.name(),
            cfg.episodes,
            cfg.slots,
            cfg.users,
            cfg.seeds,
            b.seed
        );
        b.model.save(&path, &notes).context("saving weights")?;
        println!(
            "{}: best seed {} (last-episode mean latency {:.3} s) -> {} ({:.0} s); curves in {}",
            variant.name(),
            b.seed,
            b.curve.last().map(|p| p.lat_mean_s).unwrap_or(0.0),
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
        c.predictor_steps = 2;
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
    }
}
