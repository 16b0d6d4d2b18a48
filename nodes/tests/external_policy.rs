//! External policies in a live run (real time, one host, loopback): a fake
//! policy process written here (a tokio-tungstenite server speaking
//! `edgemu_policies::external`'s JSON) serves the scheduler's slot
//! decisions and the sending agent's repair decisions. When it answers
//! every decision with valid actions, it decides every slot and every
//! repair epoch; when it hangs, drops its connections mid-run or answers
//! garbage, every request is still answered and every handoff recorded, the
//! fallbacks are counted by reason, and the run ends normally.

mod common;

use common::*;
use edgemu_policies::external::{DecisionReply, DecisionRequest, WireObs, SERVER_FEATURES};
use futures_util::{SinkExt, StreamExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_tungstenite::tungstenite::Message;

/// What the fake policy process does with each request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Least-loaded-like valid actions.
    Answer,
    /// Reads requests, never answers.
    Hang,
    /// Answers, then after `n` slot decisions drops every connection and
    /// stops listening.
    DieAfter(u64),
    /// Answers that are not valid actions (in turn: not JSON, an error,
    /// out of range or masked, no action).
    Garbage,
}

#[derive(Default)]
struct Seen {
    lyreo: AtomicU64,
    repair: AtomicU64,
}

/// A valid least-loaded-like action: each request to the server with the
/// least KV (occupancy + reserved, as shares) plus what this slot already
/// gave it; the first allowed repair action.
fn good_action(req: &DecisionRequest) -> serde_json::Value {
    match &req.obs {
        WireObs::Lyreo(a) => {
            let mut load: Vec<f32> = (0..a.servers)
                .map(|s| {
                    let f = &a.server_features[s * SERVER_FEATURES..(s + 1) * SERVER_FEATURES];
                    f[3] + f[4]
                })
                .collect();
            let picks: Vec<usize> = (0..a.requests)
                .map(|_| {
                    let s = (0..a.servers)
                        .min_by(|&x, &y| load[x].total_cmp(&load[y]))
                        .unwrap_or(0);
                    load[s] += 0.05;
                    s
                })
                .collect();
            serde_json::json!(picks)
        }
        WireObs::Repair(r) => {
            serde_json::json!(r.mask.iter().position(|&m| m).unwrap_or(0))
        }
    }
}

fn garbage(req: &DecisionRequest, n: u64) -> String {
    let bad_action = match &req.obs {
        WireObs::Lyreo(a) => serde_json::json!(vec![a.servers + 3; a.requests]),
        WireObs::Repair(r) => {
            serde_json::json!(r.mask.iter().position(|&m| !m).unwrap_or(7))
        }
    };
    match n % 4 {
        0 => "{\"this is\": not json".to_string(),
        1 => serde_json::to_string(&DecisionReply {
            id: req.id,
            action: None,
            error: Some("policy crashed".into()),
        })
        .unwrap(),
        2 => serde_json::to_string(&DecisionReply {
            id: req.id,
            action: Some(bad_action),
            error: None,
        })
        .unwrap(),
        _ => format!("{{\"id\":{}}}", req.id),
    }
}

