//! [`PolicyClient`]: the websocket connection of one decider to its policy
//! process (edgemu is the client), as a task on the decider's own arbiter.
//!
//! The task connects (each try bounded by [`CONNECT_TIMEOUT`]), then sends
//! the text frames the decider queues and hands every text frame that comes
//! back to the decider as a [`PolicyEvent`]; it never interprets them (the
//! decider's [`super::book::DecisionBook`] does). When the connection
//! fails or drops it tells the decider ([`ClientEvent::Down`]) and tries
//! again after a backoff that doubles from [`BACKOFF_MIN`] up to
//! [`BACKOFF_MAX`]. Requests queued while it is down are dropped: the
//! decider knows it is down and does not wait for them.
//!
//! Nothing here blocks the arbiter: every wait is an await, the outgoing
//! queue is bounded ([`QUEUE`]; a full queue refuses the request at once)
//! and a reply frame is at most [`MAX_FRAME_BYTES`]. Dropping the client
//! closes the connection and ends the task; so does the decider stopping.

use std::time::Duration;

use actix::prelude::*;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// Bound on one connection attempt.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// First and largest wait between connection attempts.
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Requests waiting to be written.
pub const QUEUE: usize = 16;
/// Largest reply frame accepted (a larger one drops the connection).
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// What the connection tells its decider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    Up,
    /// Connecting failed or the connection dropped (why).
    Down(String),
    /// A text frame from the policy process.
    Frame(String),
}

/// A [`ClientEvent`] of the client numbered `client` (a decider that
/// replaced its client ignores the old one's events).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PolicyEvent {
    pub client: u64,
    pub event: ClientEvent,
}

/// The sending half of one connection (module doc).
#[derive(Debug)]
pub struct PolicyClient {
    id: u64,
    url: String,
    tx: mpsc::Sender<String>,
}

impl PolicyClient {
    /// Starts connecting to `url` on the current arbiter; events go to `to`
    /// tagged `id`. Must run inside an actix system (real time).
    pub fn connect(id: u64, url: &str, to: Recipient<PolicyEvent>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        actix::spawn(run(id, url.to_string(), rx, to));
        PolicyClient {
            id,
            url: url.to_string(),
            tx,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queues one request frame; `false` when the queue is full or the
    /// task has ended (the decision falls back).
    pub fn send(&self, text: String) -> bool {
        self.tx.try_send(text).is_ok()
    }
}

fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES))
}

async fn run(id: u64, url: String, mut rx: mpsc::Receiver<String>, to: Recipient<PolicyEvent>) {
    // `false`: the decider is gone, and so is the reason to connect.
    let tell = |event: ClientEvent| {
        if !to.connected() {
            return false;
        }
        to.do_send(PolicyEvent { client: id, event });
        true
    };
    let mut backoff = BACKOFF_MIN;
    loop {
        let attempt = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config()), true),
        )
        .await;
        let why = match attempt {
            Err(_) => "connecting timed out".to_string(),
            Ok(Err(e)) => format!("cannot connect: {e}"),
            Ok(Ok((ws, _))) => {
                backoff = BACKOFF_MIN;
                if !tell(ClientEvent::Up) {
                    return;
                }
                // Requests queued while down were refused by the decider's
                // view of the connection; drop any that slipped in.
                while rx.try_recv().is_ok() {}
                let (mut sink, mut stream) = ws.split();
                let why = loop {
                    tokio::select! {
                        out = rx.recv() => match out {
                            Some(text) => {
                                if let Err(e) = sink.send(Message::text(text)).await {
                                    break format!("write failed: {e}");
                                }
                            }
                            None => {
                                let _ = sink.close().await;
                                return;
                            }
                        },
                        inc = stream.next() => match inc {
                            Some(Ok(Message::Text(t))) => {
                                if !tell(ClientEvent::Frame(t.as_str().to_owned())) {
                                    return;
                                }
                            }
                            Some(Ok(Message::Binary(b))) => {
                                // Not the protocol: the decision reads it as garbage.
                                let t = String::from_utf8_lossy(&b).into_owned();
                                if !tell(ClientEvent::Frame(t)) {
                                    return;
                                }
                            }
                            Some(Ok(Message::Close(_))) | None => break "closed by the policy process".to_string(),
                            Some(Ok(_)) => {}
                            Some(Err(e)) => break format!("read failed: {e}"),
                        },
                    }
                };
                why
            }
        };
        if !tell(ClientEvent::Down(why)) {
            return;
        }
        // Wait out the backoff; requests that arrive meanwhile are dropped.
        let wake = tokio::time::sleep(backoff);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                _ = &mut wake => break,
                out = rx.recv() => if out.is_none() { return },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
