//! Link runs (`edgemu run`): per host `links.csv` samples (cumulative counters per link
//! direction) become per-interval rates, delay percentiles and loss over time; events from
//! every host's `events.jsonl` become spans (`link.kill` … `link.restore` of the same link)
//! or instants (any other event).

use super::csv::Table;
use super::Report;
use crate::plots::{self, Labels, Series, Span};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a host writes into its sub-folder of a results folder (any one of
/// them makes the folder a host's: a host that ran only LYREO actors or
/// agents, or lost its event log, still counts).
const HOST_FILES: [&str; 7] = [
    "events.jsonl",
    "links.csv",
    "probes.csv",
    "requests.csv",
    "server_slots.csv",
    "decisions.csv",
    "handoffs.csv",
];

/// Host sub-folders, sorted: holding any of [`HOST_FILES`] and not a report
/// folder inside the run (it has its own `links.csv` and a `report.md`).
pub fn host_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.join("report.md").exists() && HOST_FILES.iter().any(|f| p.join(f).is_file()))
        .collect();
    v.sort();
    v
}

/// Host sub-folders with link samples (`links.csv`).
pub fn link_host_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v = host_dirs(dir);
    v.retain(|h| h.join("links.csv").is_file());
    v
}

/// One event of `events.jsonl`.
#[derive(Debug, Clone)]
struct Ev {
    t_s: f64,
    kind: String,
    link: Option<String>,
    dir: Option<String>,
}

fn read_events(report: &mut Report, hosts: &[PathBuf]) -> Vec<Ev> {
    let (lines, skipped) = super::events::read_events(hosts);
    for s in skipped {
        report.skip(s);
    }
    lines
        .into_iter()
        .map(|e| {
            let (link, dir) = e.link();
            Ev {
                t_s: e.t_ns as f64 / 1e9,
                kind: e.kind,
                link,
                dir,
            }
        })
        .collect()
}

/// Spans for one link direction: its kill→restore intervals (open until `end` if never
/// restored) and every event not about another link as an instant.
fn spans_for(evs: &[Ev], link: &str, dir: &str, end: f64) -> Vec<Span> {
    let mine = |e: &Ev| {
        e.link.as_deref().is_none_or(|l| l == link)
            && e.dir.as_deref().is_none_or(|d| d == dir || d == "both")
    };
    let mut spans = Vec::new();
    let mut down_since: Option<f64> = None;
    for e in evs.iter().filter(|e| mine(e)) {
        match e.kind.as_str() {
            "link.kill" => {
                down_since.get_or_insert(e.t_s);
            }
            "link.restore" => {
                if let Some(s) = down_since.take() {
                    spans.push(Span {
                        start: s,
                        end: e.t_s,
                        label: "down".into(),
                    });
                }
            }
            k => spans.push(Span {
                start: e.t_s,
                end: e.t_s,
                label: k.to_string(),
            }),
        }
    }
    if let Some(s) = down_since {
        spans.push(Span {
            start: s,
            end: end.max(s),
            label: "down".into(),
        });
    }
    spans
}

