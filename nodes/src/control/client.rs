//! `edgemu ctl`: a command-line client for the control websocket.

use anyhow::{bail, Context as _, Result};
use edgemu_config::command::{ActorTarget, Command, PolicySwap, PolicyTarget};
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

/// `edgemu ctl policy …`: the policy commands of an actor's slot.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum PolicyCmd {
    /// The active policy of ACTOR: name, version hash, when loaded, by whom.
    Get { actor: String },
    /// Swap ACTOR's policy (validated on its host; the old one stays on any error).
    Swap {
        actor: String,
        /// Policy name, e.g. least-loaded, lyreo, priorityfec-ddqn (default: keep the active one).
        #[arg(long)]
        policy: Option<String>,
        /// Weights file on the actor's host, relative to its cluster.toml's folder.
        #[arg(long, conflicts_with = "upload")]
        weights: Option<String>,
        /// A local safetensors file sent inline (base64; at most 512 KiB).
        #[arg(long)]
        upload: Option<std::path::PathBuf>,
        /// With --policy external: the policy process's websocket, e.g.
        /// ws://127.0.0.1:7300 (default: the actor's `external.url`).
        #[arg(long)]
        url: Option<String>,
        /// With --policy external: how long each decision waits, e.g. 20ms
        /// (default: the actor's `external.deadline`, else 20ms for a
        /// scheduler, 2ms for an agent).
        #[arg(long)]
        deadline: Option<String>,
        /// With --policy external: the built-in policy that decides when the
        /// process does not answer in time (default: the actor's
        /// `external.fallback`, else the active policy).
        #[arg(long)]
        fallback: Option<String>,
    },
    /// Return ACTOR's policy to its previous version.
    Rollback { actor: String },
}

/// A typed command as the JSON request a control socket parses (the
/// protocol's own serde form, so the client cannot drift from it).
fn request_of(command: Command) -> Result<serde_json::Value> {
    Ok(command.to_request())
}

impl PolicyCmd {
    /// The request this subcommand sends.
    pub fn request(&self) -> Result<serde_json::Value> {
        use base64::Engine as _;
        let target = |actor: &String| PolicyTarget {
            actor: actor.clone(),
        };
        request_of(match self {
            PolicyCmd::Get { actor } => Command::PolicyGet(target(actor)),
            PolicyCmd::Rollback { actor } => Command::PolicyRollback(target(actor)),
            PolicyCmd::Swap {
                actor,
                policy,
                weights,
                upload,
                url,
                deadline,
                fallback,
            } => {
                let weights_base64 = match upload {
                    None => None,
                    Some(path) => {
                        let max = edgemu_config::command::MAX_INLINE_WEIGHTS_BYTES as u64;
                        let len = std::fs::metadata(path)
                            .with_context(|| format!("reading {}", path.display()))?
                            .len();
                        if len > max {
                            bail!(
                                "{}: {len} bytes, more than the {max}-byte limit for inline weights; copy it next to the host's cluster.toml and use --weights",
                                path.display()
                            );
                        }
                        let bytes = std::fs::read(path)
                            .with_context(|| format!("reading {}", path.display()))?;
                        Some(base64::engine::general_purpose::STANDARD.encode(bytes))
                    }
                };
                Command::PolicySwap(PolicySwap {
                    actor: actor.clone(),
                    policy: policy.clone(),
                    weights: weights.clone(),
                    weights_base64,
                    url: url.clone(),
                    deadline: deadline.clone(),
                    fallback: fallback.clone(),
                })
            }
        })
    }
}

/// `edgemu ctl actor …`: faults of one actor (see docs/control.md).
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ActorCmd {
    /// Kill ACTOR: it drops what it holds (a server its batch and queue,
    /// each request recorded as failed) and stops until restarted.
    Kill {
        actor: String,
        /// Restart by itself after this long, e.g. 5s.
        #[arg(long = "for")]
        for_: Option<String>,
    },
    /// Restart a killed ACTOR, empty.
    Restart { actor: String },
}

