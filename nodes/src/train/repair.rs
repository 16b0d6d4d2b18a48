//! `edgemu train repair`: trains PriorityFEC's Double-DQN repair scheduler
//! on the handoff harness ([`edgemu_handoff::train`]) and writes, into
//! `--out`:
//!
//! - `repair-ddqn.safetensors` (kind `repair-ddqn`, the format of
//!   `policies/README.md`), loadable by `DdqnScheduler::load`;
//! - `curve.csv`: episode, ε, mean one-step shaped reward per decision,
//!   recovered utility of the training episode, mean Huber loss,
//!   transitions, updates;
//! - `eval.csv`: per checkpoint, the number of held-out seeds and the mean
//!   recovered utility of the greedy DDQN and of the deficit heuristic over
//!   those seeds at every `--eval-rho` deadline, with repairs sent and
//!   redundant repairs;
//! - `final.csv` (unless `--final-seeds 0`): the final network against the
//!   deficit heuristic per deadline and held-out paired seed (disjoint from
//!   the training and checkpoint seeds): both utilities, their difference,
//!   repairs sent and redundant repairs (received but not innovative) of
//!   both;
//! - `curve.png` / `curve.svg`: recovered utility of the training episodes
//!   (and their 10-episode moving mean) and, at each checkpoint, the greedy
//!   DDQN and the deficit heuristic on the held-out seeds (mean over the
//!   deadlines per seed, then mean and 95 % CI over the seeds);
//!   `reward.png` / `reward.svg`: mean shaped reward per decision and
//!   Huber loss per episode.
//!
//! `--profile FILE` (or `built-in:NAME`) takes the evaluation handoff's block
//! utilities from a measured KV-utility profile (`edgemu profile-kv`) instead of the
//! placeholder ones, and draws the training episodes' utilities from it
//! (see `edgemu_handoff::train::env`). The same seed gives the same bytes.

use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_assets::Asset;
use edgemu_gpu::kv_utility::{KvUtilityProfile, ModelIdentity};
use edgemu_handoff::train::env::EpisodeRanges;
use edgemu_handoff::train::output::{summary, write_outputs};
use edgemu_handoff::train::CurveRow;
use edgemu_handoff::train::{train, Evaluation, Progress, TrainConfig, TrainOutcome};
use edgemu_handoff::{
    cell_utilities, synthetic_payload, BlockLayout, HandoffScenario, PotentialWeights,
};

use crate::plots::{self, CiPoint, CiSeries, Formats, Labels, PlotError};

#[derive(Args, Debug, Clone)]
pub struct TrainRepairArgs {
    /// Training episodes (after the deficit-heuristic replay seeding).
    #[arg(long, default_value_t = 160)]
    pub episodes: u32,
    /// Seed of everything (episodes, channels, network, exploration).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output folder.
    #[arg(long, default_value = "results/train-repair")]
    pub out: PathBuf,
    /// Tiny episodes and a small evaluation handoff (seconds; for checking).
    #[arg(long)]
    pub quick: bool,
    /// Evaluate every this many episodes (default: 20, quick: half way).
    #[arg(long)]
    pub eval_every: Option<u32>,
    /// Held-out realizations per evaluation (default 4, quick 2).
    #[arg(long)]
    pub eval_seeds: Option<u32>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Realizations of the final evaluation of the final network against the
    /// deficit heuristic (paired seeds disjoint from the training and
    /// checkpoint seeds; default 32, quick 0); writes `final.csv` and prints
    /// the paired difference with its 95 % CI.
    #[arg(long)]
    pub final_seeds: Option<u32>,
    /// Weights λp,λd,λw of the shaping potential F = λp·k_dec/N −
    /// λd·d/(d + B_rem) − λw·ln(1+W)/ln(1+N) in the reward (default
    /// 1,0.5,0.25; 0,0,0: the plain change of recovered utility).
    #[arg(long, value_parser = parse_potential)]
    pub potential: Option<PotentialWeights>,
    /// Epochs of reward in each transition before the DDQN target bootstraps
    /// (default 32, a little over one RTT of decisions — ≈ 25 epochs at the
    /// paper setting; 1: the paper's one-step target, with which no training
    /// here beat the deficit heuristic — docs/experiments/priorityfec.md)
    #[arg(long)]
    pub n_step: Option<usize>,
    /// Deadlines ρ of the checkpoint and final evaluations, comma-separated
    /// (default 0.6,0.8,1.0,1.2, the experiment's grid): every seed runs at
    /// every ρ and a checkpoint's score (for --keep-best) is the mean over
    /// all
    #[arg(long, value_delimiter = ',')]
    pub eval_rho: Option<Vec<f64>>,
    /// Write the checkpoint with the best mean over the checkpoint seeds and
    /// every --eval-rho deadline instead of the last network (the final
    /// evaluation's seeds are disjoint from them; needs --eval-seeds > 0).
    #[arg(long)]
    pub keep_best: bool,
    /// Coding window limit K of the training episodes and of the evaluation
    /// handoffs (default: the harness's, 256).
    #[arg(long)]
    pub k: Option<u16>,
    /// Start from these weights (fine-tune); with `--episodes 0` the file is
    /// only evaluated (checkpoint and final held-out seeds).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Train on the evaluation setting itself (the paper's GE channel,
    /// 100 Mb/s, 20 ms RTT, ρ uniform in [0.7, 0.9], the whole layout)
    /// instead of the randomized channels, rates, RTTs and deadlines.
    #[arg(long)]
    pub paper_channel: bool,
    /// Measured KV-utility profile (`edgemu profile-kv`) for the evaluation
    /// handoff's and the training episodes' block utilities (default: the
    /// placeholder and synthetic ones): a file, or a shipped one built in
    /// (`built-in:smollm2-135m-kvu`, `built-in:smollm2-135m-kvu-mask`).
    /// Not with `--quick`.
    #[arg(long, value_parser = edgemu_gpu::shipped_profiles::parse_profile)]
    pub profile: Option<Asset>,
}

