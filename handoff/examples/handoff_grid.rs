//! Transport-only grid at the paper's main setting (100 Mb/s, 20 ms RTT,
//! GE (0.001, 0.5, 0.02, 0.1)), ρ ∈ {0.6, 0.8, 1.0, 1.2}, SmolLM2's layout
//! (1 536 tokens → 2 880 blocks) with the placeholder utility profile of
//! `blocks::placeholder_utilities`, every built-in scheme, `SEEDS` paired
//! realizations. Prints mean recovered utility per scheme and ρ and the wall
//! time of the grid.
//!
//!     cargo run --release -p edgemu-handoff --example handoff_grid [SEEDS]

use std::sync::Arc;
use std::time::Instant;

use edgemu_handoff::scheme::builtin_schemes;
use edgemu_handoff::{
    placeholder_utilities, run_handoff, synthetic_payload, BlockLayout, HandoffScenario, RunOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seeds: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 5,
    };
    let layout = BlockLayout::smollm2(1536)?;
    let utilities: Arc<[f64]> = placeholder_utilities(&layout).into();
    let payload = synthetic_payload(&layout, 1);
    let rhos = [0.6, 0.8, 1.0, 1.2];
    let schemes: Vec<_> = builtin_schemes().collect();
    let start = Instant::now();
    println!(
        "{:<20} {}",
        "scheme",
        rhos.map(|r| format!("rho={r:<5}")).join(" ")
    );
    let mut handoffs = 0;
    for spec in &schemes {
        let mut row = Vec::new();
        for &rho in &rhos {
            let sc =
                HandoffScenario::paper(layout, Arc::clone(&utilities), Arc::clone(&payload), rho);
            let mut sum = 0.0;
            let mut repairs = 0u64;
            for seed in 0..seeds {
                let run = run_handoff(
                    &sc,
                    spec,
                    spec.scheduler(None)?,
                    seed,
                    RunOptions::default(),
                )?;
                sum += run.report.recovered_utility;
                repairs += u64::from(run.sender.repair_sent);
                handoffs += 1;
            }
            row.push(format!(
                "{:>6.2}% r{:<5}",
                100.0 * sum / seeds as f64,
                repairs / seeds
            ));
        }
        println!("{:<20} {}", spec.name, row.join(" "));
    }
    println!(
        "{handoffs} handoffs in {:.1} s (recovered utility %, r = mean repair packets)",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