#[derive(Default)]
struct Dir {
    t: Vec<f64>,
    configured: Vec<f64>,
    achieved: Vec<f64>,
    bytes_offered: Vec<f64>,
    offered: Vec<f64>,
    lost: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

pub fn report(report: &mut Report, dir: &Path, pre: &str) -> Result<()> {
    let hosts = link_host_dirs(dir);
    if !dir.join("summary.json").is_file() {
        report.skip(format!(
            "{}: no summary.json (run in progress or stopped); plotted what links.csv holds",
            dir.display()
        ));
    }
    // Events from every host, also those without links.
    let evs = read_events(report, &host_dirs(dir));
    let mut rows = Vec::new();
    for h in &hosts {
        let t = match Table::read(&h.join("links.csv")) {
            Ok(t) => t,
            Err(e) => {
                report.skip(e.to_string());
                continue;
            }
        };
        for s in &t.skipped {
            report.skip(s.clone());
        }
        let c = |n: &str| t.col(n);
        let (ct, cl, cd, cr, ca, cbo, co, clost, c50, c99) = (
            c("t_s")?,
            c("link")?,
            c("dir")?,
            c("rate_bps")?,
            c("interval_delivered_bps")?,
            c("bytes_offered")?,
            c("offered")?,
            c("lost")?,
            c("delay_p50_ms")?,
            c("delay_p99_ms")?,
        );
        let mut dirs: BTreeMap<(String, String), Dir> = BTreeMap::new();
        for r in &t.rows {
            let d = dirs.entry((r[cl].clone(), r[cd].clone())).or_default();
            d.t.push(Table::f64(r, ct));
            d.configured.push(Table::f64(r, cr) / 1e6);
            d.achieved.push(Table::f64(r, ca) / 1e6);
            d.bytes_offered.push(Table::f64(r, cbo));
            d.offered.push(Table::f64(r, co));
            d.lost.push(Table::f64(r, clost));
            d.p50.push(Table::f64(r, c50));
            d.p99.push(Table::f64(r, c99));
        }
        for ((link, ldir), d) in &dirs {
            let name = format!(
                "{pre}link-{}-{}",
                super::safe_name(link),
                super::safe_name(ldir)
            );
            let end = d.t.last().copied().unwrap_or(0.0);
            let spans = spans_for(&evs, link, ldir, end);
            let pts = |v: &[f64]| {
                d.t.iter()
                    .copied()
                    .zip(v.iter().copied())
                    .collect::<Vec<_>>()
            };
            // Offered rate and loss per sample interval from the cumulative counters.
            let mut offered = Vec::new();
            let mut loss = Vec::new();
            for i in 1..d.t.len() {
                let dt = d.t[i] - d.t[i - 1];
                if dt > 0.0 {
                    offered.push((
                        d.t[i],
                        (d.bytes_offered[i] - d.bytes_offered[i - 1]) * 8.0 / dt / 1e6,
                    ));
                }
                let n = d.offered[i] - d.offered[i - 1];
                if n > 0.0 {
                    loss.push((d.t[i], (d.lost[i] - d.lost[i - 1]) / n));
                }
            }
            report.heading(
                3,
                &format!(
                    "link {link} {ldir} (host {})",
                    h.file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default()
                ),
            );
            let rate = [
                Series {
                    label: "offered".into(),
                    points: offered,
                },
                Series {
                    label: "achieved".into(),
                    points: pts(&d.achieved),
                },
                Series {
                    label: "configured".into(),
                    points: pts(&d.configured),
                },
            ];
            let l = Labels::new(format!("{link} {ldir}: rate"), "time (s)", "Mb/s");
            let r = plots::time_series(
                &report.out,
                &format!("{name}-rate"),
                report.formats,
                &l,
                &rate,
                &spans,
                &[],
            );
            report.chart(&format!("{name}-rate"), "rate", r);
            let delay = [
                Series {
                    label: "p50".into(),
                    points: pts(&d.p50),
                },
                Series {
                    label: "p99".into(),
                    points: pts(&d.p99),
                },
            ];
            let l = Labels::new(format!("{link} {ldir}: delay"), "time (s)", "delay (ms)");
            let r = plots::time_series(
                &report.out,
                &format!("{name}-delay"),
                report.formats,
                &l,
                &delay,
                &spans,
                &[],
            );
            report.chart(&format!("{name}-delay"), "delay", r);
            let l = Labels::new(
                format!("{link} {ldir}: loss per interval"),
                "time (s)",
                "loss ratio",
            );
            let ls = [Series {
                label: "loss".into(),
                points: loss,
            }];
            let r = plots::time_series(
                &report.out,
                &format!("{name}-loss"),
                report.formats,
                &l,
                &ls,
                &spans,
                &[],
            );
            report.chart(&format!("{name}-loss"), "loss", r);
            let last = d.t.len().saturating_sub(1);
            let (off, lost) = (
                d.offered.get(last).copied().unwrap_or(f64::NAN),
                d.lost.get(last).copied().unwrap_or(f64::NAN),
            );
            let active = end - d.t.first().copied().unwrap_or(0.0);
            let mean = |v: &[f64]| {
                let f: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
                if f.is_empty() {
                    f64::NAN
                } else {
                    f.iter().sum::<f64>() / f.len() as f64
                }
            };
            rows.push(vec![
                link.clone(),
                ldir.clone(),
                format!("{:.2}", mean(&d.configured)),
                format!(
                    "{:.2}",
                    (d.bytes_offered.get(last).copied().unwrap_or(f64::NAN)
                        - d.bytes_offered.first().copied().unwrap_or(0.0))
                        * 8.0
                        / active.max(1e-9)
                        / 1e6
                ),
                format!("{:.2}", mean(&d.achieved)),
                format!(
                    "{:.3}",
                    d.p99
                        .iter()
                        .copied()
                        .filter(|x| x.is_finite())
                        .fold(f64::NAN, f64::max)
                ),
                format!("{:.4}", if off > 0.0 { lost / off } else { f64::NAN }),
            ]);
        }
    }
    if !rows.is_empty() {
        report.heading(3, "links");
        report.table(
            &format!("{pre}links"),
            &[
                "link",
                "dir",
                "configured_mbps",
                "offered_mbps",
                "achieved_mbps",
                "max_delay_p99_ms",
                "loss",
            ],
            &rows,
        )?;
    }
    Ok(())
}
