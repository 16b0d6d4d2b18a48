//! One peer: its shared state, the task that keeps a session to it alive,
//! and the accept loop that hands dialed-in sessions to their peer task.

use super::queue::OutboundQueue;
use super::session::run_session;
use super::socket::MeshSocket;
use super::upgrade;
use super::MeshContext;
use crate::host::supervisor::Control;
use actix::prelude::*;
use edgemu_actors::messages::PeerStatus;
use edgemu_actors::router::{InboundBatch, InboundGate, PeerSendError, PeerSender};
use edgemu_codec::ids::HostId;
use edgemu_codec::wire::{Handshake, HandshakeOutcome};
use edgemu_config::command::Command;
use edgemu_config::{ControlError, PeerAddr};
use edgemu_protocol::{decode_frame, Envelope, ForwardedCommand, ForwardedReply, Frame};
use fastwebsockets::Role;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// The base round trip to a peer, measured by heartbeats.
#[derive(actix::Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct BaseRtt {
    pub peer: HostId,
    pub rtt_ns: u64,
}

/// Where the mesh delivers what it receives. Filled in once the host's
/// actors exist (after the run start); until then inbound envelopes are dropped.
#[derive(Clone, Default)]
pub struct MeshTargets {
    inner: Arc<Mutex<TargetsInner>>,
}

#[derive(Default)]
struct TargetsInner {
    router: Option<(Recipient<InboundBatch>, Arc<InboundGate>)>,
    supervisor: Option<Recipient<Control>>,
    status: Vec<Recipient<PeerStatus>>,
    rtt: Option<Recipient<BaseRtt>>,
    /// The latest base RTT per peer, replayed to `rtt` when it is set: the
    /// handshake's estimate (and any heartbeat's) can arrive before the
    /// host's actors exist, and later ones are only reported when lower.
    last_rtt: BTreeMap<HostId, u64>,
}

impl MeshTargets {
    pub fn set(
        &self,
        router: (Recipient<InboundBatch>, Arc<InboundGate>),
        supervisor: Recipient<Control>,
        status: Vec<Recipient<PeerStatus>>,
        rtt: Recipient<BaseRtt>,
    ) {
        if let Ok(mut t) = self.inner.lock() {
            t.router = Some(router);
            t.supervisor = Some(supervisor);
            t.status = status;
            for (&peer, &rtt_ns) in &t.last_rtt {
                rtt.do_send(BaseRtt { peer, rtt_ns });
            }
            t.rtt = Some(rtt);
        }
    }
    pub(crate) fn router(&self) -> Option<(Recipient<InboundBatch>, Arc<InboundGate>)> {
        self.inner.lock().ok().and_then(|t| t.router.clone())
    }
    pub(crate) fn supervisor(&self) -> Option<Recipient<Control>> {
        self.inner.lock().ok().and_then(|t| t.supervisor.clone())
    }
    pub(crate) fn peer_status(&self, peer: HostId, up: bool, left: bool) {
        if let Ok(t) = self.inner.lock() {
            for s in &t.status {
                s.do_send(PeerStatus { peer, up, left });
            }
        }
    }
    pub(crate) fn base_rtt(&self, peer: HostId, rtt_ns: u64) {
        if let Ok(mut t) = self.inner.lock() {
            t.last_rtt.insert(peer, rtt_ns);
            if let Some(r) = &t.rtt {
                r.do_send(BaseRtt { peer, rtt_ns });
            }
        }
    }
}

/// What went wrong on the sessions with one peer, for `status` and metrics.
#[derive(Default, Debug)]
pub(crate) struct PeerCounters {
    /// Frames that could not be decoded (dropped).
    pub malformed_frames: AtomicU64,
    /// Control frames (forwarded requests and replies) dropped because the
    /// control queue to the peer was full.
    pub control_dropped: AtomicU64,
    /// Sessions ended because a write did not finish in time (the peer
    /// stopped reading).
    pub write_timeouts: AtomicU64,
    /// Sessions ended because the peer was silent too long.
    pub silences: AtomicU64,
}

impl PeerCounters {
    /// The counters as `status` reports them (`up` is the caller's).
    pub fn status(&self) -> edgemu_config::command::MeshPeerStatus {
        edgemu_config::command::MeshPeerStatus {
            up: false,
            malformed_frames: self.malformed_frames.load(Ordering::Relaxed),
            control_dropped: self.control_dropped.load(Ordering::Relaxed),
            write_timeouts: self.write_timeouts.load(Ordering::Relaxed),
            silences: self.silences.load(Ordering::Relaxed),
        }
    }
}

