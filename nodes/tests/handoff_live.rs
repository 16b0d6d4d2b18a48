//! Agents handing off real KV over an emulated link, in one process under
//! virtual time, with the tiny random Llama (no download): a lossless
//! handoff delivers everything and decodes like full-KV decoding; a lossy
//! one recovers exactly the co-simulation harness's utility for the same
//! channel draws; a killed link or agent mid-handoff is recorded, never a
//! hang; a policy swap shows in the next handoff's version; the moka
//! context cache counts hits and evictions.

mod common;

use common::*;
use edgemu_config::Cluster;
use edgemu_handoff::{placeholder_utilities, run_handoff, synthetic_payload, BlockLayout};
use edgemu_handoff::{Deadline, HandoffScenario, RunOptions};
use edgemu_nodes::host::spawn::derive_seed;
use edgemu_policies::slot::version_hash;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

const GE: &str = "loss = { model = \"ge\", eps_g = 0.01, eps_b = 0.6, p_gb = 0.05, p_bg = 0.2 }";

/// Agents `a` (host `h1`) and `b` (host `h2`) on tiny real servers; `a`
/// hands its context to `b` over `wan` (100 Mb/s, 10 ms each way).
fn cluster_text(results: &str, seed: u64, task: &str, loss: &str, chaos: &str) -> String {
    format!(
        r#"
[run]
name = "handoff-live"
duration = "3s"
seed = {seed}
time = "virtual"
results = "{results}"

[[hosts]]
name = "h1"
listen = "127.0.0.1:1"

[[hosts]]
name = "h2"
listen = "127.0.0.1:2"

[[actors]]
name = "sched"
host = "h1"
kind = "scheduler"
servers = ["e1", "e2"]

[[actors]]
name = "e1"
host = "h1"
kind = "server"
backend = "real"
model = "tiny"

[[actors]]
name = "e2"
host = "h2"
kind = "server"
backend = "real"
model = "tiny"

[[actors]]
name = "a"
host = "h1"
kind = "agent"
server = "e1"
hand_to = "b"
via = "wan"
context_tokens = 64
start = "100ms"
decode_tokens = 4
{task}

[[actors]]
name = "b"
host = "h2"
kind = "agent"
server = "e2"

[[links]]
name = "wan"
a = "a"
b = "b"
rate = "100Mbps"
delay = "10ms"
{loss}
{chaos}
"#
    )
}

struct Row(HashMap<String, String>);

impl Row {
    fn get(&self, k: &str) -> &str {
        self.0
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no column {k}"))
    }
    fn f(&self, k: &str) -> f64 {
        self.get(k)
            .parse()
            .unwrap_or_else(|_| panic!("{k} = {:?}", self.get(k)))
    }
}

/// Splits a CSV line whose quoted fields may hold commas.
fn split(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn handoffs(run_dir: &Path) -> Vec<Row> {
    let text = std::fs::read_to_string(run_dir.join("h2/handoffs.csv")).expect("handoffs.csv");
    let mut lines = text.lines();
    let header = split(lines.next().expect("header"));
    lines
        .map(|l| {
            let cols = split(l);
            assert_eq!(cols.len(), header.len(), "{l}");
            Row(header.iter().cloned().zip(cols).collect())
        })
        .collect()
}

#[test]
fn a_lossless_handoff_delivers_everything_and_decodes_like_full_kv() {
    let dir = temp_dir("handoff-lossless");
    let results = dir.join("results").display().to_string();
    let text = cluster_text(
        &results,
        1,
        "rho = 1.2\nscheme = \"priority-fixed-fec\"",
        "",
        "",
    );
    let run_dir = run_file(&text, &dir, "lossless");
    let rows = handoffs(&run_dir);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.get("outcome"), "ok");
    assert_eq!((r.get("from"), r.get("to")), ("a", "b"));
    assert_eq!(r.f("recovered_utility"), 1.0);
    assert_eq!(r.f("tokens_decoded"), 4.0);
    assert_eq!(r.f("agreement"), 1.0, "decoding equals full-KV decoding");
    assert!(r.f("ttft_ms") > 10.0, "TTFT includes the link's delay");
    assert_eq!(r.get("policy"), "fixed-rate");
    assert_eq!(r.get("sender_cache_hit"), "false");
    let events = std::fs::read_to_string(run_dir.join("h1/events.jsonl")).expect("events");
    assert!(
        events.contains("handoff.start") && events.contains("handoff.sent"),
        "{events}"
    );
}