fn parse_potential(s: &str) -> Result<PotentialWeights, String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{s:?}: {e}"))?;
    match v[..] {
        [progress, deficit, window] if v.iter().all(|x| x.is_finite()) => Ok(PotentialWeights {
            progress,
            deficit,
            window,
        }),
        _ => Err(format!("{s:?}: three finite numbers λp,λd,λw expected")),
    }
}

/// The configuration `args` describe.
pub fn config(args: &TrainRepairArgs) -> Result<TrainConfig> {
    let mut cfg = if args.quick {
        TrainConfig::quick(args.episodes, args.seed)
    } else {
        TrainConfig::standard(args.episodes, args.seed)
    }
    .context("training configuration")?;
    if let Some(e) = args.eval_every {
        cfg.eval_every = e;
    }
    if let Some(s) = args.eval_seeds {
        cfg.eval_seeds = s;
    }
    cfg.final_seeds = args.final_seeds.unwrap_or(if args.quick { 0 } else { 32 });
    cfg.keep_best = args.keep_best;
    if let Some(k) = args.k {
        if k == 0 {
            bail!("--k must be positive");
        }
        cfg.k = Some(k);
    }
    if let Some(w) = args.potential {
        cfg.potential = w;
    }
    if let Some(r) = &args.eval_rho {
        cfg.eval_rhos = r.clone();
    }
    if let Some(n) = args.n_step {
        if n == 0 {
            bail!("--n-step must be at least 1 (1: the paper's one-step target)");
        }
        cfg.n_step = n;
    }
    if let Some(p) = &args.init {
        cfg.init = Some(
            edgemu_policies::repair::ddqn::DdqnNet::load(p)
                .with_context(|| format!("loading the initial weights {}", p.display()))?,
        );
    }
    if args.paper_channel {
        if args.quick {
            bail!("--paper-channel needs the full configuration (SmolLM2's layout), not --quick");
        }
        // The profile (below) fills in the utilities.
        cfg.ranges = EpisodeRanges::paper_setting(cfg.eval_scenario.layout.n_layers);
    }
    if let Some(p) = &args.profile {
        if args.quick {
            bail!("--profile needs the full configuration (SmolLM2's layout), not --quick");
        }
        let prof = KvUtilityProfile::load(p, &ModelIdentity::smollm2_135m())
            .with_context(|| format!("loading the profile {}", p.label().display()))?;
        let layout = BlockLayout::smollm2(1536).context("SmolLM2 layout")?;
        let utilities: Arc<[f64]> = cell_utilities(&prof.cells, &prof.layer_groups(), &layout)
            .with_context(|| format!("the profile {}", p.label().display()))?
            .into();
        cfg.eval_scenario = HandoffScenario::paper(
            layout,
            Arc::clone(&utilities),
            synthetic_payload(&layout, 1),
            0.8,
        );
        cfg.ranges.token_blocks = layout.blocks_per_layer();
        cfg.ranges.profile = Some(utilities);
    }
    cfg.validate()
        .context("checking --eval-rho, --eval-seeds and --keep-best")?;
    Ok(cfg)
}

