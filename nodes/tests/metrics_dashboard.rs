//! `/metrics`, `/api/snapshot` and the dashboard page on the control
//! address of a real run over loopback: counters move between scrapes, a
//! kill over the control websocket shows in the next scrape, commands are
//! counted by result, and the websocket still works on the same port.

mod common;

use common::*;
use edgemu_nodes::bench::common::http_get;
use edgemu_nodes::control::client;
use edgemu_nodes::run::{load, run_all};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const TOKEN_VAR: &str = "EDGEMU_TEST_METRICS_TOKEN";
const TOKEN: &str = "metrics-token";

fn cluster_text(results: &str, mesh: u16, control: u16) -> String {
    format!(
        r#"
[run]
name = "metrics"
duration = "60s"
seed = 11
results = "{results}"
token_env = "{TOKEN_VAR}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{mesh}"
control = "127.0.0.1:{control}"

[[actors]]
name = "cbr"
host = "edge"
kind = "constant"
to = "sink"
via = "wan"
rate = "4Mbps"
size = "1000B"

[[actors]]
name = "sink"
host = "edge"
kind = "sink"

[[links]]
name = "wan"
a = "cbr"
b = "sink"
rate = "10Mbps"
delay = "5ms"
loss = {{ model = "bernoulli", p = 0.02 }}
"#
    )
}

/// One plain HTTP GET; returns (status line and headers, body).
fn get(port: u16, path: &str) -> Option<(String, String)> {
    http_get(port, path, "*/*")
}

/// Writes the cluster file `text(results, mesh port, control port)` in a
/// fresh `dir` with the test token set and runs it on a thread; returns the
/// control port and the run.
fn start(
    dir: &str,
    run_id: &str,
    text: fn(&str, u16, u16) -> String,
) -> (
    u16,
    std::thread::JoinHandle<anyhow::Result<edgemu_nodes::run::RunOutcome>>,
) {
    std::env::set_var(TOKEN_VAR, TOKEN);
    let dir = temp_dir(dir);
    let (mesh, control) = (free_port(), free_port());
    let results = dir.join("results").display().to_string();
    let cfg = write(&dir, "cluster.toml", &text(&results, mesh, control));
    let cluster = load(&cfg).expect("load");
    let id = run_id.to_string();
    (
        control,
        std::thread::spawn(move || run_all(cluster, Some(id), false)),
    )
}

