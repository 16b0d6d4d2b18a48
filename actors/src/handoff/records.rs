//! `handoffs.csv`: one row per handoff, written by the receiving agent.

use crate::lyreo::records::CsvTable;

pub const HANDOFFS: &str = "handoffs.csv";

/// The columns of `handoffs.csv` (documented in docs/cluster-toml.md).
pub const HANDOFFS_HEADER: &str = "handoff,from,to,scheme,policy,policy_version,context,rho,deadline_ns,start_ns,bytes,source_packets,source_sent,repair_sent,packets_received,repairs_received,recovered_utility,blocks_complete,n_blocks,decoded_prefix,ttft_ms,tokens_decoded,agreement,sender_cache_hit,outcome,text";

/// One handoff as recorded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandoffRecord {
    pub handoff: u32,
    pub from: String,
    pub to: String,
    pub scheme: String,
    pub policy: String,
    pub policy_version: String,
    pub context: String,
    pub rho: f64,
    pub deadline_ns: u64,
    pub start_ns: u64,
    pub bytes: u64,
    pub source_packets: u32,
    /// From the sender's last counters (`None`: not known when recorded).
    pub source_sent: Option<u32>,
    pub repair_sent: Option<u32>,
    pub packets_received: u32,
    pub repairs_received: u32,
    pub recovered_utility: f64,
    pub blocks_complete: u32,
    pub n_blocks: u32,
    pub decoded_prefix: u32,
    pub ttft_ms: Option<f64>,
    pub tokens_decoded: u32,
    pub agreement: Option<f64>,
    pub sender_cache_hit: bool,
    /// `ok` or `aborted:<reason>`.
    pub outcome: String,
    pub text: String,
}

fn csv_text(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("\"{}\"", flat.replace('"', "\"\""))
}

fn opt<T: std::fmt::Display>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

impl HandoffRecord {
    pub fn line(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.handoff,
            self.from,
            self.to,
            self.scheme,
            self.policy,
            self.policy_version,
            csv_text(&self.context),
            self.rho,
            self.deadline_ns,
            self.start_ns,
            self.bytes,
            self.source_packets,
            opt(self.source_sent),
            opt(self.repair_sent),
            self.packets_received,
            self.repairs_received,
            self.recovered_utility,
            self.blocks_complete,
            self.n_blocks,
            self.decoded_prefix,
            self.ttft_ms.map(|t| format!("{t:.3}")).unwrap_or_default(),
            self.tokens_decoded,
            self.agreement
                .map(|a| format!("{a:.4}"))
                .unwrap_or_default(),
            self.sender_cache_hit,
            csv_text(&self.outcome),
            csv_text(&self.text),
        )
    }

    pub fn write(&self, table: &CsvTable) {
        table.row(&self.line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_has_every_column_and_quotes_text() {
        let r = HandoffRecord {
            text: "a, \"b\"\nc".into(),
            outcome: "ok".into(),
            ..HandoffRecord::default()
        };
        let line = r.line();
        assert!(line.ends_with("\"a, \"\"b\"\" c\""), "{line}");
        assert!(!line.contains('\n'));
        let header = HANDOFFS_HEADER.split(',').count();
        // Text columns hold no separator except the quoted one.
        let cols = line
            .trim_end_matches("\"a, \"\"b\"\" c\"")
            .split(',')
            .count();
        assert_eq!(cols, header);
    }
}
