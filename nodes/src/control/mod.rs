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
//! `host.heal`, `policy.get`, `policy.swap`, `policy.rollback`, `run.stop`
//! (see `docs/control.md`). A command whose target another host owns is
//! forwarded to it over the mesh. A missing or wrong token, malformed JSON or
//! an unknown command or link gets an error reply; the connection and the run
//! go on.
//!
//! The socket runs on a thread of its own ([`serve_on_own_thread`]), so
//! nothing a client sends is read, framed or parsed on the thread of the
//! host's actors. Hostile clients cannot stall the host ([`Limits`]): a message or frame
//! over 1 MiB closes the connection; the token may be given once in the
//! websocket upgrade (`Authorization: Bearer …` or `?token=…`), and a
//! connection that did not gets each request's JSON parsed on the blocking
//! pool, never on the actors' thread — as is every command (it may read a
//! trace file). Connections, requests in flight (per connection and in
//! total) and subscriptions are bounded; a connection that does not finish
//! its upgrade within 5 s, or stays idle (no request, no subscription) for
//! 60 s, is closed.
//!
//! The same address answers plain HTTP `GET`s (a request without
//! `Upgrade: websocket`): the dashboard page, `/api/snapshot` and
//! `/metrics` ([`crate::dashboard::http`]). Every answered command is
//! counted for `/metrics` by command and result.

pub mod client;

use crate::dashboard::Web;
use crate::host::commands;
use crate::host::supervisor::{Control, Supervisor};
use crate::metrics::CommandResult;
use actix::Addr;
use anyhow::Result;
use edgemu_codec::ids::HostId;
use edgemu_config::command::{Command, CommandReply, NoKeys};
use edgemu_config::{Cluster, ControlError};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Constant-time check of a client's token against the control key
/// derived from the cluster token.
fn token_ok(control_key: &[u8], given: &str) -> bool {
    crate::host::keys::control_token_ok(control_key, given)
}

/// A command's typed result as the JSON of its reply: the one place the
/// control path's reply and error become text.
fn command_result(result: Result<CommandReply, ControlError>) -> Result<serde_json::Value, String> {
    result
        .map_err(|e| e.to_string())
        .and_then(|r| r.to_json().map_err(|e| format!("reply not encodable: {e}")))
}

fn reply(id: &serde_json::Value, result: Result<serde_json::Value, String>) -> String {
    let r = edgemu_config::command::Reply::new(id.clone(), result);
    serde_json::to_string(&r).unwrap_or_else(|e| {
        serde_json::json!({"ok": false, "error": format!("reply not encodable: {e}")}).to_string()
    })
}

/// What a control socket refused, shared with the host's supervisor (which
/// reports it in `status`).
#[derive(Debug, Default)]
pub struct ControlCounters {
    pub malformed_requests: AtomicU64,
    pub unauthorized: AtomicU64,
    pub oversized_messages: AtomicU64,
    pub refused_busy: AtomicU64,
}

impl ControlCounters {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters as `status` reports them.
    pub fn status(&self) -> edgemu_config::command::ControlStatus {
        edgemu_config::command::ControlStatus {
            malformed_requests: self.malformed_requests.load(Ordering::Relaxed),
            unauthorized: self.unauthorized.load(Ordering::Relaxed),
            oversized_messages: self.oversized_messages.load(Ordering::Relaxed),
            refused_busy: self.refused_busy.load(Ordering::Relaxed),
        }
    }
}

/// Asks the supervisor for the counters its control socket should bump.
#[derive(actix::Message)]
#[rtype(result = "Arc<ControlCounters>")]
pub struct GetControlCounters;

/// Bounds on what control clients may hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest websocket message and frame.
    pub max_message_bytes: usize,
    /// Open connections.
    pub max_connections: usize,
    /// Requests being answered, per connection and over all connections.
    pub max_in_flight_per_connection: usize,
    pub max_in_flight: usize,
    /// Metrics subscriptions per connection and in total.
    pub max_subscriptions_per_connection: usize,
    pub max_subscriptions: usize,
    /// Time to finish the websocket upgrade.
    pub upgrade_timeout: Duration,
    /// A connection with no request and no subscription for this long is closed.
    pub idle_timeout: Duration,
    /// Longest wait for a command's reply.
    pub reply_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 1 << 20,
            max_connections: 64,
            max_in_flight_per_connection: 16,
            max_in_flight: 256,
            max_subscriptions_per_connection: 4,
            max_subscriptions: 64,
            upgrade_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            reply_timeout: Duration::from_secs(15),
        }
    }
}

