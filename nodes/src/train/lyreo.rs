//! `edgemu train lyreo`: PPO training of the learned LYREO family on the
//! slotted serving harness (the core: [`edgemu_serving::train`], where the
//! method and its deviations from the paper are documented). This command
//! reads the flags, shows the progress bar and writes the files.
//!
//! **Files.** Each seed's run writes `<policy>-seed<N>.safetensors`,
//! `-seed<N>-curves.csv` and `-seed<N>.json` as soon as it ends, so seeds can
//! run in separate processes into one folder; [`aggregate`] (also
//! `--aggregate`) combines whatever seeds are there into the across-seed
//! curves (mean, Student-t 95 % interval, min/max per episode), the plots and
//! `<policy>.safetensors` (the seed with the best held-out check).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_policies::lyreo::Variant;
use edgemu_serving::train::{
    evaluate_ll, train_seed, CurvePoint, PhaseTimes, Progress, SeedRun, TrainConfig,
};

#[derive(Args, Debug, Clone)]
pub struct TrainLyreoArgs {
    /// lyreo, ly-ppo, ppo, lyreo-count or lyreo-nolb.
    #[arg(long, default_value = "lyreo")]
    pub policy: String,
    /// PPO episodes per seed (after the warm start).
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
    /// Evaluate the greedy policy on the held-out seeds every N episodes
    /// (0: only after the warm start and at the end).
    #[arg(long, default_value_t = 5)]
    pub eval_every: usize,
    /// Held-out scenario seeds for that evaluation.
    #[arg(long, value_delimiter = ',', default_value = "7001,7002")]
    pub eval_seeds: Vec<u64>,
    /// Weight of the per-request advantage next to the slot's (0: the
    /// paper's slot credit only).
    #[arg(long, default_value_t = 0.0)]
    pub request_credit: f32,
    /// Weight of the per-(slot, server) advantage next to the slot's (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub server_credit: f32,
    /// PPO learning rate (after the warm start).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f32,
    /// Truncation H of the return predictor's windows (LYREO family).
    #[arg(long, default_value_t = 20)]
    pub horizon: usize,
    /// Sampled decisions per episode fed to the PPO update.
    #[arg(long, default_value_t = 4096)]
    pub decisions: usize,
    /// PPO epochs over them per episode.
    #[arg(long, default_value_t = 4)]
    pub epochs: usize,
    /// Behaviour-cloning epochs of the warm start (0: no warm start, only
    /// the normalization is fitted).
    #[arg(long, default_value_t = 8)]
    pub bc_epochs: usize,
    /// Share of each GPU's M_s that is the KV budget during training and its
    /// held-out checks (1.0 = the literal 10/20/24 GB, where Z stays 0; 0.005
    /// is where the Lyapunov term is live, see docs/experiments/lyreo.md).
    #[arg(long, default_value_t = 1.0)]
    pub kv_budget_share: f64,
    /// ν, the weight of latency against the load-balancing term Z_s·Y_s in the reward
    /// (the experiment's `--nu`). Weights trained at one ν are the policy for that ν: a ν
    /// sweep trains one set per value.
    #[arg(long, default_value_t = 0.5)]
    pub nu: f64,
    /// Output folder (weights, curves.csv, convergence.csv).
    #[arg(long, default_value = "results/train-lyreo")]
    pub out: PathBuf,
    /// Train nothing: aggregate the per-seed files already in `--out`
    /// (`<policy>-seed<N>-curves.csv`, `-seed<N>.json`, `-seed<N>.safetensors`,
    /// written by runs of any seeds) into the across-seed curves, plots and
    /// the best seed's `<policy>.safetensors`.
    #[arg(long)]
    pub aggregate: bool,
    /// A tiny run (2 episodes of 50 slots, 12 users, one seed) to check the pipeline.
    #[arg(long)]
    pub quick: bool,
}

const CURVES_HEADER: &str =
    "seed,episode,lat_mean_s,z_mean,lb_dev,high_kv,reward,eval_greedy_lat_s\n";

