//! placeholder
use anyhow::Result;
pub fn run(_a: &super::BenchArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