/// What all connections of one control socket share.
struct Shared {
    sup: Addr<Supervisor>,
    token: Vec<u8>,
    cluster: Arc<Cluster>,
    limits: Limits,
    connections: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
    subscriptions: Arc<Semaphore>,
    counters: Arc<ControlCounters>,
    web: Web,
}

/// The control socket served on its own thread (its own actix system), so
/// that a hostile client's frames, handshakes and parsing never run on the
/// thread of the host's actors (its data path). Dropping it stops serving.
pub struct ControlThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for ControlThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Binds `addr` on a thread of its own and serves control connections there
/// until the returned handle is dropped. Commands still go to `sup` (an
/// actix address works across threads).
pub async fn serve_on_own_thread(
    addr: SocketAddr,
    sup: Addr<Supervisor>,
    control_key: Vec<u8>,
    cluster: Arc<Cluster>,
    host: HostId,
    web: Web,
) -> Result<ControlThread> {
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<Result<()>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let name = format!("control-{}", cluster.host(host).name);
    std::thread::Builder::new().name(name).spawn(move || {
        actix::System::new().block_on(async move {
            match serve(addr, sup, control_key, cluster, host, web).await {
                Ok(()) => {
                    let _ = bound_tx.send(Ok(()));
                    let _ = stop_rx.await;
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                }
            }
        });
    })?;
    bound_rx
        .await
        .map_err(|_| anyhow::anyhow!("the control thread ended before binding"))??;
    Ok(ControlThread {
        stop: Some(stop_tx),
    })
}

/// Binds `addr` and serves control connections for the life of the host.
pub async fn serve(
    addr: SocketAddr,
    sup: Addr<Supervisor>,
    token: Vec<u8>,
    cluster: Arc<Cluster>,
    host: HostId,
    web: Web,
) -> Result<()> {
    serve_with(addr, sup, token, cluster, host, web, Limits::default()).await
}

pub async fn serve_with(
    addr: SocketAddr,
    sup: Addr<Supervisor>,
    token: Vec<u8>,
    cluster: Arc<Cluster>,
    host: HostId,
    web: Web,
    limits: Limits,
) -> Result<()> {
    let listener = TcpListener::bind(addr).await?;
    let host_name = cluster.host(host).name.clone();
    let counters = sup.send(GetControlCounters).await.unwrap_or_default();
    tracing::info!(host = %host_name, %addr, "control websocket listening");
    let shared = Arc::new(Shared {
        sup,
        token,
        cluster,
        connections: Arc::new(Semaphore::new(limits.max_connections)),
        in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
        subscriptions: Arc::new(Semaphore::new(limits.max_subscriptions)),
        counters,
        limits,
        web,
    });
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
            let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "control connection refused: too many connections");
                ControlCounters::bump(&shared.counters.refused_busy);
                drop(tcp);
                continue;
            };
            let shared = shared.clone();
            actix_rt::spawn(async move {
                if let Err(e) = connection(tcp, shared).await {
                    tracing::debug!(%peer, "control connection ended: {e}");
                }
                drop(permit);
            });
        }
    });
    Ok(())
}

/// The token given in the upgrade request, if any.
fn upgrade_token(
    req: &tokio_tungstenite::tungstenite::handshake::server::Request,
) -> Option<String> {
    if let Some(v) = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        if let Some(t) = v.strip_prefix("Bearer ") {
            return Some(t.to_string());
        }
    }
    req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("token=").map(str::to_string))
    })
}

