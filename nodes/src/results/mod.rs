//! The results folder of a run: `results/<run-id>/`.
//!
//! ```text
//! results/<run-id>/
//!   config.toml        the cluster file as given
//!   run.json           resolved run facts: seed, time mode, git revision, hosts
//!   summary.json       all hosts of this process (written by `edgemu run`)
//!   <host>/events.jsonl   every control, chaos and mesh event, with its time
//!   <host>/links.csv      per-sample counters of each link direction it owns
//!   <host>/probes.csv     every probe packet and ping round trip it recorded
//!   <host>/summary.json   final link counters, flow summaries, router counters
//! ```
//! Files are written as the run goes and flushed every sample period and at
//! exit (also on Ctrl-C / SIGTERM), so a stopped run keeps what it measured.
//! In virtual time nothing wall-clock-dependent goes into these files, so the
//! same file and seed give byte-identical results.

mod table;
mod writers;

pub use table::{flow_table, link_table, render, render_csv, render_markdown, LinkRow};
pub use writers::{HostResults, JsonlEvents, LinksCsv, ProbesCsv, SharedEvents};

use anyhow::{Context as _, Result};
use edgemu_config::Cluster;
use std::path::{Path, PathBuf};

/// `<name>-<YYYYmmdd-HHMMSS>` from the run's start time (UTC), so every host
/// of a run derives the same id from the coordinator's start announcement.
pub fn run_id(name: &str, start_unix_ns: u64) -> String {
    let secs = start_unix_ns / 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{name}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) — H. Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Creates `results/<run-id>/` with `config.toml` and `run.json`.
pub fn create_run_dir(
    cluster: &Cluster,
    run_id: &str,
    facts: serde_json::Value,
) -> Result<PathBuf> {
    let dir = cluster.run.results_dir.join(run_id);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating results folder {}", dir.display()))?;
    let text = std::fs::read_to_string(&cluster.source)
        .with_context(|| format!("reading {}", cluster.source.display()))?;
    write_file(&dir.join("config.toml"), text.as_bytes())?;
    let json = serde_json::to_string_pretty(&facts)?;
    write_file(&dir.join("run.json"), json.as_bytes())?;
    Ok(dir)
}

/// Writes through a temporary file and a rename, so a reader (or another
/// host sharing the folder) never sees a partial file.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}-{n}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// The git revision of the working tree the binary runs in, if any.
pub fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_formats_utc_date() {
        // 2026-12-02 13:33:46 UTC
        assert_eq!(run_id("x", 1_796_218_426_000_000_000), "x-20261202-133346");
        assert_eq!(run_id("y", 0), "y-19700101-000000");
    }
}
