//! `edgemu bench scale`'s step across hosts: the same LYREO load spread
//! over `--hosts` `edgemu node` processes, each in its own network
//! namespace (root only), as a multi-machine run would place it.
//!
//! **Network.** A bridge in a namespace of its own and one namespace per
//! host, joined by veth pairs, with host `h<k>` at `198.18.0.<11+k>/24`.
//! Everything is torn down when the step ends (or fails).
//!
//! **Load.** Host `h<k>` holds the users of cell `k`; the scheduler and
//! the modeled servers of cell `k` (S = U/10 over three GPU classes, as on
//! one host) live on the next host, `h<k+1 mod n>`. Every request and every
//! answer thus crosses the mesh, and every host runs users, servers and a
//! scheduler. The nodes run with `--wait-peers` like any multi-host run.
//!
//! **Held.** Near the end each host's own `/api/snapshot` is read from
//! inside its namespace: its timer lateness p99 and CPU, and its scheduler's
//! decision lateness p99. A step is held when every host's lateness p99s
//! are ≤ [`LATE_MS`], no router dropped anything and every request that
//! finished in time was served. The load starts at one host's largest held
//! load and grows by that much each step, up to `--hosts` times it.
//!
//! An interrupted bench (Ctrl-C) leaves its `emu-scale-<pid>-*` namespaces
//! behind (`ip netns del` removes them); a finished or failed one does not.
//!
//! Every process shares this machine's cores: the step shows what the
//! spread costs and that each host reports its own lateness; whether n
//! hosts hold n times one host's load needs n machines (the table prints
//! the cores there were).

use super::common::{http_get_at, ScratchDir};
use super::scale::{gpu_classes, router_dropped, Outcomes, LATE_MS};
use crate::netns::{ip, Netns};
use anyhow::{bail, Context as _, Result};
use edgemu_actors::router::RouterCounters;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MESH_PORT: u16 = 7300;
const CONTROL_PORT: u16 = 7400;
/// The token's environment variable in the generated file.
const TOKEN_ENV: &str = "EDGEMU_BENCH_SCALE_TOKEN";

/// Host `k`'s address.
fn host_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + k as u8)
}

/// Network namespaces for `n` hosts on one bridge; deleted on drop.
pub struct NetnsHosts {
    prefix: String,
    /// The bridge's namespace first, then the hosts'.
    created: Vec<Netns>,
    n: usize,
}

impl NetnsHosts {
    /// Why namespace hosts cannot be made here, if they cannot.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Some("needs root (it creates network namespaces)".into());
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => None,
            _ => Some("needs iproute2 (`ip`)".into()),
        }
    }

    pub fn create(n: usize) -> Result<Self> {
        if n == 0 || n > 200 {
            bail!("--hosts must be between 1 and 200, not {n}");
        }
        let mut me = NetnsHosts {
            prefix: format!("emu-scale-{}", std::process::id()),
            created: Vec::new(),
            n,
        };
        let br = me.bridge();
        me.add(&br)?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for k in 0..n {
            let ns = me.ns(k);
            me.add(&ns)?;
            let veth = format!("v{k}");
            ip(&[
                "-n", &br, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &br, "link", "set", &veth, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &veth, "up"])?;
            let addr = format!("{}/24", host_ip(k));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(me)
    }

    fn add(&mut self, ns: &str) -> Result<()> {
        self.created.push(Netns::create(ns)?);
        Ok(())
    }

    fn bridge(&self) -> String {
        format!("{}-br", self.prefix)
    }

    /// Host `k`'s namespace.
    pub fn ns(&self, k: usize) -> String {
        format!("{}-h{k}", self.prefix)
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        // The hosts' namespaces go before the bridge's.
        while let Some(ns) = self.created.pop() {
            drop(ns);
        }
    }
}

/// One host's own report near the end of a step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostFigures {
    pub host: String,
    pub timer_late_p99_ms: Option<f64>,
    /// Of the scheduler this host runs.
    pub decision_late_p99_ms: Option<f64>,
    pub cpu_cores: Option<f64>,
}

/// One step across hosts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpreadStep {
    pub hosts: usize,
    pub users: usize,
    pub servers: usize,
    pub per_host: Vec<HostFigures>,
    pub requests: usize,
    pub served: usize,
    pub not_served: usize,
    pub router_dropped: u64,
    pub held: bool,
}

/// Users of cell `k` of `n` (the remainder to the first cells).
fn cell_users(users: usize, n: usize, k: usize) -> usize {
    users / n + usize::from(k < users % n)
}

