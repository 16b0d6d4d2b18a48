//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fresh temporary folder under the target dir (kept for inspection).
pub fn temp_dir(name: &str) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write file");
    p
}

/// Parses probes.csv into (kind, flow, at, seq, size, sent_ns, due_ns, recv_ns).
pub struct ProbeRow {
    pub kind: String,
    pub flow: String,
    pub seq: u64,
    pub recv_ns: u64,
}

pub fn probes(path: &Path) -> Vec<ProbeRow> {
    let text = std::fs::read_to_string(path).expect("read probes.csv");
    text.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            ProbeRow {
                kind: c[0].to_string(),
                flow: c[1].to_string(),
                seq: c[3].parse().expect("seq"),
                recv_ns: c[7].parse().expect("recv_ns"),
            }
        })
        .collect()
}

/// All files under `dir`, relative, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("prefix").to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Runs every host of a cluster file in this process (the file's own clock,
/// virtual or real) and returns the run's results folder. The file is
/// written to `dir/<id>.toml` first and `id` is the run id.
pub fn run_file(text: &str, dir: &Path, id: &str) -> PathBuf {
    let cfg = write(dir, &format!("{id}.toml"), text);
    let cluster = edgemu_nodes::run::load(&cfg).expect("load");
    edgemu_nodes::run::run_all(cluster, Some(id.into()), false)
        .expect("run")
        .dir
}

/// The lines of an `events.jsonl`, parsed.
pub fn events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// `[[hosts]]` entry listening on 127.0.0.1:`listen`, with a control
/// address on `control` when given.
pub fn host_toml(name: &str, listen: u16, control: Option<u16>) -> String {
    let mut t = format!("\n[[hosts]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{listen}\"\n");
    if let Some(c) = control {
        t += &format!("control = \"127.0.0.1:{c}\"\n");
    }
    t
}

/// `[[actors]]` entry of the least-loaded scheduler `sched` of servers `s0`
/// and `s1` on `host`, deciding every `slot`.
pub fn scheduler_toml(host: &str, slot: &str) -> String {
    format!(
        "\n[[actors]]\nname = \"sched\"\nhost = \"{host}\"\nkind = \"scheduler\"\nservers = [\"s0\", \"s1\"]\npolicy = \"least-loaded\"\nslot = \"{slot}\"\n"
    )
}

/// The LYREO system the in-process tests share: users `u0..users` on host
/// `phones` (each with an unlimited 5 ms link to `s0` and `s1`), servers
/// `s0` (RTX 3080, 10 MHz at (50, 50)) and `s1` (RTX 4090, 12 MHz at
/// (150, 150), plus `s1_keys`, e.g. a backend) on `edge`, and a
/// least-loaded scheduler `sched` with 1 s slots on `ctl`; virtual time.
pub struct LyreoSystem<'a> {
    pub name: &'a str,
    pub duration: &'a str,
    pub seed: u64,
    pub results: &'a str,
    pub users: u32,
    pub max_output: u32,
    /// Users stop issuing requests at this time (`stop`).
    pub stop: &'a str,
    pub s1_keys: &'a str,
    /// More `[[actors]]` after the servers, before the users.
    pub actors: &'a str,
    /// `[[chaos]]` entries (at the end).
    pub chaos: &'a str,
}

impl LyreoSystem<'_> {
    pub fn toml(&self) -> String {
        let LyreoSystem {
            name,
            duration,
            seed,
            results,
            users,
            max_output,
            stop,
            s1_keys,
            actors,
            chaos,
        } = self;
        let mut t = format!(
            "\n[run]\nname = \"{name}\"\nduration = \"{duration}\"\nseed = {seed}\ntime = \"virtual\"\nresults = \"{results}\"\n"
        );
        for (i, h) in ["phones", "edge", "ctl"].iter().enumerate() {
            t += &host_toml(h, i as u16 + 1, None);
        }
        t += &scheduler_toml("ctl", "1s");
        t += &format!(
            r#"
[[actors]]
name = "s0"
host = "edge"
kind = "server"
gpu = "rtx3080"
bandwidth_mhz = 10
position = [50, 50]

[[actors]]
name = "s1"
host = "edge"
kind = "server"
gpu = "rtx4090"
{s1_keys}
bandwidth_mhz = 12
position = [150, 150]
{actors}"#
        );
        for u in 0..*users {
            t += &format!(
                r#"
[[actors]]
name = "u{u}"
host = "phones"
kind = "user"
scheduler = "sched"
workload = "lmsys-like"
max_input = 64
max_output = {max_output}
stop = "{stop}"
"#
            );
            for s in 0..2 {
                t += &format!(
                    "\n[[links]]\nname = \"u{u}-s{s}\"\na = \"u{u}\"\nb = \"s{s}\"\nrate = \"unlimited\"\ndelay = \"5ms\"\n"
                );
            }
        }
        t + chaos
    }
}

