//! One established session with a peer: the frame loop.

use super::peer::PeerShared;
use super::{MeshContext, HEARTBEAT, PEER_TIMEOUT};
use crate::host::supervisor::Control;
use edgemu_actors::router::Inbound;
use edgemu_codec::wire::{decode_frame, encode_frame, Envelope, Frame, Heartbeat, MAX_FRAME_BYTES};
use futures_util::{SinkExt, StreamExt};
use std::sync::OnceLock;
use std::time::Instant;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

pub(crate) type Ws = WebSocketStream<TcpStream>;

/// Monotonic ns since the first call in this process (heartbeat stamps).
fn mono_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Most envelopes batched into one frame, and their budget in declared bytes.
const BATCH_ENVELOPES: usize = 1024;
const BATCH_BYTES: usize = MAX_FRAME_BYTES / 4;

/// Bytes an envelope adds to a frame: its real payload, not the declared
/// size a link charges (a probe of 1400 declared bytes encodes to ~30).
fn encoded_estimate(e: &Envelope) -> usize {
    32 + match &e.payload {
        edgemu_codec::wire::Msg::Bytes(b) => b.len(),
        _ => 0,
    }
}

/// Runs until the session fails; returns why.
pub(crate) async fn run_session(
    ctx: &MeshContext,
    peer: &PeerShared,
    ws: Ws,
    env_rx: &mut mpsc::Receiver<Envelope>,
    ctrl_rx: &mut mpsc::UnboundedReceiver<Frame>,
) -> String {
    let (mut tx, mut rx) = ws.split();
    let mut hb = tokio::time::interval(HEARTBEAT);
    hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Silence is checked more often than heartbeats are sent, so a peer is
    // declared down within a tenth of a second of its 3 s of silence.
    let mut silence = tokio::time::interval(std::time::Duration::from_millis(100));
    silence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hb_seq = 0u64;
    let mut last_seen = Instant::now();
    // Peer's last heartbeat stamp, and when we got it.
    let mut echo: Option<(u64, u64)> = None;
    let mut start_rx = ctx.start.subscribe();
    let mut start_sent = false;
    let mut bad_frames = 0u64;

    macro_rules! send {
        ($frame:expr) => {
            match encode_frame(&$frame) {
                Ok(bytes) => {
                    if let Err(e) = tx.send(Message::binary(bytes)).await {
                        return format!("send failed: {e}");
                    }
                }
                Err(e) => tracing::warn!(peer = %peer.name, "frame not sent: {e}"),
            }
        };
    }

    loop {
        if ctx.coordinator && !start_sent {
            let start = *start_rx.borrow_and_update();
            if let Some(unix_ns) = start {
                send!(Frame::Start { unix_ns });
                start_sent = true;
            }
        }
        tokio::select! {
            biased;
            msg = rx.next() => {
                let msg = match msg {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return format!("receive failed: {e}"),
                    None => return "closed by peer".into(),
                };
                last_seen = Instant::now();
                if !msg.is_binary() {
                    continue;
                }
                let frame = match decode_frame(&msg.into_data()) {
                    Ok(f) => f,
                    Err(e) => {
                        bad_frames += 1;
                        tracing::warn!(peer = %peer.name, bad_frames, "malformed frame dropped: {e}");
                        continue;
                    }
                };
                match frame {
                    Frame::Envelopes(envs) => {
                        if let Some(router) = ctx.targets.router() {
                            for e in envs {
                                router.do_send(Inbound(e));
                            }
                        }
                    }
                    Frame::Heartbeat(h) => {
                        let now = mono_ns();
                        echo = Some((h.sent_ns, now));
                        if let Some(mine) = h.echo_ns {
                            let rtt = now.saturating_sub(mine).saturating_sub(h.echo_hold_ns);
                            if rtt > 0 && peer.note_rtt(rtt) {
                                ctx.targets.base_rtt(peer.id, rtt);
                            }
                        }
                    }
                    Frame::Start { unix_ns } => {
                        if !ctx.coordinator {
                            let _ = ctx.start.send(Some(unix_ns));
                        }
                    }
                    Frame::ControlForward { id, json } => {
                        let supervisor = ctx.targets.supervisor();
                        let ctrl = peer.ctrl_tx.clone();
                        let name = peer.name.clone();
                        let cluster = ctx.cluster.clone();
                        actix_rt::spawn(async move {
                            let reply = answer_forward(supervisor, cluster, json, &name).await;
                            let _ = ctrl.send(Frame::ControlReply { id, json: reply });
                        });
                    }
                    Frame::ControlReply { id, json } => peer.complete_request(id, json),
                    Frame::Bye { reason } => return format!("bye: {reason}"),
                    Frame::Hello(_) | Frame::Auth(_) => {
                        bad_frames += 1;
                        tracing::warn!(peer = %peer.name, "handshake frame after handshake; ignored");
                    }
                }
            }
            Some(frame) = ctrl_rx.recv() => {
                let bye = matches!(frame, Frame::Bye { .. });
                send!(frame);
                if bye {
                    let _ = tx.close().await;
                    return "bye sent".into();
                }
            }
            Some(first) = env_rx.recv() => {
                let mut bytes = encoded_estimate(&first);
                let mut batch = vec![first];
                while batch.len() < BATCH_ENVELOPES && bytes < BATCH_BYTES {
                    match env_rx.try_recv() {
                        Ok(e) => {
                            bytes += encoded_estimate(&e);
                            batch.push(e);
                        }
                        Err(_) => break,
                    }
                }
                send!(Frame::Envelopes(batch));
            }
            _ = silence.tick() => {
                if last_seen.elapsed() > PEER_TIMEOUT {
                    return format!("silent for {:?}", last_seen.elapsed());
                }
            }
            _ = hb.tick() => {
                hb_seq += 1;
                let now = mono_ns();
                let (echo_ns, echo_hold_ns) = match echo {
                    Some((sent, got)) => (Some(sent), now.saturating_sub(got)),
                    None => (None, 0),
                };
                send!(Frame::Heartbeat(Heartbeat { seq: hb_seq, sent_ns: now, echo_ns, echo_hold_ns }));
            }
            r = start_rx.changed(), if ctx.coordinator && !start_sent => {
                if r.is_err() { return "mesh stopped".into(); }
            }
        }
    }
}

async fn answer_forward(
    supervisor: Option<actix::Recipient<Control>>,
    cluster: std::sync::Arc<edgemu_config::Cluster>,
    json: String,
    from: &str,
) -> String {
    let Some(sup) = supervisor else {
        return serde_json::json!({ "error": "run has not started on this host" }).to_string();
    };
    // Parsed off the actor thread: it may read a trace file.
    let parsed = tokio::task::spawn_blocking(move || {
        serde_json::from_str::<serde_json::Value>(&json)
            .map_err(|e| format!("malformed forwarded request: {e}"))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    let raw = match parsed {
        Ok(v) => v,
        Err(e) => return serde_json::json!({ "error": e }).to_string(),
    };
    let (request, raw) = match crate::host::commands::parse_off_thread(cluster, raw).await {
        Ok(v) => v,
        Err(e) => return serde_json::json!({ "error": e }).to_string(),
    };
    match sup
        .send(Control {
            request,
            raw,
            forwarded: true,
            source: format!("control (via {from})"),
        })
        .await
    {
        Ok(Ok(v)) => serde_json::json!({ "result": v }).to_string(),
        Ok(Err(e)) => serde_json::json!({ "error": e }).to_string(),
        Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
    }
}
