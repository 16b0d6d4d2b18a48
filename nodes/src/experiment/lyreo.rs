//! `edgemu experiment lyreo` and `edgemu bench lyreo`: the LYREO scheduling
//! experiments (paper §V) on the slotted co-simulation harness of
//! `edgemu-serving`, modeled GPU backends.
//!
//! The grid is users × servers × GPU mix × ν × policy × seed. Policies are
//! named (`least-loaded`, `random`, `static`; learned ones will plug in by
//! name with a weights file). Each run writes `results/<run-id>/`:
//! `requests.csv` (one row per request), `server_slots.csv` (one row per
//! server and slot), `summary.json` (per episode and per grid point × policy,
//! averaged over seeds) and `summary.txt` (the printed table).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_policies::lyreo::PolicySpec;
use edgemu_serving::harness::{
    requests_csv_header, requests_csv_rows, server_slots_csv_header, server_slots_csv_rows,
};
use edgemu_serving::mobility::Mobility;
use edgemu_serving::workload::Workload;
use edgemu_serving::{run_episode, GpuMix, Scenario, Summary};
use serde::Serialize;

use crate::results::render;

#[derive(Args, Debug, Clone)]
pub struct LyreoArgs {
    /// 100 slots and 2 seeds instead of the paper's 800 and 5.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object (see the issue) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Policies, comma-separated: least-loaded, random, static (static:random too), and the
    /// learned lyreo, ly-ppo, ppo, lyreo-count, lyreo-nolb (NAME=PATH for other weights;
    /// guarded: off their training distribution a decision goes to Least-Loaded, counted in
    /// the guard_% column; raw:NAME runs the network alone).
    /// Default: the heuristics plus every learned policy with shipped weights.
    #[arg(long, value_delimiter = ',')]
    pub policies: Vec<String>,
    /// Seeds per grid point (seeds 1..=N).
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Numbers of users, comma-separated (paper sweep: 20,30,40,50,60).
    #[arg(long, value_delimiter = ',', default_value = "40")]
    pub users: Vec<usize>,
    /// Numbers of servers, comma-separated (paper sweep: 4,6,8,10,12).
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub servers: Vec<usize>,
    /// GPU mixes, comma-separated: hom, mod, het.
    #[arg(long, value_delimiter = ',', default_value = "mod")]
    pub mix: Vec<String>,
    /// Lyapunov weights ν, comma-separated (only learned policies use ν).
    #[arg(long, value_delimiter = ',', default_value = "0.5")]
    pub nu: Vec<f64>,
    /// Slots per episode T (default 800; 100 with --quick).
    #[arg(long)]
    pub slots: Option<u64>,
    /// Request lengths: lmsys-like or sharegpt.
    #[arg(long, default_value = "lmsys-like")]
    pub workload: String,
    /// User mobility: random-walk or random-waypoint.
    #[arg(long, default_value = "random-walk")]
    pub mobility: String,
    /// Share of each GPU's M_s that is the KV budget (1.0 = the paper's literal 10/20/24 GB;
    /// see docs/experiments/lyreo.md for why ~0.01 reproduces the paper's load figures).
    #[arg(long, default_value_t = 1.0)]
    pub kv_budget_share: f64,
    /// Results root.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Name of the results folder (default lyreo-<UTC time>).
    #[arg(long)]
    pub run_id: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct LyreoBenchArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Policy to time.
    #[arg(long, default_value = "least-loaded")]
    pub policy: String,
    /// Users U (one request each per slot).
    #[arg(long, default_value_t = 40)]
    pub users: usize,
    /// Modeled servers S (the Moderate GPU mix).
    #[arg(long, default_value_t = 8)]
    pub servers: usize,
    /// Slots T.
    #[arg(long, default_value_t = 800)]
    pub slots: u64,
}

