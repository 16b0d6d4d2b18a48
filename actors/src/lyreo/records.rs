//! CSV tables the LYREO actors and the agents write into their host's
//! results folder, one row per line. Rows are buffered (no system call per
//! row while the host's actors run); the host's supervisor flushes every
//! table each sample period and at the end of the run, also one stopped by
//! Ctrl-C or SIGTERM, after the actors' last rows (unanswered requests).
//! Each row goes into the buffer as one piece, so a flush never splits one.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A CSV file shared by the actors of one host (`requests.csv`, …).
#[derive(Clone)]
pub struct CsvTable {
    out: Option<Arc<Mutex<BufWriter<File>>>>,
}

impl CsvTable {
    pub const REQUESTS: &'static str = "requests.csv";
    pub const REQUESTS_HEADER: &'static str = "slot,id,user,server,policy,policy_version,input_len,output_len,outcome,sched_s,upload_s,wait_s,prefill_s,decode_s,e2e_s,reason";
    pub const SERVER_SLOTS: &'static str = "server_slots.csv";
    pub const SERVER_SLOTS_HEADER: &'static str = "slot,server,gpu,backend,assigned,lost_uploads,eta,peak_bytes,high_kv,occupancy_bytes,backlog,iterations,busy_s";
    pub const DECISIONS: &'static str = "decisions.csv";
    pub const DECISIONS_HEADER: &'static str =
        "slot,id,user,server,policy,policy_version,rate_bps,upload_s,z";

    /// Creates (or, when another actor of the host made it already, opens)
    /// `dir/name`, writing `header` once.
    pub fn open(dir: &Path, name: &str, header: &str) -> std::io::Result<CsvTable> {
        let path = dir.join(name);
        let fresh = !path.exists();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let mut out = BufWriter::new(f);
        if fresh {
            writeln!(out, "{header}")?;
            out.flush()?;
        }
        Ok(CsvTable {
            out: Some(Arc::new(Mutex::new(out))),
        })
    }

    /// A table that keeps nothing (no results folder).
    pub fn discard() -> CsvTable {
        CsvTable { out: None }
    }

    /// Appends one line (buffered); a write error is logged, not fatal (the
    /// run goes on).
    pub fn row(&self, line: &str) {
        let Some(out) = &self.out else { return };
        let Ok(mut out) = out.lock() else { return };
        let mut text = String::with_capacity(line.len() + 1);
        text.push_str(line);
        text.push('\n');
        if let Err(e) = out.write_all(text.as_bytes()) {
            tracing::warn!(error = %e, "writing a results row");
        }
    }

    /// Appends several lines at once (`text`: whole lines, each ending in a
    /// newline), as one piece; buffered like [`CsvTable::row`].
    pub fn rows(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        let Some(out) = &self.out else { return };
        let Ok(mut out) = out.lock() else { return };
        if let Err(e) = out.write_all(text.as_bytes()) {
            tracing::warn!(error = %e, "writing results rows");
        }
    }

    /// Writes the buffered rows to the file.
    pub fn flush(&self) {
        let Some(out) = &self.out else { return };
        let Ok(mut out) = out.lock() else { return };
        if let Err(e) = out.flush() {
            tracing::warn!(error = %e, "flushing a results table");
        }
    }
}

/// Nanoseconds as seconds with 6 decimals.
pub fn secs(ns: u64) -> String {
    format!("{:.6}", ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_buffered_until_flushed_and_arrive_whole() {
        let dir = std::env::temp_dir().join(format!("edgemu-csvtable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join("t.csv"));
        let a = CsvTable::open(&dir, "t.csv", "x,y").unwrap();
        let b = a.clone();
        a.row("1,2");
        let long = "3,".to_string() + &"4".repeat(10_000);
        b.row(&long);
        b.row("5,6");
        a.rows("7,8\n9,10\n");
        a.rows("");
        let read = || std::fs::read_to_string(dir.join("t.csv")).unwrap();
        assert!(!read().contains("5,6"), "no write per row");
        a.flush();
        let text = read();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["x,y", "1,2", long.as_str(), "5,6", "7,8", "9,10"]);
        // Reopened (another actor of the host): no second header.
        CsvTable::open(&dir, "t.csv", "x,y").unwrap().flush();
        assert_eq!(read().lines().count(), 6);
        CsvTable::discard().row("ignored");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