impl ActorCmd {
    /// The request this subcommand sends.
    pub fn request(&self) -> Result<serde_json::Value> {
        request_of(match self {
            ActorCmd::Kill { actor, for_ } => Command::ActorKill(ActorTarget {
                actor: actor.clone(),
                for_: for_.clone(),
            }),
            ActorCmd::Restart { actor } => Command::ActorRestart(ActorTarget {
                actor: actor.clone(),
                for_: None,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actor_subcommands_build_typed_requests() {
        let kill = ActorCmd::Kill {
            actor: "s1".into(),
            for_: Some("5s".into()),
        };
        let Command::ActorKill(t) = Command::from_request(&kill.request().unwrap()).unwrap() else {
            panic!()
        };
        assert_eq!((t.actor.as_str(), t.for_.as_deref()), ("s1", Some("5s")));
        let restart = ActorCmd::Restart { actor: "s1".into() };
        assert!(matches!(
            Command::from_request(&restart.request().unwrap()).unwrap(),
            Command::ActorRestart(_)
        ));
    }

    #[test]
    fn policy_subcommands_build_typed_requests() {
        let dir = std::env::temp_dir().join(format!("edgemu-ctl-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let small = dir.join("w.safetensors");
        std::fs::write(&small, [1u8, 2, 3]).unwrap();
        let big = dir.join("big.safetensors");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(edgemu_config::command::MAX_INLINE_WEIGHTS_BYTES as u64 + 1)
            .unwrap();
        let swap = PolicyCmd::Swap {
            actor: "sched".into(),
            policy: Some("lyreo".into()),
            weights: None,
            upload: Some(small),
            url: None,
            deadline: None,
            fallback: None,
        };
        let req = swap.request().unwrap();
        assert_eq!(req["weights_base64"], "AQID");
        let Command::PolicySwap(s) = Command::from_request(&req).unwrap() else {
            panic!("{req}")
        };
        assert_eq!(
            (s.actor.as_str(), s.policy.as_deref()),
            ("sched", Some("lyreo"))
        );
        for cmd in [
            PolicyCmd::Get {
                actor: "sched".into(),
            },
            PolicyCmd::Rollback {
                actor: "sched".into(),
            },
        ] {
            let req = cmd.request().unwrap();
            assert!(Command::from_request(&req).is_ok(), "{req}");
        }
        let get = PolicyCmd::Get {
            actor: "sched".into(),
        };
        assert_eq!(
            get.request().unwrap(),
            serde_json::json!({"cmd": "policy.get", "actor": "sched"})
        );
        let by_file = PolicyCmd::Swap {
            actor: "sched".into(),
            policy: None,
            weights: Some("w/lyreo.safetensors".into()),
            upload: None,
            url: None,
            deadline: None,
            fallback: None,
        };
        assert_eq!(
            by_file.request().unwrap(),
            serde_json::json!({"cmd": "policy.swap", "actor": "sched", "weights": "w/lyreo.safetensors"}),
            "unset options are left out"
        );
        let too_big = PolicyCmd::Swap {
            actor: "sched".into(),
            policy: None,
            weights: None,
            upload: Some(big),
            url: None,
            deadline: None,
            fallback: None,
        };
        assert!(too_big.request().unwrap_err().to_string().contains("limit"));
        let external = PolicyCmd::Swap {
            actor: "sched".into(),
            policy: Some("external".into()),
            weights: None,
            upload: None,
            url: Some("ws://127.0.0.1:7300".into()),
            deadline: Some("20ms".into()),
            fallback: Some("least-loaded".into()),
        };
        assert_eq!(
            external.request().unwrap(),
            serde_json::json!({"cmd": "policy.swap", "actor": "sched", "policy": "external",
                "url": "ws://127.0.0.1:7300", "deadline": "20ms", "fallback": "least-loaded"}),
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
