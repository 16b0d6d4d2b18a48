//! `edgemu bench control`: how fast a running emulator answers control
//! commands and swaps a policy while it is loaded — issue 11's aim that a
//! `policy.swap` is acknowledged and in force within one decision epoch,
//! with no decision dropped.
//!
//! One host in real time on loopback runs a live LYREO system (20 users,
//! 4 modeled servers, a least-loaded scheduler deciding every 200 ms) and,
//! for load on the same actors' thread, a 90 Mb/s constant-rate flow of
//! 1400-byte packets through a 100 Mb/s link. A client on another thread
//! sends, every 250 ms, a `status` and a `policy.swap` (least-loaded and
//! random in turn) to the host's control websocket, each on a fresh
//! connection as `edgemu ctl` does (so the figures include connecting),
//! and measures for each the time to its reply (ack). For each swap it then
//! polls `/api/snapshot` until the scheduler reports the new version (in
//! force: the scheduler has decided a slot with it). After the run it reads
//! the scheduler's and the users' tables: every request issued before the
//! last two slots must have been decided.
//!
//! Printed, never judged (wall-clock figures on a shared machine).

use super::common::{free_ports, http_get, print_json, within, ScratchDir};
use super::BenchArgs;
use crate::control::client;
use crate::report::csv::Table;
use crate::results::render;
use crate::run::{load, run_all};
use anyhow::{bail, Context as _, Result};
use edgemu_stats::{percentile, sorted_finite};
use serde::Serialize;
use std::time::{Duration, Instant};

const TOKEN_VAR: &str = "EDGEMU_BENCH_CONTROL_TOKEN";
const SLOT_MS: u64 = 200;

#[derive(Debug, Clone, Serialize)]
pub struct ControlFigures {
    pub swap_ack_ms_p50: f64,
    pub swap_ack_ms_p99: f64,
    /// Swap acknowledged → the scheduler's snapshot shows the new version.
    pub swap_in_force_ms_p50: f64,
    pub swap_in_force_ms_p99: f64,
    pub ctl_ack_ms_p50: f64,
    pub ctl_ack_ms_p99: f64,
    pub swaps: usize,
    /// The decision epoch (the scheduler's slot), ms.
    pub decision_epoch_ms: u64,
    /// Requests the users issued, and how many of those (issued before the
    /// last two slots) got no decision.
    pub requests: usize,
    pub undecided: usize,
    /// Decisions by policy name, from the scheduler's table.
    pub decisions_by_policy: std::collections::BTreeMap<String, usize>,
    pub duration_s: f64,
}

fn cluster_text(results: &str, mesh: u16, control: u16, secs: u64) -> String {
    let mut t = format!(
        r#"
[run]
name = "bench-control"
duration = "{secs}s"
seed = 7
results = "{results}"
token_env = "{TOKEN_VAR}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{mesh}"
control = "127.0.0.1:{control}"

[[actors]]
name = "sched"
host = "edge"
kind = "scheduler"
servers = ["s0", "s1", "s2", "s3"]
policy = "least-loaded"
slot = "{SLOT_MS}ms"
collect = "20ms"

[[actors]]
name = "cbr"
host = "edge"
kind = "constant"
to = "sink"
via = "wan"
rate = "90Mbps"
size = "1400B"

[[actors]]
name = "sink"
host = "edge"
kind = "sink"

[[links]]
name = "wan"
a = "cbr"
b = "sink"
rate = "100Mbps"
delay = "10ms"
"#
    );
    for (i, gpu) in ["rtx3080", "rtx3090", "rtx4090", "rtx3090"]
        .iter()
        .enumerate()
    {
        t += &format!(
            "\n[[actors]]\nname = \"s{i}\"\nhost = \"edge\"\nkind = \"server\"\ngpu = \"{gpu}\"\n"
        );
    }
    for u in 0..20 {
        t += &format!(
            "\n[[actors]]\nname = \"u{u}\"\nhost = \"edge\"\nkind = \"user\"\nscheduler = \"sched\"\nworkload = \"lmsys-like\"\nmax_input = 128\nmax_output = 32\nstop = \"{}s\"\n",
            secs.saturating_sub(1)
        );
    }
    t
}

/// The scheduler's active version from the host's `/api/snapshot`.
fn active_version(port: u16) -> Option<String> {
    let (_, body) = http_get(port, "/api/snapshot", "application/json")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["policy"]["sched"]["version"].as_str().map(str::to_string)
}

/// `(p50, p99)` of `v`, ms; NaN when empty.
fn p50_p99(v: &[f64]) -> (f64, f64) {
    let s = sorted_finite(v);
    let q = |p| percentile(&s, p).unwrap_or(f64::NAN);
    (q(50.0), q(99.0))
}