async fn connection(tcp: tokio::net::TcpStream, shared: Arc<Shared>) -> Result<()> {
    let limits = shared.limits;
    // Plain HTTP (dashboard, /metrics) unless the client asks for a websocket.
    if let Some(head) = crate::dashboard::http::peek_head(&tcp, limits.upgrade_timeout).await? {
        if !head.websocket {
            crate::dashboard::http::serve(tcp, head, &shared.web, &shared.sup).await;
            return Ok(());
        }
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes));
    let mut given = None;
    // The callback's error type is tungstenite's (a whole HTTP response).
    #[allow(clippy::result_large_err)]
    let accept = tokio_tungstenite::accept_hdr_async_with_config(
        tcp,
        |req: &tokio_tungstenite::tungstenite::handshake::server::Request, resp| {
            given = upgrade_token(req);
            Ok(resp)
        },
        Some(config),
    );
    let ws = tokio::time::timeout(limits.upgrade_timeout, accept)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "websocket upgrade not finished within {:?}",
                limits.upgrade_timeout
            )
        })??;
    let authenticated =
        given.is_some_and(|t| token_ok(&shared.token, &t)) || shared.token.is_empty();
    let (mut tx, mut rx) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
    let writer = actix_rt::spawn(async move {
        while let Some(text) = out_rx.recv().await {
            let sent = tokio::time::timeout(Duration::from_secs(10), tx.send(Message::text(text)));
            if !matches!(sent.await, Ok(Ok(()))) {
                break;
            }
        }
    });
    let conn_in_flight = Arc::new(Semaphore::new(limits.max_in_flight_per_connection));
    let conn_subs = Arc::new(Semaphore::new(limits.max_subscriptions_per_connection));
    loop {
        // Always wait with the timeout: whether the connection is idle is
        // decided when it expires (a request spawned just before the wait
        // has finished by then), so a client that sends one frame and goes
        // quiet cannot hold a connection slot for ever.
        let next = match tokio::time::timeout(limits.idle_timeout, rx.next()).await {
            Ok(m) => m,
            Err(_) => {
                let idle = conn_subs.available_permits() == limits.max_subscriptions_per_connection
                    && conn_in_flight.available_permits() == limits.max_in_flight_per_connection;
                if !idle {
                    continue;
                }
                tracing::debug!(
                    "control connection idle for {:?}; closed",
                    limits.idle_timeout
                );
                break;
            }
        };
        let Some(msg) = next else { break };
        let msg = msg.inspect_err(|e| {
            if matches!(e, tokio_tungstenite::tungstenite::Error::Capacity(_)) {
                ControlCounters::bump(&shared.counters.oversized_messages);
            }
        })?;
        let text = match msg {
            Message::Text(t) => t.to_string(),
            Message::Binary(_) => {
                ControlCounters::bump(&shared.counters.malformed_requests);
                let _ = out_tx.try_send(reply(
                    &serde_json::Value::Null,
                    Err("binary frames are not accepted; send JSON text".into()),
                ));
                continue;
            }
            Message::Close(_) => break,
            _ => continue,
        };
        let Ok(conn_permit) = conn_in_flight.clone().try_acquire_owned() else {
            ControlCounters::bump(&shared.counters.refused_busy);
            let _ = out_tx.try_send(reply(
                &serde_json::Value::Null,
                Err(format!(
                    "too many requests in flight on this connection (at most {})",
                    limits.max_in_flight_per_connection
                )),
            ));
            continue;
        };
        let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
            ControlCounters::bump(&shared.counters.refused_busy);
            let _ = out_tx.try_send(reply(
                &serde_json::Value::Null,
                Err("the host is busy: too many control requests in flight".into()),
            ));
            continue;
        };
        let shared = shared.clone();
        let out = out_tx.clone();
        let subs = conn_subs.clone();
        actix_rt::spawn(async move {
            handle_text(text, authenticated, &shared, &out, subs).await;
            drop((permit, conn_permit));
        });
    }
    drop(out_tx);
    let _ = writer.await;
    Ok(())
}

