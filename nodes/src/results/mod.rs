//! The results folder of a run: `results/<run-id>/`.
//!
//! ```text
//! results/<run-id>/
//!   config.toml        the cluster file as given
//!   run.json           resolved run facts: seed, time mode, git revision, hosts
//!   summary.json       all hosts of this process and the end-of-run tables (`edgemu run`)
//!   summary.md         the end-of-run tables ([`summary`]) as Markdown (`edgemu run`)
//!   <host>/events.jsonl   every control, chaos and mesh event, with its time
//!   <host>/links.csv      per-sample counters of each link direction it owns
//!   <host>/probes.csv     every probe packet and ping round trip it recorded
//!   <host>/summary.json   final link counters, flow summaries, router counters
//!   <host>/external_policies.csv  per decider that used an external policy:
//!                          decisions, answered, fallbacks by reason, round trips
//! ```
//! Files are written as the run goes and flushed every sample period and at
//! exit (also on Ctrl-C / SIGTERM), so a stopped run keeps what it measured.
//! In virtual time nothing wall-clock-dependent goes into these files, so the
//! same file and seed give byte-identical results.

pub mod external;
pub mod summary;
mod table;
mod writers;

pub use summary::{RunTables, SummaryTable};
pub use table::{flow_table, link_cells, link_table, render, render_csv, render_markdown, LinkRow};
pub use writers::{HostResults, JsonlEvents, LinksCsv, ProbesCsv, SharedEvents};

use anyhow::{Context as _, Result};
use edgemu_config::Cluster;
use std::path::{Path, PathBuf};

/// `<name>-<YYYYmmdd-HHMMSS.mmm>-<xxxx>` from the run's start time (UTC):
/// millisecond time plus four hex digits hashed from the start's full
/// nanoseconds, so every host of a run derives the same id from the
/// coordinator's start announcement while two runs started in the same
/// second (or millisecond) get different ids.
pub fn run_id(name: &str, start_unix_ns: u64) -> String {
    let secs = start_unix_ns / 1_000_000_000;
    let millis = (start_unix_ns / 1_000_000) % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{name}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}.{millis:03}-{:04x}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        suffix(start_unix_ns)
    )
}

/// 16 bits of a SplitMix64 hash of the start time (every bit of it counts).
fn suffix(start_unix_ns: u64) -> u16 {
    let mut z = start_unix_ns.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 48) as u16
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

/// Creates `results/<run-id>/` with `config.toml` and `run.json`; never
/// writes into a folder of another run.
///
/// The folder is prepared under a temporary name and renamed into place,
/// which fails when `<run-id>/` exists. An existing folder is joined only
/// when its `run.json` holds exactly these `facts` (another host of the same
/// run sharing the results folder: same config digest and start time);
/// anything else is an error, so a second run never replaces a first.
pub fn create_run_dir(
    cluster: &Cluster,
    run_id: &str,
    facts: serde_json::Value,
) -> Result<PathBuf> {
    let root = &cluster.run.results_dir;
    std::fs::create_dir_all(root)
        .with_context(|| format!("creating results folder {}", root.display()))?;
    let dir = root.join(run_id);
    let json = serde_json::to_string_pretty(&facts)?;
    if dir.exists() {
        return join_existing(&dir, &facts);
    }
    let tmp = root.join(format!(
        ".{run_id}.tmp-{}-{}",
        std::process::id(),
        next_seq()
    ));
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let text = std::fs::read_to_string(&cluster.source)
        .with_context(|| format!("reading {}", cluster.source.display()))?;
    write_file(&tmp.join("config.toml"), text.as_bytes())?;
    write_file(&tmp.join("run.json"), json.as_bytes())?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        Err(_) if dir.exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            join_existing(&dir, &facts)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e).with_context(|| format!("renaming {} to {}", tmp.display(), dir.display()))
        }
    }
}

fn join_existing(dir: &Path, facts: &serde_json::Value) -> Result<PathBuf> {
    let path = dir.join("run.json");
    let theirs: Option<serde_json::Value> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if theirs.as_ref() == Some(facts) {
        return Ok(dir.to_path_buf());
    }
    anyhow::bail!(
        "results folder {} already exists and belongs to another run; refusing to write into it (choose another --run-id or remove it)",
        dir.display()
    )
}

fn next_seq() -> u64 {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Writes through a temporary file and a rename, so a reader (or another
/// host sharing the folder) never sees a partial file.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let n = next_seq();
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
        // 2026-12-02 13:33:46.250 UTC
        let id = run_id("x", 1_796_218_426_250_000_000);
        assert!(id.starts_with("x-20261202-133346.250-"), "{id}");
        assert_eq!(id.len(), "x-20261202-133346.250-".len() + 4);
        assert!(run_id("y", 0).starts_with("y-19700101-000000.000-"));
    }

    #[test]
    fn runs_in_the_same_second_get_different_ids() {
        let a = run_id("r", 1_796_218_426_000_000_000);
        let b = run_id("r", 1_796_218_426_000_000_001);
        let c = run_id("r", 1_796_218_426_400_000_000);
        assert_ne!(a, b);
        assert_ne!(a, c);
        // Every host derives the same id from the same start.
        assert_eq!(a, run_id("r", 1_796_218_426_000_000_000));
    }

    fn cluster_in(dir: &Path) -> Cluster {
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "[run]\nduration = \"1s\"\n[[hosts]]\nname = \"a\"\nlisten = \"127.0.0.1:7101\"\n",
        )
        .unwrap();
        edgemu_config::Cluster::load(&file).unwrap()
    }

    #[test]
    fn an_existing_folder_of_another_run_is_refused() {
        let tmp = std::env::temp_dir().join(format!(
            "edgemu-run-dir-{}-{}",
            std::process::id(),
            next_seq()
        ));
        std::fs::create_dir_all(&tmp).unwrap();
        let c = cluster_in(&tmp);
        let first = serde_json::json!({ "start_unix_ns": 1 });
        let dir = create_run_dir(&c, "same", first.clone()).unwrap();
        std::fs::write(dir.join("marker"), "first").unwrap();
        // Another run with the same id: refused, the first run untouched.
        let err = create_run_dir(&c, "same", serde_json::json!({ "start_unix_ns": 2 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("already exists"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("marker")).unwrap(),
            "first"
        );
        // Another host of the same run joins it.
        assert_eq!(create_run_dir(&c, "same", first).unwrap(), dir);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
