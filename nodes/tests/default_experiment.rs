//! The default experiment (`./cluster.toml`, what `cargo run --release` runs) and the
//! example files: every file loads under the strict parser; the default one has what the
//! mission needs (issue 11 part 5); and a shortened copy of it — virtual time, the tiny
//! random-weight Llama instead of SmolLM2, LMSYS-like lengths instead of ShareGPT, so
//! nothing is downloaded — runs in this process and fills the end-of-run tables.

mod common;

use common::*;
use edgemu_config::command::{PolicyOp, Resolved};
use edgemu_config::{ActorKind, Cluster, NetAction, RealModel, ServerBackend, TimeMode};
use edgemu_nodes::results::RunTables;
use edgemu_nodes::run::{load, run_all};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn default_file() -> PathBuf {
    root().join("cluster.toml")
}

#[test]
fn the_default_file_and_every_example_load_strictly() {
    let mut files = vec![default_file()];
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    examples.sort();
    assert!(
        examples.iter().any(|p| p.ends_with("link-probe.toml")),
        "the link-probe scenario lives in examples/: {examples:?}"
    );
    files.extend(examples);
    for f in &files {
        let c = Cluster::load(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(c.hosts.len() >= 2, "{}", f.display());
    }
}

/// The policy a `policy.swap` chaos entry switches to, if it is one.
fn swap_target(r: &Resolved) -> Option<String> {
    match r {
        Resolved::Policy {
            op: PolicyOp::Swap { policy, .. },
            ..
        } => policy.clone(),
        _ => None,
    }
}

#[test]
fn the_default_file_is_the_mission() {
    let c = Cluster::load(&default_file()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.run.time, TimeMode::Real);
    assert_eq!(c.hosts.len(), 3, "three hosts in one process");
    let kinds = |f: fn(&ActorKind) -> bool| c.actors.iter().filter(|a| f(&a.kind)).count();
    assert!(
        kinds(|k| matches!(k, ActorKind::User(_))) >= 4,
        "mobile users"
    );
    let scheds: Vec<_> = c
        .actors
        .iter()
        .filter_map(|a| match &a.kind {
            ActorKind::Scheduler(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(scheds.len(), 1, "one scheduler");
    assert_eq!(scheds[0].policy, "lyreo", "the scheduler starts with LYREO");
    let modeled =
        kinds(|k| matches!(k, ActorKind::Server(s) if s.backend == ServerBackend::Modeled));
    let real = kinds(
        |k| matches!(k, ActorKind::Server(s) if s.backend == ServerBackend::Real(RealModel::SmolLm2)),
    );
    assert!(modeled >= 2, "a few modeled servers: {modeled}");
    assert_eq!(real, 1, "one real SmolLM2 server");
    // Two agents on the two edge hosts hand off over the killed link with PriorityFEC.
    let agents: Vec<_> = c
        .actors
        .iter()
        .filter(|a| matches!(a.kind, ActorKind::Agent(_)))
        .collect();
    assert_eq!(agents.len(), 2, "two agents");
    assert_ne!(agents[0].host, agents[1].host, "on two hosts");
    // The backhaul joins the two edge hosts and is killed for a few seconds.
    let kill = c
        .chaos
        .iter()
        .find(|s| s.command.name() == "link.kill")
        .expect("a link.kill entry");
    let Resolved::Action {
        action: NetAction::LinkKill { link, .. },
        for_ns: Some(_),
    } = &kill.request
    else {
        panic!("a link killed for a while: {:?}", kill.request)
    };
    let l = &c.links[link.0 as usize];
    let (ha, hb) = (c.actor(l.a).host, c.actor(l.b).host);
    assert_ne!(ha, hb, "the killed link crosses hosts");
    // LYREO → Least-Loaded → LYREO.
    let swaps: Vec<(u64, String)> = c
        .chaos
        .iter()
        .filter_map(|s| swap_target(&s.request).map(|p| (s.at_ns, p)))
        .collect();
    assert_eq!(
        swaps.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>(),
        ["least-loaded", "lyreo"],
        "two swaps: to Least-Loaded and back"
    );
    assert!(swaps[0].0 > kill.at_ns && swaps[0].0 < swaps[1].0);
    // A server is killed, then restarted, after the link came back.
    let names: Vec<&str> = c.chaos.iter().map(|s| s.command.name()).collect();
    let (k, r) = (
        names.iter().position(|n| *n == "actor.kill"),
        names.iter().position(|n| *n == "actor.restart"),
    );
    match (k, r) {
        (Some(k), Some(r)) => assert!(c.chaos[k].at_ns < c.chaos[r].at_ns),
        _ => panic!("actor.kill and actor.restart of a server: {names:?}"),
    }
    // The users stop before the end so their last requests can finish.
    let end = c.run.duration_ns;
    for a in &c.actors {
        if let ActorKind::User(u) = &a.kind {
            assert!(
                u.stop_ns.is_some_and(|s| s + 2_000_000_000 <= end),
                "{}",
                a.name
            );
        }
    }
}

/// The default file made fit for a test: virtual time, a temporary results folder, the
/// tiny random-weight model, LMSYS-like lengths. Every replacement must match, so a
/// change of the file's shape shows up here.
fn shortened(results: &Path) -> String {
    let text = std::fs::read_to_string(default_file()).expect("read cluster.toml");
    let mut t = text.clone();
    for (from, to) in [
        ("time = \"real\"", "time = \"virtual\"".to_string()),
        (
            "results = \"results\"",
            format!("results = {:?}", results.display().to_string()),
        ),
        ("model = \"smollm2\"", "model = \"tiny\"".to_string()),
        (
            "workload = \"sharegpt\"",
            "workload = \"lmsys-like\"".to_string(),
        ),
        // The agents' contexts: built-in texts (no download), short enough for them.
        (
            "contexts = \"sharegpt\"",
            "contexts = \"builtin\"".to_string(),
        ),
        ("context_tokens = 256", "context_tokens = 64".to_string()),
    ] {
        assert!(t.contains(from), "cluster.toml has no {from}");
        t = t.replace(from, &to);
    }
    t
}

#[test]
fn a_shortened_default_experiment_fills_the_tables() {
    let dir = temp_dir("default-experiment");
    let cfg = write(&dir, "mission.toml", &shortened(&dir.join("results")));
    let cluster = load(&cfg).expect("load the shortened default");
    let out = run_all(cluster, Some("mission".into()), false).expect("run");
    let links: Vec<_> = out.hosts.iter().flat_map(|h| h.links.clone()).collect();
    let tables = RunTables::read(&out.dir, &links);
    assert!(tables.skipped.is_empty(), "{:?}", tables.skipped);

    // Latency per policy version: LYREO, then Least-Loaded after the swap, then LYREO
    // again (the same version as at the start, so the same row).
    let p = tables.get("policies").expect("policy table");
    assert_eq!(
        p.column("policy"),
        ["lyreo", "least-loaded"],
        "{}",
        p.text()
    );
    let slots = p.column("slots");
    assert!(
        slots[0].contains(", "),
        "LYREO decided before and after: {slots:?}"
    );
    for n in p.column("served") {
        assert!(n.parse::<u64>().expect("count") > 0, "{}", p.text());
    }

    // Every server, the tiny real one included, with its load and KV.
    let s = tables.get("servers").expect("server table");
    let mut names = s.column("server");
    names.sort();
    assert_eq!(
        names,
        ["a-3080", "a-4090", "b-3090", "smol"],
        "{}",
        s.text()
    );
    assert!(s.column("backend").contains(&"real-tiny"), "{}", s.text());

    // The backhaul's kill dropped packets; both swaps and the kill are in the events.
    let l = tables.get("links").expect("link table");
    assert!(l.column("link").contains(&"backhaul"));
    assert!(
        l.column("down-drop").iter().any(|d| *d != "0"),
        "{}",
        l.text()
    );
    let e = tables.get("events").expect("event table");
    let kinds = e.column("event");
    assert!(kinds.contains(&"link.kill"), "{}", e.text());
    assert_eq!(
        kinds.iter().filter(|k| **k == "policy.swap").count(),
        2,
        "{}",
        e.text()
    );
    assert!(kinds.contains(&"actor.kill") && kinds.contains(&"actor.restart"));

    // The agents' handoffs (every 4 s from 2 s, the one at 10 s into the killed
    // backhaul): one row each, PriorityFEC, decoded tokens for those that arrived.
    let h = tables.get("handoffs").expect("handoff table");
    assert!(
        h.column("scheme").iter().all(|s| *s == "priorityfec"),
        "{}",
        h.text()
    );
    assert!(h.column("scheme").len() >= 6, "{}", h.text());
    assert!(h.column("outcome").contains(&"ok"), "{}", h.text());

    // The same tables in the results folder.
    let md = std::fs::read_to_string(out.dir.join("summary.md")).expect("summary.md");
    assert!(md.contains("| least-loaded |"), "{md}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.dir.join("summary.json")).expect("summary.json"))
            .expect("JSON");
    assert_eq!(
        json["tables"]["policies"]["rows"][1]["policy"],
        "least-loaded"
    );
    assert!(json["hosts"].as_array().is_some_and(|h| h.len() == 3));
}