/// Serves on `listener` until `stop` fires (then every connection drops).
async fn serve(listener: tokio::net::TcpListener, mode: Mode, seen: Arc<Seen>) {
    let died = Arc::new(tokio::sync::Notify::new());
    let accept = async {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (seen, died) = (seen.clone(), died.clone());
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                let (mut tx, mut rx) = ws.split();
                while let Some(Ok(msg)) = rx.next().await {
                    let Message::Text(text) = msg else { continue };
                    let req: DecisionRequest =
                        serde_json::from_str(text.as_str()).expect("a decision request");
                    let n = match req.obs {
                        WireObs::Lyreo(_) => seen.lyreo.fetch_add(1, Ordering::SeqCst),
                        WireObs::Repair(_) => seen.repair.fetch_add(1, Ordering::SeqCst),
                    };
                    let reply = match mode {
                        Mode::Hang => continue,
                        Mode::Garbage => garbage(&req, n),
                        Mode::Answer | Mode::DieAfter(_) => serde_json::to_string(&DecisionReply {
                            id: req.id,
                            action: Some(good_action(&req)),
                            error: None,
                        })
                        .unwrap(),
                    };
                    if tx.send(Message::text(reply)).await.is_err() {
                        return;
                    }
                    if let Mode::DieAfter(k) = mode {
                        if seen.lyreo.load(Ordering::SeqCst) >= k {
                            // Let the last answer be read before the sockets go.
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            died.notify_one();
                        }
                    }
                }
            });
        }
    };
    tokio::select! {
        _ = accept => {}
        _ = died.notified() => {}
    }
}

/// Starts the fake policy process on its own thread; its URL.
fn policy_process(mode: Mode, seen: Arc<Seen>) -> String {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let port = std_listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            serve(listener, mode, seen).await;
        });
        // Dropping the runtime closes every connection it still holds.
    });
    format!("ws://127.0.0.1:{port}")
}

/// One real-time host: a scheduler asking `url` for 0.5 s slots of two
/// modeled servers and three users (from 0.5 s, so the connections are up
/// well before the first decision); agent `a` hands a tiny-model context
/// to `b` every second, asking `url` for its repair decisions. `deadlines`
/// of a slot and a repair decision: generous where a test counts answers
/// (a loaded machine must not turn them into timeouts), short where it
/// waits for timeouts.
fn cluster_text(results: &str, url: &str, deadlines: (&str, &str)) -> String {
    let (slot_deadline, repair_deadline) = deadlines;
    let port = free_port();
    let mut t = format!(
        r#"
[run]
name = "external"
duration = "4s"
seed = 3
time = "real"
results = "{results}"

[[hosts]]
name = "solo"
listen = "127.0.0.1:{port}"

[[actors]]
name = "sched"
host = "solo"
kind = "scheduler"
servers = ["s0", "s1"]
policy = "external"
external = {{ url = "{url}", deadline = "{slot_deadline}", fallback = "least-loaded" }}
slot = "500ms"
collect = "50ms"

[[actors]]
name = "s0"
host = "solo"
kind = "server"
gpu = "rtx3080"
position = [50, 50]

[[actors]]
name = "s1"
host = "solo"
kind = "server"
gpu = "rtx4090"
position = [150, 150]

[[actors]]
name = "a"
host = "solo"
kind = "agent"
server = "s0"
model = "tiny"
hand_to = "b"
via = "wan"
context_tokens = 256
start = "600ms"
every = "1s"
handoffs = 3
ttft = "150ms"
decode_tokens = 2
policy = "external"
external = {{ url = "{url}", deadline = "{repair_deadline}", fallback = "deficit-heuristic" }}

[[actors]]
name = "b"
host = "solo"
kind = "agent"
server = "s1"
model = "tiny"

[[links]]
name = "wan"
a = "a"
b = "b"
rate = "100Mbps"
delay = "5ms"
"#
    );
    for u in 0..3 {
        t += &format!(
            r#"
[[actors]]
name = "u{u}"
host = "solo"
kind = "user"
scheduler = "sched"
workload = "lmsys-like"
max_input = 64
max_output = 8
start = "500ms"
stop = "3s"
"#
        );
    }
    t
}

/// The same system with built-in policies and `external` tables, and a
/// chaos timeline swapping the scheduler and the sender to the external
/// policy and back.
fn swapping_cluster_text(results: &str, url: &str) -> String {
    let text = cluster_text(results, url, GENEROUS)
        .replacen("policy = \"external\"\n", "policy = \"least-loaded\"\n", 1)
        .replacen(
            "policy = \"external\"\n",
            "policy = \"deficit-heuristic\"\n",
            1,
        );
    text + r#"
[[chaos]]
at = "1200ms"
command = "policy.swap"
actor = "sched"
policy = "external"

[[chaos]]
at = "800ms"
command = "policy.swap"
actor = "a"
policy = "external"
deadline = "10ms"

[[chaos]]
at = "2200ms"
command = "policy.rollback"
actor = "sched"
"#
}