pub fn measure(args: &BenchArgs) -> Result<ControlFigures> {
    let secs: u64 = if args.quick { 5 } else { 15 };
    let token = format!("bench-control-{}", std::process::id());
    std::env::set_var(TOKEN_VAR, &token);
    let scratch = ScratchDir::new("control")?;
    let dir = scratch.path();
    let [mesh, control] = free_ports()?;
    let cfg = dir.join("cluster.toml");
    std::fs::write(
        &cfg,
        cluster_text(
            &dir.join("results").display().to_string(),
            mesh,
            control,
            secs,
        ),
    )
    .with_context(|| format!("writing {}", cfg.display()))?;
    let cluster = load(&cfg)?;
    let run = std::thread::Builder::new()
        .name("bench-control-run".into())
        .spawn(move || run_all(cluster, Some("bench-control".into()), false))?;

    let url = format!("ws://127.0.0.1:{control}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    while active_version(control).is_none() {
        if t0.elapsed() > Duration::from_secs(30) || run.is_finished() {
            bail!("the host's control address never showed the scheduler");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut swap_ack, mut in_force, mut ctl_ack) = (Vec::new(), Vec::new(), Vec::new());
    let names = ["random", "least-loaded"];
    let end = t0 + Duration::from_secs(secs.saturating_sub(2));
    let mut k = 0;
    while Instant::now() < end {
        let tick = Instant::now();
        let t = Instant::now();
        rt.block_on(within(
            "status",
            client::request(&url, serde_json::json!({"cmd": "status"}), Some(&token)),
        ))
        .context("status")?;
        ctl_ack.push(t.elapsed().as_secs_f64() * 1e3);
        let name = names[k % 2];
        k += 1;
        let t = Instant::now();
        let reply = rt
            .block_on(within(
                "policy.swap",
                client::request(
                    &url,
                    serde_json::json!({"cmd": "policy.swap", "actor": "sched", "policy": name}),
                    Some(&token),
                ),
            ))
            .context("policy.swap")?;
        swap_ack.push(t.elapsed().as_secs_f64() * 1e3);
        let version = reply
            .get("version")
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| edgemu_policies::slot::version_hash(name, &[]));
        let acked = Instant::now();
        while active_version(control).as_deref() != Some(version.as_str()) {
            if acked.elapsed() > Duration::from_secs(5) {
                bail!("swap to {name} not in force 5 s after its ack");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        in_force.push(acked.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(250).saturating_sub(tick.elapsed()));
    }
    let out = run
        .join()
        .map_err(|_| anyhow::anyhow!("the run thread panicked"))??;

    let decisions = Table::read(&out.dir.join("edge/decisions.csv"))?;
    let cp = decisions.col("policy")?;
    let mut by_policy = std::collections::BTreeMap::new();
    for r in &decisions.rows {
        *by_policy.entry(r[cp].clone()).or_insert(0) += 1;
    }
    let last_slots = (secs * 1000 / SLOT_MS).saturating_sub(2);
    let requests_csv = Table::read(&out.dir.join("edge/requests.csv"))?;
    let (cs, cserver) = (requests_csv.col("slot")?, requests_csv.col("server")?);
    let requests = requests_csv.rows.len();
    let undecided = requests_csv
        .rows
        .iter()
        .filter(|r| {
            let slot: u64 = r[cs].parse().unwrap_or(0);
            slot < last_slots && (r[cserver].is_empty() || r[cserver] == "?")
        })
        .count();
    let (swap_ack_ms_p50, swap_ack_ms_p99) = p50_p99(&swap_ack);
    let (swap_in_force_ms_p50, swap_in_force_ms_p99) = p50_p99(&in_force);
    let (ctl_ack_ms_p50, ctl_ack_ms_p99) = p50_p99(&ctl_ack);
    Ok(ControlFigures {
        swap_ack_ms_p50,
        swap_ack_ms_p99,
        swap_in_force_ms_p50,
        swap_in_force_ms_p99,
        ctl_ack_ms_p50,
        ctl_ack_ms_p99,
        swaps: k,
        decision_epoch_ms: SLOT_MS,
        requests,
        undecided,
        decisions_by_policy: by_policy,
        duration_s: secs as f64,
    })
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let f = measure(args)?;
    if args.json {
        return print_json(&serde_json::to_value(&f)?);
    }
    println!(
        "bench control: live LYREO (20 users, 4 modeled servers, decisions every {} ms) + 90 Mb/s \
         through a 100 Mb/s link on one host, {} s; a status and a policy.swap every 250 ms, each on a \
         fresh websocket",
        f.decision_epoch_ms, f.duration_s
    );
    let ms = |v: f64| format!("{v:.2}");
    print!(
        "{}",
        render(
            &["figure", "p50 ms", "p99 ms"],
            &[
                vec![
                    "policy.swap ack".into(),
                    ms(f.swap_ack_ms_p50),
                    ms(f.swap_ack_ms_p99)
                ],
                vec![
                    "swap ack -> in force".into(),
                    ms(f.swap_in_force_ms_p50),
                    ms(f.swap_in_force_ms_p99)
                ],
                vec![
                    "status ack".into(),
                    ms(f.ctl_ack_ms_p50),
                    ms(f.ctl_ack_ms_p99)
                ],
            ]
        )
    );
    println!(
        "{} swaps; {} requests, {} issued before the last two slots without a decision; decisions by policy {:?}",
        f.swaps, f.requests, f.undecided, f.decisions_by_policy
    );
    Ok(())
}
