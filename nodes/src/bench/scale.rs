//! `edgemu bench scale`: how much LYREO load one host holds in real time,
//! and how long a large episode takes in virtual time.
//!
//! **Real time, one host.** Steps of U users and S = U/10 modeled servers
//! (three GPU classes) under one Least-Loaded scheduler, all on one host
//! (one actix system, as one `edgemu node` runs them), written with
//! replicated entries and run through [`crate::run::run_all`] for
//! `--seconds`. Users start at 1 s and stop 2 s before the end (outputs of
//! at most 128 tokens, so the servers' work stays bounded). Near the end
//! the host's own load report is read from `/api/snapshot`: the lateness of
//! its 10 ms probe timer (p99 over the last 5 s), the scheduler's decision
//! lateness (p99 over its last 100 slots) and the process's CPU; the
//! results give the envelopes the router dropped and the requests answered.
//! A step is *held* when both lateness p99s are ≤ 10 ms, nothing was
//! dropped and every request that finished in time was served; U doubles
//! until a step is not held or `--max-users` is reached.
//!
//! **Across hosts** (root only; see [`super::scale_hosts`]). The same load
//! spread over `--hosts` `edgemu node` processes in network namespaces,
//! from one host's largest held load up to `--hosts` times it.
//!
//! **Virtual time.** One LYREO episode of the slotted harness with
//! `--virtual-users` users, `--virtual-servers` servers (Moderate mix,
//! Least-Loaded) and `--virtual-slots` slots: its wall time and slots/s.
//!
//! Timing figures depend on the machine and what else runs on it: they are
//! printed, never judged by a test.

use super::common::{free_ports, http_get, print_json, ScratchDir};
use super::scale_hosts::{run_spread_step, NetnsHosts, SpreadStep};
use crate::results::render;
use anyhow::{Context as _, Result};
use edgemu_config::Cluster;
use edgemu_policies::lyreo::PolicySpec;
use edgemu_serving::{run_episode, Scenario};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lateness (ms) above which a step is not held.
pub const LATE_MS: f64 = 10.0;

#[derive(clap::Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Seconds of each real-time step.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Users of the first real-time step (doubled each step).
    #[arg(long, default_value_t = 250)]
    pub start_users: usize,
    /// Stop raising the load at this many users.
    #[arg(long, default_value_t = 4000)]
    pub max_users: usize,
    /// Hosts (network namespaces, root only) of the spread steps; 0 skips them.
    #[arg(long, default_value_t = 5)]
    pub hosts: usize,
    /// The `edgemu` binary the namespace hosts run (this one when unset;
    /// a test, whose own binary is not `edgemu`, names it).
    #[arg(skip)]
    pub node_exe: Option<std::path::PathBuf>,
    /// The virtual-time episode's users, servers and slots.
    #[arg(long, default_value_t = 10_000)]
    pub virtual_users: usize,
    #[arg(long, default_value_t = 200)]
    pub virtual_servers: usize,
    #[arg(long, default_value_t = 800)]
    pub virtual_slots: u64,
}

/// One real-time step's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    pub users: usize,
    pub servers: usize,
    pub timer_late_p99_ms: Option<f64>,
    pub decision_late_p99_ms: Option<f64>,
    pub cpu_cores: Option<f64>,
    pub requests: usize,
    pub served: usize,
    /// Requests answered otherwise (rejected, failed); those still decoding
    /// when the run stopped are not counted.
    pub not_served: usize,
    pub router_dropped: u64,
    pub held: bool,
}

