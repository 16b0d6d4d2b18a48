//! The control plane over real loopback websockets: token checks, malformed
//! input, forwarding to the owning host, effect on traffic, run.stop.

mod common;

use common::*;
use edgemu_nodes::control::client;
use edgemu_nodes::run::{load, run_all};
use std::time::Duration;

const TOKEN_VAR: &str = "EDGEMU_TEST_CONTROL_TOKEN";

fn cluster_text(results: &str, ports: &[u16]) -> String {
    format!(
        r#"
[run]
name = "ctl"
duration = "30s"
seed = 3
results = "{results}"
token_env = "{TOKEN_VAR}"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "beta"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[actors]]
name = "cbr"
host = "beta"
kind = "constant"
to = "sink"
via = "wan"
rate = "4Mbps"
size = "1000B"

[[actors]]
name = "sink"
host = "alpha"
kind = "sink"

[[links]]
name = "wan"
a = "cbr"
b = "sink"
rate = "10Mbps"
delay = "5ms"
"#,
        ports[0], ports[1], ports[2], ports[3]
    )
}

#[test]
fn control_commands_are_checked_forwarded_and_take_effect() {
    let token = "s3cret-token";
    std::env::set_var(TOKEN_VAR, token);
    let dir = temp_dir("control-plane");
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let cfg = write(
        &dir,
        "cluster.toml",
        &cluster_text(&dir.join("results").display().to_string(), &ports),
    );
    let cluster = load(&cfg).expect("load");
    let run = std::thread::spawn(move || run_all(cluster, Some("ctl".into()), false));

    let alpha = format!("ws://127.0.0.1:{}", ports[1]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let kill_ns = rt.block_on(async {
        wait_for_control(&alpha, Some(token)).await;

        // Wrong and missing tokens are refused; the connection and run go on.
        let e = client::request(&alpha, serde_json::json!({"cmd": "status"}), Some("wrong")).await;
        assert!(
            e.as_ref()
                .is_err_and(|e| e.to_string().contains("unauthorized")),
            "{e:?}"
        );
        let e = client::request(&alpha, serde_json::json!({"cmd": "status"}), None).await;
        assert!(
            e.as_ref()
                .is_err_and(|e| e.to_string().contains("missing token")),
            "{e:?}"
        );

        // Unknown command and unknown link: error replies naming the problem.
        let e = client::request(
            &alpha,
            serde_json::json!({"cmd": "link.explode", "link": "wan"}),
            Some(token),
        )
        .await;
        assert!(e.is_err());
        let e = client::request(
            &alpha,
            serde_json::json!({"cmd": "link.kill", "link": "nope"}),
            Some(token),
        )
        .await;
        assert!(
            e.as_ref().is_err_and(|e| e.to_string().contains("nope")),
            "{e:?}"
        );

        // Malformed JSON on a raw connection: an error reply, then the same
        // connection still answers a good request.
        {
            use futures_util::{SinkExt, StreamExt};
            use tokio_tungstenite::tungstenite::Message;
            let (mut ws, _) = tokio_tungstenite::connect_async(&alpha)
                .await
                .expect("connect");
            ws.send(Message::text("{not json")).await.expect("send");
            let reply = ws.next().await.expect("reply").expect("frame");
            let v: serde_json::Value =
                serde_json::from_str(reply.to_text().expect("text")).expect("json");
            assert_eq!(v["ok"], false);
            assert!(v["error"].as_str().unwrap_or("").contains("malformed JSON"));
            ws.send(Message::text(
                serde_json::json!({"id": 7, "cmd": "status", "token": token}).to_string(),
            ))
            .await
            .expect("send");
            let reply = ws.next().await.expect("reply").expect("frame");
            let v: serde_json::Value =
                serde_json::from_str(reply.to_text().expect("text")).expect("json");
            assert_eq!(v["id"], 7);
            assert_eq!(v["ok"], true);
        }

        // A message over the 1 MiB limit closes that connection without a
        // reply; the host goes on answering.
        {
            use futures_util::{SinkExt, StreamExt};
            use tokio_tungstenite::tungstenite::Message;
            let (mut ws, _) = tokio_tungstenite::connect_async(&alpha)
                .await
                .expect("connect");
            let huge = format!("{{\"cmd\":\"status\",\"pad\":\"{}\"}}", "x".repeat(2 << 20));
            let _ = ws.send(Message::text(huge)).await;
            let next = tokio::time::timeout(Duration::from_secs(5), ws.next())
                .await
                .expect("closed in time");
            assert!(
                !matches!(next, Some(Ok(Message::Text(_)))),
                "an oversized request was answered: {next:?}"
            );
        }
        // The token in the upgrade request authenticates the connection.
        {
            use futures_util::{SinkExt, StreamExt};
            use tokio_tungstenite::tungstenite::client::IntoClientRequest;
            use tokio_tungstenite::tungstenite::Message;
            let mut req = alpha.as_str().into_client_request().expect("request");
            req.headers_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("header"),
            );
            let (mut ws, _) = tokio_tungstenite::connect_async(req)
                .await
                .expect("connect");
            ws.send(Message::text(r#"{"id": 3, "cmd": "status"}"#))
                .await
                .expect("send");
            let reply = ws.next().await.expect("reply").expect("frame");
            let v: serde_json::Value =
                serde_json::from_str(reply.to_text().expect("text")).expect("json");
            assert_eq!(v["ok"], true, "{v}");
        }
        // Files outside the run's folder are refused without echoing them,
        // also through a host that forwards the command.
        for path in ["/etc/passwd", "../../../../etc/hostname", "/dev/zero"] {
            for key in ["rate_trace", "rate_steps"] {
                let e = client::request(
                    &alpha,
                    serde_json::json!({"cmd": "link.set", "link": "wan", "dir": "ab", key: path}),
                    Some(token),
                )
                .await
                .expect_err("refused");
                let e = e.to_string();
                assert!(e.contains("relative to the config file's folder"), "{e}");
                assert!(!e.contains("root:"), "{e}");
            }
        }

        // Status from one host covers both.
        let st = client::request(&alpha, serde_json::json!({"cmd": "status"}), Some(token))
            .await
            .expect("status");
        let hosts: Vec<&str> = st["hosts"]
            .as_array()
            .expect("hosts")
            .iter()
            .filter_map(|h| h["host"].as_str())
            .collect();
        assert_eq!(hosts, vec!["alpha", "beta"]);
        // Drop counters of the bounded paths are exported.
        let alpha_st = &st["hosts"][0];
        assert_eq!(alpha_st["router"]["dropped_inbound_full"], 0, "{alpha_st}");
        assert_eq!(
            alpha_st["mesh"]["beta"]["malformed_frames"], 0,
            "{alpha_st}"
        );
        assert_eq!(alpha_st["mesh"]["beta"]["control_dropped"], 0, "{alpha_st}");
        // What alpha's control socket refused above: two bad tokens, one
        // malformed request, one oversized message.
        assert_eq!(alpha_st["control"]["unauthorized"], 2, "{alpha_st}");
        assert_eq!(alpha_st["control"]["malformed_requests"], 1, "{alpha_st}");
        assert_eq!(alpha_st["control"]["oversized_messages"], 1, "{alpha_st}");
        assert_eq!(st["hosts"][1]["control"]["unauthorized"], 0, "{st}");

        tokio::time::sleep(Duration::from_secs(2)).await;
        // wan a→b is owned by beta (the sender's host): alpha forwards it.
        let r = client::request(
            &alpha,
            serde_json::json!({"cmd": "link.kill", "link": "wan", "dir": "ab", "for": "2s"}),
            Some(token),
        )
        .await
        .expect("kill");
        let applied = r["applied"].as_array().expect("applied");
        assert_eq!(applied.len(), 1, "{r}");
        assert_eq!(applied[0]["host"], "beta");
        let kill_ns = applied[0]["effective_ns"].as_u64().expect("effective_ns");
        tokio::time::sleep(Duration::from_secs(3)).await;

        // Metrics subscription: periodic updates with every host's links.
        let mut updates = 0;
        client::subscribe(&alpha, Some(token), "200ms", |v| {
            assert!(v["hosts"].as_array().is_some_and(|h| h.len() == 2), "{v}");
            updates += 1;
            updates < 3
        })
        .await
        .expect("subscribe");
        assert_eq!(updates, 3);

        // A partition (asked of beta, applied on both) drops cbr's traffic at beta's router.
        let beta = format!("ws://127.0.0.1:{}", ports[3]);
        let r = client::request(
            &beta,
            serde_json::json!({"cmd": "host.partition", "hosts": ["alpha", "beta"], "for": "1s"}),
            Some(token),
        )
        .await
        .expect("partition");
        assert_eq!(r["applied"].as_array().map(Vec::len), Some(2), "{r}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let r = client::request(&alpha, serde_json::json!({"cmd": "run.stop"}), Some(token))
            .await
            .expect("stop");
        assert!(r["applied"].is_array());
        kill_ns
    });
    let out = run.join().expect("run thread").expect("run result");
    assert!(
        out.hosts.iter().all(|h| h.stop_reason.contains("run.stop")),
        "stopped by run.stop"
    );

    let beta = out
        .hosts
        .iter()
        .find(|h| h.host == "beta")
        .expect("beta summary");
    assert!(
        beta.router.dropped_partition > 100,
        "partition dropped {}",
        beta.router.dropped_partition
    );

    let rows = probes(&out.dir.join("alpha/probes.csv"));
    let before = rows
        .iter()
        .filter(|r| r.recv_ns + 100_000_000 < kill_ns)
        .count();
    let during = rows
        .iter()
        .filter(|r| r.recv_ns > kill_ns + 50_000_000 && r.recv_ns < kill_ns + 2_000_000_000)
        .count();
    let after = rows
        .iter()
        .filter(|r| r.recv_ns > kill_ns + 2_100_000_000)
        .count();
    assert!(before > 100, "traffic before the kill: {before}");
    assert_eq!(during, 0, "packets during the kill window");
    assert!(after > 100, "traffic after the heal: {after}");

    let events = std::fs::read_to_string(out.dir.join("beta/events.jsonl")).expect("events");
    assert!(
        events
            .lines()
            .any(|l| l.contains("\"link.kill\"") && l.contains("control")),
        "{events}"
    );
    let refused = std::fs::read_to_string(out.dir.join("alpha/events.jsonl")).expect("events");
    assert!(!refused.contains("link.explode"));
}
