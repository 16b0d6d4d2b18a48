//! `edgemu bench …`: figures and ratios measured in one run (never pass/fail).

pub mod link;
pub mod mesh;
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
}
