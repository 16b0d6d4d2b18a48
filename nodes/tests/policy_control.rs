//! `policy.get`, `policy.swap` and `policy.rollback` end to end over real
//! loopback websockets: asked of one host, forwarded to the host that owns
//! the actor, applied to its policy slot (registered here, as a scheduler
//! or agent actor will), refused with the old policy kept on hostile input;
//! and the same command from a `[[chaos]]` entry.

mod common;

use base64::Engine as _;
use common::*;
use edgemu_codec::ids::ActorId;
use edgemu_nodes::control::client;
use edgemu_nodes::host::policies::PolicyRegistry;
use edgemu_nodes::host::HostOptions;
use edgemu_nodes::run::load;
use edgemu_policies::repair::ddqn::DdqnNet;
use edgemu_policies::slot::{version_hash, PolicySlot, RepairPolicies};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn cluster_text(ports: &[u16]) -> String {
    format!(
        r#"
[run]
name = "pol"
duration = "40s"
results = "results"
token_env = "EDGEMU_TEST_POLICY_TOKEN_UNSET"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "beta"
listen = "127.0.0.1:{}"

[[actors]]
name = "watch"
host = "alpha"
kind = "sink"

[[actors]]
name = "sender"
host = "beta"
kind = "sink"

[[chaos]]
at = "1s"
command = "policy.swap"
actor = "sender"
policy = "fixed-rate"
"#,
        ports[0], ports[1], ports[2]
    )
}

fn ddqn(seed: u64) -> Vec<u8> {
    DdqnNet::random(seed)
        .to_weights()
        .to_bytes()
        .expect("bytes")
}

/// A `repair-ddqn` file whose first layer has the wrong shape.
fn wrong_shape() -> Vec<u8> {
    let mut w = DdqnNet::random(1).to_weights();
    w.insert("q.0.weight", vec![64, 14], vec![0.1; 64 * 14]);
    w.to_bytes().expect("bytes")
}

fn with_nan() -> Vec<u8> {
    let mut w = DdqnNet::random(1).to_weights();
    let (shape, data) = w.tensor("q.1.bias").expect("tensor");
    let (shape, mut data) = (shape.to_vec(), data.to_vec());
    data[3] = f32::NAN;
    w.insert("q.1.bias", shape, data);
    w.to_bytes().expect("bytes")
}

async fn ask(url: &str, req: serde_json::Value) -> anyhow::Result<serde_json::Value> {
    client::request(url, req, None).await
}

