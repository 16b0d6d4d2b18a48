//! The end-of-run tables of a results folder, written for someone seeing edgemu for the
//! first time: what each policy version did to latency, how loaded each server was, what
//! each handoff recovered, what each link carried, and what happened when.
//!
//! [`RunTables::read`] builds them from the files the hosts wrote (every
//! `<host>/requests.csv`, `server_slots.csv`, `handoffs.csv`, `events.jsonl`, read with the
//! report's CSV and events readers) plus the link rows the run holds in memory; the
//! tables render through [`super::table`] as text (the terminal), Markdown
//! (`summary.md`) and JSON (the `tables` key of `summary.json`). `edgemu report` puts the
//! same tables into `report.md`. A table whose files are absent is left out; damaged
//! rows are skipped and listed.

use super::table::{link_cells, render, render_markdown, LinkRow};
use crate::report::csv::Table as Csv;
use crate::report::events::{read_events, EventLine};
use edgemu_links::time::NS_PER_S;
use edgemu_stats::{percentile, sorted_finite};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One table: a stable `name` (its key in JSON), a title that says how to read it.
#[derive(Debug, Clone)]
pub struct SummaryTable {
    pub name: &'static str,
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl SummaryTable {
    pub(crate) fn new(
        name: &'static str,
        title: &str,
        headers: &[&str],
        rows: Vec<Vec<String>>,
    ) -> Self {
        SummaryTable {
            name,
            title: title.to_string(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows,
        }
    }

    fn header_refs(&self) -> Vec<&str> {
        self.headers.iter().map(String::as_str).collect()
    }

    /// The title and the aligned text table.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}",
            self.title,
            render(&self.header_refs(), &self.rows)
        )
    }

    /// The title and a Markdown table.
    pub fn markdown(&self) -> String {
        format!(
            "{}\n\n{}",
            self.title,
            render_markdown(&self.header_refs(), &self.rows)
        )
    }

    /// `{"title", "columns", "rows": [{column: cell}]}`.
    pub fn json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                serde_json::Value::Object(
                    self.headers
                        .iter()
                        .cloned()
                        .zip(r.iter().map(|c| serde_json::Value::String(c.clone())))
                        .collect(),
                )
            })
            .collect();
        serde_json::json!({ "title": self.title, "columns": self.headers, "rows": rows })
    }

    /// The cells of one column, by header.
    pub fn column(&self, header: &str) -> Vec<&str> {
        let Some(i) = self.headers.iter().position(|h| h == header) else {
            return Vec::new();
        };
        self.rows
            .iter()
            .filter_map(|r| r.get(i).map(String::as_str))
            .collect()
    }
}

/// Every table of one run, in print order, and what was skipped reading it.
#[derive(Debug, Clone, Default)]
pub struct RunTables {
    pub tables: Vec<SummaryTable>,
    pub skipped: Vec<String>,
}

impl RunTables {
    /// Reads the results folder `dir`; `links` are the run's final link rows (empty: no
    /// link table, e.g. when `edgemu report` charts the links itself).
    pub fn read(dir: &Path, links: &[LinkRow]) -> RunTables {
        let hosts = host_dirs(dir);
        let mut out = RunTables::default();
        let requests = out.csvs(&hosts, "requests.csv");
        if !requests.is_empty() {
            out.push(policy_table(&requests));
        }
        let slots = out.csvs(&hosts, "server_slots.csv");
        if !slots.is_empty() {
            out.push(server_table(&slots, &requests));
        }
        let handoffs = out.csvs(&hosts, "handoffs.csv");
        if !handoffs.is_empty() {
            out.push(handoff_table(&handoffs));
        }
        let external = out.csvs(&hosts, super::external::EXTERNAL_POLICIES);
        if !external.is_empty() {
            out.push(super::external::table(&external));
        }
        if !links.is_empty() {
            let (headers, rows) = link_cells(links);
            out.tables.push(SummaryTable::new(
                "links",
                "Links: configured vs achieved (rates in Mb/s over the run; delay = model one-way incl. queueing; down-drop = dropped while killed):",
                &headers,
                rows,
            ));
        }
        let (events, skipped) = read_events(&hosts);
        out.skipped.extend(skipped);
        if !events.is_empty() {
            out.tables.push(event_table(&events));
        }
        out
    }

    fn push(&mut self, t: Result<SummaryTable, String>) {
        match t {
            Ok(t) => self.tables.push(t),
            Err(e) => self.skipped.push(e),
        }
    }

