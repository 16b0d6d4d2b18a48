//! One established session with a peer: the frame loop.

use super::peer::PeerShared;
use super::queue::encoded_estimate;
use super::socket::{Incoming, MeshReader, MeshSocket, MeshWriter};
use super::{MeshContext, HEARTBEAT, PEER_TIMEOUT};
use crate::host::supervisor::Control;
use edgemu_actors::router::InboundBatch;
use edgemu_codec::wire::Heartbeat;
use edgemu_config::command::Command;
use edgemu_config::ControlError;
use edgemu_protocol::{decode_frame, Envelope, ForwardedReply, Frame};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Monotonic ns since the first call in this process (heartbeat stamps).
fn mono_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Most envelopes batched into one frame, and their budget in encoded
/// bytes: a frame of 64 KiB stays in the CPU's cache from its encoding
/// through masking to the kernel's copy, on both sides. In `bench mesh`
/// both 32 KiB frames (more writes and turns per byte) and 256 KiB frames
/// (payloads out of cache by the time the kernel copies them) cost each
/// side more CPU per byte.
const BATCH_ENVELOPES: usize = 1024;
const BATCH_BYTES: usize = 64 * 1024;

/// Longest the reader waits for a router that is behind before it reads
/// on (and drops what finds no room): far below the peer's write timeout
/// and silence limit, so a slow router never ends a session.
const ROUTER_WAIT: Duration = Duration::from_millis(100);

/// Longest a single websocket write may take. A peer that stops reading
/// fills the socket's buffers; its session ends after this instead of
/// blocking forever (and with it, everything queued for the peer).
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs until the session fails; returns why.
///
/// Reading and writing are two futures polled side by side, so a write
/// waiting on a full socket never stops this side from reading (two hosts
/// flooding each other used to block both in a write, each waiting for the
/// other to read, until both declared the other silent). The writer sends
/// control frames first, then heartbeats, then data, so heartbeats and
/// control never wait behind more than one data frame; every write has
/// [`WRITE_TIMEOUT`].
pub(crate) async fn run_session(
    ctx: &MeshContext,
    peer: &PeerShared,
    ws: MeshSocket,
    ctrl_rx: &mut mpsc::Receiver<Frame>,
) -> String {
    let (rx, tx) = match ws.split() {
        Ok(halves) => halves,
        Err(e) => return format!("{e:#}"),
    };
    let last_seen = Cell::new(Instant::now());
    // Peer's last heartbeat stamp, and when we got it.
    let echo: Cell<Option<(u64, u64)>> = Cell::new(None);
    // What the reader got that the writer answers: pings, and the peer's close.
    let (pong_tx, mut pong_rx) = mpsc::channel::<Answer>(4);
    tokio::select! {
        why = read_loop(ctx, peer, rx, &last_seen, &echo, &pong_tx) => why,
        why = write_loop(ctx, peer, tx, ctrl_rx, &mut pong_rx, &last_seen, &echo) => why,
    }
}

/// What the writer sends for the reader.
enum Answer {
    Pong(Vec<u8>),
    /// The peer closed: echo its close, then the session ends.
    Close,
}

/// What a websocket message was, once read (one lives at a time, on the
/// stack: boxing the frame would add an allocation per message).
#[allow(clippy::large_enum_variant)]
enum Read {
    Frame(Frame),
    Malformed(String),
    Ping(Vec<u8>),
    Nothing,
    Closed,
}