/// One row of `external_policies.csv`, by column name.
struct Counts(std::collections::HashMap<String, String>);

impl Counts {
    fn n(&self, col: &str) -> u64 {
        self.0[col].parse().unwrap_or_else(|_| panic!("{col}"))
    }
    fn ms(&self, col: &str) -> f64 {
        self.0[col].parse().unwrap_or_else(|_| panic!("{col}"))
    }
}

fn counts(dir: &Path, actor: &str) -> Counts {
    let text = std::fs::read_to_string(dir.join("solo/external_policies.csv"))
        .expect("external_policies.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let row = lines
        .find(|l| l.starts_with(&format!("{actor},")))
        .unwrap_or_else(|| panic!("no row for {actor} in\n{text}"));
    // The url is quoted and has no comma here.
    let cells: Vec<&str> = row.split(',').collect();
    assert_eq!(cells.len(), header.len(), "{row}");
    let c = Counts(
        header
            .iter()
            .zip(cells)
            .map(|(h, c)| (h.to_string(), c.to_string()))
            .collect(),
    );
    let fallbacks: u64 = ["timeout", "error", "malformed", "disconnected"]
        .iter()
        .map(|r| c.n(r))
        .sum();
    assert_eq!(
        c.n("decisions"),
        c.n("answered") + fallbacks,
        "{actor}: every decision ends once\n{text}"
    );
    c
}

/// What every run must show whatever the policy process did: each request
/// answered (served), each placed once in `decisions.csv`, each handoff
/// recorded with a decode, and the run's end in the event log.
fn every_request_answered(dir: &Path) -> (Vec<RequestRow>, Vec<Vec<String>>) {
    let reqs = requests(&dir.join("solo/requests.csv"));
    // 3 users × slots 1..=5 (0.5 s slots from 0.5 s, stop at 3 s).
    assert_eq!(reqs.len(), 15, "one record per request");
    for r in &reqs {
        assert_eq!(r.outcome, "served", "{r:?}");
    }
    let decisions = std::fs::read_to_string(dir.join("solo/decisions.csv")).expect("decisions");
    let rows: Vec<Vec<String>> = decisions
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 15, "{decisions}");
    let handoffs = std::fs::read_to_string(dir.join("solo/handoffs.csv")).expect("handoffs");
    let h: Vec<&str> = handoffs.lines().skip(1).collect();
    assert_eq!(h.len(), 3, "{handoffs}");
    for l in &h {
        assert!(l.contains(",\"ok\","), "{l}");
    }
    let ev = events(&dir.join("solo/events.jsonl"));
    assert!(ev.iter().any(|e| e["kind"] == "run.end"), "the run ended");
    (reqs, rows)
}

/// Deadlines that a reply on loopback meets even on a loaded machine.
const GENEROUS: (&str, &str) = ("300ms", "50ms");

fn run(mode: Mode, name: &str) -> (PathBuf, Arc<Seen>) {
    let dir = temp_dir(&format!("external-{name}"));
    let results = dir.join("results").display().to_string();
    let seen = Arc::new(Seen::default());
    let url = policy_process(mode, seen.clone());
    let deadlines = if mode == Mode::Hang {
        ("40ms", "5ms")
    } else {
        GENEROUS
    };
    let run_dir = run_file(&cluster_text(&results, &url, deadlines), &dir, name);
    (run_dir, seen)
}

