//! `<host>/external_policies.csv`: one row per decider (a scheduler, an
//! agent) that used an external policy during the run, written at the end
//! from the deciders' counters, and the summary table built from every
//! host's file (docs/external-policy.md).

use crate::report::csv::Table as Csv;
use edgemu_actors::external::book::ExternalStats;
use std::collections::BTreeMap;
use std::path::Path;

pub const EXTERNAL_POLICIES: &str = "external_policies.csv";

pub const HEADER: &str = "actor,problem,url,decisions,asked,answered,timeout,error,malformed,disconnected,late,connects,rtt_count,rtt_p50_ms,rtt_p99_ms,rtt_max_ms,rtt_mean_ms";

fn ms(us: u64) -> String {
    format!("{:.3}", us as f64 / 1e3)
}

/// The file's text (header and one line per decider).
pub fn csv(stats: &BTreeMap<String, ExternalStats>) -> String {
    let mut out = String::from(HEADER);
    out.push('\n');
    for (actor, s) in stats {
        let mean = s.rtt_sum_us.checked_div(s.rtt_count).unwrap_or(0);
        out.push_str(&format!(
            "{actor},{},\"{}\",{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            s.problem,
            s.url.replace('"', "\"\""),
            s.decisions,
            s.asked,
            s.answered,
            s.timeout,
            s.error,
            s.malformed,
            s.disconnected,
            s.late,
            s.connects,
            s.rtt_count,
            ms(s.rtt_p50_us),
            ms(s.rtt_p99_us),
            ms(s.rtt_max_us),
            ms(mean),
        ));
    }
    out
}

/// Writes `dir/external_policies.csv` when any decider used an external policy.
pub fn write(dir: &Path, stats: &BTreeMap<String, ExternalStats>) -> anyhow::Result<()> {
    if stats.is_empty() {
        return Ok(());
    }
    super::write_file(&dir.join(EXTERNAL_POLICIES), csv(stats).as_bytes())
}

/// One row per decider of every host's file.
pub fn table(files: &[Csv]) -> Result<super::SummaryTable, String> {
    const COLS: [&str; 12] = [
        "actor",
        "problem",
        "decisions",
        "answered",
        "timeout",
        "error",
        "malformed",
        "disconnected",
        "late",
        "rtt_p50_ms",
        "rtt_p99_ms",
        "rtt_max_ms",
    ];
    let mut rows = Vec::new();
    for t in files {
        let idx: Vec<usize> = COLS
            .iter()
            .map(|c| t.col(c).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        for r in &t.rows {
            rows.push(idx.iter().map(|&i| r[i].clone()).collect());
        }
    }
    Ok(super::SummaryTable::new(
        "external_policies",
        "External policies, one row per decider: decisions taken while external, answered by the policy process within the deadline, decided by the fallback (by reason), replies after the deadline (late), and the round trip of the replies in time (ms):",
        &[
            "actor",
            "problem",
            "decisions",
            "answered",
            "timeout",
            "error",
            "malformed",
            "disconnected",
            "late",
            "rtt p50",
            "rtt p99",
            "rtt max",
        ],
        rows,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_actors::external::book::DecisionBook;

    #[test]
    fn the_file_reads_back_into_the_summary_table() {
        let mut b = DecisionBook::new("repair");
        let id = b.ask(0);
        let _ = b.on_frame(1_500_000, &format!(r#"{{"id":{id},"action":0}}"#));
        b.accept(id);
        let id = b.ask(10_000_000);
        b.expire(id);
        let mut s = b.snapshot();
        s.url = "ws://127.0.0.1:7301/a,b".into();
        let stats: BTreeMap<String, ExternalStats> = [("agent-a".to_string(), s)].into();
        let dir = std::env::temp_dir().join(format!("edgemu-ext-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, &stats).unwrap();
        let t = Csv::read(&dir.join(EXTERNAL_POLICIES)).unwrap();
        assert!(t.skipped.is_empty(), "{:?}", t.skipped);
        let table = table(&[t]).unwrap();
        assert_eq!(table.column("actor"), ["agent-a"]);
        assert_eq!(table.column("answered"), ["1"]);
        assert_eq!(table.column("timeout"), ["1"]);
        assert_eq!(table.column("rtt p50"), ["1.500"]);
        let _ = std::fs::remove_dir_all(&dir);
        // Nothing used: no file.
        let empty = std::env::temp_dir().join(format!("edgemu-ext-none-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        write(&empty, &BTreeMap::new()).unwrap();
        assert!(!empty.join(EXTERNAL_POLICIES).exists());
        let _ = std::fs::remove_dir_all(&empty);
    }
}
