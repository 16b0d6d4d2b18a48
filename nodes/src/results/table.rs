//! The terminal summary tables.

use edgemu_actors::messages::LinkStatus;
use edgemu_actors::probes::{FlowSummary, RecordKind};
use serde::Serialize;

/// One link direction at the end of a run, as printed and in summary.json.
#[derive(Debug, Clone, Serialize)]
pub struct LinkRow {
    pub link: String,
    pub dir: String,
    pub host: String,
    pub configured_bps: Option<u64>,
    /// Offered and delivered bits/s over the run's active time.
    pub offered_bps: f64,
    pub achieved_bps: f64,
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    pub loss_measured: f64,
    pub loss_expected: Option<f64>,
    pub stats: LinkStatus,
}

impl LinkRow {
    pub fn new(host: &str, s: &LinkStatus, active_s: f64) -> Self {
        let accounted = s.delivered + s.lost;
        LinkRow {
            link: s.name.clone(),
            dir: s.dir.to_string(),
            host: host.to_string(),
            configured_bps: s.rate_bps,
            offered_bps: if active_s > 0.0 {
                s.bytes_offered as f64 * 8.0 / active_s
            } else {
                0.0
            },
            achieved_bps: if active_s > 0.0 {
                s.bytes_delivered as f64 * 8.0 / active_s
            } else {
                0.0
            },
            delay_p50_ms: s.delay_p50_ns as f64 / 1e6,
            delay_p99_ms: s.delay_p99_ns as f64 / 1e6,
            loss_measured: if accounted > 0 {
                s.lost as f64 / accounted as f64
            } else {
                0.0
            },
            loss_expected: s.expected_loss,
            stats: s.clone(),
        }
    }
}

fn mbps(bps: f64) -> String {
    format!("{:.2}", bps / 1e6)
}

/// Renders rows as an aligned text table.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:>w$}", c, w = widths.get(i).copied().unwrap_or(0)))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.iter().map(|s| s.to_string()).collect(), &mut out);
    line(widths.iter().map(|w| "-".repeat(*w)).collect(), &mut out);
    for r in rows {
        line(r.clone(), &mut out);
    }
    out
}

/// Renders rows as a Markdown (GitHub) table; `|` in cells is escaped.
pub fn render_markdown(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |c: &str| c.replace('|', "\\|");
    let mut out = format!(
        "| {} |\n",
        headers
            .iter()
            .map(|h| cell(h))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    out.push_str(&format!("|{}\n", "---:|".repeat(headers.len())));
    for r in rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

/// Renders rows as CSV (fields containing `,`, `"` or newlines are quoted).
pub fn render_csv(headers: &[&str], rows: &[Vec<String>]) -> String {
    let field = |c: &str| {
        if c.contains([',', '"', '\n']) {
            format!("\"{}\"", c.replace('"', "\"\""))
        } else {
            c.to_string()
        }
    };
    let mut out = headers
        .iter()
        .map(|h| field(h))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for r in rows {
        out.push_str(&r.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    }
    out
}

/// The per-link table's headers and cells: configured vs achieved rate, delay
/// percentiles, loss.
pub fn link_cells(rows: &[LinkRow]) -> ([&'static str; 12], Vec<Vec<String>>) {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.link.clone(),
                r.dir.clone(),
                r.host.clone(),
                r.configured_bps.map_or("-".into(), |b| mbps(b as f64)),
                mbps(r.offered_bps),
                mbps(r.achieved_bps),
                format!("{:.2}", r.delay_p50_ms),
                format!("{:.2}", r.delay_p99_ms),
                format!("{:.2}%", r.loss_measured * 100.0),
                r.loss_expected
                    .map_or("-".into(), |l| format!("{:.2}%", l * 100.0)),
                r.stats.queue_dropped.to_string(),
                r.stats.down_dropped.to_string(),
            ]
        })
        .collect();
    (
        [
            "link",
            "dir",
            "host",
            "rate Mb/s",
            "offered",
            "achieved",
            "p50 ms",
            "p99 ms",
            "loss",
            "expected",
            "q-drop",
            "down-drop",
        ],
        body,
    )
}

/// The per-link table: configured vs achieved rate, delay percentiles, loss.
pub fn link_table(rows: &[LinkRow]) -> String {
    let (headers, body) = link_cells(rows);
    render(&headers, &body)
}

/// The per-flow table from sinks and pingers.
pub fn flow_table(flows: &[FlowSummary]) -> String {
    let body: Vec<Vec<String>> = flows
        .iter()
        .map(|f| {
            vec![
                f.flow.clone(),
                f.at.clone(),
                match f.kind {
                    RecordKind::Packet => "one-way".into(),
                    RecordKind::Rtt => "rtt".into(),
                },
                f.packets.to_string(),
                f.missing.to_string(),
                mbps(f.throughput_bps),
                format!("{:.2}", f.delay_p50_ns as f64 / 1e6),
                format!("{:.2}", f.delay_p99_ns as f64 / 1e6),
                f.delay_err_p99_ns
                    .map_or("-".into(), |e| format!("{:.3}", e as f64 / 1e6)),
            ]
        })
        .collect();
    render(
        &[
            "flow",
            "at",
            "kind",
            "packets",
            "missing",
            "Mb/s",
            "p50 ms",
            "p99 ms",
            "err p99 ms",
        ],
        &body,
    )
}