/// The harness's value for the handoff the file describes: the same
/// layout, utilities, link parameters and the forward link's seed.
fn harness_utility(text: &str, scheme: &str, rho: f64) -> f64 {
    let spec = edgemu_handoff::scheme(scheme).expect("scheme");
    harness_utility_with(text, scheme, rho, spec.scheduler(None).expect("builtin"))
}

/// [`harness_utility`] with `scheduler` deciding the repairs.
fn harness_utility_with(
    text: &str,
    scheme: &str,
    rho: f64,
    scheduler: Box<dyn edgemu_policies::repair::RepairScheduler>,
) -> f64 {
    let c = Cluster::from_str(text, Path::new("c.toml")).expect("config");
    let device = edgemu_gpu::model::parse_device("cpu").expect("cpu");
    let tiny =
        edgemu_gpu::model::load_tiny(edgemu_actors::handoff::engine::TINY_SEED, &device, None)
            .expect("tiny");
    let cfg = tiny.model.config();
    let layout = BlockLayout::for_model(
        cfg.n_layers as u32,
        cfg.n_kv_heads as u32,
        cfg.head_dim as u32,
        2,
        64,
    )
    .expect("layout");
    let link = &c.links[0];
    let scenario = HandoffScenario::over_link(
        layout,
        Arc::from(placeholder_utilities(&layout)),
        synthetic_payload(&layout, 0),
        link.ab.clone(),
        link.ba.clone(),
        Deadline::Rho(rho),
    )
    .expect("a fixed-rate link");
    let spec = edgemu_handoff::scheme(scheme).expect("scheme");
    // Link `wan` is link 0, direction a → b: salt 0.
    let seed = derive_seed(c.run.seed, 0);
    run_handoff(&scenario, spec, scheduler, seed, RunOptions::default())
        .expect("harness")
        .report
        .recovered_utility
}

#[test]
fn lossy_handoffs_in_virtual_time_equal_the_harness() {
    let dir = temp_dir("handoff-equal");
    let results = dir.join("results").display().to_string();
    let mut checked = 0;
    for (seed, scheme) in [
        (1, "priority-fixed-fec"),
        (2, "flec-rt"),
        (3, "deficit-heuristic"),
        (4, "udp"),
        (5, "uniform-fec"),
    ] {
        let rho = 0.9;
        let task = format!("rho = {rho}\nscheme = \"{scheme}\"");
        let text = cluster_text(&results, seed, &task, GE, "");
        let run_dir = run_file(&text, &dir, &format!("eq-{seed}"));
        let rows = handoffs(&run_dir);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get("outcome"), "ok");
        let live = rows[0].f("recovered_utility");
        let sim = harness_utility(&text, scheme, rho);
        assert_eq!(
            live, sim,
            "seed {seed}, {scheme}: actors {live} vs harness {sim}"
        );
        if live < 1.0 {
            checked += 1;
        }
    }
    assert!(checked >= 2, "the channel must lose something in some runs");
}

