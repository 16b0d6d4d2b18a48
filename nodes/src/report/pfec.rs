//! PriorityFEC experiment runs (`edgemu experiment priorityfec`): `handoffs.csv` with one row
//! per context × realization × ρ × scheme (columns context, realization, rho, scheme,
//! utility, f1, top1). Means with Student-t 95 % CIs over independent units
//! (`edgemu_stats::cluster_means`): recovered utility over the realizations' means (it does
//! not depend on the context), F1 and top-1 over the contexts' means. A CSV without the
//! context or realization column counts each row as its own unit.

use super::csv::Table;
use super::Report;
use crate::plots::{self, BarSeries, CiPoint, CiSeries, Labels};
use anyhow::Result;
use edgemu_stats::cluster_means;
use std::collections::BTreeMap;
use std::path::Path;

/// Schemes of the paper's ablation, in bar order.
const ABLATION: [&str; 4] = [
    "priorityfec",
    "priority-fixed-fec",
    "priority-only",
    "rl-fec-only",
];

/// ρ as a map key (ρ values are written with few decimals).
pub(super) fn rho_key(r: f64) -> i64 {
    (r * 1e6).round() as i64
}

/// The samples one (scheme, ρ) cell's means and 95 % intervals are taken over, for the
/// experiment's summary and this report alike: recovered utility as one mean per
/// realization (it depends on the channel draw, not on the context), F1 and top-1 as one
/// mean per context (`edgemu_stats::cluster_means`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CellSamples {
    /// Handoffs in the cell.
    pub n: usize,
    pub utility: Vec<f64>,
    pub f1: Vec<f64>,
    pub top1: Vec<f64>,
}

impl CellSamples {
    /// From the cell's handoffs as (realization, context, [utility, f1, top1]).
    pub(crate) fn of<R: Ord + Clone, C: Ord + Clone>(rows: &[(R, C, [f64; 3])]) -> Self {
        let by_real = |k: usize| cluster_means(rows.iter().map(|(r, _, v)| (r.clone(), v[k])));
        let by_ctx = |k: usize| cluster_means(rows.iter().map(|(_, c, v)| (c.clone(), v[k])));
        Self {
            n: rows.len(),
            utility: by_real(0),
            f1: by_ctx(1),
            top1: by_ctx(2),
        }
    }
}

