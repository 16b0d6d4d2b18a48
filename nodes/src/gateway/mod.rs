//! OpenAI-compatible gateways (`kind = "gateway"` in `cluster.toml`): each
//! serves `/v1/models`, `/v1/completions` and `/v1/chat/completions`
//! (streamed or not) on its `listen` address, and hands every request to
//! its actor (`edgemu_actors::lyreo::gateway`), which runs it through the
//! emulated edge as a mobile user's request. See docs/gateway.md.
//!
//! A gateway's HTTP side runs where its `http_thread` says: by default on
//! its host's thread, beside the gateway actor, so a request and its
//! tokens pass between the two without waking another thread; or on a
//! thread of its own (`http_thread = "own"`), so parsing and writing HTTP
//! never delays the host's other actors, at the price of two crossings
//! between threads per request (see docs/gateway.md for both measured).

pub mod http;
pub mod text;

use actix::Addr;
use anyhow::{Context as _, Result};
use edgemu_actors::lyreo::gateway::GatewayActor;
use edgemu_actors::lyreo::live::LyreoLive;
use edgemu_config::{GatewayHttpThread, GatewayModel, GatewaySpec};
use std::rc::Rc;

/// A gateway's HTTP server; dropping it stops the server.
pub struct GatewayServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The address it listens on (the port the OS chose, for port 0).
    pub addr: std::net::SocketAddr,
}

impl Drop for GatewayServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Loads the gateway's tokenizer, reads its API key, binds its address and
/// serves it, on the thread its `http_thread` names, until the handle is
/// dropped. Called on the host's thread.
pub async fn serve(
    name: &str,
    spec: &GatewaySpec,
    actor: Addr<GatewayActor>,
    live: LyreoLive,
) -> Result<GatewayServer> {
    let api_key = match &spec.api_key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(k) if !k.trim().is_empty() => Some(k.trim().to_string()),
            _ => anyhow::bail!(
                "gateway {name:?}: `api_key_env` names {var}, which is not set (or empty) in this node's environment"
            ),
        },
    };
    let (name, spec) = (name.to_string(), spec.clone());
    let listen = spec.listen;
    let label = name.clone();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<Result<std::net::SocketAddr>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http_thread = spec.http_thread;
    // Read off the host's thread: the tokenizer comes from the model file.
    let codec = match spec.model {
        GatewayModel::Modeled => text::Codec::Estimate,
        GatewayModel::SmolLm2 => tokio::task::spawn_blocking(text::Codec::smollm2)
            .await
            .context("loading the gateway's tokenizer")?
            .with_context(|| format!("gateway {label:?}"))?,
    };
    // Made on the thread that serves: what the server shares between its
    // connections is not `Send`.
    let run = move || async move {
        let gw = Rc::new(http::Gateway {
            name,
            spec,
            actor,
            codec,
            api_key,
            live,
        });
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                let _ = bound_tx.send(Err(e.into()));
                return;
            }
        };
        let addr = listener.local_addr().unwrap_or(listen);
        let _ = bound_tx.send(Ok(addr));
        tokio::select! {
            _ = http::serve(listener, gw) => {}
            _ = stop_rx => {}
        }
    };
    match http_thread {
        GatewayHttpThread::Host => {
            actix_rt::spawn(run());
        }
        GatewayHttpThread::Own => {
            std::thread::Builder::new()
                .name(format!("gateway-{label}"))
                .spawn(move || actix::System::new().block_on(run()))
                .context("starting the gateway thread")?;
        }
    }
    let addr = bound_rx
        .await
        .map_err(|_| anyhow::anyhow!("the gateway's server ended before binding"))?
        .with_context(|| format!("gateway {label:?} on {listen}"))?;
    tracing::info!(gateway = %label, %addr, http_thread = http_thread.name(), "OpenAI-compatible gateway listening");
    Ok(GatewayServer {
        stop: Some(stop_tx),
        addr,
    })
}