#[test]
fn a_policy_that_answers_decides_every_slot_and_every_repair_epoch() {
    let (dir, seen) = run(Mode::Answer, "answer");
    let (_, rows) = every_request_answered(&dir);
    let handoffs = std::fs::read_to_string(dir.join("solo/handoffs.csv")).expect("handoffs");
    for l in handoffs.lines().skip(1) {
        assert!(l.contains(",external,external:ws://127.0.0.1:"), "{l}");
    }
    for r in &rows {
        assert_eq!(r[4], "external", "decided by the external policy: {r:?}");
        assert!(r[5].starts_with("external:ws://127.0.0.1:"), "{r:?}");
    }
    let sched = counts(&dir, "sched");
    assert_eq!(
        sched.n("decisions"),
        5,
        "one decision per slot with requests"
    );
    assert_eq!(sched.n("answered"), 5);
    assert_eq!(sched.n("late"), 0);
    assert_eq!(sched.n("rtt_count"), 5);
    assert!(sched.ms("rtt_p99_ms") > 0.0);
    assert_eq!(seen.lyreo.load(Ordering::SeqCst), 5);
    let agent = counts(&dir, "a");
    assert!(agent.n("decisions") > 0, "repair epochs were asked");
    assert_eq!(agent.n("answered"), agent.n("decisions"), "none fell back");
    assert_eq!(seen.repair.load(Ordering::SeqCst), agent.n("asked"));
    let ev = events(&dir.join("solo/events.jsonl"));
    assert!(!ev.iter().any(|e| e["kind"] == "policy.fallback"));
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "policy.connection" && e["detail"]["up"] == true));
    let summary = std::fs::read_to_string(dir.join("summary.md")).expect("summary.md");
    assert!(summary.contains("External policies"), "{summary}");
}

