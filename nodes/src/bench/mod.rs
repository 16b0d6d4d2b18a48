//! `edgemu bench …`: figures and ratios measured in one run (never pass/fail).
//!
//! Each benchmark has a `report(&BenchArgs) -> serde_json::Value` (the
//! object `--json` prints) and a `run` that prints a table or that object.

pub mod attach;
pub mod common;
pub mod control;
pub mod dashboard;
pub mod decode;
pub mod gateway;
pub mod handoff;
pub mod hostile;
pub mod link;
pub mod mesh;
pub mod scale;
pub mod scale_hosts;
pub mod virtual_time;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Shorter runs (for smoke tests; figures are noisier).
    #[arg(long)]
    pub quick: bool,
    /// Skip cases that start other `edgemu` processes (for callers that
    /// are not the `edgemu` binary, like tests).
    #[arg(skip)]
    pub in_process_only: bool,
}

/// `edgemu bench fec`: the codec crate's benchmark, printed.
pub fn fec(args: &BenchArgs) -> anyhow::Result<()> {
    // The paper's GE channel from the links crate (the one loss model).
    use rand::SeedableRng;
    let mut ge = edgemu_links::paper_channel::GE;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let report = edgemu_codec::fec::run_fec_bench(
        &edgemu_codec::fec::FecBenchOptions { quick: args.quick },
        &mut || ge.lose(&mut rng),
    );
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