/// `servers` modeled servers split over the three GPU classes (a third
/// each, the rest to the last).
pub(super) fn gpu_classes(servers: usize) -> [(&'static str, usize); 3] {
    let per_class = servers.div_ceil(3);
    [
        ("rtx3080", per_class.min(servers)),
        ("rtx3090", per_class.min(servers.saturating_sub(per_class))),
        ("rtx4090", servers.saturating_sub(2 * per_class)),
    ]
}

/// The cluster file of one step.
fn step_toml(users: usize, servers: usize, seconds: u64, ports: [u16; 2], results: &str) -> String {
    let classes = gpu_classes(servers);
    let mut t = format!(
        "[run]\nname = \"bench-scale\"\nduration = \"{seconds}s\"\nseed = 1\ntime = \"real\"\n\
         results = \"{results}\"\n\n[[hosts]]\nname = \"host\"\nlisten = \"127.0.0.1:{}\"\n\
         control = \"127.0.0.1:{}\"\n\n[[actors]]\nname = \"sched\"\nhost = \"host\"\n\
         kind = \"scheduler\"\npolicy = \"least-loaded\"\nservers = [{}]\n",
        ports[0],
        ports[1],
        classes
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("\"{c}-{{0..{}}}\"", n - 1))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (class, n) in classes.iter().filter(|(_, n)| *n > 0) {
        t += &format!(
            "\n[[actors]]\nname = \"{class}-{{i}}\"\ncount = {n}\nhost = \"host\"\n\
             kind = \"server\"\ngpu = \"{class}\"\n"
        );
    }
    t += &format!(
        "\n[[actors]]\nname = \"user-{{i}}\"\ncount = {users}\nhost = \"host\"\nkind = \"user\"\n\
         scheduler = \"sched\"\nmax_output = 128\nstart = \"1s\"\nstop = \"{}s\"\n",
        seconds.saturating_sub(2).max(2)
    );
    t
}

/// Envelopes a host's router dropped, for any reason.
pub(super) fn router_dropped(r: &edgemu_actors::router::RouterCounters) -> u64 {
    r.dropped_queue_full
        + r.dropped_peer_down
        + r.dropped_partition
        + r.dropped_unknown
        + r.dropped_bad_route
        + r.dropped_inbound_full
}

/// Request outcomes of a `requests.csv`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Outcomes {
    pub requests: usize,
    pub served: usize,
    /// Answered otherwise (rejected, failed); still decoding at the end
    /// (`unanswered`) is not counted.
    pub not_served: usize,
}

impl Outcomes {
    pub(super) fn of_csv(text: &str) -> Self {
        let mut o = Outcomes::default();
        for outcome in text.lines().skip(1).filter_map(|l| l.split(',').nth(8)) {
            o.requests += 1;
            match outcome {
                "served" => o.served += 1,
                "unanswered" => {}
                _ => o.not_served += 1,
            }
        }
        o
    }

    pub(super) fn add(&mut self, other: Outcomes) {
        self.requests += other.requests;
        self.served += other.served;
        self.not_served += other.not_served;
    }
}

/// Runs one real-time step.
fn run_step(users: usize, seconds: u64) -> Result<Step> {
    let servers = (users / 10).max(8);
    let dir = ScratchDir::new("scale")?;
    let ports = free_ports()?;
    let results = dir.path().join("results");
    let text = step_toml(
        users,
        servers,
        seconds,
        ports,
        &results.display().to_string(),
    );
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let cluster = Cluster::from_str(&text, &path)
        .map_err(|e| anyhow::anyhow!("generated cluster file: {e}"))?;
    // The host's own report, read near the end (its windows cover the
    // last seconds of load).
    let control = ports[1];
    let probe = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis((seconds * 1000).saturating_sub(1500)));
        http_get(control, "/api/snapshot", "application/json")
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
    });
    let out = crate::run::run_all(Arc::new(cluster), Some("bench".into()), false)?;
    let snap = probe.join().ok().flatten();
    let f = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_f64);
    let load = snap.as_ref().and_then(|s| s.get("load"));
    let sched = snap
        .as_ref()
        .and_then(|s| s.get("scheduler"))
        .and_then(|s| s.get("sched"));
    let router_dropped = out.hosts.iter().map(|h| router_dropped(&h.router)).sum();
    let reqs = std::fs::read_to_string(out.dir.join("host").join("requests.csv"))
        .context("reading the step's requests.csv")?;
    let outcomes = Outcomes::of_csv(&reqs);
    let timer = f(load.and_then(|l| l.get("timer_late_p99_ms")));
    let decision = f(sched.and_then(|s| s.get("decision_late_p99_ms")));
    let held = timer.is_some_and(|t| t <= LATE_MS)
        && decision.is_some_and(|d| d <= LATE_MS)
        && router_dropped == 0
        && outcomes.not_served == 0;
    Ok(Step {
        users,
        servers,
        timer_late_p99_ms: timer,
        decision_late_p99_ms: decision,
        cpu_cores: f(load.and_then(|l| l.get("cpu_cores"))),
        requests: outcomes.requests,
        served: outcomes.served,
        not_served: outcomes.not_served,
        router_dropped,
        held,
    })
}