#[test]
fn policy_commands_are_forwarded_validated_and_rolled_back() {
    let dir = temp_dir("policy-control");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let cfg = write(&dir, "cluster.toml", &cluster_text(&ports));
    std::fs::create_dir_all(dir.join("w")).expect("dir");
    let good = ddqn(7);
    std::fs::write(dir.join("w/good.safetensors"), &good).expect("write");
    std::fs::write(dir.join("w/shape.safetensors"), wrong_shape()).expect("write");
    std::fs::write(dir.join("w/nan.safetensors"), with_nan()).expect("write");
    std::fs::write(dir.join("secret.txt"), "root:x:0:0:root").expect("write");
    let cluster = load(&cfg).expect("load");

    // The slot a repair-scheduling actor on beta would register.
    let beta_policies = PolicyRegistry::default();
    let initial = ddqn(1);
    let slot = PolicySlot::new(
        RepairPolicies,
        "priorityfec-ddqn",
        Some(&initial),
        Path::new("<initial>"),
        0,
        "config",
    )
    .expect("slot");
    beta_policies.register(ActorId(1), Arc::new(slot));

    let threads = spawn_real_hosts(&cluster, |h| HostOptions {
        run_id: Some("pol".into()),
        wait_peers: Some(Duration::from_secs(10)),
        policies: if h.name == "beta" {
            beta_policies.clone()
        } else {
            PolicyRegistry::default()
        },
        ..Default::default()
    });

    let alpha = format!("ws://127.0.0.1:{}", ports[1]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        wait_for_control(&alpha, None).await;

        // The chaos entry at 1 s swaps to fixed-rate on beta.
        let mut got = json!(null);
        for _ in 0..100 {
            got = ask(&alpha, json!({"cmd": "policy.get", "actor": "sender"}))
                .await
                .expect("get");
            if got["requested_by"] == "chaos#1" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(got["policy"], "fixed-rate", "{got}");
        assert_eq!(got["host"], "beta", "{got}");
        assert_eq!(got["problem"], "repair");
        assert_eq!(got["version"], version_hash("fixed-rate", b""));
        assert_eq!(
            got["previous"],
            version_hash("priorityfec-ddqn", &initial),
            "{got}"
        );

        // A file under the run's folder, asked of alpha, applied on beta.
        let r = ask(
            &alpha,
            json!({"cmd": "policy.swap", "actor": "sender", "policy": "priorityfec-ddqn",
                   "weights": "w/good.safetensors"}),
        )
        .await
        .expect("swap");
        let good_version = version_hash("priorityfec-ddqn", &good);
        assert_eq!(r["version"], good_version, "{r}");
        assert_eq!(r["requested_by"], "control (via alpha)", "{r}");

        // Hostile swaps: refused with a clear error, the good version kept.
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 600 * 1024]);
        let nan_inline = base64::engine::general_purpose::STANDARD.encode(with_nan());
        let hostile = [
            (json!({"weights": "w/shape.safetensors"}), "shape"),
            (json!({"weights": "w/nan.safetensors"}), "not finite"),
            (json!({"weights_base64": nan_inline}), "not finite"),
            (
                json!({"weights": "/etc/passwd"}),
                "relative to the config file's folder",
            ),
            (
                json!({"weights": "../cluster.toml"}),
                "relative to the config file's folder",
            ),
            (json!({"weights": "secret.txt"}), "safetensors"),
            (json!({"weights_base64": big}), "limit"),
            (json!({"policy": "no-such-policy"}), "unknown repair policy"),
        ];
        for (extra, want) in hostile {
            let mut req = json!({"cmd": "policy.swap", "actor": "sender"});
            for (k, v) in extra.as_object().expect("object") {
                req[k] = v.clone();
            }
            let e = ask(&alpha, req).await.expect_err("refused").to_string();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains("root:x"), "file content echoed: {e}");
            let now = ask(&alpha, json!({"cmd": "policy.get", "actor": "sender"}))
                .await
                .expect("get");
            assert_eq!(now["version"], good_version, "{want} changed the policy");
        }

        // An actor without a slot, and an unknown actor.
        let e = ask(&alpha, json!({"cmd": "policy.get", "actor": "watch"}))
            .await
            .expect_err("no slot");
        assert!(e.to_string().contains("no policy slot"), "{e}");
        let e = ask(&alpha, json!({"cmd": "policy.get", "actor": "nobody"}))
            .await
            .expect_err("unknown");
        assert!(e.to_string().contains("no actor named"), "{e}");

        // Inline bytes, then two rollbacks back to the chaos version.
        let inline = ddqn(9);
        let r = ask(
            &alpha,
            json!({"cmd": "policy.swap", "actor": "sender",
                   "weights_base64": base64::engine::general_purpose::STANDARD.encode(&inline)}),
        )
        .await
        .expect("inline swap");
        assert_eq!(r["version"], version_hash("priorityfec-ddqn", &inline));
        assert_eq!(r["previous"], good_version);
        let r = ask(&alpha, json!({"cmd": "policy.rollback", "actor": "sender"}))
            .await
            .expect("rollback");
        assert_eq!(r["version"], good_version);
        let r = ask(&alpha, json!({"cmd": "policy.rollback", "actor": "sender"}))
            .await
            .expect("rollback");
        assert_eq!(r["policy"], "fixed-rate");

        ask(&alpha, json!({"cmd": "run.stop"})).await.expect("stop");
    });
    for t in threads {
        t.join().expect("host thread").expect("host result");
    }
    let events =
        std::fs::read_to_string(dir.join("results/pol/beta/events.jsonl")).expect("events");
    let swaps: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("\"policy.swap\""))
        .collect();
    assert!(swaps.iter().any(|l| l.contains("chaos#1")), "{events}");
    assert!(
        swaps
            .iter()
            .any(|l| l.contains("control (via alpha)") && l.contains("unchanged")),
        "refused swaps are logged: {events}"
    );
    assert!(events.contains("\"policy.rollback\""), "{events}");
}