/// Parses, authenticates and answers one request (or starts a subscription).
async fn handle_text(
    text: String,
    authenticated: bool,
    shared: &Arc<Shared>,
    out: &mpsc::Sender<String>,
    conn_subs: Arc<Semaphore>,
) {
    let null = serde_json::Value::Null;
    let count = |cmd: Option<&str>, r: CommandResult| shared.web.metrics.count_command(cmd, r);
    // JSON parsing happens on the blocking pool, never on the actors' thread.
    let parsed =
        tokio::task::spawn_blocking(move || serde_json::from_str::<serde_json::Value>(&text)).await;
    if !matches!(parsed, Ok(Ok(serde_json::Value::Object(_)))) {
        ControlCounters::bump(&shared.counters.malformed_requests);
    }
    let request = match parsed {
        Ok(Ok(v @ serde_json::Value::Object(_))) => v,
        Ok(Ok(_)) => {
            count(None, CommandResult::BadRequest);
            let _ = out
                .send(reply(&null, Err("a request must be a JSON object".into())))
                .await;
            return;
        }
        Ok(Err(e)) => {
            count(None, CommandResult::BadRequest);
            let _ = out
                .send(reply(&null, Err(format!("malformed JSON: {e}"))))
                .await;
            return;
        }
        Err(e) => {
            let _ = out
                .send(reply(&null, Err(format!("request not parsed: {e}"))))
                .await;
            return;
        }
    };
    let id = request
        .get("id")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let cmd = request
        .get("cmd")
        .and_then(|c| c.as_str())
        .map(str::to_string);
    if !authenticated {
        let given = request.get("token").and_then(|t| t.as_str()).unwrap_or("");
        if !token_ok(&shared.token, given) {
            let why = if request.get("token").is_none() {
                "missing token"
            } else {
                "wrong token"
            };
            tracing::warn!("control request refused: {why}");
            ControlCounters::bump(&shared.counters.unauthorized);
            count(cmd.as_deref(), CommandResult::Unauthorized);
            let _ = out
                .send(reply(&id, Err(format!("unauthorized: {why}"))))
                .await;
            return;
        }
    }
    let limits = shared.limits;
    let (command, parsed) = match commands::parse_off_thread(shared.cluster.clone(), request).await
    {
        Ok(v) => v,
        Err(e) => {
            count(cmd.as_deref(), CommandResult::BadRequest);
            let _ = out.send(reply(&id, Err(e.to_string()))).await;
            return;
        }
    };
    // Answered here, by this socket (route.rs refuses to forward it).
    if let commands::Request::Subscribe { interval_ns } = parsed {
        count(cmd.as_deref(), CommandResult::Ok);
        subscribe(
            Duration::from_nanos(interval_ns),
            id,
            shared,
            out,
            conn_subs,
        )
        .await;
        return;
    }
    let r = tokio::time::timeout(
        limits.reply_timeout,
        shared.sup.send(Control {
            request: parsed,
            command,
            forwarded: false,
            source: "control".into(),
        }),
    )
    .await;
    let result = command_result(match r {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(ControlError::HostStopping(e.to_string())),
        Err(_) => Err(ControlError::NoReply(limits.reply_timeout)),
    });
    let outcome = if result.is_ok() {
        CommandResult::Ok
    } else {
        CommandResult::Error
    };
    count(cmd.as_deref(), outcome);
    let _ = out.send(reply(&id, result)).await;
}

/// `metrics.subscribe`, parsed and resolved like every command (its
/// interval defaulted and floored by [`edgemu_config::command::Command::resolve`]).
async fn subscribe(
    interval: Duration,
    id: serde_json::Value,
    shared: &Arc<Shared>,
    out: &mpsc::Sender<String>,
    conn_subs: Arc<Semaphore>,
) {
    let (Ok(conn_permit), Ok(permit)) = (
        conn_subs.try_acquire_owned(),
        shared.subscriptions.clone().try_acquire_owned(),
    ) else {
        ControlCounters::bump(&shared.counters.refused_busy);
        let _ = out
            .send(reply(&id, Err("too many metrics subscriptions".into())))
            .await;
        return;
    };
    let _ = out
        .send(reply(&id, Ok(serde_json::json!({ "subscribed": true }))))
        .await;
    let sup = shared.sup.clone();
    let out = out.clone();
    actix_rt::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            let r = sup
                .send(Control {
                    request: commands::Request::Status,
                    command: Command::Metrics(NoKeys {}),
                    forwarded: false,
                    source: "control".into(),
                })
                .await;
            let v = match r.map(command_result) {
                Ok(Ok(v)) => v,
                _ => break,
            };
            let msg = serde_json::json!({ "event": "metrics", "id": id, "result": v }).to_string();
            // A subscriber that does not read loses updates, never the host's memory.
            match out.try_send(msg) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
        drop((permit, conn_permit));
    });
}
