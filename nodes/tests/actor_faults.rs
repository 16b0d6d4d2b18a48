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
use edgemu_nodes::run::load;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const USERS: u32 = 3;
/// Users issue requests in slots 0..STOP_SLOTS.
const STOP_SLOTS: u64 = 8;

/// Three users on `phones`, two modeled servers on `edge`, the scheduler
/// (least-loaded, 1 s slots) on `ctl`; long outputs so that a server holds
/// a running batch and a queue most of the time.
fn cluster_text(results: &str, chaos: &str) -> String {
    LyreoSystem {
        name: "faults",
        duration: "16s",
        seed: 11,
        results,
        users: USERS,
        max_output: 400,
        stop: &format!("{STOP_SLOTS}s"),
        s1_keys: "",
        actors: "\n[[actors]]\nname = \"probe\"\nhost = \"edge\"\nkind = \"sink\"\n",
        chaos,
    }
    .toml()
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
fn assert_all_accounted(text: &str, reqs: &[RequestRow]) {
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
    let run_dir = run_file(&text, &dir, "server");

    let reqs = requests(&run_dir.join("phones/requests.csv"));
    assert_all_accounted(&text, &reqs);
    let killed: Vec<&RequestRow> = reqs
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
    // Back empty: the first slot after the restart holds no KV, no backlog.
    let row6: Vec<&str> = slots
        .lines()
        .find(|l| l.starts_with("6,s1,"))
        .expect("s1 slot 6")
        .split(',')
        .collect();
    assert_eq!(
        (row6[9], row6[10]),
        ("0", "0"),
        "occupancy, backlog: {row6:?}"
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
    let run_dir = run_file(&text, &dir, "sched");
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
    let again = run_file(&text, &dir, "sched2");
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
        let e = parse_request(&cluster, &json)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    let e = parse_request(
        &cluster,
        &serde_json::json!({"cmd": "actor.restart", "actor": "s1", "for": "1s"}),
    )
    .expect_err("restart has nothing to heal")
    .to_string();
    assert!(e.contains("`for` is valid only with"), "{e}");
}

/// `actor.kill` / `actor.restart` over the control websocket in real time:
/// asked of alpha, forwarded to beta (the server's host), answered with
/// what the kill did; repeats change nothing; bad names are refused; the
/// faults land in beta's event log.
#[test]
fn actor_commands_over_the_control_socket_reach_the_owner_host() {
    use edgemu_nodes::control::client;
    use edgemu_nodes::host::HostOptions;
    use serde_json::json;
    use std::time::Duration;

    let dir = temp_dir("faults-control");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let text = format!(
        r#"
[run]
name = "fc"
duration = "30s"
results = "results"
token_env = "EDGEMU_TEST_FAULTS_TOKEN_UNSET"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "beta"
listen = "127.0.0.1:{}"
"#,
        ports[0], ports[1], ports[2]
    ) + &scheduler_toml("alpha", "200ms")
        + r#"
[[actors]]
name = "u0"
host = "alpha"
kind = "user"
scheduler = "sched"
max_input = 64
max_output = 400

[[actors]]
name = "s0"
host = "beta"
kind = "server"
gpu = "rtx3080"

[[actors]]
name = "s1"
host = "beta"
kind = "server"
gpu = "rtx4090"

[[actors]]
name = "probe"
host = "beta"
kind = "sink"
"#;
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    let threads = spawn_real_hosts(&cluster, |_| HostOptions {
        run_id: Some("fc".into()),
        wait_peers: Some(Duration::from_secs(10)),
        ..Default::default()
    });
    let alpha = format!("ws://127.0.0.1:{}", ports[1]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ask = |req: serde_json::Value| client::request(&alpha, req, None);
        wait_for_control(&alpha, None).await;
        // Let a few slots run so that s1 holds requests.
        tokio::time::sleep(Duration::from_millis(600)).await;

        let r = ask(json!({"cmd": "actor.kill", "actor": "s1"}))
            .await
            .expect("kill");
        let a = &r["applied"][0];
        assert_eq!(
            (a["host"].as_str(), a["target"].as_str()),
            (Some("beta"), Some("actor s1")),
            "{r}"
        );
        assert!(
            a["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("killed; ")),
            "{r}"
        );
        assert!(a.get("error").is_none(), "{r}");
        let r = ask(json!({"cmd": "actor.kill", "actor": "s1"}))
            .await
            .expect("kill again");
        assert_eq!(r["applied"][0]["detail"], "already dead", "{r}");
        for (name, want) in [("nope", "no actor named"), ("probe", "cannot be killed")] {
            let e = ask(json!({"cmd": "actor.kill", "actor": name}))
                .await
                .expect_err("refused")
                .to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        let r = ask(json!({"cmd": "actor.restart", "actor": "s1"}))
            .await
            .expect("restart");
        assert_eq!(r["applied"][0]["detail"], "restarted, empty", "{r}");
        let r = ask(json!({"cmd": "actor.restart", "actor": "s1"}))
            .await
            .expect("restart again");
        assert_eq!(r["applied"][0]["detail"], "not dead; nothing to restart");
        // A user on alpha itself, killed for a moment.
        let r = ask(json!({"cmd": "actor.kill", "actor": "u0", "for": "300ms"}))
            .await
            .expect("kill u0");
        assert_eq!(r["applied"][0]["host"], "alpha", "{r}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        ask(json!({"cmd": "run.stop"})).await.expect("stop");
    });
    for t in threads {
        t.join().expect("host thread").expect("host result");
    }
    let beta = std::fs::read_to_string(dir.join("results/fc/beta/events.jsonl")).expect("events");
    let kills: Vec<&str> = beta
        .lines()
        .filter(|l| l.contains("\"actor.kill\""))
        .collect();
    assert_eq!(kills.len(), 2, "{beta}");
    assert!(kills[0].contains("control (via alpha)"), "{beta}");
    assert!(beta.contains("\"actor.restart\""), "{beta}");
    let alpha_ev =
        std::fs::read_to_string(dir.join("results/fc/alpha/events.jsonl")).expect("events");
    assert!(
        alpha_ev.contains("\"source\":\"actor.kill for\"")
            && alpha_ev.contains("\"actor.restart\""),
        "u0 restarted by itself: {alpha_ev}"
    );
}