/// The virtual-time episode's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VirtualEpisode {
    pub users: usize,
    pub servers: usize,
    pub slots: u64,
    pub wall_s: f64,
    pub slots_per_s: f64,
    pub decisions: u64,
}

/// Everything `bench scale` measures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleReport {
    pub late_ms_limit: f64,
    pub steps: Vec<Step>,
    /// The largest step held.
    pub largest_held: Option<Step>,
    /// The steps across namespace hosts.
    pub spread: Spread,
    #[serde(rename = "virtual")]
    pub virtual_episode: VirtualEpisode,
}

/// The steps across namespace hosts, or why there are none.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Spread {
    pub hosts: usize,
    /// Cores this machine has (all hosts share them).
    pub cores: usize,
    /// One host's largest held load, the first step's users.
    pub base_users: usize,
    pub steps: Vec<SpreadStep>,
    pub largest_held: Option<SpreadStep>,
    /// `largest_held` users over `base_users`.
    pub ratio_to_one_host: Option<f64>,
    pub skipped: Option<String>,
}

/// Steps of `base` users × 1, 2, … `a.hosts` across namespace hosts until
/// one is not held.
fn measure_spread(a: &ScaleArgs, base: usize, quiet: bool) -> Result<Spread> {
    let mut spread = Spread {
        hosts: a.hosts,
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        base_users: base,
        steps: Vec::new(),
        largest_held: None,
        ratio_to_one_host: None,
        skipped: None,
    };
    if a.hosts == 0 {
        spread.skipped = Some("--hosts 0".into());
        return Ok(spread);
    }
    if let Some(why) = NetnsHosts::unavailable() {
        spread.skipped = Some(why);
        return Ok(spread);
    }
    let net = NetnsHosts::create(a.hosts).context("creating the namespace hosts")?;
    for m in 1..=a.hosts {
        let users = base * m;
        if !quiet {
            eprintln!(
                "bench scale: {users} users over {} namespace hosts, {} s ...",
                a.hosts, a.seconds
            );
        }
        let s = run_spread_step(&net, users, a.seconds.max(5), a.node_exe.as_deref())?;
        let held = s.held;
        spread.steps.push(s);
        if !held {
            break;
        }
    }
    spread.largest_held = spread.steps.iter().rfind(|s| s.held).cloned();
    spread.ratio_to_one_host = spread
        .largest_held
        .as_ref()
        .map(|s| s.users as f64 / base.max(1) as f64);
    Ok(spread)
}

/// Runs the steps and the virtual-time episode (progress on stderr unless
/// `quiet`).
pub fn measure(a: &ScaleArgs, quiet: bool) -> Result<ScaleReport> {
    let mut steps = Vec::new();
    let mut users = a.start_users.max(1);
    loop {
        if !quiet {
            eprintln!(
                "bench scale: {users} users, {} servers, {} s ...",
                (users / 10).max(8),
                a.seconds
            );
        }
        let s = run_step(users, a.seconds.max(5))?;
        let held = s.held;
        steps.push(s);
        if !held || users * 2 > a.max_users {
            break;
        }
        users *= 2;
    }
    let largest_held = steps.iter().rfind(|s| s.held).cloned();
    let base = largest_held
        .as_ref()
        .map_or(a.start_users.max(1), |s| s.users);
    let spread = measure_spread(a, base, quiet)?;
    let mut sc = Scenario::paper_default(1);
    sc.users = a.virtual_users;
    sc.servers = a.virtual_servers;
    sc.slots = a.virtual_slots;
    let spec = PolicySpec::parse("least-loaded")?;
    if !quiet {
        eprintln!(
            "bench scale: virtual time, U={} S={} T={} ...",
            sc.users, sc.servers, sc.slots
        );
    }
    let t0 = Instant::now();
    let o = run_episode(&sc, &spec).context("the virtual-time episode")?;
    let wall = t0.elapsed().as_secs_f64();
    Ok(ScaleReport {
        late_ms_limit: LATE_MS,
        steps,
        largest_held,
        spread,
        virtual_episode: VirtualEpisode {
            users: sc.users,
            servers: sc.servers,
            slots: sc.slots,
            wall_s: wall,
            slots_per_s: sc.slots as f64 / wall,
            decisions: o.summary.decisions,
        },
    })
}

