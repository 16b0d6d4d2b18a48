//! Actor faults (`actor.kill` / `actor.restart`, issue 11 part 4) on the
//! live LYREO actors in one process under virtual time: a server killed
//! while it holds a batch accounts for every request (served before the
//! kill, or failed with the reason; none missing), the scheduler stops
//! assigning to it after its report timeout and resumes after the restart;
//! `for = D` restarts by itself; a killed scheduler does not hang its users;
//! a killed user records its open requests; bad names are refused, by the
//! control parser and the chaos loader alike.

mod common;

use common::*;
use edgemu_config::Cluster;
use edgemu_nodes::host::commands::parse_request;
use edgemu_nodes::run::{load, run_all};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const USERS: u32 = 3;
/// Users issue requests in slots 0..STOP_SLOTS.
const STOP_SLOTS: u64 = 8;

/// Three users on `phones`, two modeled servers on `edge`, the scheduler
/// (least-loaded, 1 s slots) on `ctl`; long outputs so that a server holds
/// a running batch and a queue most of the time.
fn cluster_text(results: &str, chaos: &str) -> String {
    let mut t = format!(
        r#"
[run]
name = "faults"
duration = "16s"
seed = 11
time = "virtual"
results = "{results}"

[[hosts]]
name = "phones"
listen = "127.0.0.1:1"

[[hosts]]
name = "edge"
listen = "127.0.0.1:2"

[[hosts]]
name = "ctl"
listen = "127.0.0.1:3"

[[actors]]
name = "sched"
host = "ctl"
kind = "scheduler"
servers = ["s0", "s1"]
policy = "least-loaded"
slot = "1s"

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
bandwidth_mhz = 12
position = [150, 150]

[[actors]]
name = "probe"
host = "edge"
kind = "sink"
"#
    );
    for u in 0..USERS {
        t += &format!(
            r#"
[[actors]]
name = "u{u}"
host = "phones"
kind = "user"
scheduler = "sched"
workload = "lmsys-like"
max_input = 64
max_output = 400
stop = "{STOP_SLOTS}s"
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

#[derive(Debug)]
struct Req {
    slot: u64,
    id: u64,
    user: String,
    server: String,
    outcome: String,
    e2e: Option<f64>,
    reason: String,
}

fn requests(path: &Path) -> Vec<Req> {
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
            Req {
                slot: c[0].parse().expect("slot"),
                id: c[1].parse().expect("id"),
                user: c[2].into(),
                server: c[3].into(),
                outcome: c[8].into(),
                e2e: c[14].parse().ok(),
                reason: c[15].into(),
            }
        })
        .collect()
}

/// (slot, server) of every decision.
fn decisions(path: &Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(path)
        .expect("decisions")
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[0].parse().expect("slot"), c[3].to_string())
        })
        .collect()
}

fn events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

fn run(text: &str, dir: &Path, id: &str) -> std::path::PathBuf {
    let cfg = write(dir, &format!("{id}.toml"), text);
    let cluster = load(&cfg).expect("load");
    run_all(cluster, Some(id.into()), false).expect("run").dir
}

/// The ids users send: the user's actor id in the high bits, the slot below.
fn sent_ids(cluster_text: &str) -> BTreeSet<u64> {
    let c = Cluster::from_str(cluster_text, Path::new("c.toml")).expect("cluster");
    let mut ids = BTreeSet::new();
    for u in 0..USERS {
        let a = c
            .actors
            .iter()
            .find(|a| a.name == format!("u{u}"))
            .expect("user");
        for slot in 0..STOP_SLOTS {
            ids.insert((u64::from(a.id.0) << 32) | slot);
        }
    }
    ids
}

/// Every request sent has exactly one row, and no row is for a request
/// that was not sent.
fn assert_all_accounted(text: &str, reqs: &[Req]) {
    let rows: Vec<u64> = reqs.iter().map(|r| r.id).collect();
    let unique: BTreeSet<u64> = rows.iter().copied().collect();
    assert_eq!(unique.len(), rows.len(), "one row per request");
    assert_eq!(unique, sent_ids(text), "every request sent has its row");
    for r in reqs {
        match r.outcome.as_str() {
            "served" => assert!(r.e2e.is_some(), "{r:?}"),
            "failed" => assert!(!r.reason.is_empty(), "a failure says why: {r:?}"),
            other => panic!("{other}: {r:?}"),
        }
    }
}