#[test]
fn a_policy_that_hangs_times_out_and_the_fallback_decides() {
    let (dir, seen) = run(Mode::Hang, "hang");
    let (_, rows) = every_request_answered(&dir);
    for r in &rows {
        assert_eq!(r[4], "least-loaded", "the fallback decided: {r:?}");
    }
    let sched = counts(&dir, "sched");
    assert_eq!(sched.n("decisions"), 5);
    assert_eq!(sched.n("timeout"), 5);
    assert_eq!(sched.n("answered"), 0);
    assert_eq!(seen.lyreo.load(Ordering::SeqCst), 5, "every slot was asked");
    let agent = counts(&dir, "a");
    assert!(agent.n("timeout") > 0);
    assert_eq!(agent.n("answered"), 0);
    let ev = events(&dir.join("solo/events.jsonl"));
    let slot_fallbacks = ev
        .iter()
        .filter(|e| e["kind"] == "policy.fallback" && e["detail"]["problem"] == "lyreo")
        .count();
    assert_eq!(slot_fallbacks, 5);
    // Repair fallbacks: one event per handoff, not one per decision.
    let repair: Vec<_> = ev
        .iter()
        .filter(|e| e["kind"] == "policy.fallback" && e["detail"]["problem"] == "repair")
        .collect();
    assert_eq!(repair.len(), 3, "{repair:?}");
    let summed: u64 = repair
        .iter()
        .map(|e| e["detail"]["by_reason"]["timeout"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(summed, agent.n("timeout"));
}

#[test]
fn a_policy_process_that_disconnects_mid_run_costs_no_request() {
    let (dir, _) = run(Mode::DieAfter(2), "disconnect");
    let (_, rows) = every_request_answered(&dir);
    assert!(rows.iter().any(|r| r[4] == "external"));
    assert!(rows.iter().any(|r| r[4] == "least-loaded"));
    let sched = counts(&dir, "sched");
    assert_eq!(sched.n("decisions"), 5);
    assert_eq!(sched.n("answered"), 2, "answered until it died");
    assert_eq!(sched.n("disconnected"), 3, "then no connection");
    let ev = events(&dir.join("solo/events.jsonl"));
    assert!(ev.iter().any(|e| e["kind"] == "policy.connection"
        && e["source"] == "sched"
        && e["detail"]["up"] == false));
    counts(&dir, "a");
}

#[test]
fn a_policy_that_answers_garbage_is_refused_and_counted() {
    let (dir, _) = run(Mode::Garbage, "garbage");
    let (_, rows) = every_request_answered(&dir);
    for r in &rows {
        assert_eq!(r[4], "least-loaded", "{r:?}");
    }
    let sched = counts(&dir, "sched");
    assert_eq!(sched.n("decisions"), 5);
    assert_eq!(sched.n("answered"), 0);
    assert!(sched.n("malformed") > 0);
    assert!(sched.n("error") > 0);
    assert_eq!(
        sched.n("timeout"),
        0,
        "each garbage answer falls back at once"
    );
    let agent = counts(&dir, "a");
    assert_eq!(agent.n("answered"), 0);
    assert!(
        agent.n("malformed") > 0,
        "masked and malformed repair actions"
    );
}

#[test]
fn a_swap_to_the_external_policy_and_back_takes_effect_at_the_next_decision() {
    let dir = temp_dir("external-swap");
    let results = dir.join("results").display().to_string();
    let seen = Arc::new(Seen::default());
    let url = policy_process(Mode::Answer, seen.clone());
    let run_dir = run_file(&swapping_cluster_text(&results, &url), &dir, "swap");
    let (_, rows) = every_request_answered(&run_dir);
    let ll = edgemu_policies::slot::version_hash("least-loaded", &[]);
    // Slots at 0.5 s: 1–2 before the swap (1.2 s), 3–4 external, 5 after
    // the rollback (2.2 s).
    for r in &rows {
        let slot: u64 = r[0].parse().expect("slot");
        let (name, version) = match slot {
            0..=2 => ("least-loaded", ll.clone()),
            3 | 4 => ("external", format!("external:{url}")),
            _ => ("least-loaded", ll.clone()),
        };
        assert_eq!(
            (r[4].as_str(), r[5].as_str()),
            (name, version.as_str()),
            "{r:?}"
        );
    }
    let sched = counts(&run_dir, "sched");
    assert_eq!((sched.n("decisions"), sched.n("answered")), (2, 2));
    assert_eq!(seen.lyreo.load(Ordering::SeqCst), 2);
    // The sender: the handoff of 0.6 s under deficit-heuristic, those of 1.6
    // and 2.6 s under the external policy (swapped at 0.8 s).
    let handoffs = std::fs::read_to_string(run_dir.join("solo/handoffs.csv")).expect("handoffs");
    let policies: Vec<&str> = handoffs
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(4).expect("policy"))
        .collect();
    assert_eq!(policies, ["deficit-heuristic", "external", "external"]);
    let agent = counts(&run_dir, "a");
    assert!(agent.n("answered") > 0);
    assert_eq!(agent.n("answered"), agent.n("decisions"));
}

#[test]
fn an_unknown_fallback_stops_the_host_naming_the_actor_and_key() {
    let dir = temp_dir("external-bad-fallback");
    let results = dir.join("results").display().to_string();
    for (i, (from, to, want)) in [
        (
            "fallback = \"least-loaded\"",
            "fallback = \"fifo\"",
            "scheduler \"sched\": external.fallback \"fifo\"",
        ),
        (
            "fallback = \"deficit-heuristic\"",
            "fallback = \"fifo\"",
            "unknown repair policy `fifo`",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let text = cluster_text(&results, "ws://127.0.0.1:9", GENEROUS).replace(from, to);
        let cfg = write(&dir, "bad.toml", &text);
        let cluster = edgemu_nodes::run::load(&cfg).expect("the file itself is valid");
        let e = edgemu_nodes::run::run_all(cluster, Some(format!("bad{i}")), false)
            .map(|_| ())
            .expect_err("refused at start");
        let e = format!("{e:#}");
        assert!(e.contains(want), "{e}");
    }
}