fn curve_rows(curve: &[CurvePoint], out: &mut String) {
    for p in curve {
        let eval = p.eval_lat_s.map(|x| x.to_string()).unwrap_or_default();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{}\n",
            p.seed, p.episode, p.lat_mean_s, p.z_mean, p.lb_dev, p.high_kv, p.reward, eval
        ));
    }
}

/// Reads what [`curve_rows`] wrote (after [`CURVES_HEADER`]).
fn parse_curve(text: &str, file: &Path) -> Result<Vec<CurvePoint>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let at = || format!("{} line {}", file.display(), n + 1);
        if f.len() != 8 {
            bail!("{}: {} fields, expected 8", at(), f.len());
        }
        let num = |k: usize| -> Result<f64> {
            f[k].parse::<f64>()
                .with_context(|| format!("{}: field {} `{}`", at(), k + 1, f[k]))
        };
        out.push(CurvePoint {
            seed: f[0].parse().with_context(|| format!("{}: seed", at()))?,
            episode: f[1].parse().with_context(|| format!("{}: episode", at()))?,
            lat_mean_s: num(2)?,
            z_mean: num(3)?,
            lb_dev: num(4)?,
            high_kv: num(5)?,
            reward: num(6)?,
            eval_lat_s: if f[7].is_empty() { None } else { Some(num(7)?) },
        });
    }
    Ok(out)
}

/// What a seed's run leaves next to its weights and curve
/// (`<policy>-seed<N>.json`), for the across-seed aggregation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeedSummary {
    pub seed: u64,
    /// Held-out greedy mean latency of the kept weights.
    pub best_eval_s: f64,
    /// The PPO episode after which they were taken (`None`: the warm start).
    pub taken_after: Option<usize>,
    /// Held-out greedy mean latency right after the warm start.
    pub warm_eval_s: f64,
    /// Least-Loaded on the same held-out seeds.
    pub ll_eval_s: f64,
    pub eval_seeds: Vec<u64>,
    pub wall_s: f64,
    /// Where `wall_s` went.
    #[serde(default)]
    pub phases: PhaseTimes,
    pub command: String,
}

/// The across-seed statistics of one value per episode: mean, Student-t
/// 95 % interval, min and max over the seeds that reached the episode.
fn across(v: &[f64]) -> (f64, f64, f64, f64, f64) {
    let (m, lo, hi) = edgemu_stats::mean_ci95(v).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (m, lo, hi, min, max)
}

/// Every seed's points (`<policy>-curves.csv`) and the across-seed curves
/// (`<policy>-convergence.csv`: per episode the number of seeds, then for
/// the sampling policy's mean latency and mean virtual-queue length the
/// mean, 95 % interval and min/max over seeds, and the mean held-out greedy
/// latency where every seed evaluated).
fn curves_csv(curves: &[Vec<CurvePoint>]) -> (String, String) {
    let mut a = String::from(CURVES_HEADER);
    for c in curves {
        curve_rows(c, &mut a);
    }
    let mut b = String::from(
        "episode,seeds,lat_mean_s,lat_ci_lo_s,lat_ci_hi_s,lat_min_s,lat_max_s,\
         z_mean,z_ci_lo,z_ci_hi,z_min,z_max,eval_greedy_lat_mean_s\n",
    );
    let eps = curves.iter().map(Vec::len).max().unwrap_or(0);
    for e in 0..eps {
        let at: Vec<&CurvePoint> = curves.iter().filter_map(|c| c.get(e)).collect();
        let lat: Vec<f64> = at.iter().map(|p| p.lat_mean_s).collect();
        let z: Vec<f64> = at.iter().map(|p| p.z_mean).collect();
        let (lm, llo, lhi, lmin, lmax) = across(&lat);
        let (zm, zlo, zhi, zmin, zmax) = across(&z);
        let evals: Vec<f64> = at.iter().filter_map(|p| p.eval_lat_s).collect();
        let eval = if evals.len() == at.len() {
            (evals.iter().sum::<f64>() / evals.len() as f64).to_string()
        } else {
            String::new()
        };
        b.push_str(&format!(
            "{e},{},{lm},{llo},{lhi},{lmin},{lmax},{zm},{zlo},{zhi},{zmin},{zmax},{eval}\n",
            at.len()
        ));
    }
    (a, b)
}

