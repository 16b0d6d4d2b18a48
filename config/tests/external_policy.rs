//! `policy = "external"`: the `external` table of a scheduler and an agent,
//! the swap to it (control and chaos), and its refusal in virtual time. Each
//! error names its key and line.

use edgemu_config::command::{Command, ExternalSwap, PolicyOp, Resolved};
use edgemu_config::*;
use std::path::Path;

fn file(time: &str, sched: &str, agent: &str, chaos: &str) -> String {
    format!(
        r#"[run]
duration = "20s"
time = "{time}"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:7101"

[[actors]]
name = "sched"
host = "alpha"
kind = "scheduler"
servers = ["s0"]
{sched}

[[actors]]
name = "s0"
host = "alpha"
kind = "server"

[[actors]]
name = "a"
host = "alpha"
kind = "agent"
server = "s0"
model = "tiny"
{agent}
{chaos}"#
    )
}

fn parse(text: &str) -> Result<Cluster, ConfigError> {
    Cluster::from_str(text, Path::new("/tmp/edgemu-external/cluster.toml"))
}

/// The one error's message, which must name `key` and the line holding `needle`.
fn error(text: &str, key: &str, needle: &str) -> String {
    let e = parse(text).expect_err("refused");
    let d = e.diagnostics();
    let line = text
        .lines()
        .position(|l| l.contains(needle))
        .expect("needle in the file")
        + 1;
    let hit = d
        .iter()
        .find(|d| d.message.contains(key))
        .unwrap_or_else(|| panic!("no error about {key}: {e}"));
    // A key's error is on its line; a missing key's on its table's header.
    assert!(
        hit.line == line || hit.line + 1 == line,
        "{key} at line {} (expected near {line}): {e}",
        hit.line
    );
    hit.message.clone()
}

fn scheduler(c: &Cluster) -> &SchedulerSpec {
    match &c.actors[0].kind {
        ActorKind::Scheduler(s) => s,
        _ => panic!("not a scheduler"),
    }
}

fn agent(c: &Cluster) -> &AgentSpec {
    match &c.actors[2].kind {
        ActorKind::Agent(a) => a,
        _ => panic!("not an agent"),
    }
}

#[test]
fn external_tables_resolve_with_their_defaults() {
    let c = parse(&file(
        "real",
        r#"policy = "external"
external = { url = "ws://127.0.0.1:7300", deadline = "30ms", fallback = "Random" }"#,
        r#"policy = "external"
external = { url = "ws://127.0.0.1:7301/repair" }"#,
        "",
    ))
    .unwrap();
    let s = scheduler(&c);
    assert_eq!(s.policy, "external");
    let e = s.external.as_ref().unwrap();
    assert_eq!(e.url, "ws://127.0.0.1:7300");
    assert_eq!(e.deadline_ns, Some(30_000_000));
    assert_eq!(e.fallback.as_deref(), Some("random"));
    let a = agent(&c).external.as_ref().unwrap();
    assert_eq!((a.deadline_ns, a.fallback.as_deref()), (None, None));
    assert_eq!(
        a.deadline_or(external::DEFAULT_REPAIR_DEADLINE_NS),
        2_000_000
    );
    assert!(c
        .describe()
        .contains("external policy at ws://127.0.0.1:7300"));
    // A table without `policy = "external"` is what a swap uses.
    let c = parse(&file(
        "real",
        r#"external = { url = "ws://127.0.0.1:7300" }"#,
        "",
        "",
    ))
    .unwrap();
    assert_eq!(scheduler(&c).policy, "least-loaded");
    assert!(scheduler(&c).external.is_some());
}

