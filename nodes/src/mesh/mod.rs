//! The host mesh: one websocket per pair of hosts (the host whose name sorts
//! lower dials), carrying [`Frame`]s.
//!
//! Per peer there is one long-lived task that owns the bounded outbound
//! envelope queue and (re)establishes the session: dial with capped
//! exponential backoff (or wait for the peer to dial us), handshake (version,
//! config digest, HMAC challenge with the cluster token), then exchange
//! envelopes, heartbeats every second and forwarded control requests until
//! the socket fails or the peer is silent for 3 s. While a peer is down the
//! router's sends to it fail at once (counted as dropped), and envelopes
//! still queued when it went down are discarded.
//!
//! Heartbeats echo each other's send time, so each side measures the round
//! trip; its minimum is the base RTT that link actors subtract from their
//! configured delay.

mod peer;
mod queue;
mod session;
mod socket;
mod upgrade;

pub use peer::{BaseRtt, MeshTargets};

use crate::host::supervisor::ControlForwarder;
use anyhow::{Context as _, Result};
use edgemu_codec::ids::HostId;
use edgemu_codec::wire::{Hello, PROTOCOL_VERSION};
use edgemu_config::command::{Command, CommandReply};
use edgemu_config::{Cluster, ControlError};
use edgemu_protocol::Frame;
use futures_util::future::BoxFuture;
use peer::PeerShared;
use rand::RngCore;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Outbound envelopes queued per peer before the router starts dropping,
/// and their bound in encoded bytes (see `queue`).
pub const PEER_QUEUE: usize = 16_384;
pub const PEER_QUEUE_BYTES: usize = 256 * 1024;
/// A peer silent this long is down.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(3);
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Everything a session needs to know about this host.
pub(crate) struct MeshContext {
    pub cluster: Arc<Cluster>,
    pub host: HostId,
    pub token: Vec<u8>,
    pub incarnation: u64,
    pub targets: MeshTargets,
    /// The run's start time (unix ns), once known.
    pub start: watch::Sender<Option<u64>>,
    pub coordinator: bool,
    /// Set once this host said goodbye: sessions are not re-established.
    pub leaving: std::sync::atomic::AtomicBool,
}

impl MeshContext {
    pub(crate) fn hello(&self) -> Hello {
        let mut nonce = [0u8; 32];
        rand::rng().fill_bytes(&mut nonce);
        Hello {
            protocol_version: PROTOCOL_VERSION,
            host: self.cluster.host(self.host).name.clone(),
            incarnation: self.incarnation,
            config_digest: self.cluster.digest,
            nonce,
        }
    }
}

/// This host's end of the mesh.
pub struct Mesh {
    ctx: Arc<MeshContext>,
    peers: BTreeMap<HostId, Arc<PeerShared>>,
    start_rx: watch::Receiver<Option<u64>>,
}

/// The coordinator is the host whose name sorts first.
pub fn coordinator(cluster: &Cluster) -> Option<HostId> {
    cluster
        .hosts
        .iter()
        .min_by(|a, b| a.name.cmp(&b.name))
        .map(|h| h.id)
}

impl Mesh {
    /// Binds the mesh listener and starts one task per peer. Must be called
    /// inside the host's actix system.
    pub async fn start(
        cluster: Arc<Cluster>,
        host: HostId,
        token: Vec<u8>,
        targets: MeshTargets,
    ) -> Result<Mesh> {
        let spec = cluster.host(host).clone();
        let listener = tokio::net::TcpListener::bind(spec.listen)
            .await
            .with_context(|| {
                format!(
                    "binding mesh listener {} for host {}",
                    spec.listen, spec.name
                )
            })?;
        let (start, start_rx) = watch::channel(None);
        let ctx = Arc::new(MeshContext {
            coordinator: coordinator(&cluster) == Some(host),
            cluster: cluster.clone(),
            host,
            token,
            incarnation: rand::rng().next_u64(),
            targets,
            start,
            leaving: std::sync::atomic::AtomicBool::new(false),
        });
        let mut peers = BTreeMap::new();
        let mut incoming = BTreeMap::new();
        for h in cluster.hosts.iter().filter(|h| h.id != host) {
            let (ctrl_tx, ctrl_rx) = mpsc::channel::<Frame>(peer::CONTROL_QUEUE);
            let shared = Arc::new(PeerShared::new(
                h.id,
                h.name.clone(),
                PEER_QUEUE,
                PEER_QUEUE_BYTES,
                ctrl_tx,
            ));
            let (in_tx, in_rx) = mpsc::channel(4);
            let dial = if spec.name < h.name {
                Some(h.advertise.clone())
            } else {
                None
            };
            actix_rt::spawn(peer::peer_task(
                ctx.clone(),
                shared.clone(),
                ctrl_rx,
                in_rx,
                dial,
            ));
            incoming.insert(h.name.clone(), in_tx);
            peers.insert(h.id, shared);
        }
        actix_rt::spawn(peer::accept_loop(ctx.clone(), listener, incoming));
        Ok(Mesh {
            ctx,
            peers,
            start_rx,
        })
    }