/// Fig. 2 as images: mean latency and mean virtual-queue length per episode,
/// the mean over seeds as the line and its Student-t 95 % interval as the band.
fn convergence_plots(
    out: &Path,
    variant: Variant,
    curves: &[Vec<CurvePoint>],
) -> Result<Vec<PathBuf>> {
    use crate::plots::{lines_with_ci, CiPoint, CiSeries, Formats, Labels};
    let eps = curves.iter().map(Vec::len).max().unwrap_or(0);
    let series = |f: fn(&CurvePoint) -> f64| CiSeries {
        label: format!(
            "{} (mean; band: 95 % CI over {} seeds)",
            variant.name(),
            curves.len()
        ),
        points: (0..eps)
            .filter_map(|e| {
                let v: Vec<f64> = curves.iter().filter_map(|c| c.get(e)).map(f).collect();
                CiPoint::from_samples(e as f64, &v)
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

fn taken_after(after: Option<usize>) -> String {
    match after {
        Some(e) => format!("after PPO episode {e}"),
        None => "after the warm start".into(),
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `<policy>-seed<N>`: the stem of one seed's files.
fn seed_stem(variant: Variant, seed: u64) -> String {
    format!("{}-seed{seed}", variant.name())
}

/// Writes one seed's weights, curve and summary into `out`.
fn write_seed(
    out: &Path,
    cfg: &TrainConfig,
    r: &SeedRun,
    wall_s: f64,
    command: &str,
) -> Result<()> {
    let stem = seed_stem(cfg.variant, r.seed);
    let notes = format!(
        "{command}; seed {}; held-out greedy {:.4} s {} (warm start {:.4} s, Least-Loaded {:.4} s, seeds {:?})",
        r.seed,
        r.best_eval.0,
        taken_after(r.best_eval.1),
        r.warm_eval,
        r.ll_eval,
        cfg.eval_seeds
    );
    r.model
        .save(&out.join(format!("{stem}.safetensors")), &notes)
        .context("saving weights")?;
    let mut c = String::from(CURVES_HEADER);
    curve_rows(&r.curve, &mut c);
    write(&out.join(format!("{stem}-curves.csv")), &c)?;
    let summary = SeedSummary {
        seed: r.seed,
        best_eval_s: r.best_eval.0,
        taken_after: r.best_eval.1,
        warm_eval_s: r.warm_eval,
        ll_eval_s: r.ll_eval,
        eval_seeds: cfg.eval_seeds.clone(),
        wall_s,
        phases: r.phases.clone(),
        command: command.to_string(),
    };
    write(
        &out.join(format!("{stem}.json")),
        &serde_json::to_string_pretty(&summary)?,
    )
}

/// Every seed of `variant` found in `out` (by its `.json`), in seed order,
/// with its curve.
fn read_seeds(out: &Path, variant: Variant) -> Result<Vec<(SeedSummary, Vec<CurvePoint>)>> {
    let prefix = format!("{}-seed", variant.name());
    let mut found = Vec::new();
    let dir = std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))?;
    for entry in dir {
        let name = entry
            .with_context(|| format!("reading {}", out.display()))?
            .file_name();
        let name = name.to_string_lossy();
        let Some(seed) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let path = out.join(name.as_ref());
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let summary: SeedSummary =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let cpath = out.join(format!("{}-curves.csv", seed_stem(variant, seed)));
        let ctext = std::fs::read_to_string(&cpath)
            .with_context(|| format!("reading {}", cpath.display()))?;
        found.push((summary, parse_curve(&ctext, &cpath)?));
    }
    found.sort_by_key(|(s, _)| s.seed);
    Ok(found)
}

/// The across-seed curves, plots and the best seed's weights as
/// `<policy>.safetensors` (the seed whose kept weights had the lowest
/// held-out greedy latency), from the per-seed files in `out`.
pub fn aggregate(out: &Path, variant: Variant) -> Result<()> {
    let seeds = read_seeds(out, variant)?;
    if seeds.is_empty() {
        bail!(
            "no {}-seed<N>.json in {}: nothing to aggregate",
            variant.name(),
            out.display()
        );
    }
    let curves: Vec<Vec<CurvePoint>> = seeds.iter().map(|(_, c)| c.clone()).collect();
    let (all, conv) = curves_csv(&curves);
    write(&out.join(format!("{}-curves.csv", variant.name())), &all)?;
    write(
        &out.join(format!("{}-convergence.csv", variant.name())),
        &conv,
    )?;
    for (s, _) in &seeds {
        let p = &s.phases;
        println!(
            "{} seed {}: held-out greedy {:.4} s {} (warm start {:.4} s) vs Least-Loaded {:.4} s; \
             {:.0} s (warm start {:.0}, rollouts {:.0}, credit {:.0}, PPO updates {:.0}, checks {:.0})",
            variant.name(),
            s.seed,
            s.best_eval_s,
            taken_after(s.taken_after),
            s.warm_eval_s,
            s.ll_eval_s,
            s.wall_s,
            p.warm_start_s,
            p.rollout_s,
            p.credit_s,
            p.update_s,
            p.eval_s
        );
    }
    let warm: Vec<f64> = seeds.iter().map(|(s, _)| s.warm_eval_s).collect();
    let kept: Vec<f64> = seeds.iter().map(|(s, _)| s.best_eval_s).collect();
    let last: Vec<f64> = curves
        .iter()
        .filter_map(|c| c.iter().rev().find_map(|p| p.eval_lat_s))
        .collect();
    let show = |v: &[f64]| match edgemu_stats::mean_ci95(v) {
        Some((m, lo, hi)) => format!("{m:.4} s [{lo:.4}, {hi:.4}]"),
        None => "–".into(),
    };
    println!(
        "{}: held-out greedy over {} seeds (mean [95 % CI]): warm start {}, last check {}, kept {}; Least-Loaded {:.4} s",
        variant.name(),
        seeds.len(),
        show(&warm),
        show(&last),
        show(&kept),
        seeds[0].0.ll_eval_s
    );
    let best = seeds
        .iter()
        .min_by(|a, b| a.0.best_eval_s.total_cmp(&b.0.best_eval_s))
        .map(|(s, _)| s.seed)
        .context("no seed")?;
    let from = out.join(format!("{}.safetensors", seed_stem(variant, best)));
    let to = out.join(format!("{}.safetensors", variant.name()));
    std::fs::copy(&from, &to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    println!(
        "{}: best seed {best} -> {}; curves in {}",
        variant.name(),
        to.display(),
        out.display()
    );
    // After the weights: a plot that cannot be drawn loses nothing already written.
    match convergence_plots(out, variant, &curves) {
        Ok(files) => println!(
            "convergence plots: {} files in {}",
            files.len(),
            out.display()
        ),
        Err(e) => eprintln!("warning: convergence plots not drawn: {e:#}"),
    }
    Ok(())
}

pub fn run(a: &TrainLyreoArgs) -> Result<()> {
    let variant = Variant::parse(&a.policy.to_ascii_lowercase()).with_context(|| {
        format!(
            "--policy `{}`: not a learned policy (lyreo, ly-ppo, ppo, lyreo-count, lyreo-nolb)",
            a.policy
        )
    })?;
    if a.aggregate {
        return aggregate(&a.out, variant);
    }
    let mut cfg = TrainConfig::new(variant);
    cfg.episodes = a.episodes;
    cfg.seeds = a.seeds.clone();
    cfg.slots = a.slots;
    cfg.users = a.users;
    cfg.eval_every = a.eval_every;
    cfg.eval_seeds = a.eval_seeds.clone();
    cfg.request_credit = a.request_credit;
    cfg.server_credit = a.server_credit;
    cfg.lr = a.lr;
    cfg.horizon = a.horizon;
    cfg.decisions_per_update = a.decisions;
    cfg.epochs = a.epochs;
    cfg.bc_epochs = a.bc_epochs;
    cfg.kv_budget_share = a.kv_budget_share;
    cfg.nu = a.nu;
    if a.quick {
        cfg.episodes = 2;
        cfg.seeds.truncate(1);
        cfg.slots = 50;
        cfg.users = 12;
        cfg.eval_seeds.truncate(1);
    }
    cfg.check()?;
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
    let command = format!(
        "edgemu train lyreo --policy {} --episodes {} --slots {} --users {} --eval-every {} \
         --lr {} --horizon {} --decisions {} --epochs {} --request-credit {} --server-credit {} --kv-budget-share {} --nu {}",
        variant.name(),
        cfg.episodes,
        cfg.slots,
        cfg.users,
        cfg.eval_every,
        cfg.lr,
        cfg.horizon,
        cfg.decisions_per_update,
        cfg.epochs,
        cfg.request_credit,
        cfg.server_credit,
        cfg.kv_budget_share,
        cfg.nu
    );
    let ll_eval = evaluate_ll(&cfg)?;
    // Seed by seed, each written as soon as it is done: another process can
    // train other seeds into the same folder, and `--aggregate` (or the end
    // of this run) combines whatever is there.
    for &seed in &cfg.seeds {
        let start = Instant::now();
        let r = train_seed(&cfg, seed, ll_eval, &mut |p: Progress<'_>| {
            match p {
            Progress::WarmStart { seed, agreement } => tracing::info!(
                "seed {seed} warm start: greedy agrees with Least-Loaded on {agreement:.3} of its decisions"
            ),
            Progress::Episode(p) => {
                pb.set_message(format!(
                    "seed {} ep {}: lat {:.3} s, Z {:.4}",
                    p.seed, p.episode, p.lat_mean_s, p.z_mean
                ));
                pb.inc(1);
            }
        }
        })?;
        write_seed(&a.out, &cfg, &r, start.elapsed().as_secs_f64(), &command)?;
    }
    pb.finish();
    aggregate(&a.out, variant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_policies::lyreo::LearnedModel;
    use edgemu_serving::train::train;

    fn tiny(variant: Variant) -> TrainConfig {
        TrainConfig::smoke(variant)
    }

    /// Two seeds trained by separate calls into one folder, then
    /// aggregated: the across-seed CSV has both seeds' points and the
    /// 95 % interval, the plots are drawn and the best seed's weights load.
    #[test]
    fn per_seed_files_aggregate_into_curves_plots_and_best_weights() {
        let dir = std::env::temp_dir().join(format!("edgemu-conv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut evals = Vec::new();
        for seed in [3, 4] {
            let mut cfg = tiny(Variant::LyPpo);
            cfg.seeds = vec![seed];
            let runs = train(&cfg, |_| {}).unwrap();
            evals.push((runs[0].best_eval.0, seed));
            write_seed(&dir, &cfg, &runs[0], 1.0, "test").unwrap();
        }
        aggregate(&dir, Variant::LyPpo).unwrap();
        let seeds = read_seeds(&dir, Variant::LyPpo).unwrap();
        assert_eq!(seeds.len(), 2);
        assert_eq!(seeds[0].1.len(), 2, "two episodes read back");
        let conv = std::fs::read_to_string(dir.join("ly-ppo-convergence.csv")).unwrap();
        let row: Vec<f64> = conv
            .lines()
            .nth(1)
            .unwrap()
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(row[1], 2.0, "two seeds at episode 0");
        let lat = [seeds[0].1[0].lat_mean_s, seeds[1].1[0].lat_mean_s];
        assert!((row[2] - (lat[0] + lat[1]) / 2.0).abs() < 1e-12);
        assert!(row[3] <= row[5] && row[5] <= row[2] && row[2] <= row[6] && row[6] <= row[4]);
        for f in ["latency", "z"] {
            for ext in ["png", "svg"] {
                assert!(dir.join(format!("ly-ppo-convergence-{f}.{ext}")).exists());
            }
        }
        let svg = std::fs::read_to_string(dir.join("ly-ppo-convergence-latency.svg")).unwrap();
        assert!(svg.contains("mean latency (s)") && svg.contains("2 seeds"));
        let best = evals.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap().1;
        assert_eq!(
            std::fs::read(dir.join("ly-ppo.safetensors")).unwrap(),
            std::fs::read(dir.join(format!("ly-ppo-seed{best}.safetensors"))).unwrap()
        );
        LearnedModel::load(&dir.join("ly-ppo.safetensors"), Variant::LyPpo).unwrap();
        std::fs::remove_dir_all(&dir).ok();
    }
}