/// The value of the sample line that starts with `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// `/metrics` as Prometheus asks for it (OpenMetrics).
fn scrape(port: u16) -> String {
    let (head, body) = http_get(
        port,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    )
    .expect("GET /metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    body
}

#[test]
fn metrics_move_during_a_run_and_show_a_kill() {
    let token = TOKEN;
    let (control, run) = start("metrics-dashboard", "metrics", cluster_text);

    // Wait for the control address to answer plain HTTP.
    let t0 = Instant::now();
    let page = loop {
        match get(control, "/") {
            Some((head, body)) if head.starts_with("HTTP/1.1 200") => break body,
            _ if t0.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            other => panic!("the dashboard never answered: {other:?}"),
        }
    };
    assert!(page.contains("/assets/uPlot.iife.min.js"), "{page}");
    assert!(!page.contains(token));
    let (head, js) = get(control, "/assets/uPlot.iife.min.js").expect("uPlot");
    assert!(head.starts_with("HTTP/1.1 200") && js.contains("uPlot"));
    let (head, _) = get(control, "/nope").expect("404");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // Plain HTTP changes nothing: other methods are refused; garbage that is
    // no HTTP goes to the websocket handshake, which closes the connection.
    {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", control)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
        .expect("w");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
        let mut s = std::net::TcpStream::connect(("127.0.0.1", control)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
            .expect("w");
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(!rest.starts_with(b"HTTP/1.1 200"));
    }

    let delivered = r#"edgemu_link_delivered_packets_total{host="edge",link="wan",dir="ab"}"#;
    let offered = r#"edgemu_link_offered_packets_total{host="edge",link="wan",dir="ab"}"#;
    let delay_count = r#"edgemu_link_delay_seconds_count{host="edge",link="wan",dir="ab"}"#;
    let up = r#"edgemu_link_up{host="edge",link="wan",dir="ab"}"#;

    // Counters move between scrapes.
    let first = scrape(control);
    assert!(first.ends_with("# EOF\n"));
    let d0 = value(&first, delivered).expect("delivered series");
    let mut moved = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let text = scrape(control);
        let d1 = value(&text, delivered).expect("delivered series");
        if d1 > d0 {
            moved = Some(text);
            break;
        }
    }
    let text = moved.expect("delivered packets never moved between scrapes");
    assert!(value(&text, offered).expect("offered") >= value(&text, delivered).expect("d"));
    assert!(value(&text, delay_count).expect("delay histogram") > 0.0);
    assert_eq!(value(&text, up), Some(1.0));

    // The snapshot the page polls has the link and the run.start event.
    let (_, snap) = get(control, "/api/snapshot?since=0").expect("snapshot");
    let snap: serde_json::Value = serde_json::from_str(&snap).expect("snapshot JSON");
    assert_eq!(snap["host"], "edge");
    assert_eq!(snap["links"][0]["name"], "wan");
    assert_eq!(snap["links"][0]["dir"], "ab");
    assert!(snap["events"]
        .as_array()
        .expect("events")
        .iter()
        .any(|e| e["kind"] == "run.start"));

    let url = format!("ws://127.0.0.1:{control}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // The websocket still answers on the same port; a bad token is counted.
        let e = client::request(&url, serde_json::json!({"cmd": "status"}), Some("wrong")).await;
        assert!(e.is_err());
        client::request(
            &url,
            serde_json::json!({"cmd": "link.kill", "link": "wan", "dir": "ab"}),
            Some(token),
        )
        .await
        .expect("kill");
    });
    let text = scrape(control);
    assert_eq!(value(&text, up), Some(0.0), "{text}");
    // Without an OpenMetrics Accept header: the classic text format, which
    // Prometheus's own linter accepts.
    let (head, classic) = get(control, "/metrics").expect("GET /metrics");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(classic.contains("# TYPE edgemu_link_delivered_packets_total counter"));
    assert!(!classic.contains("# EOF"));
    promtool_check(&classic);
    assert_eq!(
        value(
            &text,
            r#"edgemu_control_commands_total{host="edge",command="link.kill",result="ok"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"edgemu_control_commands_total{host="edge",command="status",result="unauthorized"}"#
        ),
        Some(1.0)
    );
    // Packets offered to the killed direction are now counted as down-dropped.
    let dd = r#"edgemu_link_down_dropped_packets_total{host="edge",link="wan",dir="ab"}"#;
    let mut dropped = false;
    for _ in 0..100 {
        if value(&scrape(control), dd).unwrap_or(0.0) > 0.0 {
            dropped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(dropped, "no down-dropped packets after the kill");
    let (_, snap) = get(control, "/api/snapshot?since=0").expect("snapshot");
    assert!(snap.contains("\"link.kill\""), "{snap}");

    rt.block_on(async {
        client::request(&url, serde_json::json!({"cmd": "run.stop"}), Some(token))
            .await
            .expect("stop");
    });
    let out = run.join().expect("run thread").expect("run result");
    assert!(out.hosts.iter().all(|h| h.stop_reason.contains("run.stop")));
}

/// `promtool check metrics` on `text` where Prometheus's linter is installed
/// (CI installs the Debian package `prometheus`; there it must be present).
fn promtool_check(text: &str) {
    let Ok(out) = std::process::Command::new("promtool")
        .arg("--version")
        .output()
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "promtool is not installed (Debian package prometheus)"
        );
        eprintln!("promtool check skipped: promtool not installed");
        return;
    };
    assert!(out.status.success());
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool output");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lyreo_cluster_text(results: &str, mesh: u16, control: u16) -> String {
    let mut t = format!(
        r#"
[run]
name = "lyreo-metrics"
duration = "60s"
seed = 3
results = "{results}"
token_env = "{TOKEN_VAR}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{mesh}"
control = "127.0.0.1:{control}"
"#
    );
    t += &scheduler_toml("edge", "500ms");
    t += r#"
[[actors]]
name = "s0"
host = "edge"
kind = "server"
gpu = "rtx3080"

[[actors]]
name = "s1"
host = "edge"
kind = "server"
gpu = "rtx4090"
"#;
    for u in 0..3 {
        t += &format!(
            "\n[[actors]]\nname = \"u{u}\"\nhost = \"edge\"\nkind = \"user\"\nscheduler = \"sched\"\nworkload = \"lmsys-like\"\nmax_input = 64\nmax_output = 16\n"
        );
    }
    t
}

