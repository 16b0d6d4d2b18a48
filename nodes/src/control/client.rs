//! `edgemu ctl`: a command-line client for the control websocket.

use anyhow::{bail, Context as _, Result};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// Sends one request and returns the reply's `result` (or the error it carried).
pub async fn request(
    url: &str,
    mut req: serde_json::Value,
    token: Option<&str>,
) -> Result<serde_json::Value> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    if let Some(t) = token {
        req["token"] = t.into();
    }
    req["id"] = 1.into();
    ws.send(Message::text(req.to_string())).await?;
    while let Some(msg) = ws.next().await {
        if let Message::Text(t) = msg? {
            let v: serde_json::Value = serde_json::from_str(&t).context("malformed reply")?;
            if v.get("id") != Some(&serde_json::Value::from(1)) {
                continue;
            }
            let _ = ws.close(None).await;
            if v.get("ok").and_then(|o| o.as_bool()) == Some(true) {
                return Ok(v.get("result").cloned().unwrap_or_default());
            }
            bail!(
                "{}",
                v.get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("request failed")
            );
        }
    }
    bail!("connection closed before a reply")
}

/// Subscribes to metrics and calls `each` for every update until it returns false.
pub async fn subscribe(
    url: &str,
    token: Option<&str>,
    interval: &str,
    mut each: impl FnMut(&serde_json::Value) -> bool,
) -> Result<()> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let mut req = serde_json::json!({ "id": 1, "cmd": "metrics.subscribe", "interval": interval });
    if let Some(t) = token {
        req["token"] = t.into();
    }
    ws.send(Message::text(req.to_string())).await?;
    while let Some(msg) = ws.next().await {
        if let Message::Text(t) = msg? {
            let v: serde_json::Value = serde_json::from_str(&t).context("malformed message")?;
            if v.get("ok").and_then(|o| o.as_bool()) == Some(false) {
                bail!(
                    "{}",
                    v.get("error")
                        .and_then(|e| e.as_str())
                        .unwrap_or("subscription refused")
                );
            }
            if v.get("event").and_then(|e| e.as_str()) == Some("metrics") {
                if let Some(r) = v.get("result") {
                    if !each(r) {
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}