/// s1 is killed at 2.5 s while it decodes a batch and holds a queue, and
/// restarted at 6.5 s.
#[test]
fn a_server_killed_during_a_batch_accounts_for_every_request_and_the_scheduler_routes_around_it() {
    let dir = temp_dir("faults-server");
    let results = dir.join("results").display().to_string();
    let chaos = "\n[[chaos]]\nat = \"2500ms\"\ncommand = \"actor.kill\"\nactor = \"s1\"\n\n[[chaos]]\nat = \"6500ms\"\ncommand = \"actor.restart\"\nactor = \"s1\"\n";
    let text = cluster_text(&results, chaos);
    let run_dir = run(&text, &dir, "server");

    let reqs = requests(&run_dir.join("phones/requests.csv"));
    assert_all_accounted(&text, &reqs);
    let killed: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.reason == "server killed")
        .collect();
    assert!(
        !killed.is_empty(),
        "s1 held requests when it was killed: {reqs:#?}"
    );
    for r in &killed {
        assert_eq!((r.server.as_str(), r.outcome.as_str()), ("s1", "failed"));
        assert!(r.slot <= 2, "issued before the kill: {r:?}");
    }
    // Served by s1 before the kill, and after the restart.
    assert!(reqs
        .iter()
        .any(|r| r.server == "s1" && r.outcome == "served" && r.slot <= 2));
    assert!(reqs
        .iter()
        .any(|r| r.server == "s1" && r.outcome == "served" && r.slot >= 7));
    // Every failure is s1's, and for a documented reason.
    for r in reqs.iter().filter(|r| r.outcome == "failed") {
        assert_eq!(r.server, "s1", "{r:?}");
        assert!(
            r.reason == "server killed" || r.reason == "server down",
            "{r:?}"
        );
    }
    // Served by s0 throughout.
    assert!(reqs
        .iter()
        .all(|r| r.server != "s0" || r.outcome == "served"));

    // The scheduler (deciding 100 ms into each slot): s1's last report is
    // for slot 1 (at 2 s); with the two-slot timeout it is unavailable from
    // the decision at 4.1 s, and available again at 7.1 s after its first
    // report (7 s) since the restart.
    let d = decisions(&run_dir.join("ctl/decisions.csv"));
    let to_s1 = |slot: u64| d.iter().filter(|(s, v)| *s == slot && v == "s1").count();
    for slot in 4..=6 {
        assert_eq!(to_s1(slot), 0, "slot {slot}: s1 is down: {d:?}");
    }
    assert!(
        (7..STOP_SLOTS).any(|s| to_s1(s) > 0),
        "s1 is assigned again after its restart: {d:?}"
    );
    let ev = events(&run_dir.join("ctl/events.jsonl"));
    let at = |kind: &str| -> Vec<u64> {
        ev.iter()
            .filter(|e| e["kind"] == kind && e["detail"]["server"] == "s1")
            .map(|e| e["t_ns"].as_u64().expect("t_ns"))
            .collect()
    };
    assert_eq!(at("server.unavailable"), vec![4_100_000_000]);
    assert_eq!(at("server.available"), vec![7_100_000_000]);

    // The edge host logs the kill with what it dropped, and the restart.
    let ev = events(&run_dir.join("edge/events.jsonl"));
    let kill = ev
        .iter()
        .find(|e| e["kind"] == "actor.kill")
        .expect("actor.kill event");
    assert_eq!(kill["source"], "chaos#1");
    assert_eq!(kill["detail"]["target"], "actor s1");
    let detail = kill["detail"]["detail"].as_str().expect("detail");
    assert!(
        detail.contains(&format!("{} requests failed", killed.len())),
        "{detail}"
    );
    assert!(detail.contains("running"), "{detail}");
    assert!(ev.iter().any(|e| e["kind"] == "actor.restart"
        && e["source"] == "chaos#2"
        && e["detail"]["detail"] == "restarted, empty"));

    // No per-slot rows while s1 was dead (slots 3..=5 end at 3, 4, 5 … 6 s).
    let slots = std::fs::read_to_string(run_dir.join("edge/server_slots.csv")).expect("slots");
    let s1_slots: BTreeSet<u64> = slots
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(1) == Some("s1"))
        .map(|l| {
            l.split(',')
                .next()
                .and_then(|x| x.parse().ok())
                .expect("slot")
        })
        .collect();
    for s in 2..=5 {
        assert!(!s1_slots.contains(&s), "slot {s}: {slots}");
    }
    assert!(
        s1_slots.contains(&1) && s1_slots.contains(&6),
        "{s1_slots:?}"
    );
}