    pub fn is_coordinator(&self) -> bool {
        self.ctx.coordinator
    }

    pub fn peers_up(&self) -> usize {
        self.peers
            .values()
            .filter(|p| p.up.load(Ordering::Acquire))
            .count()
    }

    pub fn peer_is_up(&self, h: HostId) -> bool {
        self.peers
            .get(&h)
            .is_some_and(|p| p.up.load(Ordering::Acquire))
    }

    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Coordinator: announce the run start (unix ns) to every peer, now and
    /// to any that connects later.
    pub fn announce_start(&self, unix_ns: u64) {
        let _ = self.ctx.start.send(Some(unix_ns));
    }

    /// Waits for the run start: announced by us or received from the coordinator.
    pub async fn wait_start(&mut self) -> Option<u64> {
        loop {
            if let Some(v) = *self.start_rx.borrow_and_update() {
                return Some(v);
            }
            if self.start_rx.changed().await.is_err() {
                return None;
            }
        }
    }

    pub fn targets(&self) -> &MeshTargets {
        &self.ctx.targets
    }

    /// The router's view of each peer.
    pub fn peer_senders(&self) -> Vec<(HostId, Box<dyn edgemu_actors::router::PeerSender>)> {
        self.peers
            .iter()
            .map(|(h, p)| {
                (
                    *h,
                    Box::new(peer::QueueSender(p.clone()))
                        as Box<dyn edgemu_actors::router::PeerSender>,
                )
            })
            .collect()
    }

    pub fn forwarder(&self) -> Arc<dyn ControlForwarder> {
        Arc::new(MeshForwarder {
            peers: self.peers.clone(),
        })
    }

    /// Tells every peer we are leaving.
    pub fn say_goodbye(&self, reason: &str) {
        self.ctx.leaving.store(true, Ordering::Release);
        for p in self.peers.values() {
            let _ = p.send_control(Frame::Bye {
                reason: reason.to_string(),
            });
        }
    }
}

struct MeshForwarder {
    peers: BTreeMap<HostId, Arc<PeerShared>>,
}

/// How long a forwarded control request may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

impl ControlForwarder for MeshForwarder {
    fn counters(&self) -> BTreeMap<String, edgemu_config::command::MeshPeerStatus> {
        self.peers
            .values()
            .map(|p| {
                let mut c = p.counters.status();
                c.up = p.up.load(Ordering::Acquire);
                (p.name.clone(), c)
            })
            .collect()
    }

    fn forward(
        &self,
        host: HostId,
        command: Command,
    ) -> BoxFuture<'static, Result<CommandReply, ControlError>> {
        let peer = self.peers.get(&host).cloned();
        Box::pin(async move {
            let peer = peer.ok_or(ControlError::NoSuchPeer(host.0))?;
            if !peer.up.load(Ordering::Acquire) {
                return Err(ControlError::PeerDown(peer.name.clone()));
            }
            let rx = peer.register_request(command)?;
            match tokio::time::timeout(FORWARD_TIMEOUT, rx).await {
                Ok(Ok(reply)) => reply.map_err(|e| ControlError::Remote {
                    host: peer.name.clone(),
                    error: Box::new(e),
                }),
                Ok(Err(_)) => Err(ControlError::PeerLost(peer.name.clone())),
                Err(_) => Err(ControlError::PeerSilent {
                    host: peer.name.clone(),
                    after: FORWARD_TIMEOUT,
                }),
            }
        })
    }
}