/// A repair DDQN written by Python, swapped into a virtual-time run by the
/// chaos timeline, recovers exactly the harness's utility with the same
/// weights on the same channel draws, and the records carry its version.
/// The weights are the `edgemu` Python package's trained example when
/// `EDGEMU_PY_REPAIR_WEIGHTS` names it (`.ci/run`), else the fixture that
/// `scripts/write_policy_weights.py` wrote.
#[test]
fn a_python_written_repair_policy_swapped_in_equals_the_harness() {
    let weights = std::env::var_os("EDGEMU_PY_REPAIR_WEIGHTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../policies/tests/fixtures/python-repair-ddqn.safetensors")
        });
    let bytes = std::fs::read(&weights).expect("python-written weights");
    let version = version_hash("priorityfec-ddqn", &bytes);
    let dir = temp_dir("handoff-python");
    std::fs::write(dir.join("python-repair.safetensors"), &bytes).expect("copy");
    let results = dir.join("results").display().to_string();
    let chaos = "[[chaos]]\nat = \"0s\"\ncommand = \"policy.swap\"\nactor = \"a\"\n\
                 policy = \"priorityfec-ddqn\"\nweights = \"python-repair.safetensors\"\n";
    let mut lossy = 0;
    for seed in [1, 2, 3] {
        let rho = 0.9;
        let task = format!("rho = {rho}\nscheme = \"priorityfec\"");
        let text = cluster_text(&results, seed, &task, GE, chaos);
        let rows = handoffs(&run_file(&text, &dir, &format!("py-{seed}")));
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.get("outcome"), "ok");
        assert_eq!(r.get("policy"), "priorityfec-ddqn");
        assert_eq!(r.get("policy_version"), &version[..12]);
        let net = edgemu_policies::repair::ddqn::DdqnScheduler::load(&weights).expect("loads");
        let live = r.f("recovered_utility");
        let sim = harness_utility_with(&text, "priorityfec", rho, Box::new(net));
        assert_eq!(live, sim, "seed {seed}: actors {live} vs harness {sim}");
        lossy += usize::from(live < 1.0);
    }
    assert!(lossy >= 1, "the channel must lose something in some run");
}

#[test]
fn a_killed_link_or_agent_mid_handoff_is_recorded() {
    let dir = temp_dir("handoff-kill");
    let results = dir.join("results").display().to_string();
    // The link dies 2 ms into the handoff (start at 100 ms, prefill inline).
    let chaos = "[[chaos]]\nat = \"102ms\"\ncommand = \"link.kill\"\nlink = \"wan\"\n";
    let text = cluster_text(&results, 1, "rho = 1.0", "", chaos);
    let rows = handoffs(&run_file(&text, &dir, "link"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get("outcome"), "ok", "a partial handoff is decoded");
    assert!(rows[0].f("recovered_utility") < 1.0);

    let chaos = "[[chaos]]\nat = \"102ms\"\ncommand = \"actor.kill\"\nactor = \"a\"\n";
    let text = cluster_text(&results, 1, "rho = 1.0", "", chaos);
    let run_dir = run_file(&text, &dir, "agent");
    let rows = handoffs(&run_dir);
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].get("outcome").starts_with("aborted:sender killed"),
        "{}",
        rows[0].get("outcome")
    );
    let events = std::fs::read_to_string(run_dir.join("h1/events.jsonl")).expect("events");
    assert!(
        events.contains("agent.kill") && events.contains("handoff.abort"),
        "{events}"
    );
}

#[test]
fn a_policy_swap_shows_in_the_next_handoff_and_the_cache_counts() {
    let dir = temp_dir("handoff-swap");
    let results = dir.join("results").display().to_string();
    let chaos = "[[chaos]]\nat = \"1s\"\ncommand = \"policy.swap\"\nactor = \"a\"\npolicy = \"fixed-rate\"\n";
    let task = "rho = 1.2\nscheme = \"deficit-heuristic\"\nevery = \"1500ms\"\nhandoffs = 2";
    let text = cluster_text(&results, 1, task, "", chaos);
    let rows = handoffs(&run_file(&text, &dir, "swap"));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get("policy"), "deficit-heuristic");
    assert_eq!(rows[1].get("policy"), "fixed-rate");
    let v = version_hash("fixed-rate", &[]);
    assert_eq!(rows[1].get("policy_version"), &v[..12]);
    // One context, handed twice: the second is a hit in a's cache.
    assert_eq!(rows[0].get("sender_cache_hit"), "false");
    assert_eq!(rows[1].get("sender_cache_hit"), "true");

    // A cache smaller than the context keeps nothing: a miss each time,
    // and evictions counted.
    let task = format!("{task}\nkv_cache = \"1KiB\"");
    let text = cluster_text(&results, 1, &task, "", "");
    let run_dir = run_file(&text, &dir, "tiny-cache");
    let rows = handoffs(&run_dir);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.get("sender_cache_hit") == "false"));
    let events = std::fs::read_to_string(run_dir.join("h1/events.jsonl")).expect("events");
    let last = events
        .lines()
        .rfind(|l| l.contains("handoff.start"))
        .expect("a start event");
    let v: serde_json::Value = serde_json::from_str(last).expect("json");
    assert!(
        v["detail"]["cache"]["evictions"].as_u64().unwrap_or(0) >= 1,
        "{last}"
    );
}