/// Trains and writes the outputs; returns the outcome.
pub fn train_repair(args: &TrainRepairArgs) -> Result<TrainOutcome> {
    let cfg = config(args)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(u64::from(cfg.episodes))
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} episodes {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let mut out = train(&cfg, |p| match p {
        Progress::Episode(r) => {
            bar.set_position(u64::from(r.episode));
            bar.set_message(format!(
                "ε {:.3} utility {:.3} loss {:.2e}",
                r.epsilon, r.recovered_utility, r.loss
            ));
        }
        Progress::Evaluation(e) => bar.println(format!(
            "checkpoint {:>4}: ddqn {:.4} vs deficit heuristic {:.4} (rho = {}, {} held-out seeds)",
            e.episode,
            e.ddqn_mean(),
            e.heuristic_mean(),
            rho_list(e),
            e.seeds()
        )),
        Progress::Final(e) => bar.println(format!(
            "final network on {} held-out paired seeds (rho = {}): ddqn {:.4} vs deficit heuristic {:.4}",
            e.seeds(),
            rho_list(e),
            e.ddqn_mean(),
            e.heuristic_mean()
        )),
    })
    .context("training")?;
    bar.finish_and_clear();
    let wall = start.elapsed().as_secs_f64();
    let last = out.evaluations.last().cloned();
    let command = format!(
        "edgemu train repair --episodes {} --seed {} --n-step {} --eval-rho {} --eval-every {} --eval-seeds {} --final-seeds {}{}{}{}{}{}{}{}",
        cfg.episodes,
        cfg.seed,
        cfg.n_step,
        cfg.eval_rhos
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join(","),
        cfg.eval_every,
        cfg.eval_seeds,
        cfg.final_seeds,
        if args.quick { " --quick" } else { "" },
        if args.paper_channel {
            " --paper-channel"
        } else {
            ""
        },
        args.init
            .as_ref()
            .map_or(String::new(), |p| format!(" --init {}", p.display())),
        args.k.map_or(String::new(), |k| format!(" --k {k}")),
        if args.keep_best { " --keep-best" } else { "" },
        args.potential.map_or(String::new(), |w| format!(
            " --potential {},{},{}",
            w.progress, w.deficit, w.window
        )),
        args.profile
            .as_ref()
            .map_or(String::new(), |p| format!(" --profile {p}"))
    );
    let weights = write_outputs(&args.out, &command, &mut out)
        .with_context(|| format!("writing outputs into {}", args.out.display()))?;
    println!(
        "trained {} episodes ({} seeded transitions, {} updates) in {wall:.1} s",
        cfg.episodes, out.seeded_transitions, out.updates
    );
    if let Some(e) = &last {
        println!("final checkpoint: {}", summary(e));
    }
    if let Some(f) = &out.final_evaluation {
        println!("final held-out evaluation: {}", summary(f));
        let rhos = f.rhos();
        let mut parts = vec![(String::new(), f.clone())];
        if rhos.len() > 1 {
            parts.extend(
                rhos.iter()
                    .map(|&r| (format!(" at rho = {r}"), f.at_rho(r))),
            );
        }
        for (label, e) in parts {
            // A seed at several deadlines is one channel draw: the CI is
            // over the seeds' means, not over seeds × deadlines.
            let per_seed = seed_means(&e, &e.differences());
            if let Some((m, lo, hi)) = edgemu_stats::mean_ci95(&per_seed) {
                println!(
                    "paired difference ddqn - heuristic{label}: {:+.3} points, 95 % CI [{:+.3}, {:+.3}] (Student t over seeds, n = {})",
                    100.0 * m,
                    100.0 * lo,
                    100.0 * hi,
                    per_seed.len()
                );
            }
        }
    }
    println!(
        "wrote {}, {}, {}",
        weights.display(),
        args.out.join("curve.csv").display(),
        args.out.join("eval.csv").display()
    );
    if out.curve.is_empty() {
        // --episodes 0 only evaluates the initial network: nothing to draw.
        println!("no training curve to plot: 0 episodes trained");
        return Ok(out);
    }
    match plot_curves(&args.out, &out) {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
        }
        // The CSVs are the result; a chart that cannot be drawn is reported.
        Err(e) => eprintln!("training-curve plot: {e}"),
    }
    Ok(out)
}

