//! LYREO experiment runs (`edgemu experiment lyreo`): `requests.csv`, `server_slots.csv`,
//! `summary.json`. Policies are compared over every grid point and seed the run holds.

use super::csv::Table;
use super::Report;
use crate::plots::{self, BarSeries, Labels, RefLine, Samples, Series};
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

pub fn report(report: &mut Report, dir: &Path, pre: &str) -> Result<()> {
    match Table::read(&dir.join("requests.csv")) {
        Ok(t) => latency(report, &t, pre)?,
        Err(e) => report.skip(format!("latency charts: {e}")),
    }
    match Table::read(&dir.join("server_slots.csv")) {
        Ok(t) => slots(report, &t, pre)?,
        Err(e) => report.skip(format!("server charts: {e}")),
    }
    table_ii(report, dir, pre)
}

fn latency(report: &mut Report, t: &Table, pre: &str) -> Result<()> {
    for s in &t.skipped {
        report.skip(s.clone());
    }
    let (cp, ce, cr) = (t.col("policy")?, t.col("e2e_s")?, t.col("rejected")?);
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in &t.rows {
        let rejected = matches!(r[cr].as_str(), "1" | "true");
        if !rejected {
            by.entry(r[cp].as_str())
                .or_default()
                .push(Table::f64(r, ce));
        }
    }
    let samples: Vec<Samples> = by
        .into_iter()
        .map(|(k, v)| Samples {
            label: k.to_string(),
            values: v,
        })
        .collect();
    report.heading(3, "End-to-end latency per policy");
    let name = format!("{pre}lyreo-latency-cdf");
    let r = plots::cdf(
        &report.out,
        &name,
        report.formats,
        &Labels::new("End-to-end latency", "latency (s)", "CDF"),
        &samples,
    );
    report.chart(&name, "latency CDF", r);
    let name = format!("{pre}lyreo-latency-box");
    let r = plots::box_plot(
        &report.out,
        &name,
        report.formats,
        &Labels::new("End-to-end latency", "policy", "latency (s)"),
        &samples,
    );
    report.chart(&name, "latency box plot", r);
    Ok(())
}

fn slots(report: &mut Report, t: &Table, pre: &str) -> Result<()> {
    for s in &t.skipped {
        report.skip(s.clone());
    }
    let (cp, cslot, csrv, ceta, cpk) = (
        t.col("policy")?,
        t.col("slot")?,
        t.col("server")?,
        t.col("eta")?,
        t.col("peak_frac")?,
    );
    // Key of a slot: every column before `slot` except `server` (grid point, policy, seed).
    let key_cols: Vec<usize> = (0..cslot).filter(|&i| i != csrv).collect();
    let mut per_slot: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for r in &t.rows {
        let key: Vec<&str> = key_cols.iter().map(|&i| r[i].as_str()).collect();
        per_slot
            .entry((r[cp].clone(), format!("{}|{}", key.join(","), r[cslot])))
            .or_default()
            .push(Table::f64(r, ceta));
    }
    // Load-balance deviation of a slot: mean over servers of (η_s − η̄)².
    let mut dev: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for ((policy, _), etas) in &per_slot {
        let f: Vec<f64> = etas.iter().copied().filter(|x| x.is_finite()).collect();
        if f.is_empty() {
            continue;
        }
        let m = f.iter().sum::<f64>() / f.len() as f64;
        dev.entry(policy.clone())
            .or_default()
            .push(f.iter().map(|x| (x - m).powi(2)).sum::<f64>() / f.len() as f64);
    }
    let groups: Vec<String> = dev.keys().cloned().collect();
    let means: Vec<f64> = dev
        .values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .collect();
    report.heading(3, "Load-balance deviation per policy");
    let name = format!("{pre}lyreo-lb-deviation");
    let l = Labels::new(
        "Load-balance deviation mean((η_s − η̄)²)",
        "policy",
        "deviation",
    );
    let r = plots::grouped_bars(
        &report.out,
        &name,
        report.formats,
        &l,
        &groups,
        &[BarSeries {
            label: "mean over slots".into(),
            values: means,
        }],
    );
    report.chart(&name, "load-balance deviation", r);

    // KV occupancy over time: the first grid point/seed of each policy, one line per server.
    report.heading(
        3,
        "Per-server KV occupancy (first grid point and seed of each policy)",
    );
    let mut first_key: BTreeMap<String, String> = BTreeMap::new();
    let mut series: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
    for r in &t.rows {
        let key: Vec<&str> = key_cols.iter().map(|&i| r[i].as_str()).collect();
        let key = key.join(",");
        let fk = first_key
            .entry(r[cp].clone())
            .or_insert_with(|| key.clone());
        if *fk == key {
            series
                .entry((r[cp].clone(), r[csrv].clone()))
                .or_default()
                .push((Table::f64(r, cslot), Table::f64(r, cpk)));
        }
    }
    for policy in first_key.keys() {
        let lines: Vec<Series> = series
            .iter()
            .filter(|((p, _), _)| p == policy)
            .map(|((_, s), pts)| Series {
                label: format!("server {s}"),
                points: pts.clone(),
            })
            .collect();
        let name = format!("{pre}lyreo-kv-{}", super::safe_name(policy));
        let l = Labels::new(
            format!("Peak KV occupancy per slot: {policy}"),
            "slot",
            "peak KV / M_s",
        );
        let refs = [RefLine {
            y: 0.9,
            label: "90 %".into(),
        }];
        let r = plots::time_series(&report.out, &name, report.formats, &l, &lines, &[], &refs);
        report.chart(&name, &format!("KV occupancy {policy}"), r);
    }
    Ok(())
}

fn table_ii(report: &mut Report, dir: &Path, pre: &str) -> Result<()> {
    let path = dir.join("summary.json");
    let v: serde_json::Value =
        match std::fs::read_to_string(&path).map(|t| serde_json::from_str(&t)) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                report.skip(format!("Table II: {}: {e}", path.display()));
                return Ok(());
            }
            Err(_) => {
                report.skip(format!(
                    "Table II: {} missing (run in progress?)",
                    path.display()
                ));
                return Ok(());
            }
        };
    let Some(grid) = v["grid"].as_array() else {
        report.skip(format!("Table II: {} has no grid", path.display()));
        return Ok(());
    };
    let s = |g: &serde_json::Value, k: &str| match &g[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n
            .as_f64()
            .map(|x| {
                if x.fract() == 0.0 {
                    format!("{x}")
                } else {
                    format!("{x:.4}")
                }
            })
            .unwrap_or_default(),
        _ => String::new(),
    };
    let cols = [
        "users",
        "servers",
        "mix",
        "nu",
        "policy",
        "seeds",
        "lat_mean_s",
        "lat_p99_s",
        "lb_dev",
        "high_kv",
    ];
    let rows: Vec<Vec<String>> = grid
        .iter()
        .map(|g| cols.iter().map(|k| s(g, k)).collect())
        .collect();
    report.heading(3, "Table II");
    report.table(&format!("{pre}table-ii"), &cols, &rows)
}