async fn read_loop(
    ctx: &MeshContext,
    peer: &PeerShared,
    mut rx: MeshReader,
    last_seen: &Cell<Instant>,
    echo: &Cell<Option<(u64, u64)>>,
    pong_tx: &mpsc::Sender<Answer>,
) -> String {
    loop {
        // The frame is decoded where it was read (no copy of its bytes).
        let read = rx
            .next(|m| match m {
                Incoming::Data(bytes) => match decode_frame(bytes) {
                    Ok(f) => Read::Frame(f),
                    Err(e) => Read::Malformed(e.to_string()),
                },
                Incoming::Ping(p) => Read::Ping(p),
                Incoming::Ignored => Read::Nothing,
                Incoming::Closed => Read::Closed,
            })
            .await;
        let read = match read {
            Ok(r) => r,
            Err(e) => return format!("receive failed: {e:#}"),
        };
        last_seen.set(Instant::now());
        let frame = match read {
            Read::Frame(f) => f,
            Read::Malformed(e) => {
                let n = peer
                    .counters
                    .malformed_frames
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                tracing::warn!(peer = %peer.name, malformed_frames = n, "malformed frame dropped: {e}");
                continue;
            }
            Read::Ping(p) => {
                // A full pong queue means pings come faster than the writer
                // answers them; dropping one is harmless.
                let _ = pong_tx.try_send(Answer::Pong(p));
                continue;
            }
            Read::Nothing => continue,
            Read::Closed => {
                // The writer echoes the close and ends the session; reading
                // goes on (the peer sends nothing more) unless it cannot.
                if pong_tx.try_send(Answer::Close).is_err() {
                    return "closed by peer".into();
                }
                continue;
            }
        };
        match frame {
            Frame::Envelopes(mut envs) => {
                if let Some((router, gate)) = ctx.targets.router() {
                    // The frame goes to the router as one message. When the
                    // router is far behind, the envelopes past the gate's
                    // room are dropped (counted by the gate).
                    let admitted = gate.admit_many(envs.len());
                    envs.truncate(admitted);
                    if !envs.is_empty() {
                        router.do_send(InboundBatch(envs, peer.id));
                    }
                    // A router behind on this thread gets its turn before
                    // the next frame is read (see InboundGate): waiting
                    // pushes back on the peer through TCP instead of
                    // decoding frames only to drop them.
                    if !gate.room(ROUTER_WAIT).await {
                        tracing::debug!(peer = %peer.name, pending = gate.pending(), "the router is behind; reading on, dropping what has no room");
                    }
                }
            }
            Frame::Heartbeat(h) => {
                let now = mono_ns();
                echo.set(Some((h.sent_ns, now)));
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
            Frame::ControlForward { id, command } => {
                let supervisor = ctx.targets.supervisor();
                let ctrl = peer.ctrl_tx.clone();
                let name = peer.name.clone();
                let cluster = ctx.cluster.clone();
                actix_rt::spawn(async move {
                    let reply = answer_forward(supervisor, cluster, command.0, &name).await;
                    // The reply waits for room: the requester times out on its own.
                    let _ = ctrl.send(Frame::ControlReply { id, reply }).await;
                });
            }
            Frame::ControlReply { id, reply } => peer.complete_request(id, reply),
            Frame::Bye { reason } => return format!("bye: {reason}"),
            Frame::Hello(_) | Frame::Auth(_) => {
                peer.counters
                    .malformed_frames
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %peer.name, "handshake frame after handshake; ignored");
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn write_loop(
    ctx: &MeshContext,
    peer: &PeerShared,
    mut tx: MeshWriter,
    ctrl_rx: &mut mpsc::Receiver<Frame>,
    pong_rx: &mut mpsc::Receiver<Answer>,
    last_seen: &Cell<Instant>,
    echo: &Cell<Option<(u64, u64)>>,
) -> String {
    let mut hb = tokio::time::interval(HEARTBEAT);
    hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Silence is checked more often than heartbeats are sent, so a peer is
    // declared down within a tenth of a second of its 3 s of silence.
    let mut silence = tokio::time::interval(Duration::from_millis(100));
    silence.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hb_seq = 0u64;
    let mut start_rx = ctx.start.subscribe();
    let mut start_sent = false;
    // What was taken from the peer's queue and is not written yet.
    let mut pending: VecDeque<Envelope> = VecDeque::new();

    macro_rules! write {
        ($fut:expr) => {
            match tokio::time::timeout(WRITE_TIMEOUT, $fut).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if e.downcast_ref::<edgemu_codec::wire::WireError>().is_some() {
                        tracing::warn!(peer = %peer.name, "frame not sent: {e:#}");
                    } else {
                        return format!("send failed: {e:#}");
                    }
                }
                Err(_) => {
                    peer.counters.write_timeouts.fetch_add(1, Ordering::Relaxed);
                    return format!("a write blocked for {WRITE_TIMEOUT:?}: the peer is not reading");
                }
            }
        };
    }
    macro_rules! send {
        ($frame:expr) => {
            write!(tx.send(&$frame))
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
            Some(frame) = ctrl_rx.recv() => {
                let bye = matches!(frame, Frame::Bye { .. });
                send!(frame);
                if bye {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, tx.close()).await;
                    return "bye sent".into();
                }
            }
            Some(answer) = pong_rx.recv() => match answer {
                Answer::Pong(p) => write!(tx.pong(p)),
                Answer::Close => {
                    let _ = tokio::time::timeout(WRITE_TIMEOUT, tx.close()).await;
                    return "closed by peer".into();
                }
            },
            _ = silence.tick() => {
                let quiet = last_seen.get().elapsed();
                if quiet > PEER_TIMEOUT {
                    peer.counters.silences.fetch_add(1, Ordering::Relaxed);
                    return format!("silent for {quiet:?}");
                }
            }
            _ = hb.tick() => {
                hb_seq += 1;
                let now = mono_ns();
                let (echo_ns, echo_hold_ns) = match echo.get() {
                    Some((sent, got)) => (Some(sent), now.saturating_sub(got)),
                    None => (None, 0),
                };
                send!(Frame::Heartbeat(Heartbeat { seq: hb_seq, sent_ns: now, echo_ns, echo_hold_ns }));
            }
            r = start_rx.changed(), if ctx.coordinator && !start_sent => {
                if r.is_err() { return "mesh stopped".into(); }
            }
            () = peer.out.ready(), if pending.is_empty() => {
                peer.out.take_all(&mut pending);
            }
            // One frame of what was taken per turn, so control frames and
            // heartbeats never wait behind more than one data frame.
            () = std::future::ready(()), if !pending.is_empty() => {
                let mut bytes = 0;
                let n = pending
                    .iter()
                    .take(BATCH_ENVELOPES)
                    .take_while(|e| {
                        let fits = bytes < BATCH_BYTES;
                        bytes += encoded_estimate(e);
                        fits
                    })
                    .count();
                write!(tx.send_envelopes(pending.drain(..n)));
            }
        }
    }
}

/// Runs a command another host forwarded: resolved here (off the actor
/// thread: it may read a trace file) and applied to this host's targets
/// only. The typed reply goes back as it is.
async fn answer_forward(
    supervisor: Option<actix::Recipient<Control>>,
    cluster: std::sync::Arc<edgemu_config::Cluster>,
    command: Command,
    from: &str,
) -> ForwardedReply {
    let sup = supervisor.ok_or(ControlError::NotStarted)?;
    let (command, request) = crate::host::commands::resolve_off_thread(cluster, command).await?;
    sup.send(Control {
        request,
        command,
        forwarded: true,
        source: format!("control (via {from})"),
    })
    .await
    .map_err(|e| ControlError::HostStopping(e.to_string()))?
}

#[cfg(test)]
mod tests {
    //! Sessions under saturating load, on real loopback sockets.
    use super::*;
    use crate::mesh::MeshTargets;
    use edgemu_codec::ids::{ActorId, HostId};
    use edgemu_protocol::encode_frame;
    use edgemu_protocol::Msg;
    use std::sync::Arc;
    use tokio::sync::watch;

    fn context(host: u16) -> MeshContext {
        let text = "[run]\nduration = \"10s\"\n[[hosts]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\n[[hosts]]\nname = \"b\"\nlisten = \"127.0.0.1:2\"\n";
        let cluster = edgemu_config::Cluster::from_str(text, std::path::Path::new("t.toml"))
            .expect("cluster");
        MeshContext {
            cluster: Arc::new(cluster),
            host: HostId(host),
            token: Vec::new(),
            incarnation: 1,
            targets: MeshTargets::default(),
            start: watch::channel(None).0,
            coordinator: false,
            leaving: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// (listening side, dialing side), upgraded as the mesh does.
    async fn socket_pair() -> (MeshSocket, MeshSocket) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let dial = async {
            let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
            crate::mesh::upgrade::client(&mut c, &addr.to_string(), "/mesh")
                .await
                .expect("client upgrade");
            c
        };
        let accept = async {
            let (mut s, _) = listener.accept().await.expect("accept");
            crate::mesh::upgrade::server(&mut s)
                .await
                .expect("server upgrade");
            s
        };
        let (client, server) = tokio::join!(dial, accept);
        (
            MeshSocket::new(server, fastwebsockets::Role::Server),
            MeshSocket::new(client, fastwebsockets::Role::Client),
        )
    }

    fn big_envelope() -> Envelope {
        Envelope {
            src: ActorId(0),
            dst: ActorId(1),
            via: None,
            sent_at_ns: 0,
            due_ns: None,
            payload: Msg::KvFrame(vec![7u8; 64 * 1024]),
        }
    }

    /// Keeps `peer`'s outbound queue full.
    async fn flood(peer: Arc<PeerShared>) {
        loop {
            if peer.out.try_push(big_envelope()).is_err() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    fn peer(id: u16) -> (Arc<PeerShared>, mpsc::Receiver<Frame>) {
        let (ctrl_tx, ctrl_rx) = mpsc::channel(16);
        (
            Arc::new(PeerShared::new(
                HostId(id),
                format!("h{id}"),
                256,
                usize::MAX,
                ctrl_tx,
            )),
            ctrl_rx,
        )
    }

    /// A peer that keeps sending but stops reading fills the socket; the
    /// session ends on its write timeout (it used to block forever).
    #[test]
    fn a_peer_that_stops_reading_is_declared_down() {
        actix::System::new().block_on(async {
            let (a, b) = socket_pair().await;
            let (_b_rx, mut b_tx) = b.split().expect("split");
            actix_rt::spawn(async move {
                let mut seq = 0;
                loop {
                    seq += 1;
                    let hb = Frame::Heartbeat(Heartbeat {
                        seq,
                        sent_ns: 0,
                        echo_ns: None,
                        echo_hold_ns: 0,
                    });
                    encode_frame(&hb).expect("encode");
                    if b_tx.send(&hb).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
            let ctx = context(0);
            let (p, mut ctrl_rx) = peer(1);
            actix_rt::spawn(flood(p.clone()));
            let why = tokio::time::timeout(
                Duration::from_secs(30),
                run_session(&ctx, &p, a, &mut ctrl_rx),
            )
            .await
            .expect("the session must end, not block");
            assert!(why.contains("not reading"), "{why}");
            assert_eq!(p.counters.write_timeouts.load(Ordering::Relaxed), 1);
        });
    }

    /// A peer's websocket close is echoed and ends the session.
    #[test]
    fn a_peer_close_is_echoed_and_ends_the_session() {
        actix::System::new().block_on(async {
            let (a, b) = socket_pair().await;
            let (mut b_rx, mut b_tx) = b.split().expect("split");
            let ctx = context(0);
            let (p, mut ctrl_rx) = peer(1);
            let peer_side = async move {
                b_tx.close().await.expect("close");
                loop {
                    let closed = b_rx
                        .next(|m| matches!(m, crate::mesh::socket::Incoming::Closed))
                        .await
                        .expect("the echo, before the connection ends");
                    if closed {
                        return;
                    }
                }
            };
            let (why, ()) = tokio::time::timeout(Duration::from_secs(10), async {
                tokio::join!(run_session(&ctx, &p, a, &mut ctrl_rx), peer_side)
            })
            .await
            .expect("the session must end");
            assert!(
                why.contains("closed by peer") || why.contains("receive"),
                "{why}"
            );
        });
    }

    /// A frame read while the host is still setting its targets (the read
    /// began before they existed) reaches the router set meanwhile: the
    /// reader looks the router up once the frame is read.
    #[test]
    fn a_frame_read_while_the_targets_are_set_reaches_the_router() {
        use crate::bench::mesh::{CountingRouter, Counts};
        use actix::Actor as _;
        use edgemu_actors::router::InboundGate;
        actix::System::new().block_on(async {
            let (a, b) = socket_pair().await;
            let (_b_rx, mut b_tx) = b.split().expect("split");
            let ctx = context(0);
            let (p, mut ctrl_rx) = peer(1);
            let counts = Arc::new(Counts::default());
            let peer_side = async {
                // The session is reading by now, with no targets yet.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let gate = Arc::new(InboundGate::new(16));
                let r = CountingRouter(counts.clone(), gate.clone()).start();
                ctx.targets.set(
                    (r.clone().recipient(), gate),
                    r.clone().recipient(),
                    vec![r.clone().recipient()],
                    r.recipient(),
                );
                b_tx.send(&Frame::Envelopes(vec![big_envelope()]))
                    .await
                    .expect("send");
                let t0 = Instant::now();
                while counts.snapshot().0 == 0 && t0.elapsed() < Duration::from_secs(5) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::select! {
                why = run_session(&ctx, &p, a, &mut ctrl_rx) => panic!("the session ended: {why}"),
                () = peer_side => {}
            }
            assert_eq!(counts.snapshot(), (1, 64 * 1024));
        });
    }

    /// Two hosts flooding each other with data both keep reading, so
    /// neither is declared down (both used to block in a write, each waiting
    /// for the other to read, until both saw 3 s of silence).
    #[test]
    fn hosts_flooding_each_other_stay_up() {
        actix::System::new().block_on(async {
            let (a, b) = socket_pair().await;
            let (ctx_a, ctx_b) = (context(0), context(1));
            let (pa, mut a_ctrl) = peer(1);
            let (pb, mut b_ctrl) = peer(0);
            actix_rt::spawn(flood(pa.clone()));
            actix_rt::spawn(flood(pb.clone()));
            let both = async {
                tokio::select! {
                    why = run_session(&ctx_a, &pa, a, &mut a_ctrl) => Some(format!("a: {why}")),
                    why = run_session(&ctx_b, &pb, b, &mut b_ctrl) => Some(format!("b: {why}")),
                }
            };
            // Longer than the 3 s silence limit.
            let ended = tokio::time::timeout(PEER_TIMEOUT + Duration::from_secs(2), both)
                .await
                .unwrap_or(None);
            assert_eq!(ended, None, "a saturated session went down");
            assert_eq!(pa.counters.silences.load(Ordering::Relaxed), 0);
            assert_eq!(pb.counters.silences.load(Ordering::Relaxed), 0);
        });
    }
}