/// The evaluation's deadlines, `0.6/0.8/…`.
fn rho_list(e: &Evaluation) -> String {
    e.rhos()
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// Per seed, the mean of `values` (parallel to the evaluation's entries)
/// over the seed's deadlines.
fn seed_means(e: &Evaluation, values: &[f64]) -> Vec<f64> {
    edgemu_stats::cluster_means(e.seed.iter().copied().zip(values.iter().copied()))
}

/// Moving mean over the last `w` values (fewer at the start).
fn moving_mean(xs: &[f64], w: usize) -> Vec<f64> {
    (0..xs.len())
        .map(|i| {
            let s = &xs[i.saturating_sub(w.max(1) - 1)..=i];
            s.iter().sum::<f64>() / s.len() as f64
        })
        .collect()
}

fn line(label: &str, xs: impl Iterator<Item = f64>, ys: &[f64]) -> CiSeries {
    CiSeries {
        label: label.into(),
        points: xs
            .zip(ys)
            .map(|(x, &y)| CiPoint {
                x,
                mean: y,
                lo: y,
                hi: y,
            })
            .collect(),
    }
}

/// Draws `curve.{png,svg}` and `reward.{png,svg}` into `dir` (module docs).
pub fn plot_curves(dir: &Path, out: &TrainOutcome) -> Result<Vec<PathBuf>, PlotError> {
    let episodes = || out.curve.iter().map(|r| f64::from(r.episode));
    let pick = |f: fn(&CurveRow) -> f64| out.curve.iter().map(f).collect::<Vec<f64>>();
    let utility = pick(|r| r.recovered_utility);
    let mut series = vec![
        line("training episode", episodes(), &utility),
        line(
            "training, 10-episode mean",
            episodes(),
            &moving_mean(&utility, 10),
        ),
    ];
    let rhos = out.evaluations.first().map(rho_list).unwrap_or_default();
    for (label, pick) in [
        (
            format!("greedy DDQN, held-out seeds (ρ = {rhos})"),
            (|e: &Evaluation| &e.ddqn) as fn(&Evaluation) -> &Vec<f64>,
        ),
        (
            "deficit heuristic, same seeds".to_string(),
            |e: &Evaluation| &e.heuristic,
        ),
    ] {
        series.push(CiSeries {
            label,
            points: out
                .evaluations
                .iter()
                .filter_map(|e| {
                    CiPoint::from_samples(f64::from(e.episode), &seed_means(e, pick(e)))
                })
                .collect(),
        });
    }
    let mut files = plots::lines_with_ci(
        dir,
        "curve",
        Formats::default(),
        &Labels::new(
            "DDQN repair scheduler training",
            "episode",
            "recovered utility",
        ),
        &series,
    )?;
    let reward = [
        line(
            "mean one-step shaped reward per decision",
            episodes(),
            &pick(|r| r.mean_reward),
        ),
        line("mean Huber loss", episodes(), &pick(|r| r.loss)),
    ];
    files.extend(plots::lines_with_ci(
        dir,
        "reward",
        Formats::default(),
        &Labels::new("DDQN training: reward and loss", "episode", "value"),
        &reward,
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(out: PathBuf) -> TrainRepairArgs {
        TrainRepairArgs {
            episodes: 2,
            seed: 3,
            out,
            quick: true,
            eval_every: None,
            eval_seeds: Some(1),
            quiet: true,
            profile: None,
            final_seeds: None,
            paper_channel: false,
            init: None,
            potential: None,
            n_step: None,
            eval_rho: None,
            k: None,
            keep_best: false,
        }
    }

    #[test]
    fn quick_training_writes_weights_csvs_and_plots() {
        let dir = std::env::temp_dir().join(format!("edgemu-train-repair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = train_repair(&args(dir.clone())).expect("quick training");
        assert_eq!(out.curve.len(), 2);
        for f in [
            "repair-ddqn.safetensors",
            "curve.csv",
            "eval.csv",
            "curve.png",
            "curve.svg",
            "reward.png",
            "reward.svg",
        ] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        let svg = std::fs::read_to_string(dir.join("curve.svg")).expect("svg");
        assert!(svg.contains("deficit heuristic"), "legend missing");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_profile_is_refused_with_quick_and_a_wrong_one_named() {
        let mut a = args(std::env::temp_dir());
        a.profile = Some(Asset::File(PathBuf::from("/nonexistent/kvu.json")));
        let e = format!("{:#}", config(&a).expect_err("--profile with --quick"));
        assert!(e.contains("--quick"), "{e}");
        a.quick = false;
        let e = format!("{:#}", config(&a).expect_err("missing profile"));
        assert!(e.contains("/nonexistent/kvu.json"), "{e}");
    }

    #[test]
    fn options_are_checked_and_applied() {
        let w = parse_potential("1, 0,0.25").expect("three numbers");
        assert_eq!((w.progress, w.deficit, w.window), (1.0, 0.0, 0.25));
        assert!(parse_potential("1,0").is_err());
        assert!(parse_potential("1,x,0").is_err());
        assert!(parse_potential("1,inf,0").is_err());
        let mut a = args(std::env::temp_dir());
        a.paper_channel = true;
        let e = format!(
            "{:#}",
            config(&a).expect_err("--paper-channel with --quick")
        );
        assert!(e.contains("--quick"), "{e}");
        a.paper_channel = false;
        a.k = Some(0);
        assert!(config(&a).is_err());
        a.k = Some(64);
        a.keep_best = true;
        let c = config(&a).expect("quick config");
        assert_eq!((c.k, c.keep_best, c.final_seeds), (Some(64), true, 0));
        assert_eq!(c.n_step, edgemu_handoff::train::DEFAULT_N_STEP);
        a.n_step = Some(0);
        assert!(config(&a).is_err());
        a.n_step = Some(1);
        assert_eq!(config(&a).expect("one-step").n_step, 1);
        // --quick evaluates at 0.8 only, the full configuration on the grid.
        assert_eq!(config(&a).expect("quick rho").eval_rhos, vec![0.8]);
        a.quick = false;
        assert_eq!(
            config(&a).expect("default rho").eval_rhos,
            vec![0.6, 0.8, 1.0, 1.2]
        );
        a.quick = true;
        a.eval_rho = Some(vec![0.6, 1.2]);
        assert_eq!(config(&a).expect("two rho").eval_rhos, vec![0.6, 1.2]);
        a.eval_rho = Some(vec![0.0]);
        assert!(config(&a).is_err());
        a.eval_rho = Some(vec![0.8, 0.8]);
        let e = format!("{:#}", config(&a).unwrap_err());
        assert!(e.contains("0.8 is given twice"), "{e}");
        a.eval_rho = None;
        a.keep_best = true;
        a.eval_seeds = Some(0);
        assert!(config(&a).is_err());
        a.n_step = Some(usize::MAX);
        a.keep_best = false;
        assert!(config(&a).is_ok());
    }

    /// A seed evaluated at several deadlines is one draw: the interval is
    /// over the seeds' means.
    #[test]
    fn seed_means_group_the_deadlines_of_a_seed() {
        let e = Evaluation {
            episode: 0,
            rho: vec![0.6, 0.6, 1.0, 1.0],
            seed: vec![0, 1, 0, 1],
            ddqn: vec![0.5, 0.7, 0.9, 1.0],
            heuristic: vec![0.4, 0.7, 0.9, 0.9],
            ddqn_repairs: vec![0; 4],
            heuristic_repairs: vec![0; 4],
            ddqn_redundant: vec![0; 4],
            heuristic_redundant: vec![0; 4],
        };
        let d = seed_means(&e, &e.differences());
        assert_eq!(d.len(), 2);
        assert!(
            (d[0] - 0.05).abs() < 1e-12 && (d[1] - 0.05).abs() < 1e-12,
            "{d:?}"
        );
        assert_eq!(rho_list(&e), "0.6/1");
    }

    #[test]
    fn moving_mean_is_trailing() {
        assert_eq!(moving_mean(&[1.0, 3.0, 5.0], 2), vec![1.0, 2.0, 4.0]);
    }
}
