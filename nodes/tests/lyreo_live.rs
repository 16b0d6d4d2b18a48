//! The LYREO actors (users, servers, scheduler) on three hosts in one
//! process under virtual time: per-request records on the users' host,
//! per-server-slot rows on the servers' host, decisions with the policy
//! name on the scheduler's host; a killed radio link shows up as
//! unanswered requests; the same seed gives byte-identical tables.

mod common;

use common::*;
use edgemu_config::Cluster;
use edgemu_nodes::run::{load, run_all};
use edgemu_policies::slot::version_hash;
use std::path::Path;

/// Three users on `phones`, two servers on `edge` (`s1` on `backend`),
/// the scheduler on `ctl`; uplinks user → server with 5 ms delay.
fn cluster_text(results: &str, s1_backend: &str, chaos: &str) -> String {
    LyreoSystem {
        name: "lyreo-live",
        duration: "6s",
        seed: 5,
        results,
        users: 3,
        max_output: 8,
        stop: "4s",
        s1_keys: s1_backend,
        actors: "",
        chaos,
    }
    .toml()
}

#[test]
fn users_servers_and_scheduler_on_three_hosts_record_every_request() {
    let dir = temp_dir("lyreo-live");
    let results = dir.join("results").display().to_string();
    // s1 decodes with a real (tiny, random-weight) Llama on the CPU.
    let text = cluster_text(&results, "backend = \"real\"\nmodel = \"tiny\"", "");
    let run_dir = run_file(&text, &dir, "real");

    let reqs = requests(&run_dir.join("phones/requests.csv"));
    // 3 users × slots 0..3 (stop at 4 s).
    assert_eq!(reqs.len(), 12, "one record per request");
    for u in ["u0", "u1", "u2"] {
        assert_eq!(reqs.iter().filter(|r| r.user == u).count(), 4, "{u}");
    }
    let served: Vec<&RequestRow> = reqs.iter().filter(|r| r.outcome == "served").collect();
    assert_eq!(served.len(), 12, "nothing lost without chaos");
    for r in &served {
        assert_eq!(r.policy, "least-loaded");
        let sum: f64 = r.parts.iter().sum();
        let e2e = r.e2e.expect("e2e of a served request");
        assert!(
            (sum - e2e).abs() < 2e-3,
            "sched+upload+wait+prefill+decode = {sum} vs e2e {e2e}"
        );
        assert!(
            r.parts[1] > 0.005,
            "upload includes the 5 ms link: {}",
            r.parts[1]
        );
        assert!(r.parts[4] > 0.0, "decoded");
    }
    // Least-loaded spreads 3 requests a slot over both servers.
    assert!(served.iter().any(|r| r.server == "s0"));
    assert!(served.iter().any(|r| r.server == "s1"));

    let slots = std::fs::read_to_string(run_dir.join("edge/server_slots.csv")).expect("slots");
    assert!(slots.starts_with("slot,server,gpu,backend,"));
    assert!(slots.lines().any(|l| l.contains(",s1,rtx4090,real-tiny,")));
    assert!(slots.lines().any(|l| l.contains(",s0,rtx3080,modeled,")));
    let decisions = std::fs::read_to_string(run_dir.join("ctl/decisions.csv")).expect("decisions");
    assert_eq!(decisions.lines().count(), 1 + 12);
    let ll = version_hash("least-loaded", &[]);
    assert!(decisions
        .lines()
        .skip(1)
        .all(|l| l.contains(&format!(",least-loaded,{ll},"))));
    // Records live only on the host of the actor that writes them.
    assert!(!run_dir.join("edge/requests.csv").exists());
}