/// Modeled servers of a cell of `users` (a tenth, at least three).
fn cell_servers(users: usize) -> usize {
    (users / 10).max(3)
}

/// The cluster file of a step: `users` in `n` cells (see the module doc).
pub(super) fn spread_toml(n: usize, users: usize, seconds: u64, results: &str) -> String {
    let mut t = format!(
        "[run]\nname = \"bench-scale-hosts\"\nduration = \"{seconds}s\"\nseed = 1\ntime = \"real\"\n\
         results = \"{results}\"\ntoken_env = \"{TOKEN_ENV}\"\n"
    );
    for k in 0..n {
        t += &format!(
            "\n[[hosts]]\nname = \"h{k}\"\nlisten = \"{ip}:{MESH_PORT}\"\ncontrol = \"{ip}:{CONTROL_PORT}\"\n",
            ip = host_ip(k)
        );
    }
    for k in 0..n {
        let cell_users = cell_users(users, n, k);
        let classes = gpu_classes(cell_servers(cell_users));
        let server_host = (k + 1) % n;
        let names: Vec<String> = classes
            .iter()
            .filter(|(_, c)| *c > 0)
            .map(|(class, c)| format!("\"{class}-c{k}-{{0..{}}}\"", c - 1))
            .collect();
        t += &format!(
            "\n[[actors]]\nname = \"sched-c{k}\"\nhost = \"h{server_host}\"\nkind = \"scheduler\"\n\
             policy = \"least-loaded\"\nservers = [{}]\n",
            names.join(", ")
        );
        for (class, c) in classes.iter().filter(|(_, c)| *c > 0) {
            t += &format!(
                "\n[[actors]]\nname = \"{class}-c{k}-{{i}}\"\ncount = {c}\nhost = \"h{server_host}\"\n\
                 kind = \"server\"\ngpu = \"{class}\"\n"
            );
        }
        if cell_users > 0 {
            t += &format!(
                "\n[[actors]]\nname = \"user-c{k}-{{i}}\"\ncount = {cell_users}\nhost = \"h{k}\"\n\
                 kind = \"user\"\nscheduler = \"sched-c{k}\"\nmax_output = 128\nstart = \"1s\"\n\
                 stop = \"{}s\"\n",
                seconds.saturating_sub(2).max(2)
            );
        }
    }
    t
}

/// Reads `url_path` from host `k`'s control address, from inside its
/// namespace (on a thread that joins it; the caller's thread stays put).
fn snapshot_in(ns: &str, k: usize) -> Option<serde_json::Value> {
    crate::netns::run_in(ns, move || {
        let addr = SocketAddr::from((host_ip(k), CONTROL_PORT));
        Ok(http_get_at(addr, "/api/snapshot", "application/json")
            .and_then(|(_, body)| serde_json::from_str(&body).ok()))
    })
    .ok()
    .flatten()
}