/// One row of a user host's `requests.csv`.
#[derive(Debug)]
pub struct RequestRow {
    pub slot: u64,
    pub id: u64,
    pub user: String,
    pub server: String,
    pub policy: String,
    pub outcome: String,
    /// sched, upload, wait, prefill, decode (s; NaN when empty).
    pub parts: [f64; 5],
    pub e2e: Option<f64>,
    pub reason: String,
}

/// `requests.csv`, checking its header and that every row has every column.
pub fn requests(path: &Path) -> Vec<RequestRow> {
    let text = std::fs::read_to_string(path).expect("read requests.csv");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("slot,id,user,server,policy,policy_version,input_len,output_len,outcome,sched_s,upload_s,wait_s,prefill_s,decode_s,e2e_s,reason")
    );
    lines
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            assert_eq!(c.len(), 16, "{l}");
            let f = |i: usize| c[i].parse::<f64>().unwrap_or(f64::NAN);
            RequestRow {
                slot: c[0].parse().expect("slot"),
                id: c[1].parse().expect("id"),
                user: c[2].into(),
                server: c[3].into(),
                policy: c[4].into(),
                outcome: c[8].into(),
                parts: [f(9), f(10), f(11), f(12), f(13)],
                e2e: c[14].parse().ok(),
                reason: c[15].into(),
            }
        })
        .collect()
}

/// Starts every host of `cluster` in real time, each on its own thread
/// and actix system, with the options `opts` gives it.
pub fn spawn_real_hosts(
    cluster: &std::sync::Arc<edgemu_config::Cluster>,
    opts: impl Fn(&edgemu_config::HostSpec) -> edgemu_nodes::host::HostOptions,
) -> Vec<std::thread::JoinHandle<anyhow::Result<edgemu_nodes::host::supervisor::HostSummary>>> {
    cluster
        .hosts
        .iter()
        .map(|h| {
            let (c, id, o) = (cluster.clone(), h.id, opts(h));
            std::thread::spawn(move || {
                actix::System::new().block_on(edgemu_nodes::host::run_host_real(c, id, o))
            })
        })
        .collect()
}

/// Waits (up to 20 s) until the control websocket at `url` answers `status`.
pub async fn wait_for_control(url: &str, token: Option<&str>) {
    for _ in 0..200 {
        let status = serde_json::json!({"cmd": "status"});
        if edgemu_nodes::control::client::request(url, status, token)
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("control websocket {url} never answered");
}

/// Every host of a cluster running in real time on threads of its own,
/// with a client of its control socket: the tests that drive a live run
/// from outside (HTTP clients, programs in namespaces) start one.
pub struct LiveRun {
    threads:
        Vec<std::thread::JoinHandle<anyhow::Result<edgemu_nodes::host::supervisor::HostSummary>>>,
    pub rt: tokio::runtime::Runtime,
    /// `ws://` URL of the control socket.
    pub ctl: String,
}

impl LiveRun {
    /// Starts `cluster` with run id `id` and waits until its control
    /// socket on loopback port `control` answers.
    pub fn start(
        cluster: &std::sync::Arc<edgemu_config::Cluster>,
        id: &str,
        control: u16,
    ) -> LiveRun {
        let id = id.to_string();
        let threads = spawn_real_hosts(cluster, |_| edgemu_nodes::host::HostOptions {
            run_id: Some(id.clone()),
            wait_peers: Some(std::time::Duration::from_secs(10)),
            ..Default::default()
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let ctl = format!("ws://127.0.0.1:{control}");
        rt.block_on(wait_for_control(&ctl, None));
        LiveRun { threads, rt, ctl }
    }

    /// One control request, answered.
    pub fn ask(&self, req: serde_json::Value) -> serde_json::Value {
        self.rt
            .block_on(edgemu_nodes::control::client::request(&self.ctl, req, None))
            .expect("control request")
    }

    /// `run.stop`, then waits for every host; each must end without error.
    pub fn stop(self) {
        let _ = self.ask(serde_json::json!({"cmd": "run.stop"}));
        for t in self.threads {
            t.join().expect("host thread").expect("host run");
        }
    }
}

/// Waits (up to 60 s) until something accepts TCP connections on loopback
/// port `port`.
pub fn wait_for_port(port: u16, what: &str) {
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "{what} never listened on {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
