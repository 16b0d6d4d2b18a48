//! CSV tables the LYREO actors write into their host's results folder, one
//! row per line, flushed as written so nothing is lost on Ctrl-C.

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

    /// Appends one line; a write error is logged, not fatal (the run goes on).
    pub fn row(&self, line: &str) {
        let Some(out) = &self.out else { return };
        let Ok(mut out) = out.lock() else { return };
        if let Err(e) = writeln!(out, "{line}").and_then(|_| out.flush()) {
            tracing::warn!(error = %e, "writing a LYREO results row");
        }
    }
}

/// Nanoseconds as seconds with 6 decimals.
pub fn secs(ns: u64) -> String {
    format!("{:.6}", ns as f64 / 1e9)
}
