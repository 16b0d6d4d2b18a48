//! The reader of a run's `<host>/events.jsonl` files, shared by the link charts (spans of
//! `link.kill` … `link.restore`) and the end-of-run events table. A line that is not JSON
//! or lacks `t_ns` / `kind` (a truncated last line of a run in progress) is skipped and
//! reported, never a panic.

use std::path::{Path, PathBuf};

/// One line of `events.jsonl`.
#[derive(Debug, Clone)]
pub struct EventLine {
    pub t_ns: u64,
    pub host: String,
    /// Who caused it: `control`, `chaos#N`, `mesh`, `run`, an actor.
    pub source: String,
    pub kind: String,
    pub detail: serde_json::Value,
}

impl EventLine {
    /// The link and direction the event is about, if any: link actors write
    /// `{"link", "dir"}`, control and chaos `{"target": "link NAME DIR"}`.
    pub fn link(&self) -> (Option<String>, Option<String>) {
        let mut link = self.detail["link"].as_str().map(str::to_string);
        let mut dir = self.detail["dir"].as_str().map(str::to_string);
        if let Some(target) = self.detail["target"].as_str() {
            let mut parts = target.split_whitespace();
            if parts.next() == Some("link") {
                link = link.or_else(|| parts.next().map(str::to_string));
                dir = dir.or_else(|| parts.next().map(str::to_string));
            }
        }
        (link, dir)
    }
}

/// Every event of the given host folders (each one's `events.jsonl`), sorted by time
/// (stable: one host's order is kept for equal times), and what was skipped.
pub fn read_events(hosts: &[PathBuf]) -> (Vec<EventLine>, Vec<String>) {
    let mut evs = Vec::new();
    let mut skipped = Vec::new();
    for h in hosts {
        read_one(&h.join("events.jsonl"), &mut evs, &mut skipped);
    }
    evs.sort_by_key(|e| e.t_ns);
    (evs, skipped)
}

fn read_one(path: &Path, evs: &mut Vec<EventLine>, skipped: &mut Vec<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        skipped.push(format!(
            "{}: missing or unreadable (no events from this host)",
            path.display()
        ));
        return;
    };
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            skipped.push(format!(
                "{} line {}: not JSON (truncated?)",
                path.display(),
                i + 1
            ));
            continue;
        };
        let (Some(t_ns), Some(kind)) = (v["t_ns"].as_u64(), v["kind"].as_str()) else {
            skipped.push(format!("{} line {}: no t_ns/kind", path.display(), i + 1));
            continue;
        };
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        evs.push(EventLine {
            t_ns,
            host: text("host"),
            source: text("source"),
            kind: kind.to_string(),
            detail: v["detail"].clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sorts_and_skips_damaged_lines() {
        let dir = std::env::temp_dir().join(format!("edgemu-events-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(
            a.join("events.jsonl"),
            "{\"t_ns\":5,\"host\":\"a\",\"source\":\"chaos#0\",\"kind\":\"link.kill\",\"detail\":{\"target\":\"link wan ab\"}}\n{\"t_ns\":",
        )
        .unwrap();
        std::fs::write(
            b.join("events.jsonl"),
            "{\"t_ns\":1,\"host\":\"b\",\"source\":\"run\",\"kind\":\"run.start\",\"detail\":{}}\n{\"x\":1}\n",
        )
        .unwrap();
        let (evs, skipped) = read_events(&[a, b, dir.join("none")]);
        assert_eq!(
            evs.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            ["run.start", "link.kill"]
        );
        assert_eq!(evs[1].link(), (Some("wan".into()), Some("ab".into())));
        assert_eq!(evs[1].source, "chaos#0");
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