/// A `policy.swap` chaos entry switches the live scheduler from
/// least-loaded to random at a slot boundary, then a rollback brings it
/// back: every decision and every request record names the policy and the
/// version hash that made it, and the swaps are in the event log.
#[test]
fn a_policy_swap_while_running_is_seen_in_every_decision_and_request() {
    let dir = temp_dir("lyreo-live-swap");
    let results = dir.join("results").display().to_string();
    let chaos = "\n[[chaos]]\nat = \"1500ms\"\ncommand = \"policy.swap\"\nactor = \"sched\"\npolicy = \"random\"\n\n[[chaos]]\nat = \"2500ms\"\ncommand = \"policy.rollback\"\nactor = \"sched\"\n";
    let text = cluster_text(&results, "", chaos);
    let run_dir = run_file(&text, &dir, "swap");

    let (ll, rnd) = (
        version_hash("least-loaded", &[]),
        version_hash("random", &[]),
    );
    let decisions = std::fs::read_to_string(run_dir.join("ctl/decisions.csv")).expect("decisions");
    // slot,id,user,server,policy,policy_version,…: slots 0–1 before the
    // swap, slot 2 after it, slot 3 after the rollback.
    let by_slot = |slot: &str| -> Vec<(String, String)> {
        decisions
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|c| c[0] == slot)
            .map(|c| (c[4].to_string(), c[5].to_string()))
            .collect()
    };
    for (slot, name, version) in [
        ("0", "least-loaded", &ll),
        ("1", "least-loaded", &ll),
        ("2", "random", &rnd),
        ("3", "least-loaded", &ll),
    ] {
        let rows = by_slot(slot);
        assert_eq!(rows.len(), 3, "slot {slot}: {decisions}");
        for (n, v) in rows {
            assert_eq!((n.as_str(), &v), (name, version), "slot {slot}");
        }
    }
    let reqs = requests(&run_dir.join("phones/requests.csv"));
    assert_eq!(reqs.len(), 12);
    assert_eq!(reqs.iter().filter(|r| r.policy == "random").count(), 3);
    assert!(
        reqs.iter().all(|r| r.outcome == "served"),
        "no decision lost"
    );
    let events = std::fs::read_to_string(run_dir.join("ctl/events.jsonl")).expect("events");
    assert!(
        events.contains("policy.swap") && events.contains("policy.rollback"),
        "{events}"
    );
}