/// Control frames (forwards, replies, goodbyes) queued per peer.
pub(crate) const CONTROL_QUEUE: usize = 256;

pub(crate) struct PeerShared {
    pub id: HostId,
    pub name: String,
    pub up: AtomicBool,
    /// Envelopes for the peer, taken by the session's writer.
    pub out: OutboundQueue,
    pub ctrl_tx: mpsc::Sender<Frame>,
    pub counters: PeerCounters,
    pub rtt_min_ns: AtomicU64,
    next_request: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<ForwardedReply>>>,
}

impl PeerShared {
    pub fn new(
        id: HostId,
        name: String,
        queue_capacity: usize,
        queue_bytes: usize,
        ctrl_tx: mpsc::Sender<Frame>,
    ) -> Self {
        PeerShared {
            id,
            name,
            up: AtomicBool::new(false),
            out: OutboundQueue::new(queue_capacity, queue_bytes),
            ctrl_tx,
            counters: PeerCounters::default(),
            rtt_min_ns: AtomicU64::new(u64::MAX),
            next_request: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The requests waiting for a reply (a map without invariants, so a
    /// panic elsewhere that poisoned the lock leaves it usable).
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<ForwardedReply>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a forwarded control command; the receiver gets the reply.
    pub fn register_request(
        &self,
        command: Command,
    ) -> Result<oneshot::Receiver<ForwardedReply>, ControlError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        // Registered before it is sent, so a quick reply finds it.
        self.pending().insert(id, tx);
        let sent = self.send_control(Frame::ControlForward {
            id,
            command: ForwardedCommand(command),
        });
        if let Err(e) = sent {
            self.pending().remove(&id);
            return Err(e);
        }
        Ok(rx)
    }

    /// Queues a control frame; a full queue drops it and counts it.
    pub fn send_control(&self, frame: Frame) -> Result<(), ControlError> {
        self.ctrl_tx.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                self.counters
                    .control_dropped
                    .fetch_add(1, Ordering::Relaxed);
                ControlError::PeerQueueFull(self.name.clone())
            }
            mpsc::error::TrySendError::Closed(_) => ControlError::PeerLeaving(self.name.clone()),
        })
    }

    pub fn complete_request(&self, id: u64, reply: ForwardedReply) {
        let tx = self.pending().remove(&id);
        if let Some(tx) = tx {
            let _ = tx.send(reply);
        }
    }

    /// Drops pending requests (their senders see the peer went down).
    pub fn fail_pending(&self) {
        self.pending().clear();
    }

    pub fn note_rtt(&self, rtt_ns: u64) -> bool {
        let prev = self.rtt_min_ns.fetch_min(rtt_ns, Ordering::AcqRel);
        rtt_ns < prev
    }
}

/// The router's handle on a peer's outbound queue.
pub(crate) struct QueueSender(pub Arc<PeerShared>);

impl PeerSender for QueueSender {
    fn try_send(&self, envelope: Envelope) -> Result<(), PeerSendError> {
        if !self.0.up.load(Ordering::Acquire) {
            return Err(PeerSendError::Down);
        }
        self.0.out.try_push(envelope)
    }
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the handshake on a fresh websocket; returns the outcome and the
/// time it took (about one round trip: a first base-RTT estimate).
pub(crate) async fn handshake(
    ws: &mut MeshSocket,
    ctx: &MeshContext,
    expected: Option<String>,
) -> anyhow::Result<(HandshakeOutcome, Duration)> {
    let mut hs = Handshake::new(ctx.hello(), ctx.token.clone(), expected);
    let t0 = Instant::now();
    let fut = async {
        ws.send(&hs.hello_frame()).await?;
        while let Some(bytes) = ws.recv().await? {
            let frame = decode_frame(&bytes)?;
            let (reply, done) = hs.on_frame(frame)?;
            if let Some(r) = reply {
                ws.send(&r).await?;
            }
            if let Some(outcome) = done {
                return Ok(outcome);
            }
        }
        anyhow::bail!("connection closed during handshake")
    };
    let outcome = tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .map_err(|_| anyhow::anyhow!("handshake timed out after {HANDSHAKE_TIMEOUT:?}"))??;
    Ok((outcome, t0.elapsed()))
}

/// Accepts dialed-in peers: handshake, then hand the session to that peer's task.
pub(crate) async fn accept_loop(
    ctx: Arc<MeshContext>,
    listener: TcpListener,
    incoming: BTreeMap<String, mpsc::Sender<(MeshSocket, HandshakeOutcome, Duration)>>,
) {
    let incoming = Arc::new(incoming);
    loop {
        let (tcp, addr) = match listener.accept().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("mesh accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ctx = ctx.clone();
        let incoming = incoming.clone();
        actix_rt::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let mut tcp = tcp;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, upgrade::server(&mut tcp)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(%addr, "mesh: websocket upgrade failed: {e:#}");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%addr, "mesh: websocket upgrade timed out after {HANDSHAKE_TIMEOUT:?}");
                    return;
                }
            }
            let mut ws = MeshSocket::new(tcp, Role::Server);
            match handshake(&mut ws, &ctx, None).await {
                Ok((outcome, rtt)) => {
                    let me = &ctx.cluster.host(ctx.host).name;
                    match incoming.get(&outcome.peer_host) {
                        Some(tx) if outcome.peer_host < *me => {
                            let _ = tx.send((ws, outcome, rtt)).await;
                        }
                        Some(_) => {
                            tracing::warn!(%addr, peer = %outcome.peer_host, "mesh: peer dialed us but we dial it; closing")
                        }
                        None => {
                            tracing::warn!(%addr, peer = %outcome.peer_host, "mesh: unknown peer host")
                        }
                    }
                }
                Err(e) => tracing::warn!(%addr, "mesh: handshake refused: {e:#}"),
            }
        });
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Longest a TCP connect to a peer may take before the dial is retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