pub fn report(report: &mut Report, dir: &Path, pre: &str) -> Result<()> {
    let t = Table::read(&dir.join("handoffs.csv"))?;
    for s in &t.skipped {
        report.skip(s.clone());
    }
    let (crho, cs, cu, cf, ct) = (
        t.col("rho")?,
        t.col("scheme")?,
        t.col("utility")?,
        t.col("f1")?,
        t.col("top1")?,
    );
    let (cctx, creal) = (t.col("context").ok(), t.col("realization").ok());
    // (scheme, ρ) -> handoffs as (realization, context, [utility, f1, top1]); a missing
    // unit column makes each row its own unit (its row number).
    type Row = (String, String, [f64; 3]);
    let mut raw: BTreeMap<(String, i64), Vec<Row>> = BTreeMap::new();
    for (i, r) in t.rows.iter().enumerate() {
        let rho = Table::f64(r, crho);
        if !rho.is_finite() {
            continue;
        }
        let unit = |c: Option<usize>| c.map_or_else(|| format!("row {i}"), |c| r[c].clone());
        raw.entry((r[cs].clone(), rho_key(rho))).or_default().push((
            unit(creal),
            unit(cctx),
            [Table::f64(r, cu), Table::f64(r, cf), Table::f64(r, ct)],
        ));
    }
    type Cell = CellSamples;
    let mut cells: BTreeMap<String, BTreeMap<i64, Cell>> = BTreeMap::new();
    for ((scheme, rho), rows) in raw {
        cells
            .entry(scheme)
            .or_default()
            .insert(rho, CellSamples::of(&rows));
    }
    let series = |pick: fn(&Cell) -> &Vec<f64>| -> Vec<CiSeries> {
        cells
            .iter()
            .map(|(s, by)| CiSeries {
                label: s.clone(),
                points: by
                    .iter()
                    .filter_map(|(k, c)| CiPoint::from_samples(*k as f64 / 1e6, pick(c)))
                    .collect(),
            })
            .collect()
    };
    report.heading(3, "Recovered utility vs ρ");
    let name = format!("{pre}pfec-utility");
    let l = Labels::new(
        "Recovered utility (mean, 95 % CI)",
        "ρ = (D − T_ow) / T_ser",
        "recovered utility",
    );
    let r = plots::lines_with_ci(
        &report.out,
        &name,
        report.formats,
        &l,
        &series(|c| &c.utility),
    );
    report.chart(&name, "recovered utility vs rho", r);
    report.heading(3, "Task quality vs ρ");
    for (metric, pick, title) in [
        (
            "f1",
            (|c: &Cell| &c.f1) as fn(&Cell) -> &Vec<f64>,
            "Token F1 vs full-KV decoding",
        ),
        (
            "top1",
            |c: &Cell| &c.top1,
            "Top-1 agreement vs full-KV decoding",
        ),
    ] {
        let name = format!("{pre}pfec-{metric}");
        let l = Labels::new(format!("{title} (mean, 95 % CI)"), "ρ", metric);
        let r = plots::lines_with_ci(&report.out, &name, report.formats, &l, &series(pick));
        report.chart(&name, title, r);
    }
    // Ablation at ρ = 0.8 (or the nearest ρ present).
    let rhos: Vec<i64> = {
        let mut v: Vec<i64> = cells.values().flat_map(|b| b.keys().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    if let Some(&at) = rhos.iter().min_by_key(|&&k| k.abs_diff(rho_key(0.8))) {
        let present: Vec<&str> = ABLATION
            .iter()
            .copied()
            .filter(|s| cells.contains_key(*s))
            .collect();
        let schemes: Vec<String> = if present.is_empty() {
            cells.keys().cloned().collect()
        } else {
            present.iter().map(|s| s.to_string()).collect()
        };
        let mean = |v: &Vec<f64>| CiPoint::from_samples(0.0, v).map_or(f64::NAN, |p| p.mean);
        let bar = |label: &str, pick: fn(&Cell) -> &Vec<f64>| BarSeries {
            label: label.into(),
            values: schemes
                .iter()
                .map(|s| {
                    cells
                        .get(s)
                        .and_then(|b| b.get(&at))
                        .map_or(f64::NAN, |c| mean(pick(c)))
                })
                .collect(),
        };
        let bars = [
            bar("utility", |c| &c.utility),
            bar("F1", |c| &c.f1),
            bar("top-1", |c| &c.top1),
        ];
        report.heading(3, &format!("Ablation at ρ = {}", at as f64 / 1e6));
        let name = format!("{pre}pfec-ablation");
        let l = Labels::new(
            format!("Ablation at ρ = {}", at as f64 / 1e6),
            "scheme",
            "mean",
        );
        let r = plots::grouped_bars(&report.out, &name, report.formats, &l, &schemes, &bars);
        report.chart(&name, "ablation", r);
    }
    let mut rows = Vec::new();
    for (s, by) in &cells {
        for (k, c) in by {
            let f = |v: &Vec<f64>| CiPoint::from_samples(0.0, v);
            let fmt = |p: Option<CiPoint>| p.map_or(String::new(), |p| format!("{:.4}", p.mean));
            let u = f(&c.utility);
            let half = |p: Option<CiPoint>| {
                p.map_or(String::new(), |p| format!("{:.4}", (p.hi - p.lo) / 2.0))
            };
            rows.push(vec![
                s.clone(),
                format!("{}", *k as f64 / 1e6),
                c.n.to_string(),
                c.utility.len().to_string(),
                c.f1.len().to_string(),
                fmt(u),
                half(u),
                fmt(f(&c.f1)),
                half(f(&c.f1)),
                fmt(f(&c.top1)),
                half(f(&c.top1)),
            ]);
        }
    }
    report.heading(3, "Per scheme and ρ");
    report.table(
        &format!("{pre}pfec-cells"),
        &[
            "scheme",
            "rho",
            "n",
            "realizations",
            "contexts",
            "utility",
            "utility_ci95",
            "f1",
            "f1_ci95",
            "top1",
            "top1_ci95",
        ],
        &rows,
    )
}
