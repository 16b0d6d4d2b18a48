//! The results folder of `edgemu experiment priorityfec` as it grows, context
//! by context, and how a stopped run is continued (`--resume DIR`).
//!
//! **Files.** At the start: `settings.json` (everything that decides the
//! figures — grid without the context count, rebuild mode, seeds, decode
//! length, the model's identity and file size, and the SHA-256 of the
//! KV-utility profile, the DDQN weights and the loss trace), `transport.csv`
//! (one row per transport run; it does not depend on the context) and the
//! header of `handoffs.csv`. After each finished context: its rows are
//! appended to `handoffs.csv` and synced, then one JSON line
//! ([`ContextDone`]) to `contexts.jsonl` and synced. A context counts as
//! finished only once its line is in `contexts.jsonl`, so stopping the process
//! at any point (Ctrl-C, a kill) loses at most the context in progress.
//!
//! **Resume.** `--resume DIR` recomputes the settings from the command line
//! and refuses to go on when any differs from `DIR/settings.json` (naming each
//! one), or when the recomputed `transport.csv` differs from the stored one;
//! the context count may grow (context `i` is the same whatever the count:
//! the evaluation set is a prefix, checked by each context's token digest).
//! Rows of a context without its `contexts.jsonl` line (a run stopped while
//! writing) are dropped, finished contexts are skipped, and the summary,
//! tables and plots are computed over every row in the file at the end — the
//! same files, byte for byte, as one uninterrupted run (tested).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::results::write_file;

/// Version of the folder layout below.
const FORMAT: &str = "edgemu-pfec-run/1";

/// Hex SHA-256 of a file's bytes.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(sha256_hex(&bytes))
}

/// Hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Hex SHA-256 of a token sequence (little-endian u32s).
pub fn tokens_sha256(tokens: &[u32]) -> String {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    sha256_hex(&bytes)
}

/// One finished context (a line of `contexts.jsonl`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContextDone {
    pub context: usize,
    /// SHA-256 of the context's tokens.
    pub tokens_sha256: String,
    /// Rows appended to `handoffs.csv`.
    pub rows: usize,
    /// Distinct incomplete outcomes scored.
    pub scored: usize,
    /// Wall and CPU seconds of the context (prefill, reference, scoring);
    /// CPU of the threads of the stream that scored it.
    pub wall_s: f64,
    pub cpu_s: f64,
}

/// A results folder being written.
pub struct RunDir {
    pub dir: PathBuf,
}

impl RunDir {
    fn settings_path(&self) -> PathBuf {
        self.dir.join("settings.json")
    }
    fn contexts_path(&self) -> PathBuf {
        self.dir.join("contexts.jsonl")
    }
    pub fn handoffs_path(&self) -> PathBuf {
        self.dir.join("handoffs.csv")
    }
    fn transport_path(&self) -> PathBuf {
        self.dir.join("transport.csv")
    }

    /// A new run in `dir`: refuses a folder that already holds one.
    pub fn start(
        dir: &Path,
        settings: &serde_json::Value,
        transport_csv: &str,
        handoffs_header: &str,
    ) -> Result<Self> {
        let rd = RunDir {
            dir: dir.to_path_buf(),
        };
        if rd.contexts_path().exists() || rd.settings_path().exists() {
            bail!(
                "{} already holds a PriorityFEC run: continue it with --resume {} or choose another --run-id",
                dir.display(),
                dir.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut s = settings.clone();
        s["format"] = FORMAT.into();
        write_file(
            &rd.settings_path(),
            serde_json::to_string_pretty(&s)?.as_bytes(),
        )?;
        write_file(&rd.transport_path(), transport_csv.as_bytes())?;
        write_file(
            &rd.handoffs_path(),
            format!("{}\n", handoffs_header.trim_end()).as_bytes(),
        )?;
        write_file(&rd.contexts_path(), b"")?;
        Ok(rd)
    }

    /// Continues the run in `dir` (module docs): checks the settings and the
    /// transport outcomes, drops rows of unfinished contexts, and returns the
    /// finished contexts.
    pub fn resume(
        dir: &Path,
        settings: &serde_json::Value,
        transport_csv: &str,
    ) -> Result<(Self, BTreeMap<usize, ContextDone>)> {
        let rd = RunDir {
            dir: dir.to_path_buf(),
        };
        let text = std::fs::read_to_string(rd.settings_path()).with_context(|| {
            format!(
                "--resume {}: reading {} (is it a PriorityFEC run folder?)",
                dir.display(),
                rd.settings_path().display()
            )
        })?;
        let stored: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("parsing {}", rd.settings_path().display()))?;
        if stored.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            bail!(
                "{}: format {:?}, expected {FORMAT:?}",
                rd.settings_path().display(),
                stored.get("format")
            );
        }
        let diffs = differences(&stored, settings);
        if !diffs.is_empty() {
            bail!(
                "--resume {}: the run's settings differ from this command's:\n  {}\n(run with the stored settings, or start a new run)",
                dir.display(),
                diffs.join("\n  ")
            );
        }
        let stored_transport = std::fs::read_to_string(rd.transport_path())
            .with_context(|| format!("reading {}", rd.transport_path().display()))?;
        if stored_transport != transport_csv {
            bail!(
                "--resume {}: the transport outcomes differ from the stored {} (another build of the schemes?); start a new run",
                dir.display(),
                rd.transport_path().display()
            );
        }
        let done = rd.finished()?;
        rd.drop_unfinished_rows(&done)?;
        Ok((rd, done))
    }