async fn dial(
    ctx: &MeshContext,
    peer: &PeerShared,
    addr: &PeerAddr,
) -> (MeshSocket, HandshakeOutcome, Duration) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let attempt = async {
            // A name is resolved at every attempt: a pod's DNS name exists
            // only once the pod runs.
            let target = addr.to_string();
            let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target.as_str()))
                .await
                .map_err(|_| anyhow::anyhow!("connect timed out after {CONNECT_TIMEOUT:?}"))??;
            let _ = tcp.set_nodelay(true);
            let mut tcp = tcp;
            tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                upgrade::client(&mut tcp, &target, "/mesh"),
            )
            .await
            .map_err(|_| {
                anyhow::anyhow!("websocket upgrade timed out after {HANDSHAKE_TIMEOUT:?}")
            })??;
            let mut ws = MeshSocket::new(tcp, Role::Client);
            let (outcome, rtt) = handshake(&mut ws, ctx, Some(peer.name.clone())).await?;
            anyhow::Ok((ws, outcome, rtt))
        };
        match attempt.await {
            Ok(v) => return v,
            Err(e) => {
                tracing::debug!(peer = %peer.name, %addr, "mesh dial failed: {e:#}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Keeps one session to `peer` alive for the life of the process.
pub(crate) async fn peer_task(
    ctx: Arc<MeshContext>,
    peer: Arc<PeerShared>,
    mut ctrl_rx: mpsc::Receiver<Frame>,
    mut incoming: mpsc::Receiver<(MeshSocket, HandshakeOutcome, Duration)>,
    dial_addr: Option<PeerAddr>,
) {
    let mut last_incarnation: Option<u64> = None;
    loop {
        let (ws, outcome, rtt) = match &dial_addr {
            Some(addr) => dial(&ctx, &peer, addr).await,
            None => match incoming.recv().await {
                Some(v) => v,
                None => return,
            },
        };
        if last_incarnation.is_some_and(|i| i != outcome.peer_incarnation) {
            tracing::info!(peer = %peer.name, "peer restarted (new incarnation)");
        }
        last_incarnation = Some(outcome.peer_incarnation);
        let rtt_ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        if peer.note_rtt(rtt_ns) {
            ctx.targets.base_rtt(peer.id, rtt_ns);
        }
        // Discard what was queued for an earlier session.
        peer.out.clear();
        peer.up.store(true, Ordering::Release);
        ctx.targets.peer_status(peer.id, true, false);
        tracing::info!(peer = %peer.name, rtt_us = rtt.as_micros() as u64, "mesh session up");
        let reason = run_session(&ctx, &peer, ws, &mut ctrl_rx).await;
        peer.up.store(false, Ordering::Release);
        peer.fail_pending();
        // The end of a run is a goodbye from one side or the other, not a
        // failure: logged at info; anything else is a peer lost.
        let left = reason.starts_with("bye") || ctx.leaving.load(Ordering::Acquire);
        ctx.targets.peer_status(peer.id, false, left);
        if left {
            tracing::info!(peer = %peer.name, "mesh session closed: {reason}");
        } else {
            tracing::warn!(peer = %peer.name, "mesh session down: {reason}");
        }
        if reason == "bye sent" || ctx.leaving.load(Ordering::Acquire) {
            // We are leaving: do not dial again.
            return;
        }
    }
}
