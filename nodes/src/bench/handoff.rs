//! `edgemu bench handoff`: PriorityFEC's online computation (paper Table II).
//!
//! Runs `priorityfec` handoffs with the component timers of
//! [`edgemu_handoff::timing`] at the paper's main setting (100 Mb/s, 20 ms
//! RTT, GE (0.001, 0.5, 0.02, 0.1), SmolLM2 layout with 2 880 blocks and the
//! placeholder utilities) at ρ = 0.8 and 1.0 over paired seeds, with the
//! shipped weights `policies/weights/repair-ddqn.safetensors` (built in; or
//! `--weights`), and reports per 1 000 transmitted packets (source + repair)
//! the ms spent in state construction and feedback processing, DDQN
//! inference, RLC encoding and the receiver's decoding, and the decision
//! latency (state construction to scheduling output) mean and P99 in µs.
//! Wall-clock figures: build with `--release`. `--quick` runs one small
//! handoff (for the smoke test).

use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Args;
use edgemu_assets::Asset;
use edgemu_handoff::timing::CoreTimers;
use edgemu_handoff::{
    placeholder_utilities, run_handoff_timed, scheme, synthetic_payload, BlockLayout,
    HandoffScenario, RunOptions,
};
use edgemu_policies::repair::ddqn::{DdqnNet, DdqnScheduler};
use edgemu_policies::shipped::parse_weights;
use serde_json::json;

/// The paper's Table II (Qwen2.5-7B, ρ = 0.8): ms per 1k packets and µs.
pub const PAPER: [(&str, f64); 6] = [
    ("state_ms_per_1k", 9.42),
    ("rl_ms_per_1k", 3.41),
    ("enc_ms_per_1k", 10.31),
    ("dec_ms_per_1k", 7.19),
    ("decision_us_mean", 75.98),
    ("decision_us_p99", 94.35),
];

#[derive(Args, Debug, Clone)]
pub struct HandoffBenchArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// One small handoff (smoke test; figures are not the paper's setting).
    #[arg(long)]
    pub quick: bool,
    /// DDQN weights: a file, or the shipped ones built in
    /// (`built-in:repair-ddqn`).
    #[arg(long, default_value = crate::experiment::priorityfec::DEFAULT_WEIGHTS, value_parser = parse_weights)]
    pub weights: Asset,
    /// Paired realizations per ρ.
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
}

/// Runs the benchmark and returns the JSON object `--json` prints.
pub fn report(args: &HandoffBenchArgs) -> Result<serde_json::Value> {
    let label = args.weights.label();
    let net = DdqnNet::from_source(&args.weights)
        .with_context(|| format!("loading {}", label.display()))?;
    let layout = if args.quick {
        BlockLayout::new(3, 160, 16, 12_288)?
    } else {
        BlockLayout::smollm2(1536)?
    };
    let utilities: Arc<[f64]> = placeholder_utilities(&layout).into();
    let payload = synthetic_payload(&layout, 1);
    let (rhos, seeds): (&[f64], u64) = if args.quick {
        (&[0.8], 1)
    } else {
        (&[0.8, 1.0], args.seeds.max(1))
    };
    let spec = scheme("priorityfec")?;
    let mut timers = CoreTimers::default();
    let (mut packets, mut handoffs, mut utility) = (0u64, 0u64, 0.0);
    for &rho in rhos {
        let sc = HandoffScenario::paper(layout, Arc::clone(&utilities), Arc::clone(&payload), rho);
        for seed in 0..seeds {
            let sched = Box::new(DdqnScheduler::new(net.clone()));
            let (run, t) = run_handoff_timed(
                &sc,
                spec,
                spec.scheduler(Some(sched))?,
                seed,
                RunOptions::default(),
            )?;
            packets += u64::from(run.sender.source_sent + run.sender.repair_sent);
            utility += run.report.recovered_utility;
            handoffs += 1;
            timers.add(&t);
        }
    }
    let per_1k = |ns: u64| ns as f64 / 1e6 / (packets.max(1) as f64 / 1000.0);
    let mut d = timers.decision_ns.clone();
    d.sort_unstable();
    let mean_us = if d.is_empty() {
        0.0
    } else {
        d.iter().sum::<u64>() as f64 / d.len() as f64 / 1e3
    };
    let sorted: Vec<f64> = d.iter().map(|&v| v as f64).collect();
    let p99_us = edgemu_stats::percentile(&sorted, 99.0).map_or(0.0, |v| v / 1e3);
    Ok(json!({
        "state_ms_per_1k": per_1k(timers.state_ns),
        "rl_ms_per_1k": per_1k(timers.rl_ns),
        "enc_ms_per_1k": per_1k(timers.enc_ns),
        "dec_ms_per_1k": per_1k(timers.dec_ns),
        "decision_us_mean": mean_us,
        "decision_us_p99": p99_us,
        "packets": packets,
        "decisions": d.len(),
        "handoffs": handoffs,
        "rhos": rhos,
        "mean_recovered_utility": utility / handoffs.max(1) as f64,
        "weights": label.display().to_string(),
    }))
}

/// Prints the table (next to the paper's figures) or the JSON object.
pub fn run(args: &HandoffBenchArgs) -> Result<()> {
    let v = report(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = PAPER
        .iter()
        .map(|(k, paper)| {
            let ours = v.get(*k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            vec![
                (*k).to_string(),
                format!("{ours:.3}"),
                format!("{paper:.2}"),
            ]
        })
        .collect();
    print!(
        "{}",
        crate::results::render(&["figure", "edgemu", "paper (Table II, rho 0.8)"], &rows)
    );
    println!(
        "{} handoffs, {} packets, {} decisions, mean recovered utility {:.4}; weights {}",
        v["handoffs"],
        v["packets"],
        v["decisions"],
        v["mean_recovered_utility"].as_f64().unwrap_or(0.0),
        v["weights"]
    );
    Ok(())
}