/// The run's start (unix ns) from its `run.json`, once written; fails
/// early when a node has already exited.
fn run_start(dir: &Path, deadline: Instant, nodes: &mut Nodes) -> Result<u64> {
    let path = dir.join("run.json");
    loop {
        for (name, child) in &mut nodes.0 {
            if let Some(status) = child.try_wait()? {
                bail!("host {name}'s node exited with {status} before the run started");
            }
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(s) = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("start_unix_ns").and_then(serde_json::Value::as_u64))
            {
                return Ok(s);
            }
        }
        if Instant::now() > deadline {
            bail!("the run did not start (no start in {})", path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The started nodes; killed on drop if still running.
struct Nodes(Vec<(String, Child)>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs one step of `users` over the hosts of `net`; the nodes run `exe`
/// (this binary when `None`).
pub fn run_spread_step(
    net: &NetnsHosts,
    users: usize,
    seconds: u64,
    exe: Option<&Path>,
) -> Result<SpreadStep> {
    let n = net.n;
    let dir = ScratchDir::new("scale-hosts")?;
    let results = dir.path().join("results");
    let text = spread_toml(n, users, seconds, &results.display().to_string());
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let exe = match exe {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe().context("locating the edgemu binary")?,
    };
    let token = format!("scale-{}-{}", std::process::id(), rand::random::<u64>());
    let run_id = "bench-hosts";
    let mut nodes = Nodes(Vec::new());
    for k in 0..n {
        let log = std::fs::File::create(dir.path().join(format!("h{k}.log")))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &net.ns(k)])
            .arg(&exe)
            .args(["node", "--config"])
            .arg(&path)
            .args([
                "--host",
                &format!("h{k}"),
                "--run-id",
                run_id,
                "--wait-peers",
                "20s",
                "--quiet",
            ])
            .env(TOKEN_ENV, &token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting host h{k}'s node"))?;
        nodes.0.push((format!("h{k}"), child));
    }
    let run_dir = results.join(run_id);
    let start = run_start(
        &run_dir,
        Instant::now() + Duration::from_secs(40),
        &mut nodes,
    )
    .with_context(|| node_logs(dir.path(), n))?;
    // Each host's own report near the end (its windows cover the last
    // seconds of load).
    let probe_at = start + (seconds * 1000).saturating_sub(1500) * 1_000_000;
    let now = edgemu_actors::clock::unix_now_ns();
    std::thread::sleep(Duration::from_nanos(probe_at.saturating_sub(now)));
    let snaps: Vec<Option<serde_json::Value>> =
        (0..n).map(|k| snapshot_in(&net.ns(k), k)).collect();
    let deadline = Instant::now() + Duration::from_secs(seconds + 60);
    for (name, child) in &mut nodes.0 {
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!(
                        "host {name}'s node exited with {status}: {}",
                        node_logs(dir.path(), n)
                    );
                }
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "host {name}'s node did not finish: {}",
                    node_logs(dir.path(), n)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let f = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_f64);
    let mut per_host = Vec::new();
    let mut outcomes = Outcomes::default();
    let mut dropped = 0;
    for (k, snap) in snaps.iter().enumerate() {
        let host = format!("h{k}");
        let load = snap.as_ref().and_then(|s| s.get("load"));
        let sched = snap
            .as_ref()
            .and_then(|s| s.get("scheduler"))
            .and_then(|s| s.get(format!("sched-c{}", (k + n - 1) % n)));
        per_host.push(HostFigures {
            host: host.clone(),
            timer_late_p99_ms: f(load.and_then(|l| l.get("timer_late_p99_ms"))),
            decision_late_p99_ms: f(sched.and_then(|s| s.get("decision_late_p99_ms"))),
            cpu_cores: f(load.and_then(|l| l.get("cpu_cores"))),
        });
        // A host's summary.json (its `HostSummary`): the router's counters.
        #[derive(serde::Deserialize)]
        struct Summary {
            router: RouterCounters,
        }
        let summary: Summary = read_json(&run_dir.join(&host).join("summary.json"))?;
        dropped += router_dropped(&summary.router);
        let csv = run_dir.join(&host).join("requests.csv");
        let text =
            std::fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
        outcomes.add(Outcomes::of_csv(&text));
    }
    let late = |x: Option<f64>| x.is_some_and(|v| v <= LATE_MS);
    let held = per_host
        .iter()
        .all(|h| late(h.timer_late_p99_ms) && late(h.decision_late_p99_ms))
        && dropped == 0
        && outcomes.not_served == 0;
    let servers = (0..n).map(|k| cell_servers(cell_users(users, n, k))).sum();
    Ok(SpreadStep {
        hosts: n,
        users,
        servers,
        per_host,
        requests: outcomes.requests,
        served: outcomes.served,
        not_served: outcomes.not_served,
        router_dropped: dropped,
        held,
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &PathBuf) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The last lines of every node's log, for an error.
fn node_logs(dir: &Path, n: usize) -> String {
    let mut out = String::new();
    for k in 0..n {
        let text = std::fs::read_to_string(dir.join(format!("h{k}.log"))).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        out += &format!(
            "\n--- h{k}: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_config::Cluster;

    #[test]
    fn a_spread_file_puts_each_cells_servers_on_the_next_host() {
        let text = spread_toml(5, 1003, 10, "/tmp/r");
        let c = Cluster::from_str(&text, Path::new("s.toml")).unwrap();
        let n = |k: &str| c.actors.iter().filter(|a| a.kind.kind_name() == k).count();
        assert_eq!(c.hosts.len(), 5);
        assert_eq!((n("user"), n("scheduler")), (1003, 5));
        assert_eq!(n("server"), 5 * 20);
        let host_of = |name: &str| {
            let a = c.actors.iter().find(|a| a.name == name).expect(name);
            c.hosts[a.host.0 as usize].name.clone()
        };
        assert_eq!(host_of("user-c4-0"), "h4");
        assert_eq!(host_of("sched-c4"), "h0");
        assert_eq!(host_of("rtx4090-c1-0"), "h2");
    }
}