/// A live LYREO run shows its servers (KV, batch, requests by outcome) and
/// its scheduler (Z_s, assignments, the active policy version) in
/// `/metrics` and in the page's snapshot; a `policy.swap` shows in both.
#[test]
fn lyreo_servers_and_scheduler_show_in_metrics_and_the_snapshot() {
    let token = TOKEN;
    let (control, run) = start("metrics-lyreo", "lyreo", lyreo_cluster_text);

    let ll = edgemu_policies::slot::version_hash("least-loaded", &[]);
    let policy_series = |name: &str, version: &str| {
        format!(
            r#"edgemu_scheduler_policy{{host="edge",scheduler="sched",policy="{name}",version="{version}"}}"#
        )
    };
    let served = r#"edgemu_server_requests_total{host="edge",server="s0",outcome="served"}"#;
    let slots = r#"edgemu_server_slots_total{host="edge",server="s1",gpu="rtx4090"}"#;
    let t0 = Instant::now();
    let text = loop {
        if let Some((head, body)) = http_get(
            control,
            "/metrics",
            "application/openmetrics-text;version=1.0.0",
        ) {
            if head.starts_with("HTTP/1.1 200")
                && value(&body, slots).unwrap_or(0.0) >= 2.0
                && value(&body, served).unwrap_or(0.0) >= 1.0
            {
                break body;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(40),
            "LYREO families never appeared"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(value(&text, &policy_series("least-loaded", &ll)), Some(1.0));
    assert_eq!(
        value(
            &text,
            r#"edgemu_server_kv_capacity_bytes{host="edge",server="s0",gpu="rtx3080"}"#
        ),
        Some(10e9),
        "M_s of an RTX 3080: {text}"
    );
    assert!(text.contains(r#"edgemu_scheduler_queue_z{host="edge",scheduler="sched",server="s1"}"#));
    for state in ["arriving", "queued", "running"] {
        let series = format!(
            r#"edgemu_server_requests_in_state{{host="edge",server="s0",state="{state}"}}"#
        );
        assert!(value(&text, &series).is_some(), "{series} missing: {text}");
    }
    assert!(
        value(
            &text,
            r#"edgemu_scheduler_decisions_total{host="edge",scheduler="sched"}"#
        )
        .unwrap_or(0.0)
            >= 3.0
    );
    let (_, snap) = get(control, "/api/snapshot?since=0").expect("snapshot");
    let snap: serde_json::Value = serde_json::from_str(&snap).expect("snapshot JSON");
    assert_eq!(snap["servers"]["s0"]["gpu"], "rtx3080");
    assert_eq!(snap["policy"]["sched"]["policy"], "least-loaded");
    assert_eq!(snap["policy"]["sched"]["version"], ll.as_str());

    let url = format!("ws://127.0.0.1:{control}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        client::request(
            &url,
            serde_json::json!({"cmd": "policy.swap", "actor": "sched", "policy": "random"}),
            Some(token),
        )
        .await
        .expect("swap");
    });
    let rnd = edgemu_policies::slot::version_hash("random", &[]);
    let mut swapped = false;
    for _ in 0..100 {
        if value(&scrape(control), &policy_series("random", &rnd)) == Some(1.0) {
            swapped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(swapped, "the swap never showed in /metrics");
    let (_, classic) = get(control, "/metrics").expect("GET /metrics");
    promtool_check(&classic);
    rt.block_on(async {
        client::request(&url, serde_json::json!({"cmd": "run.stop"}), Some(token))
            .await
            .expect("stop");
    });
    run.join().expect("run thread").expect("run result");
}