#[test]
fn a_killed_uplink_leaves_unanswered_requests_and_runs_are_reproducible() {
    let dir = temp_dir("lyreo-live-chaos");
    let results = dir.join("results").display().to_string();
    let chaos = "\n[[chaos]]\nat = \"0s\"\ncommand = \"link.kill\"\nlink = \"u0-s0\"\n\n[[chaos]]\nat = \"0s\"\ncommand = \"link.kill\"\nlink = \"u0-s1\"\n";
    let text = cluster_text(&results, "", chaos);
    let a = run_file(&text, &dir, "a");
    let b = run_file(&text, &dir, "b");
    for f in [
        "phones/requests.csv",
        "edge/server_slots.csv",
        "ctl/decisions.csv",
    ] {
        let x = std::fs::read(a.join(f)).expect("a");
        let y = std::fs::read(b.join(f)).expect("b");
        assert!(x == y, "{f} differs between two runs with the same seed");
    }
    let reqs = requests(&a.join("phones/requests.csv"));
    assert_eq!(reqs.len(), 12);
    for r in &reqs {
        let expect = if r.user == "u0" {
            "unanswered"
        } else {
            "served"
        };
        assert_eq!(r.outcome, expect, "{}", r.user);
    }
    let slots = std::fs::read_to_string(a.join("edge/server_slots.csv")).expect("slots");
    let lost: u64 = slots
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .nth(5)
                .and_then(|x| x.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert!(lost >= 3, "u0's lost uploads are counted: {lost}\n{slots}");
}

#[test]
fn the_documented_lyreo_example_is_valid() {
    let doc = include_str!("../../docs/cluster-toml.md");
    let start = doc.find("```toml lyreo\n").expect("the LYREO example") + "```toml lyreo\n".len();
    let end = start + doc[start..].find("```").expect("its end");
    let head = "[run]\nduration = \"5s\"\n[[hosts]]\nname = \"ctl\"\nlisten = \"127.0.0.1:1\"\n[[hosts]]\nname = \"gpu1\"\nlisten = \"127.0.0.1:2\"\n[[hosts]]\nname = \"phones\"\nlisten = \"127.0.0.1:3\"\n";
    let c = Cluster::from_str(
        &format!("{head}{}", &doc[start..end]),
        Path::new("doc.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = c.actors.iter().map(|a| a.kind.kind_name()).collect();
    assert_eq!(kinds, ["scheduler", "server", "server", "user"]);
    assert!(c
        .describe()
        .contains("LYREO scheduler: policy \"least-loaded\" over edge-a, edge-b"));
}

#[test]
fn bad_lyreo_actors_are_located_errors() {
    let base = cluster_text("r", "", "");
    let check = |text: &str, want: &str| {
        let e = Cluster::from_str(text, Path::new("c.toml"))
            .expect_err("invalid")
            .to_string();
        assert!(e.contains(want), "{want:?} not in:\n{e}");
        assert!(e.contains("c.toml:"), "located: {e}");
    };
    check(
        &base.replace(
            "scheduler = \"sched\"\nworkload",
            "scheduler = \"s0\"\nworkload",
        ),
        "actor \"s0\" is a server; expected a scheduler actor",
    );
    check(
        &base.replace("servers = [\"s0\", \"s1\"]", "servers = [\"s0\"]"),
        "server \"s1\" is in no scheduler's `servers`",
    );
    check(
        &base.replace("gpu = \"rtx3080\"", "gpu = \"a100\""),
        "\"rtx3080\" or \"rtx3090\" or \"rtx4090\"",
    );
    check(
        &base.replace("workload = \"lmsys-like\"", "workload = \"alpaca\""),
        "\"lmsys-like\" or \"sharegpt\"",
    );
    check(
        &base.replace("slot = \"1s\"", "slot = \"1s\"\ncolor = 3"),
        "color",
    );
    // The policy name is checked when the host starts.
    let dir = temp_dir("lyreo-live-policy");
    let results = dir.join("results").display().to_string();
    let text = cluster_text(&results, "", "").replace("least-loaded", "telepathy");
    let cfg = write(&dir, "p.toml", &text);
    let e = run_all(load(&cfg).expect("load"), Some("p".into()), false)
        .err()
        .expect("unknown policy")
        .to_string();
    assert!(e.contains("telepathy"), "{e}");
}

#[test]
fn a_sharegpt_user_sends_lengths_from_the_real_conversations() {
    if edgemu_data::locate().is_err() || edgemu_tokenizer::resolve_model_path(None).is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must have the ShareGPT file and the model (scripts/fetch-data.sh, fetch-model.sh)"
        );
        eprintln!("skipped: ShareGPT file or SmolLM2 absent");
        return;
    }
    let dir = temp_dir("lyreo-live-sharegpt");
    let results = dir.join("results").display().to_string();
    let text = cluster_text(&results, "", "")
        .replace("workload = \"lmsys-like\"", "workload = \"sharegpt\"")
        .replace("max_input = 64", "max_input = 300");
    let run_dir = run_file(&text, &dir, "sg");
    let csv = std::fs::read_to_string(run_dir.join("phones/requests.csv")).expect("requests");
    let lens: Vec<(u32, u32)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[6].parse().expect("in"), c[7].parse().expect("out"))
        })
        .collect();
    assert_eq!(lens.len(), 12);
    assert!(lens
        .iter()
        .all(|&(i, o)| (1..=300).contains(&i) && (1..=8).contains(&o)));
    // Real prompts vary in length (the log-normal stream would too, but
    // these are drawn from the tokenized conversations).
    let distinct: std::collections::BTreeSet<u32> = lens.iter().map(|l| l.0).collect();
    assert!(distinct.len() > 3, "{lens:?}");
}

#[test]
fn a_missing_sharegpt_file_stops_the_host_naming_it() {
    let dir = temp_dir("lyreo-live-nodata");
    let results = dir.join("results").display().to_string();
    let text = cluster_text(&results, "", "")
        .replace("workload = \"lmsys-like\"", "workload = \"sharegpt\"");
    let cfg = write(&dir, "nd.toml", &text);
    // The child process sees a data folder with no file in it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgemu"))
        .args(["run", "--quiet", "--config"])
        .arg(&cfg)
        .env("EDGEMU_DATA_DIR", dir.join("no-data"))
        .env_remove("EDGEMU_SHAREGPT_JSON")
        .env("EDGEMU_NO_FETCH", "1")
        .output()
        .expect("run edgemu");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("user \"u0\"") && err.contains("sharegpt") && err.contains("no-data"),
        "{err}"
    );
}