/// The columns of a table of steps (one host, or across hosts).
const STEP_COLUMNS: [&str; 10] = [
    "users",
    "servers",
    "timer p99 ms",
    "decision p99 ms",
    "CPU cores",
    "requests",
    "served",
    "not served",
    "dropped",
    "held",
];

/// A step's row under [`STEP_COLUMNS`].
fn step_row(s: &Step) -> Vec<String> {
    let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2}"));
    vec![
        s.users.to_string(),
        s.servers.to_string(),
        opt(s.timer_late_p99_ms),
        opt(s.decision_late_p99_ms),
        opt(s.cpu_cores),
        s.requests.to_string(),
        s.served.to_string(),
        s.not_served.to_string(),
        s.router_dropped.to_string(),
        if s.held { "yes" } else { "no" }.into(),
    ]
}

pub fn run(a: &ScaleArgs) -> Result<()> {
    let r = measure(a, a.json)?;
    if a.json {
        return print_json(&serde_json::to_value(&r)?);
    }
    let (steps, largest) = (&r.steps, &r.largest_held);
    let ve = &r.virtual_episode;
    let rows: Vec<Vec<String>> = steps.iter().map(step_row).collect();
    println!(
        "bench scale: one host in real time, {} s per step (held: timer and decision lateness p99 <= {LATE_MS} ms, nothing dropped or refused)",
        a.seconds
    );
    print!("{}", render(&STEP_COLUMNS, &rows));
    match largest {
        Some(s) => println!(
            "largest load held: {} users + {} modeled servers",
            s.users, s.servers
        ),
        None => println!("largest load held: none of the steps"),
    }
    print_spread(&r.spread, a.seconds);
    println!(
        "virtual time: U={} S={} T={} LYREO episode (least-loaded): {:.1} s wall, {:.1} slots/s",
        ve.users, ve.servers, ve.slots, ve.wall_s, ve.slots_per_s
    );
    Ok(())
}

fn print_spread(sp: &Spread, seconds: u64) {
    if let Some(why) = &sp.skipped {
        println!("across hosts: skipped ({why})");
        return;
    }
    let worst = |xs: Vec<Option<f64>>| -> Option<f64> {
        xs.into_iter().try_fold(0.0f64, |m, x| x.map(|v| m.max(v)))
    };
    // Each step as one host's row: the worst host's lateness, all hosts' CPU.
    let rows: Vec<Vec<String>> = sp
        .steps
        .iter()
        .map(|s| {
            step_row(&Step {
                users: s.users,
                servers: s.servers,
                timer_late_p99_ms: worst(s.per_host.iter().map(|h| h.timer_late_p99_ms).collect()),
                decision_late_p99_ms: worst(
                    s.per_host.iter().map(|h| h.decision_late_p99_ms).collect(),
                ),
                cpu_cores: s.per_host.iter().map(|h| h.cpu_cores).sum(),
                requests: s.requests,
                served: s.served,
                not_served: s.not_served,
                router_dropped: s.router_dropped,
                held: s.held,
            })
        })
        .collect();
    println!(
        "across {} hosts (network namespaces sharing this machine's {} cores), {seconds} s per step; \
         lateness: the worst host's p99, CPU: all hosts together",
        sp.hosts, sp.cores
    );
    print!("{}", render(&STEP_COLUMNS, &rows));
    match (&sp.largest_held, sp.ratio_to_one_host) {
        (Some(s), Some(r)) => println!(
            "largest load held across {} hosts: {} users + {} servers = {r:.1}x one host's {} users",
            sp.hosts, s.users, s.servers, sp.base_users
        ),
        _ => println!("largest load held across {} hosts: none of the steps", sp.hosts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_steps_file_is_valid_and_holds_its_users_and_servers() {
        let text = step_toml(1000, 100, 10, [17_001, 17_002], "/tmp/r");
        let c = Cluster::from_str(&text, Path::new("s.toml")).unwrap();
        let n = |k: &str| c.actors.iter().filter(|a| a.kind.kind_name() == k).count();
        assert_eq!((n("user"), n("server"), n("scheduler")), (1000, 100, 1));
        let text = step_toml(80, 8, 10, [17_001, 17_002], "/tmp/r");
        let c = Cluster::from_str(&text, Path::new("s.toml")).unwrap();
        assert_eq!(c.actors.len(), 80 + 8 + 1);
    }
}