    /// The finished contexts in `contexts.jsonl`; a last line cut short by a
    /// stop is ignored.
    fn finished(&self) -> Result<BTreeMap<usize, ContextDone>> {
        let p = self.contexts_path();
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let mut done = BTreeMap::new();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<ContextDone>(line) {
                Ok(c) => {
                    done.insert(c.context, c);
                }
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => bail!("{}:{}: {e}", p.display(), i + 1),
            }
        }
        Ok(done)
    }

    /// Keeps the header and the rows of finished contexts of `handoffs.csv`.
    fn drop_unfinished_rows(&self, done: &BTreeMap<usize, ContextDone>) -> Result<()> {
        let p = self.handoffs_path();
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        let mut lines = text.lines();
        let header = lines.next().context("handoffs.csv has no header")?;
        let col = header
            .split(',')
            .position(|c| c == "context")
            .context("handoffs.csv has no context column")?;
        let mut out = format!("{header}\n");
        let mut kept: BTreeMap<usize, usize> = BTreeMap::new();
        for line in lines {
            let ci = line
                .split(',')
                .nth(col)
                .and_then(|c| c.parse::<usize>().ok());
            // A line cut short has too few fields or an unparsable context.
            if line.split(',').count() != header.split(',').count() {
                continue;
            }
            if let Some(ci) = ci.filter(|c| done.contains_key(c)) {
                *kept.entry(ci).or_default() += 1;
                out.push_str(line);
                out.push('\n');
            }
        }
        for (ci, d) in done {
            let have = kept.get(ci).copied().unwrap_or(0);
            if have != d.rows {
                bail!(
                    "{}: context {ci} is marked finished with {} rows but has {have}",
                    p.display(),
                    d.rows
                );
            }
        }
        if out != text {
            write_file(&p, out.as_bytes())?;
        }
        Ok(())
    }

    /// Appends a finished context: its `handoffs.csv` lines (no header), then
    /// its `contexts.jsonl` line, each synced to disk.
    pub fn append_context(&self, csv_lines: &str, done: &ContextDone) -> Result<()> {
        append_synced(&self.handoffs_path(), csv_lines.as_bytes())?;
        let mut line = serde_json::to_string(done)?;
        line.push('\n');
        append_synced(&self.contexts_path(), line.as_bytes())
    }

    /// Every finished context so far.
    pub fn contexts_done(&self) -> Result<BTreeMap<usize, ContextDone>> {
        self.finished()
    }
}

fn append_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_data())
        .with_context(|| format!("appending to {}", path.display()))
}

/// `key: stored X, now Y` for every top-level key that differs (`format` aside).
fn differences(stored: &serde_json::Value, now: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", stored, now, &mut out);
    out
}

/// Differences of two settings objects, named by dotted path (`grid.k`) so
/// that a nested setting is named rather than its whole object printed.
fn diff_into(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        if a != b {
            out.push(format!("{path}: stored {a}, now {b}"));
        }
        return;
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if path.is_empty() && k.as_str() == "format" {
            continue;
        }
        let name = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) => diff_into(&name, x, y, out),
            (x, y) if x != y => {
                let show = |v: Option<&serde_json::Value>| {
                    v.map_or("(absent)".to_string(), |v| v.to_string())
                };
                out.push(format!("{name}: stored {}, now {}", show(x), show(y)));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("edgemu-pfec-run-{name}-{}", std::process::id()))
    }

    #[test]
    fn resume_checks_settings_and_drops_unfinished_rows() {
        let dir = tmp("unit");
        let _ = std::fs::remove_dir_all(&dir);
        let settings = serde_json::json!({"mode": "zero-fill", "weights_sha256": "aa"});
        let rd = RunDir::start(&dir, &settings, "t\n1\n", "context,x").unwrap();
        let done0 = ContextDone {
            context: 0,
            tokens_sha256: "h0".into(),
            rows: 2,
            scored: 1,
            wall_s: 1.0,
            cpu_s: 1.0,
        };
        rd.append_context("0,1\n0,2\n", &done0).unwrap();
        // Context 1 stopped half-written: rows, no line, a torn last row.
        append_synced(&rd.handoffs_path(), b"1,5\n1").unwrap();
        assert!(
            RunDir::start(&dir, &settings, "t\n1\n", "context,x").is_err(),
            "a second start in the same folder"
        );
        let other = serde_json::json!({"mode": "zero-fill", "weights_sha256": "bb"});
        let e = format!(
            "{:#}",
            RunDir::resume(&dir, &other, "t\n1\n").err().unwrap()
        );
        assert!(
            e.contains("weights_sha256: stored \"aa\", now \"bb\""),
            "{e}"
        );
        let e = format!(
            "{:#}",
            RunDir::resume(&dir, &settings, "t\n2\n").err().unwrap()
        );
        assert!(e.contains("transport"), "{e}");
        let (rd, done) = RunDir::resume(&dir, &settings, "t\n1\n").unwrap();
        assert_eq!(done.into_values().collect::<Vec<_>>(), vec![done0]);
        let text = std::fs::read_to_string(rd.handoffs_path()).unwrap();
        assert_eq!(text, "context,x\n0,1\n0,2\n");
        let t = crate::report::csv::Table::parse(&rd.handoffs_path(), &text).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[1][t.col("x").unwrap()], "2");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
