//! `edgemu train repair`: trains PriorityFEC's Double-DQN repair scheduler
//! on the handoff harness ([`edgemu_handoff::train`]) and writes, into
//! `--out`:
//!
//! - `repair-ddqn.safetensors` (kind `repair-ddqn`, the format of
//!   `policies/README.md`), loadable by `DdqnScheduler::load`;
//! - `curve.csv`: episode, ε, mean shaped reward per decision, recovered
//!   utility of the training episode, mean Huber loss, transitions, updates;
//! - `eval.csv`: per checkpoint, mean recovered utility of the greedy DDQN
//!   and of the deficit heuristic on the held-out seeds at ρ = 0.8.
//!
//! No plot yet: the plot module has not landed on main; the CSVs are what a
//! plot would be drawn from. The same seed gives the same bytes.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_handoff::train::output::{summary, write_outputs};
use edgemu_handoff::train::{train, Progress, TrainConfig, TrainOutcome};

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
            "checkpoint {:>4}: ddqn {:.4} vs deficit heuristic {:.4} (ρ = 0.8, {} held-out seeds)",
            e.episode,
            e.ddqn_mean(),
            e.heuristic_mean(),
            e.ddqn.len()
        )),
    })
    .context("training")?;
    bar.finish_and_clear();
    let wall = start.elapsed().as_secs_f64();
    let last = out.evaluations.last().cloned();
    let command = format!(
        "edgemu train repair --episodes {} --seed {}{}",
        cfg.episodes,
        cfg.seed,
        if args.quick { " --quick" } else { "" }
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
    println!(
        "wrote {}, {}, {}",
        weights.display(),
        args.out.join("curve.csv").display(),
        args.out.join("eval.csv").display()
    );
    Ok(out)
}