/// The scheduler is killed for 2 s (restarting by itself), and a user is
/// killed for 1 s later: users record the undecided requests as failed instead
/// of waiting, the killed user's open request is failed, and the run is
/// the same with the same seed.
#[test]
fn kill_for_restarts_by_itself_and_a_killed_scheduler_does_not_hang_users() {
    let dir = temp_dir("faults-sched");
    let results = dir.join("results").display().to_string();
    let chaos = "\n[[chaos]]\nat = \"1500ms\"\ncommand = \"actor.kill\"\nactor = \"sched\"\nfor = \"2s\"\n\n[[chaos]]\nat = \"6500ms\"\ncommand = \"actor.kill\"\nactor = \"u2\"\nfor = \"1s\"\n";
    let text = cluster_text(&results, chaos);
    let run_dir = run(&text, &dir, "sched");
    let reqs = requests(&run_dir.join("phones/requests.csv"));

    // u2 was dead from 6.5 s to 7.5 s: it did not issue slot 7.
    let mut by_user: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &reqs {
        *by_user.entry(r.user.as_str()).or_default() += 1;
    }
    assert_eq!(by_user.get("u2"), Some(&((STOP_SLOTS - 1) as usize)));
    assert!(!reqs.iter().any(|r| r.user == "u2" && r.slot == 7));
    let rows: BTreeSet<u64> = reqs.iter().map(|r| r.id).collect();
    assert_eq!(rows.len(), reqs.len());

    // Slots 2 and 3 (issued at 2 s and 3 s, the scheduler dead from 1.5 s
    // to 3.5 s) were never assigned: failed, "no assignment".
    for r in &reqs {
        let want = if (2..=3).contains(&r.slot) {
            ("failed", "no assignment")
        } else if r.user == "u2" && r.slot == 6 {
            ("failed", "user killed")
        } else {
            ("served", "")
        };
        assert_eq!((r.outcome.as_str(), r.reason.as_str()), want, "{r:?}");
    }
    let d = decisions(&run_dir.join("ctl/decisions.csv"));
    assert!(d.iter().all(|(s, _)| !(2..=3).contains(s)), "{d:?}");
    assert!(d.iter().any(|(s, _)| *s == 4), "decides again at 4.1 s");

    let ev = events(&run_dir.join("ctl/events.jsonl"));
    let restart = ev
        .iter()
        .find(|e| e["kind"] == "actor.restart")
        .expect("the automatic restart is logged");
    assert_eq!(restart["t_ns"], 3_500_000_000u64);
    assert_eq!(restart["source"], "actor.kill for");
    assert!(ev.iter().any(|e| e["kind"] == "actor.kill"
        && e["detail"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("restarts at 3.500 s"))));
    let ev = events(&run_dir.join("phones/events.jsonl"));
    assert!(ev.iter().any(|e| e["kind"] == "actor.kill"
        && e["detail"]["detail"]
            == "killed; 1 open requests failed (\"user killed\"); restarts at 7.500 s"));
    assert!(ev
        .iter()
        .any(|e| e["kind"] == "actor.restart" && e["t_ns"] == 7_500_000_000u64));

    // Reproducible.
    let again = run(&text, &dir, "sched2");
    for f in [
        "phones/requests.csv",
        "ctl/decisions.csv",
        "edge/server_slots.csv",
    ] {
        let x = std::fs::read(run_dir.join(f)).expect("a");
        let y = std::fs::read(again.join(f)).expect("b");
        assert!(x == y, "{f} differs between two runs with the same seed");
    }
}

/// A chaos entry and a control request with the same keys resolve to the
/// same command and fail with the same error.
#[test]
fn chaos_and_control_share_the_actor_commands_and_refuse_bad_names() {
    let base = cluster_text("r", "");
    let cluster = Cluster::from_str(&base, Path::new("c.toml")).expect("cluster");
    let chaos = |keys: &str| {
        Cluster::from_str(
            &format!("{base}\n[[chaos]]\nat = \"1s\"\ncommand = \"actor.kill\"\n{keys}\n"),
            Path::new("c.toml"),
        )
    };
    let c = chaos("actor = \"s1\"\nfor = \"3s\"").expect("valid");
    let control = parse_request(
        &cluster,
        &serde_json::json!({"cmd": "actor.kill", "actor": "s1", "for": "3s"}),
    )
    .expect("valid");
    assert_eq!(c.chaos[0].request, control);
    assert!(c.describe().contains("actor.kill s1"), "{}", c.describe());

    for (keys, json, want) in [
        (
            "actor = \"nope\"",
            serde_json::json!({"cmd": "actor.kill", "actor": "nope"}),
            "no actor named \"nope\"",
        ),
        (
            "actor = \"probe\"",
            serde_json::json!({"cmd": "actor.kill", "actor": "probe"}),
            "cannot be killed",
        ),
        (
            "actor = \"s1\"\nfor = \"soon\"",
            serde_json::json!({"cmd": "actor.kill", "actor": "s1", "for": "soon"}),
            "for",
        ),
    ] {
        let e = chaos(keys).expect_err(keys).to_string();
        assert!(e.contains(want), "{want:?} not in {e}");
        assert!(e.contains("c.toml:"), "located: {e}");
        let e = parse_request(&cluster, &json).expect_err("refused");
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    let e = parse_request(
        &cluster,
        &serde_json::json!({"cmd": "actor.restart", "actor": "s1", "for": "1s"}),
    )
    .expect_err("restart has nothing to heal");
    assert!(e.contains("`for` is valid only with"), "{e}");
}