#[test]
fn bad_external_settings_are_located() {
    let cases: [(&str, &str, &str, &str); 7] = [
        (r#"policy = "external""#, "", "external", "name = \"sched\""),
        (
            r#"external = { url = "http://127.0.0.1:7300" }"#,
            "",
            "external.url",
            "http://",
        ),
        (
            r#"external = { url = "ws://x:1", deadline = "0ms" }"#,
            "",
            "external.deadline",
            "0ms",
        ),
        (
            r#"external = { url = "ws://x:1", deadline = "950ms" }"#,
            "",
            "external.deadline",
            "950ms",
        ),
        (
            r#"external = { url = "ws://x:1", fallback = "external" }"#,
            "",
            "external.fallback",
            "fallback",
        ),
        (
            r#"external = { url = "ws://x:1", wait = "1ms" }"#,
            "",
            "wait",
            "wait",
        ),
        ("", r#"policy = "external""#, "external", "name = \"a\""),
    ];
    for (sched, agent, key, needle) in cases {
        let msg = error(&file("real", sched, agent, ""), key, needle);
        assert!(!msg.is_empty(), "{key}");
    }
}

#[test]
fn virtual_time_refuses_an_external_policy() {
    let msg = error(
        &file(
            "virtual",
            r#"policy = "external"
external = { url = "ws://127.0.0.1:7300" }"#,
            "",
            "",
        ),
        "virtual",
        "policy = \"external\"",
    );
    assert!(msg.contains("real time"), "{msg}");
    let chaos = r#"
[[chaos]]
at = "2s"
command = "policy.swap"
actor = "a"
policy = "external"
url = "ws://127.0.0.1:7301"
"#;
    let msg = error(
        &file("virtual", "", "", chaos),
        "virtual",
        "policy = \"external\"",
    );
    assert!(msg.contains("time = \"real\""), "{msg}");
}

#[test]
fn a_swap_to_external_takes_the_actor_table_as_defaults() {
    let chaos = r#"
[[chaos]]
at = "2s"
command = "policy.swap"
actor = "sched"
policy = "external"
deadline = "40ms"

[[chaos]]
at = "3s"
command = "policy.swap"
actor = "a"
policy = "external"
url = "ws://127.0.0.1:7301"
fallback = "no-repair"
"#;
    let c = parse(&file(
        "real",
        r#"external = { url = "ws://127.0.0.1:7300", fallback = "random" }"#,
        "",
        chaos,
    ))
    .unwrap();
    let op = |i: usize| match &c.chaos[i].request {
        Resolved::Policy { op, .. } => op.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        op(0),
        PolicyOp::Swap {
            policy: Some("external".into()),
            weights: None,
            external: Some(ExternalSwap {
                url: "ws://127.0.0.1:7300".into(),
                deadline_ns: Some(40_000_000),
                fallback: Some("random".into()),
            }),
        }
    );
    let PolicyOp::Swap {
        external: Some(e), ..
    } = op(1)
    else {
        panic!()
    };
    assert_eq!(
        (e.url.as_str(), e.deadline_ns, e.fallback.as_deref()),
        ("ws://127.0.0.1:7301", None, Some("no-repair"))
    );

    // The control path resolves the same way and says what is wrong.
    let resolve = |json: serde_json::Value| {
        Command::from_request(&json)
            .and_then(|cmd| cmd.resolve(&c))
            .map_err(|e| e.to_string())
    };
    let e = resolve(serde_json::json!({"cmd": "policy.swap", "actor": "a", "policy": "external"}))
        .unwrap_err();
    assert!(e.contains("url"), "{e}");
    let e = resolve(
        serde_json::json!({"cmd": "policy.swap", "actor": "sched", "policy": "lyreo", "url": "ws://x:1"}),
    )
    .unwrap_err();
    assert!(e.contains("url") && e.contains("external"), "{e}");
    let e = resolve(serde_json::json!({"cmd": "policy.swap", "actor": "s0", "policy": "external", "url": "ws://x:1"}))
        .unwrap_err();
    assert!(e.contains("scheduler or an agent"), "{e}");
    let e = resolve(
        serde_json::json!({"cmd": "policy.swap", "actor": "sched", "policy": "external", "deadline": "2s"}),
    )
    .unwrap_err();
    assert!(e.contains("deadline"), "{e}");
}
