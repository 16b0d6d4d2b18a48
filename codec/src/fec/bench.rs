//! placeholder
pub struct FecBenchOptions { pub quick: bool }
pub struct FecBenchReport;
pub struct KernelFigures;
pub fn run_fec_bench(_o: &FecBenchOptions) -> FecBenchReport { FecBenchReport }