#[test]
fn bad_agents_are_located_errors() {
    let base = cluster_text("r", 1, "rho = 0.8", "", "");
    let check = |text: &str, want: &str| {
        let e = Cluster::from_str(text, Path::new("c.toml"))
            .expect_err("invalid")
            .to_string();
        assert!(e.contains(want), "{want:?} not in:\n{e}");
        assert!(e.contains("c.toml:"), "located: {e}");
    };
    check(
        &base.replace("rho = 0.8", "scheme = \"tcp\""),
        "between agents, `tcp-kernel` is the kernel's TCP through attach points",
    );
    // tcp-kernel's `via` joins two attach points, not the agents.
    check(
        &base.replace("rho = 0.8", "rho = 0.8\nscheme = \"tcp-kernel\""),
        "must join an attach point on this agent's host (its `a`) and one on \"b\"'s host",
    );
    check(
        &base.replace("rho = 0.8", "rho = 0.8\nttft = \"1s\""),
        "not both",
    );
    check(
        &base.replace("server = \"e2\"", "server = \"e1\""),
        "on another host",
    );
    check(
        &base.replace("context_tokens = 64", "context_tokens = 60"),
        "multiple of 16",
    );
    check(
        &base.replace("hand_to = \"b\"", "hand_to = \"e2\""),
        "expected a agent actor",
    );
    check(
        &base.replace(
            "name = \"e1\"\nhost = \"h1\"\nkind = \"server\"\nbackend = \"real\"\nmodel = \"tiny\"",
            "name = \"e1\"\nhost = \"h1\"\nkind = \"server\"",
        ),
        "modeled backend",
    );
    check(
        &base.replace("decode_tokens = 4", "decode_tokens = 4\ncoding_window = 0"),
        "coding_window",
    );
    check(
        &base.replace(
            "decode_tokens = 4",
            "decode_tokens = 4\ncoding_window = 5000",
        ),
        "expected a number from 1 to 4096, found 5000",
    );
    check(
        &base.replace(
            "name = \"b\"\nhost = \"h2\"\nkind = \"agent\"",
            "name = \"b\"\nhost = \"h2\"\nkind = \"agent\"\ncoding_window = 64",
        ),
        "set `hand_to`",
    );
    let c = Cluster::from_str(&base, Path::new("c.toml")).expect("valid");
    assert!(
        c.describe().contains("hands 1 64-token builtin context(s)"),
        "{}",
        c.describe()
    );
    assert!(
        c.describe().contains("coding window 256"),
        "{}",
        c.describe()
    );
    let wide = base.replace(
        "decode_tokens = 4",
        "decode_tokens = 4\ncoding_window = 1024",
    );
    let c = Cluster::from_str(&wide, Path::new("c.toml")).expect("valid");
    assert!(
        c.describe().contains("coding window 1024"),
        "{}",
        c.describe()
    );
}

