//! How much the size of a repair burst matters: the deficit heuristic (a
//! burst of 1, 4 or 16 sized to the estimated deficit `d`) against the same
//! rule with every burst at most `B` (`cap B`: the largest allowed burst
//! ≤ B whenever `d > 0`) and, given a weights file, the DDQN — on paired
//! realization seeds at the paper setting (SmolLM2's layout, placeholder
//! utilities, GE (0.001, 0.5, 0.02, 0.1), 100 Mb/s, 20 ms RTT). Prints the
//! mean recovered utility, the paired difference to the heuristic with its
//! 95 % Student-t interval, the repairs sent and the decisions taken with
//! `d > 0`.
//!
//!     cargo run --release -p edgemu-handoff --example burst_sizing -- \
//!         [SEEDS] [FIRST_SEED] [RHO] [WEIGHTS]
//!
//! Seeds are `FINAL_SEED_BASE + FIRST_SEED + i` (default 64 from 5 000,
//! disjoint from the trainer's checkpoint and final seeds).

use std::path::Path;
use std::sync::Arc;

use edgemu_handoff::harness::{run_handoff, RunOptions};
use edgemu_handoff::scheme::scheme;
use edgemu_handoff::train::FINAL_SEED_BASE;
use edgemu_handoff::{placeholder_utilities, synthetic_payload, BlockLayout, HandoffScenario};
use edgemu_policies::repair::ddqn::DdqnScheduler;
use edgemu_policies::repair::{
    ActionMask, DeficitHeuristic, RepairAction, RepairObservation, RepairScheduler,
};

/// The largest allowed repair burst ≤ `cap` whenever the estimated deficit is
/// positive, else source.
struct CappedBurst(u32);

impl RepairScheduler for CappedBurst {
    fn name(&self) -> &str {
        "capped-burst"
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        if obs.deficit > 0 {
            if let Some(a) = mask.largest_repair_up_to(self.0) {
                return a;
            }
        }
        mask.first_allowed().unwrap_or(RepairAction::Source)
    }
}

/// Counts the actions a scheduler takes while the estimated deficit is
/// positive.
struct Counting<S> {
    inner: S,
    counts: Arc<std::sync::Mutex<[u64; 4]>>,
}

impl<S: RepairScheduler> RepairScheduler for Counting<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        let a = self.inner.decide(obs, mask);
        if obs.deficit > 0 {
            if let Ok(mut c) = self.counts.lock() {
                c[a.index()] += 1;
            }
        }
        a
    }

    fn reset(&mut self) {
        self.inner.reset()
    }
}

type Make = Box<dyn Fn() -> Box<dyn RepairScheduler>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().map_or(Ok(64), |s| s.parse())?;
    let first: u64 = args.next().map_or(Ok(5_000), |s| s.parse())?;
    let rho: f64 = args.next().map_or(Ok(0.8), |s| s.parse())?;
    let weights = args.next();
    let layout = BlockLayout::smollm2(1536)?;
    let u: Arc<[f64]> = placeholder_utilities(&layout).into();
    let sc = HandoffScenario::paper(layout, u, synthetic_payload(&layout, 1), rho);
    let spec = scheme("priorityfec")?;

    let mut rules: Vec<(String, Make)> = vec![
        (
            "deficit heuristic".into(),
            Box::new(|| Box::new(DeficitHeuristic)),
        ),
        ("cap 1".into(), Box::new(|| Box::new(CappedBurst(1)))),
        ("cap 4".into(), Box::new(|| Box::new(CappedBurst(4)))),
        ("cap 16".into(), Box::new(|| Box::new(CappedBurst(16)))),
    ];
    if let Some(w) = weights {
        let path = std::path::PathBuf::from(&w);
        DdqnScheduler::load(Path::new(&path))?;
        rules.push((
            format!("ddqn {w}"),
            Box::new(move || match DdqnScheduler::load(&path) {
                Ok(s) => Box::new(s),
                Err(e) => panic!("{e}"),
            }),
        ));
    }

    println!(
        "rho {rho}, {seeds} paired seeds from {}; decisions with d > 0: source / R1 / R4 / R16 per handoff",
        FINAL_SEED_BASE + first
    );
    let mut base: Vec<f64> = Vec::new();
    for (name, make) in &rules {
        let counts = Arc::new(std::sync::Mutex::new([0u64; 4]));
        let (mut util, mut repairs) = (Vec::new(), 0u64);
        for i in 0..seeds {
            let s = Counting {
                inner: make(),
                counts: counts.clone(),
            };
            let r = run_handoff(
                &sc,
                spec,
                Box::new(s),
                FINAL_SEED_BASE + first + i,
                RunOptions::default(),
            )?;
            util.push(r.report.recovered_utility);
            repairs += u64::from(r.sender.repair_sent);
        }
        let n = seeds as f64;
        let mean = util.iter().sum::<f64>() / n;
        let c = *counts.lock().map_err(|_| "poisoned")?;
        let per = |x: u64| x as f64 / n;
        let diff = if base.is_empty() {
            base = util.clone();
            String::from("(baseline)")
        } else {
            let d: Vec<f64> = util
                .iter()
                .zip(&base)
                .map(|(a, b)| 100.0 * (a - b))
                .collect();
            let (md, lo, hi) = edgemu_stats::mean_ci95(&d).ok_or("no seeds to compare")?;
            let better = d.iter().filter(|&&x| x > 0.0).count();
            let worse = d.iter().filter(|&&x| x < 0.0).count();
            format!(
                "{md:+.3} points [{:+.3}, {:+.3}], better on {better}, worse on {worse}",
                lo, hi
            )
        };
        println!(
            "{name:<20} {:.4}  {diff}; repairs {:.0}; d>0: {:.0} / {:.0} / {:.0} / {:.0}",
            mean,
            repairs as f64 / n,
            per(c[0]),
            per(c[1]),
            per(c[2]),
            per(c[3])
        );
    }
    Ok(())
}