    /// Every host's `name` that exists, read (unreadable files are skipped and listed).
    fn csvs(&mut self, hosts: &[PathBuf], name: &str) -> Vec<Csv> {
        let mut out = Vec::new();
        for h in hosts {
            let path = h.join(name);
            if !path.is_file() {
                continue;
            }
            match Csv::read(&path) {
                Ok(t) => {
                    self.skipped.extend(t.skipped.iter().cloned());
                    out.push(t);
                }
                Err(e) => self.skipped.push(e.to_string()),
            }
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&SummaryTable> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Every table as text, blank lines between them.
    pub fn text(&self) -> String {
        self.tables
            .iter()
            .map(SummaryTable::text)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `summary.md`: every table, then what was skipped (nothing that differs between two
    /// virtual-time runs of one file and seed, not even the run's folder name).
    pub fn markdown(&self) -> String {
        let mut md = String::from("# End-of-run tables\n\n");
        for t in &self.tables {
            md.push_str(&t.markdown());
            md.push('\n');
        }
        if !self.skipped.is_empty() {
            md.push_str("Skipped while reading the results:\n\n");
            for s in &self.skipped {
                md.push_str(&format!("- {s}\n"));
            }
        }
        md
    }

    /// `{name: table}` for `summary.json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.tables
                .iter()
                .map(|t| (t.name.to_string(), t.json()))
                .collect(),
        )
    }
}

/// The host sub-folders of a results folder, sorted by name (the report's definition).
pub fn host_dirs(dir: &Path) -> Vec<PathBuf> {
    crate::report::links::host_dirs(dir)
}

fn cols<const N: usize>(t: &Csv, names: [&str; N]) -> Result<[usize; N], String> {
    let mut out = [0; N];
    for (o, n) in out.iter_mut().zip(names) {
        *o = t.col(n).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The first of `names` that `t` has.
fn col_any(t: &Csv, names: &[&str]) -> Option<usize> {
    names.iter().find_map(|n| t.col(n).ok())
}

fn secs(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The mean of the finite values (summed in ascending order).
fn mean(v: &[f64]) -> Option<f64> {
    edgemu_stats::mean(&sorted_finite(v))
}

/// The `p`-th percentile of the finite values (the workspace's definition,
/// nearest rank, as the LYREO experiment's figures).
fn quantile(v: &[f64], p: f64) -> Option<f64> {
    percentile(&sorted_finite(v), p)
}

/// Slot numbers as ranges: `0–13, 26–31`.
fn slot_ranges(slots: &BTreeSet<u64>) -> String {
    let mut parts = Vec::new();
    let mut it = slots.iter().copied();
    let Some(mut lo) = it.next() else {
        return "-".into();
    };
    let mut hi = lo;
    let mut close = |lo: u64, hi: u64| {
        parts.push(if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}–{hi}")
        })
    };
    for s in it {
        if hi.checked_add(1) == Some(s) {
            hi = s;
        } else {
            close(lo, hi);
            lo = s;
            hi = s;
        }
    }
    close(lo, hi);
    parts.join(", ")
}

/// A version hash as shown: its first 8 hex digits.
fn short(version: &str) -> String {
    version.chars().take(8).collect()
}

#[derive(Default)]
struct PolicyAcc {
    first_slot: u64,
    slots: BTreeSet<u64>,
    requests: usize,
    failed: BTreeMap<String, usize>,
    e2e: Vec<f64>,
}

/// Requests by the policy version that decided them (the users' `requests.csv`).
fn policy_table(requests: &[Csv]) -> Result<SummaryTable, String> {
    let mut by: BTreeMap<(String, String), PolicyAcc> = BTreeMap::new();
    for t in requests {
        let [cs, cp, cv, co, ce] =
            cols(t, ["slot", "policy", "policy_version", "outcome", "e2e_s"])?;
        // Why a request failed (`reason`, when the file has it), else its outcome.
        let creason = col_any(t, &["reason"]);
        for r in &t.rows {
            let slot = r[cs].parse::<u64>().unwrap_or(0);
            let acc = by
                .entry((r[cp].clone(), r[cv].clone()))
                .or_insert_with(|| PolicyAcc {
                    first_slot: slot,
                    ..Default::default()
                });
            acc.first_slot = acc.first_slot.min(slot);
            acc.slots.insert(slot);
            acc.requests += 1;
            if r[co] == "served" {
                acc.e2e.push(Csv::f64(r, ce));
            } else {
                let why = creason
                    .map(|c| r[c].as_str())
                    .filter(|w| !w.is_empty())
                    .unwrap_or(&r[co]);
                *acc.failed.entry(why.to_string()).or_default() += 1;
            }
        }
    }
    let mut groups: Vec<_> = by.into_iter().collect();
    groups.sort_by_key(|(_, a)| a.first_slot);
    let rows = groups
        .into_iter()
        .map(|((policy, version), a)| {
            let failed: usize = a.failed.values().sum();
            let why = a
                .failed
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                if policy.is_empty() {
                    "(undecided)".into()
                } else {
                    policy
                },
                short(&version),
                slot_ranges(&a.slots),
                a.requests.to_string(),
                a.e2e.len().to_string(),
                if failed == 0 {
                    "0".into()
                } else {
                    format!("{failed} ({why})")
                },
                secs(mean(&a.e2e)),
                secs(quantile(&a.e2e, 50.0)),
                secs(quantile(&a.e2e, 99.0)),
            ]
        })
        .collect();
    Ok(SummaryTable::new(
        "policies",
        "Latency by the policy version that decided each request (end to end = scheduling + upload + wait + prefill + decode, seconds, served requests):",
        &[
            "policy", "version", "slots", "requests", "served", "failed", "mean s", "p50 s",
            "p99 s",
        ],
        rows,
    ))
}

#[derive(Default)]
struct ServerAcc {
    gpu: String,
    backend: String,
    slots: BTreeSet<u64>,
    eta: Vec<f64>,
    peak: u64,
    high: usize,
}

/// Per-server load and KV from every `server_slots.csv`, served / failed requests from
/// `requests.csv`.
fn server_table(slots: &[Csv], requests: &[Csv]) -> Result<SummaryTable, String> {
    let mut by: BTreeMap<String, ServerAcc> = BTreeMap::new();
    let mut last_slot = 0u64;
    for t in slots {
        let [cs, cn, cg, cb, ce, cp, ch] = cols(
            t,
            [
                "slot",
                "server",
                "gpu",
                "backend",
                "eta",
                "peak_bytes",
                "high_kv",
            ],
        )?;
        for r in &t.rows {
            let slot = r[cs].parse::<u64>().unwrap_or(0);
            last_slot = last_slot.max(slot);
            let a = by.entry(r[cn].clone()).or_default();
            a.gpu.clone_from(&r[cg]);
            a.backend.clone_from(&r[cb]);
            a.slots.insert(slot);
            a.eta.push(Csv::f64(r, ce));
            a.peak = a.peak.max(r[cp].parse().unwrap_or(0));
            a.high += usize::from(r[ch] == "1");
        }
    }
    let mut outcome: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in requests {
        let [cs, co] = cols(t, ["server", "outcome"])?;
        for r in &t.rows {
            if r[cs].is_empty() {
                continue;
            }
            let e = outcome.entry(r[cs].clone()).or_default();
            if r[co] == "served" {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }
    let total_slots = last_slot.saturating_add(1);
    let rows = by
        .into_iter()
        .map(|(name, a)| {
            let cap = edgemu_engine::Profile::builtin(&a.gpu)
                .map(|p| p.kv_capacity_bytes)
                .ok();
            let (served, failed) = outcome.get(&name).copied().unwrap_or_default();
            let reported = a.slots.len();
            vec![
                name,
                a.gpu,
                a.backend,
                served.to_string(),
                failed.to_string(),
                mean(&a.eta).map_or("-".into(), |e| format!("{e:.5}")),
                format!("{:.1}", a.peak as f64 / 1e6),
                cap.map_or("-".into(), |c| format!("{:.0}", c as f64 / 1e9)),
                cap.map_or("-".into(), |c| {
                    format!("{:.2}%", a.peak as f64 / c.max(1) as f64 * 100.0)
                }),
                format!("{:.1}%", a.high as f64 / reported.max(1) as f64 * 100.0),
                (total_slots as usize).saturating_sub(reported).to_string(),
            ]
        })
        .collect();
    Ok(SummaryTable::new(
        "servers",
        "Servers: load and KV (η = KV memory-time / (M_s·Δ), mean over its slots; high-KV = share of slots whose peak exceeded 90 % of M_s; unavailable = slots without a report, e.g. while killed):",
        &[
            "server",
            "gpu",
            "backend",
            "served",
            "failed",
            "mean η",
            "peak KV MB",
            "M_s GB",
            "peak/M_s",
            "high-KV",
            "slots unavailable",
        ],
        rows,
    ))
}

/// One row per handoff, in start order, from every `handoffs.csv` (the agents'
/// columns, looked up by name; a missing one shows `-`): recovered utility, time to
/// first token, tokens decoded and their agreement with the full-KV continuation,
/// packets = source + repair packets sent, and the outcome (`ok` or `aborted:…`).
fn handoff_table(handoffs: &[Csv]) -> Result<SummaryTable, String> {
    let mut rows: Vec<(f64, Vec<String>)> = Vec::new();
    for t in handoffs {
        let cs = t.col("scheme").map_err(|e| e.to_string())?;
        let text = |r: &[String], names: &[&str]| {
            col_any(t, names)
                .map(|c| r[c].clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "-".into())
        };
        let num = |r: &[String], names: &[&str]| col_any(t, names).map(|c| Csv::f64(r, c));
        let f = |x: Option<f64>, digits: usize| {
            x.filter(|v| v.is_finite())
                .map_or("-".into(), |v| format!("{v:.digits$}"))
        };
        for r in &t.rows {
            let start_ns = num(r, &["start_ns"]).unwrap_or(f64::NAN);
            let ttft_ms = num(r, &["ttft_ms"]).or_else(|| num(r, &["ttft_s"]).map(|s| s * 1e3));
            let packets = num(r, &["packets"]).or_else(|| {
                num(r, &["source_sent"]).map(|s| s + num(r, &["repair_sent"]).unwrap_or(0.0))
            });
            let version = text(r, &["policy_version", "version"]);
            rows.push((
                start_ns,
                vec![
                    f(Some(start_ns / NS_PER_S as f64), 1),
                    format!("{}→{}", text(r, &["from"]), text(r, &["to"])),
                    r[cs].clone(),
                    text(r, &["policy"]),
                    if version == "-" {
                        version
                    } else {
                        short(&version)
                    },
                    text(r, &["context"]),
                    num(r, &["recovered_utility", "utility"])
                        .filter(|u| u.is_finite())
                        .map_or("-".into(), |u| format!("{:.1}%", u * 100.0 + 0.0)), // + 0.0: no "-0.0%"
                    f(ttft_ms, 1),
                    f(num(r, &["tokens_decoded", "tokens"]), 0),
                    num(r, &["agreement"])
                        .filter(|u| u.is_finite())
                        .map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
                    f(packets, 0),
                    f(num(r, &["repair_sent", "repairs"]), 0),
                    text(r, &["outcome"]),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(SummaryTable::new(
        "handoffs",
        "Handoffs, one per row: recovered utility (share of the context's KV utility complete at the deadline), time to first token, tokens decoded from the rebuilt cache and their agreement with the full-KV continuation, packets sent (source + repair):",
        &[
            "start s",
            "agents",
            "scheme",
            "policy",
            "version",
            "context",
            "utility",
            "TTFT ms",
            "tokens",
            "agree",
            "packets",
            "repairs",
            "outcome",
        ],
        rows.into_iter().map(|(_, r)| r).collect(),
    ))
}

/// What an event is about: a link (and direction), an actor, a peer host, hosts.
fn target(e: &EventLine) -> String {
    if let (Some(l), d) = e.link() {
        return match d {
            Some(d) => format!("link {l} {d}"),
            None => format!("link {l}"),
        };
    }
    let d = &e.detail;
    for key in ["target", "actor", "server", "peer"] {
        if let Some(s) = d[key].as_str() {
            return s.to_string();
        }
    }
    if let Some(h) = d["hosts"].as_array() {
        return h
            .iter()
            .filter_map(|h| h.as_str())
            .collect::<Vec<_>>()
            .join(" ");
    }
    "-".into()
}

/// The rest of an event's detail, compact and cut to a readable length: keys the other
/// columns already show (or the time, again) are left out, version hashes shortened.
fn detail(e: &EventLine) -> String {
    const SKIP: [&str; 14] = [
        "target",
        "link",
        "dir",
        "actor",
        "peer",
        "hosts",
        "host",
        "server",
        "scheduler",
        "problem",
        "requested_by",
        "at_ns",
        "effective_ns",
        "loaded_at_ns",
    ];
    let Some(map) = e.detail.as_object() else {
        return String::new();
    };
    let hashlike = |s: &str| s.len() >= 32 && s.chars().all(|c| c.is_ascii_hexdigit());
    let parts: Vec<String> = map
        .iter()
        .filter(|(k, v)| !SKIP.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| match (k.strip_suffix("_ns"), v) {
            // Times and durations in seconds, like the time column.
            (Some(k), serde_json::Value::Number(n)) => match n.as_u64() {
                Some(ns) => format!("{k}={:.3}s", ns as f64 / NS_PER_S as f64),
                None => format!("{k}={n}"),
            },
            (_, serde_json::Value::String(s)) if k == "detail" => s.clone(),
            (_, serde_json::Value::String(s)) if hashlike(s) => format!("{k}={}", short(s)),
            (_, serde_json::Value::String(s)) => format!("{k}={s}"),
            (_, other) => format!("{k}={other}"),
        })
        .collect();
    let s = parts.join(" ");
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(79).collect::<String>())
    } else {
        s
    }
}

/// Every event of the run in time order; the same event on several hosts at the same
/// time (the run's start and end) is one row naming them all.
fn event_table(events: &[EventLine]) -> SummaryTable {
    let mut rows: Vec<Vec<String>> = Vec::new();
    // Hosts leaving after the end make the mesh report peers down: not the run's story.
    let end = events
        .iter()
        .find(|e| e.kind == "run.end")
        .map_or(u64::MAX, |e| e.t_ns);
    for e in events
        .iter()
        .filter(|e| !(e.source == "mesh" && e.t_ns >= end))
    {
        let row = vec![
            format!("{:.3}", e.t_ns as f64 / NS_PER_S as f64),
            e.host.clone(),
            e.source.clone(),
            e.kind.clone(),
            target(e),
            detail(e),
        ];
        let same = |r: &Vec<String>| {
            r.iter()
                .zip(&row)
                .enumerate()
                .all(|(i, (a, b))| i == 1 || a == b)
        };
        match rows
            .iter_mut()
            .rev()
            .take_while(|r| r[0] == row[0])
            .find(|r| same(r))
        {
            Some(r) => {
                r[1].push(',');
                r[1].push_str(&row[1]);
            }
            None => rows.push(row),
        }
    }
    SummaryTable::new(
        "events",
        "Events (run time in s; source chaos#N = the Nth [[chaos]] entry, heal = the end of its `for`; from every host's events.jsonl):",
        &["t s", "host", "source", "event", "target", "detail"],
        rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Csv {
        Csv::parse(Path::new("x.csv"), text).unwrap()
    }

    #[test]
    fn slot_ranges_join_runs() {
        let s: BTreeSet<u64> = [0, 1, 2, 5, 7, 8].into_iter().collect();
        assert_eq!(slot_ranges(&s), "0–2, 5, 7–8");
        assert_eq!(slot_ranges(&BTreeSet::new()), "-");
    }

    #[test]
    fn policy_rows_follow_the_order_policies_first_decided() {
        let t = csv("slot,id,user,server,policy,policy_version,input_len,output_len,outcome,sched_s,upload_s,wait_s,prefill_s,decode_s,e2e_s\n\
0,1,u,s,lyreo,aaaa1111bb,1,1,served,0,0,0,0,0,1.0\n\
1,2,u,s,lyreo,aaaa1111bb,1,1,served,0,0,0,0,0,3.0\n\
2,3,u,s,least-loaded,cccc2222dd,1,1,served,0,0,0,0,0,2.0\n\
3,4,u,s,least-loaded,cccc2222dd,1,1,unanswered,,,,,,\n\
4,5,u,s,lyreo,aaaa1111bb,1,1,served,0,0,0,0,0,2.0\n");
        let p = policy_table(&[t]).unwrap();
        assert_eq!(p.column("policy"), ["lyreo", "least-loaded"]);
        assert_eq!(p.column("version"), ["aaaa1111", "cccc2222"]);
        assert_eq!(p.column("slots"), ["0–1, 4", "2–3"]);
        assert_eq!(p.column("requests"), ["3", "2"]);
        assert_eq!(p.column("failed"), ["0", "1 (1 unanswered)"]);
        assert_eq!(p.column("mean s"), ["2.000", "2.000"]);
        assert_eq!(p.column("p50 s"), ["2.000", "2.000"]);
    }

    #[test]
    fn server_rows_count_unreported_slots_and_use_the_class_capacity() {
        let slots = csv("slot,server,gpu,backend,assigned,lost_uploads,eta,peak_bytes,high_kv,occupancy_bytes,backlog,iterations,busy_s\n\
0,a,rtx3080,modeled,1,0,0.1,1000000000,0,0,0,1,0.1\n\
1,a,rtx3080,modeled,1,0,0.3,9500000000,1,0,0,1,0.1\n\
2,a,rtx3080,modeled,1,0,0.2,100,0,0,0,1,0.1\n\
0,b,rtx4090,real,1,0,0.0,0,0,0,0,1,0.1\n");
        let req = csv("server,outcome\na,served\na,served\nb,failed\n,unanswered\n");
        let s = server_table(&[slots], &[req]).unwrap();
        assert_eq!(s.column("server"), ["a", "b"]);
        assert_eq!(s.column("served"), ["2", "0"]);
        assert_eq!(s.column("failed"), ["0", "1"]);
        assert_eq!(s.column("mean η"), ["0.20000", "0.00000"]);
        assert_eq!(s.column("M_s GB"), ["10", "24"]);
        assert_eq!(s.column("peak/M_s"), ["95.00%", "0.00%"]);
        assert_eq!(s.column("high-KV"), ["33.3%", "0.0%"]);
        assert_eq!(s.column("slots unavailable"), ["0", "2"]);
    }

    #[test]
    fn handoff_columns_are_found_by_name_and_missing_ones_show_a_dash() {
        // The agents' columns (a subset, in their order), text quoted.
        let h = csv("handoff,scheme,policy,policy_version,bytes,source_sent,repair_sent,recovered_utility,ttft_ms,tokens_decoded,outcome,text\n\
1,priorityfec,ddqn,abcdef0123,2000000,100,20,0.9,120,8,\"ok\",\"Hi, there\"\n\
2,priorityfec,ddqn,abcdef0123,2000000,100,10,0.7,80,8,\"aborted:agent killed\",\"\"\n");
        let t = handoff_table(&[h]).unwrap();
        assert_eq!(t.column("scheme"), ["priorityfec", "priorityfec"]);
        assert_eq!(t.column("policy"), ["ddqn", "ddqn"]);
        assert_eq!(t.column("utility"), ["90.0%", "70.0%"]);
        assert_eq!(t.column("TTFT ms"), ["120.0", "80.0"]);
        assert_eq!(t.column("tokens"), ["8", "8"]);
        assert_eq!(t.column("packets"), ["120", "110"]);
        assert_eq!(t.column("repairs"), ["20", "10"]);
        assert_eq!(t.column("outcome"), ["ok", "aborted:agent killed"]);
        assert_eq!(t.column("start s"), ["-", "-"]);
        // Rows come in start order whatever the file order.
        let h = csv("scheme,start_ns,recovered_utility\nudp,3000000000,0.5\nudp,1000000000,0.25\n");
        let t = handoff_table(&[h]).unwrap();
        assert_eq!(t.column("start s"), ["1.0", "3.0"]);
        assert_eq!(t.column("utility"), ["25.0%", "50.0%"]);
        let bare = csv("scheme,utility\nudp,0.5\n");
        let t = handoff_table(&[bare]).unwrap();
        assert_eq!(t.column("repairs"), ["-"]);
        assert_eq!(t.column("version"), ["-"]);
        let no_scheme = csv("utility\n1\n");
        assert!(handoff_table(&[no_scheme]).is_err());
    }

    #[test]
    fn the_same_event_on_several_hosts_is_one_row() {
        let ev = |t_ns, host: &str, kind: &str, detail| EventLine {
            t_ns,
            host: host.into(),
            source: "run".into(),
            kind: kind.into(),
            detail,
        };
        let d = serde_json::json!({ "duration_ns": 5, "host": "x" });
        let swap =
            serde_json::json!({ "actor": "sched", "version": "ab".repeat(32), "effective_ns": 1 });
        let t = event_table(&[
            ev(0, "a", "run.start", d.clone()),
            ev(0, "b", "run.start", d.clone()),
            ev(1_000_000_000, "a", "policy.swap", swap),
            ev(2_000_000_000, "b", "run.start", d),
        ]);
        assert_eq!(t.column("host"), ["a,b", "a", "b"]);
        assert_eq!(t.column("target"), ["-", "sched", "-"]);
        assert_eq!(t.column("detail")[0], "duration=0.000s");
        assert_eq!(t.column("detail")[1], "version=abababab");
    }
}