/// Figures of one grid point × policy, averaged over seeds.
#[derive(Debug, Clone, Serialize)]
pub struct Aggregate {
    pub users: usize,
    pub servers: usize,
    pub mix: String,
    pub nu: f64,
    pub policy: String,
    pub seeds: u64,
    pub lat_mean_s: f64,
    pub lat_p99_s: f64,
    pub lb_dev: f64,
    pub high_kv: f64,
    pub rejected: usize,
    pub wait_mean_s: f64,
    pub prefill_mean_s: f64,
    pub decode_mean_s: f64,
    pub upload_mean_s: f64,
    pub episode_wall_s: f64,
    /// Each seed's mean latency (seeds 1..=N in order), for paired tests.
    pub seed_lat_mean_s: Vec<f64>,
    /// Decisions over the seeds.
    #[serde(skip)]
    pub decisions: u64,
    /// Of those, how many a learned policy's guard placed with Least-Loaded
    /// (off its training distribution); left out of the JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub fallbacks: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A policy against Least-Loaded at one grid point: the per-seed paired
/// difference of mean latency (policy − LL; same seed = same users,
/// topology and requests), its mean and Student-t 95 % interval.
#[derive(Debug, Clone, Serialize)]
pub struct Paired {
    pub users: usize,
    pub servers: usize,
    pub mix: String,
    pub nu: f64,
    pub policy: String,
    pub seeds: usize,
    pub diff_mean_s: f64,
    pub diff_ci_lo_s: f64,
    pub diff_ci_hi_s: f64,
    /// The mean difference relative to Least-Loaded's mean latency.
    pub diff_rel: f64,
}

/// [`Paired`] for every policy at every grid point that also ran
/// `least-loaded` with the same seeds.
pub fn paired_vs_least_loaded(aggs: &[Aggregate]) -> Vec<Paired> {
    let mut out = Vec::new();
    for g in aggs.iter().filter(|g| g.policy != "least-loaded") {
        let Some(ll) = aggs.iter().find(|l| {
            l.policy == "least-loaded"
                && l.users == g.users
                && l.servers == g.servers
                && l.mix == g.mix
                && l.nu == g.nu
                && l.seed_lat_mean_s.len() == g.seed_lat_mean_s.len()
        }) else {
            continue;
        };
        let d: Vec<f64> = g
            .seed_lat_mean_s
            .iter()
            .zip(&ll.seed_lat_mean_s)
            .map(|(a, b)| a - b)
            .collect();
        let Some((m, lo, hi)) = edgemu_stats::mean_ci95(&d) else {
            continue;
        };
        out.push(Paired {
            users: g.users,
            servers: g.servers,
            mix: g.mix.clone(),
            nu: g.nu,
            policy: g.policy.clone(),
            seeds: d.len(),
            diff_mean_s: m,
            diff_ci_lo_s: lo,
            diff_ci_hi_s: hi,
            diff_rel: m / ll.lat_mean_s,
        });
    }
    out
}

fn paired_table(ps: &[Paired]) -> String {
    let rows: Vec<Vec<String>> = ps
        .iter()
        .map(|p| {
            let verdict = if p.seeds < 2 {
                "– (1 seed)"
            } else if p.diff_ci_hi_s < 0.0 {
                "lower"
            } else if p.diff_ci_lo_s > 0.0 {
                "higher"
            } else {
                "n.s."
            };
            vec![
                p.users.to_string(),
                p.servers.to_string(),
                p.mix.clone(),
                format!("{}", p.nu),
                p.policy.clone(),
                p.seeds.to_string(),
                format!("{:+.4}", p.diff_mean_s),
                format!("[{:+.4}, {:+.4}]", p.diff_ci_lo_s, p.diff_ci_hi_s),
                format!("{:+.2}", p.diff_rel * 100.0),
                verdict.to_string(),
            ]
        })
        .collect();
    render(
        &[
            "U",
            "S",
            "mix",
            "nu",
            "policy",
            "seeds",
            "d_lat_mean_s",
            "95% CI (paired t)",
            "d_%",
            "vs LL",
        ],
        &rows,
    )
}

/// The mean over seeds of one figure (0 when there are none).
fn avg(xs: &[Summary], f: impl Fn(&Summary) -> f64) -> f64 {
    edgemu_stats::mean(&xs.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
}

fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (d, s) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970 (Howard Hinnant's algorithm).
    let z = d as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// Runs the grid and writes the results folder.
pub fn run(a: &LyreoArgs) -> Result<()> {
    let names: Vec<String> = if a.policies.is_empty() {
        edgemu_policies::lyreo::Variant::ALL
            .into_iter()
            .filter(|v| v.has_default_weights())
            .map(|v| v.name().to_string())
            .chain(["least-loaded", "random", "static"].map(String::from))
            .collect()
    } else {
        a.policies.clone()
    };
    let specs: Vec<PolicySpec> = names
        .iter()
        .map(|p| PolicySpec::parse(p))
        .collect::<Result<_, _>>()
        .context("--policies")?;
    let mixes: Vec<GpuMix> = a
        .mix
        .iter()
        .map(|m| GpuMix::parse(m))
        .collect::<Result<_, _>>()
        .context("--mix")?;
    let workload = Workload::parse(&a.workload).context("--workload")?;
    let mobility = Mobility::parse(&a.mobility).context("--mobility")?;
    let seeds = a.seeds.unwrap_or(if a.quick { 2 } else { 5 });
    let slots = a.slots.unwrap_or(if a.quick { 100 } else { 800 });
    if seeds == 0 || slots == 0 {
        bail!("--seeds and --slots must be > 0");
    }
    if a.users.contains(&0) || a.servers.contains(&0) {
        bail!("--users and --servers must be > 0");
    }
    let run_id = a
        .run_id
        .clone()
        .unwrap_or_else(|| format!("lyreo-{}", utc_stamp()));
    let dir = a.results.join(&run_id);
    if dir.exists() {
        bail!(
            "results folder {} exists; not overwriting it",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let key_cols = "users,servers,mix,nu,policy,seed";
    let mut req_csv = requests_csv_header(key_cols);
    let mut slot_csv = server_slots_csv_header(key_cols);
    let mut episodes = Vec::new();
    let mut aggregates = Vec::new();
    let total = a.users.len() * a.servers.len() * mixes.len() * a.nu.len() * specs.len();
    let mut point = 0;
    for &users in &a.users {
        for &servers in &a.servers {
            for &mix in &mixes {
                for &nu in &a.nu {
                    for spec in &specs {
                        point += 1;
                        if !a.json {
                            eprintln!(
                                "[{point}/{total}] U={users} S={servers} mix={} ν={nu} {} × {seeds} seeds",
                                mix.name(),
                                spec.name
                            );
                        }
                        let mut sums = Vec::new();
                        let mut wall = 0.0;
                        let mut fallbacks = 0;
                        for seed in 1..=seeds {
                            let mut sc = Scenario::paper_default(seed);
                            sc.users = users;
                            sc.servers = servers;
                            sc.mix = mix;
                            sc.nu = nu;
                            sc.slots = slots;
                            sc.workload = workload.clone();
                            sc.mobility = mobility;
                            sc.kv_budget_share = a.kv_budget_share;
                            let t0 = Instant::now();
                            let o = run_episode(&sc, spec).with_context(|| {
                                format!("episode U={users} S={servers} {} seed {seed}", spec.name)
                            })?;
                            wall += t0.elapsed().as_secs_f64();
                            let key = format!(
                                "{users},{servers},{},{nu},{},{seed}",
                                mix.name(),
                                spec.name
                            );
                            requests_csv_rows(&key, &o.requests, &mut req_csv);
                            server_slots_csv_rows(&key, &o.server_slots, &mut slot_csv);
                            sums.push(o.summary);
                            fallbacks += o.fallbacks;
                        }
                        aggregates.push(Aggregate {
                            users,
                            servers,
                            mix: mix.name().to_string(),
                            nu,
                            policy: spec.name.clone(),
                            seeds,
                            lat_mean_s: avg(&sums, |s| s.lat_mean_s),
                            lat_p99_s: avg(&sums, |s| s.lat_p99_s),
                            lb_dev: avg(&sums, |s| s.lb_dev),
                            high_kv: avg(&sums, |s| s.high_kv),
                            rejected: sums.iter().map(|s| s.rejected).sum(),
                            wait_mean_s: avg(&sums, |s| s.wait_mean_s),
                            prefill_mean_s: avg(&sums, |s| s.prefill_mean_s),
                            decode_mean_s: avg(&sums, |s| s.decode_mean_s),
                            upload_mean_s: avg(&sums, |s| s.upload_mean_s),
                            episode_wall_s: wall / seeds as f64,
                            seed_lat_mean_s: sums.iter().map(|s| s.lat_mean_s).collect(),
                            decisions: sums.iter().map(|s| s.decisions).sum(),
                            fallbacks,
                        });
                        episodes.extend(sums);
                    }
                }
            }
        }
    }
    let write = |name: &str, text: &str| -> Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    };
    write("requests.csv", &req_csv)?;
    write("server_slots.csv", &slot_csv)?;
    let paired = paired_vs_least_loaded(&aggregates);
    let mut table = table(&aggregates);
    if !paired.is_empty() {
        table.push_str("\nmean latency minus Least-Loaded's, paired by seed (Student t, 95 %):\n");
        table.push_str(&paired_table(&paired));
    }
    write("summary.txt", &table)?;
    let episode_wall_s = if aggregates.is_empty() {
        0.0
    } else {
        aggregates.iter().map(|g| g.episode_wall_s).sum::<f64>() / aggregates.len() as f64
    };
    // `policies`: the first grid point (the default setting unless swept).
    let mut policies = serde_json::Map::new();
    if let Some(first) = aggregates.first() {
        for g in aggregates.iter().filter(|g| {
            g.users == first.users
                && g.servers == first.servers
                && g.mix == first.mix
                && g.nu == first.nu
        }) {
            policies.insert(
                g.policy.clone(),
                serde_json::json!({
                    "lat_mean_s": g.lat_mean_s, "lat_p99_s": g.lat_p99_s,
                    "lb_dev": g.lb_dev, "high_kv": g.high_kv,
                }),
            );
        }
    }
    let short = serde_json::json!({ "policies": policies, "episode_wall_s": episode_wall_s });
    let summary = serde_json::json!({
        "run_id": run_id,
        "git_rev": option_env!("EDGEMU_GIT_REV").unwrap_or("unknown"),
        "settings": {
            "slots": slots, "seeds": seeds, "slot_s": 1.0, "epsilon": 0.01,
            "workload": a.workload, "mobility": a.mobility,
            "area_m": [200.0, 200.0], "bandwidth_mhz": [6.0, 14.0], "power_dbm": [15.0, 25.0],
        },
        "policies": short["policies"],
        "episode_wall_s": episode_wall_s,
        "grid": aggregates,
        "paired_vs_least_loaded": paired,
        "episodes": episodes,
    });
    write("summary.json", &serde_json::to_string_pretty(&summary)?)?;
    if a.json {
        println!("{short}");
    } else {
        print!("{table}");
        println!("results: {}", dir.display());
    }
    Ok(())
}

fn table(aggs: &[Aggregate]) -> String {
    // The guard column only when a learned policy fell back somewhere.
    let guard = aggs.iter().any(|g| g.fallbacks > 0);
    let rows: Vec<Vec<String>> = aggs
        .iter()
        .map(|g| {
            let mut row = vec![
                g.users.to_string(),
                g.servers.to_string(),
                g.mix.clone(),
                format!("{}", g.nu),
                g.policy.clone(),
                format!("{:.3}", g.lat_mean_s),
                format!("{:.3}", g.lat_p99_s),
                format!("{:.3e}", g.lb_dev),
                format!("{:.2}", g.high_kv * 100.0),
                format!("{:.3}", g.wait_mean_s),
                format!("{:.3}", g.prefill_mean_s),
                format!("{:.3}", g.decode_mean_s),
                g.rejected.to_string(),
                format!("{:.2}", g.episode_wall_s),
            ];
            if guard {
                row.push(format!(
                    "{:.2}",
                    100.0 * g.fallbacks as f64 / g.decisions.max(1) as f64
                ));
            }
            row
        })
        .collect();
    let mut header = vec![
        "U",
        "S",
        "mix",
        "nu",
        "policy",
        "lat_mean_s",
        "lat_p99_s",
        "lb_dev",
        "high_kv_%",
        "wait_s",
        "prefill_s",
        "decode_s",
        "rejected",
        "wall_s",
    ];
    if guard {
        header.push("guard_%");
    }
    render(&header, &rows)
}

/// `edgemu bench lyreo`: one paper-default episode (T = 800, U = 40, S = 8,
/// modeled), timed.
pub fn bench(a: &LyreoBenchArgs) -> Result<()> {
    let spec = PolicySpec::parse(&a.policy).context("--policy")?;
    let mut sc = Scenario::paper_default(1);
    sc.users = a.users;
    sc.servers = a.servers;
    sc.slots = a.slots;
    let t0 = Instant::now();
    let o = run_episode(&sc, &spec).context("bench episode")?;
    let wall = t0.elapsed().as_secs_f64();
    let v = serde_json::json!({
        "episode_wall_s": wall,
        "slots_per_s": sc.slots as f64 / wall,
        "decisions_per_s": o.summary.decisions as f64 / wall,
    });
    if a.json {
        println!("{v}");
    } else {
        println!(
            "lyreo episode (T={}, U={}, S={}, {}): {:.3} s wall, {:.0} slots/s, {:.0} decisions/s, \
             {:.0}x real time",
            sc.slots,
            sc.users,
            sc.servers,
            spec.name,
            wall,
            sc.slots as f64 / wall,
            o.summary.decisions as f64 / wall,
            sc.slots as f64 / wall
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(policy: &str, seeds: &[f64]) -> Aggregate {
        Aggregate {
            users: 40,
            servers: 8,
            mix: "mod".into(),
            nu: 0.5,
            policy: policy.into(),
            seeds: seeds.len() as u64,
            lat_mean_s: seeds.iter().sum::<f64>() / seeds.len() as f64,
            lat_p99_s: 0.0,
            lb_dev: 0.0,
            high_kv: 0.0,
            rejected: 0,
            wait_mean_s: 0.0,
            prefill_mean_s: 0.0,
            decode_mean_s: 0.0,
            upload_mean_s: 0.0,
            episode_wall_s: 0.0,
            seed_lat_mean_s: seeds.to_vec(),
            decisions: 0,
            fallbacks: 0,
        }
    }

    /// Differences (−0.01, −0.02, −0.03): mean −0.02, s = 0.01,
    /// half-width t(2) · 0.01/√3 = 4.303 · 0.005774 = 0.02484.
    #[test]
    fn paired_difference_is_hand_computed() {
        let aggs = [
            agg("least-loaded", &[1.0, 2.0, 3.0]),
            agg("lyreo", &[0.99, 1.98, 2.97]),
            agg("random", &[1.0, 2.0]),
        ];
        let p = paired_vs_least_loaded(&aggs);
        assert_eq!(p.len(), 1, "random has other seeds: not paired");
        assert_eq!(p[0].policy, "lyreo");
        assert!((p[0].diff_mean_s + 0.02).abs() < 1e-12);
        let half = 4.303 * 0.01 / 3f64.sqrt();
        assert!((p[0].diff_ci_hi_s - (-0.02 + half)).abs() < 1e-9);
        assert!((p[0].diff_ci_lo_s - (-0.02 - half)).abs() < 1e-9);
        assert!((p[0].diff_rel + 0.01).abs() < 1e-12);
        assert!(paired_table(&p).contains("n.s."));
    }
}