#[test]
fn the_documented_agents_example_is_valid() {
    let doc = include_str!("../../docs/cluster-toml.md");
    let start =
        doc.find("```toml agents\n").expect("the agents example") + "```toml agents\n".len();
    let end = start + doc[start..].find("```").expect("its end");
    let head = "[run]\nduration = \"5s\"\n[[hosts]]\nname = \"gpu1\"\nlisten = \"127.0.0.1:1\"\n[[hosts]]\nname = \"gpu2\"\nlisten = \"127.0.0.1:2\"\n[[actors]]\nname = \"sched\"\nhost = \"gpu1\"\nkind = \"scheduler\"\nservers = [\"edge-b\", \"edge-c\"]\n[[actors]]\nname = \"edge-b\"\nhost = \"gpu1\"\nkind = \"server\"\nbackend = \"real\"\n[[actors]]\nname = \"edge-c\"\nhost = \"gpu2\"\nkind = \"server\"\nbackend = \"real\"\n";
    let c = Cluster::from_str(
        &format!("{head}{}", &doc[start..end]),
        Path::new("doc.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let d = c.describe();
    assert!(d.contains("to agent-b via wan: 3 every 8s"), "{d}");
}

/// In real time over loopback, `status` and `/metrics` show the sending
/// agent's context-KV cache counters (the first handoff is a miss).
#[test]
fn the_senders_kv_cache_counters_show_in_status_and_metrics() {
    let dir = temp_dir("handoff-cache-status");
    let results = dir.join("results").display().to_string();
    let (m1, m2, control) = (free_port(), free_port(), free_port());
    let text = cluster_text(&results, 1, "rho = 1.0\nevery = \"1s\"", "", "")
        .replace("time = \"virtual\"\n", "")
        .replace("duration = \"3s\"", "duration = \"30s\"")
        .replace(
            "listen = \"127.0.0.1:1\"",
            &format!("listen = \"127.0.0.1:{m1}\"\ncontrol = \"127.0.0.1:{control}\""),
        )
        .replace(
            "listen = \"127.0.0.1:2\"",
            &format!("listen = \"127.0.0.1:{m2}\""),
        )
        .replace(
            "[run]\n",
            "[run]\ntoken_env = \"EDGEMU_TEST_CACHE_TOKEN_UNSET\"\n",
        );
    let cfg = write(&dir, "cache.toml", &text);
    let cluster = edgemu_nodes::run::load(&cfg).expect("load");
    let run = std::thread::spawn(move || {
        edgemu_nodes::run::run_all(cluster, Some("cache".into()), false)
    });
    let url = format!("ws://127.0.0.1:{control}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cache = rt.block_on(async {
        wait_for_control(&url, None).await;
        for _ in 0..300 {
            let status = edgemu_nodes::control::client::request(
                &url,
                serde_json::json!({"cmd": "status"}),
                None,
            )
            .await
            .expect("status");
            let h1 = status["hosts"]
                .as_array()
                .and_then(|h| h.iter().find(|h| h["host"] == "h1"))
                .cloned()
                .expect("h1 answers");
            let c = &h1["kv_caches"]["a"];
            // The miss counts at the lookup, the bytes once the prefill is
            // kept: on a busy machine a status can fall between the two.
            if c["misses"].as_u64().unwrap_or(0) >= 1 && c["bytes"].as_u64().unwrap_or(0) > 0 {
                return c.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("no cache miss with its prefilled bytes in status after 30 s");
    });
    assert!(cache["bytes"].as_u64().unwrap_or(0) > 0, "{cache}");
    assert!(cache["capacity_bytes"].as_u64().unwrap_or(0) > 0, "{cache}");
    let (_, metrics) =
        edgemu_nodes::bench::common::http_get(control, "/metrics", "*/*").expect("GET /metrics");
    assert!(
        metrics.contains(r#"edgemu_agent_kv_cache_misses_total{host="h1",agent="a"}"#),
        "{metrics}"
    );
    rt.block_on(edgemu_nodes::control::client::request(
        &url,
        serde_json::json!({"cmd": "run.stop"}),
        None,
    ))
    .expect("stop");
    run.join().expect("run thread").expect("run");
}
