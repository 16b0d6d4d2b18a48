//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fresh temporary folder under the target dir (kept for inspection).
pub fn temp_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p
}

/// Parses probes.csv into (kind, flow, at, seq, size, sent_ns, due_ns, recv_ns).
pub struct ProbeRow {
    pub kind: String,
    pub flow: String,
    pub seq: u64,
    pub recv_ns: u64,
}

pub fn probes(path: &Path) -> Vec<ProbeRow> {
    let text = std::fs::read_to_string(path).expect("read probes.csv");
    text.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            ProbeRow {
                kind: c[0].to_string(),
                flow: c[1].to_string(),
                seq: c[3].parse().expect("seq"),
                recv_ns: c[7].parse().expect("recv_ns"),
            }
        })
        .collect()
}

/// All files under `dir`, relative, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("prefix").to_path_buf());
            }
        }
    }
    out.sort();
    out
}
