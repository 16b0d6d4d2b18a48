//! The control websocket of a host: JSON text frames, request → reply, plus
//! subscriptions.
//!
//! A request is one JSON object: `{"id": 1, "token": "…", "cmd": "link.kill",
//! "link": "wan", "dir": "ab", "for": "3s"}`. The reply echoes the id:
//! `{"id": 1, "ok": true, "result": {"applied": [{"host": …, "target": …,
//! "effective_ns": …}]}}` or `{"id": 1, "ok": false, "error": "…"}`.
//! Commands: `status`, `metrics`, `metrics.subscribe` (then a
//! `{"event": "metrics", …}` message every `interval`, default 1 s),
//! `link.set`, `link.kill`, `link.restore`, `link.flap`, `host.partition`,
//! `host.heal`, `run.stop`. A command whose target another host owns is
//! forwarded to it over the mesh. A missing or wrong token, malformed JSON or
//! an unknown command or link gets an error reply; the connection and the run
//! go on. Commands run on their own tasks and never block the data path.

pub mod client;

use crate::host::supervisor::{Control, Supervisor};
use actix::Addr;
use anyhow::Result;
use edgemu_codec::ids::HostId;
use edgemu_config::Cluster;
use futures_util::{SinkExt, StreamExt};
use hmac::Mac;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// Constant-time token comparison (via HMAC verification of a fixed message).
fn token_ok(expected: &[u8], given: &str) -> bool {
    if expected.is_empty() {
        return true;
    }
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"edgemu-control-token") else {
        return false;
    };
    mac.update(expected);
    let want = mac.finalize().into_bytes();
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"edgemu-control-token") else {
        return false;
    };
    mac.update(given.as_bytes());
    mac.verify_slice(&want).is_ok()
}

fn reply(id: &serde_json::Value, result: Result<serde_json::Value, String>) -> String {
    match result {
        Ok(v) => serde_json::json!({ "id": id, "ok": true, "result": v }).to_string(),
        Err(e) => serde_json::json!({ "id": id, "ok": false, "error": e }).to_string(),
    }
}

/// Binds `addr` and serves control connections for the life of the host.
pub async fn serve(
    addr: SocketAddr,
    sup: Addr<Supervisor>,
    token: Vec<u8>,
    cluster: Arc<Cluster>,
    host: HostId,
) -> Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let host_name = cluster.host(host).name.clone();
    tracing::info!(host = %host_name, %addr, "control websocket listening");
    let token = Arc::new(token);
    actix_rt::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!("control accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let sup = sup.clone();
            let token = token.clone();
            actix_rt::spawn(async move {
                if let Err(e) = connection(tcp, sup, token).await {
                    tracing::debug!(%peer, "control connection ended: {e}");
                }
            });
        }
    });
    Ok(())
}

async fn connection(
    tcp: tokio::net::TcpStream,
    sup: Addr<Supervisor>,
    token: Arc<Vec<u8>>,
) -> Result<()> {
    let ws = tokio_tungstenite::accept_async(tcp).await?;
    let (mut tx, mut rx) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
    let writer = actix_rt::spawn(async move {
        while let Some(text) = out_rx.recv().await {
            if tx.send(Message::text(text)).await.is_err() {
                break;
            }
        }
    });
    while let Some(msg) = rx.next().await {
        let msg = msg?;
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Binary(b) => match String::from_utf8(b.to_vec()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = out_tx
                        .send(reply(
                            &serde_json::Value::Null,
                            Err("binary frames are not accepted; send JSON text".into()),
                        ))
                        .await;
                    continue;
                }
            },
            Message::Close(_) => break,
            _ => continue,
        };
        let request: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => {
                let _ = out_tx
                    .send(reply(
                        &serde_json::Value::Null,
                        Err("a request must be a JSON object".into()),
                    ))
                    .await;
                continue;
            }
            Err(e) => {
                let _ = out_tx
                    .send(reply(
                        &serde_json::Value::Null,
                        Err(format!("malformed JSON: {e}")),
                    ))
                    .await;
                continue;
            }
        };
        let id = request
            .get("id")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let given = request.get("token").and_then(|t| t.as_str()).unwrap_or("");
        if !token_ok(&token, given) {
            let why = if request.get("token").is_none() {
                "missing token"
            } else {
                "wrong token"
            };
            tracing::warn!("control request refused: {why}");
            let _ = out_tx
                .send(reply(&id, Err(format!("unauthorized: {why}"))))
                .await;
            continue;
        }
        let cmd = request
            .get("cmd")
            .and_then(|c| c.as_str())
            .unwrap_or("")
            .to_string();
        let sup = sup.clone();
        let out = out_tx.clone();
        if cmd == "metrics.subscribe" {
            let interval = request
                .get("interval")
                .and_then(|i| i.as_str())
                .map(edgemu_config::parse_duration_ns)
                .transpose();
            let interval = match interval {
                Ok(i) => Duration::from_nanos(i.unwrap_or(1_000_000_000).max(10_000_000)),
                Err(e) => {
                    let _ = out
                        .send(reply(&id, Err(format!("\"interval\": {e}"))))
                        .await;
                    continue;
                }
            };
            let _ = out
                .send(reply(&id, Ok(serde_json::json!({ "subscribed": true }))))
                .await;
            actix_rt::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                loop {
                    tick.tick().await;
                    let r = sup
                        .send(Control {
                            request: serde_json::json!({ "cmd": "metrics" }),
                            forwarded: false,
                            source: "control".into(),
                        })
                        .await;
                    let v = match r {
                        Ok(Ok(v)) => v,
                        _ => break,
                    };
                    let msg = serde_json::json!({ "event": "metrics", "id": id, "result": v })
                        .to_string();
                    if out.send(msg).await.is_err() {
                        break;
                    }
                }
            });
            continue;
        }
        actix_rt::spawn(async move {
            let r = sup
                .send(Control {
                    request,
                    forwarded: false,
                    source: "control".into(),
                })
                .await;
            let result = match r {
                Ok(r) => r,
                Err(e) => Err(format!("host is shutting down: {e}")),
            };
            let _ = out.send(reply(&id, result)).await;
        });
    }
    drop(out_tx);
    let _ = writer.await;
    Ok(())
}
