//! The router of one host: where every envelope goes next.
//!
//! An envelope with `via = Some(link)` goes first to the link actor of the
//! direction it travels (decided by which endpoint sent it); that actor lives
//! on the sending host, so traffic is impaired before it leaves. When the
//! link releases it (`via` cleared), or when it had no link, the envelope
//! goes to the destination actor if it is local, or to the peer host that
//! owns it through that peer's bounded outbound queue. A full queue, a down
//! or partitioned peer, or an unknown id drops the envelope and counts it,
//! like a router would; nothing is buffered without limit.

use crate::clock::Clock;
use crate::events::{Event, EventLog};
use crate::link_actor::LinkActor;
use crate::messages::{Deliver, PeerControl, PeerStatus, Route, RouteBatch};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, Direction, HostId, LinkId};
use edgemu_config::Cluster;
use edgemu_protocol::Envelope;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::inbound_gate::{InboundGate, INBOUND_LIMIT};

/// Why a peer did not take an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSendError {
    Full,
    Down,
}

/// The outbound side of the connection to one peer host (a websocket queue in
/// real mode, the peer's router in virtual mode).
pub trait PeerSender: Send {
    fn try_send(&self, envelope: Envelope) -> Result<(), PeerSendError>;
}

#[derive(Debug, Default, Clone, Serialize, serde::Deserialize)]
pub struct RouterCounters {
    pub delivered_local: u64,
    pub sent_remote: u64,
    pub received_remote: u64,
    pub dropped_unknown: u64,
    pub dropped_queue_full: u64,
    pub dropped_peer_down: u64,
    pub dropped_partition: u64,
    pub dropped_bad_route: u64,
    /// Envelopes from peers dropped because the router was this far behind
    /// (see [`InboundGate`]).
    pub dropped_inbound_full: u64,
}

/// One partition from a peer: `[from_ns, until_ns)`, open while `until_ns`
/// is None.
#[derive(Debug, Clone, Copy)]
struct PartitionWindow {
    from_ns: u64,
    until_ns: Option<u64>,
    generation: u64,
}

impl PartitionWindow {
    fn contains(&self, t_ns: u64) -> bool {
        t_ns >= self.from_ns && self.until_ns.is_none_or(|u| t_ns < u)
    }
}

/// An envelope from a peer host, with the host it came from (the mesh
/// session it arrived on, authenticated by the handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Inbound(pub Envelope, pub HostId);

/// The envelopes of one mesh frame from a peer host, admitted by the
/// router's [`InboundGate`] as a batch: one mailbox message per frame
/// instead of one per envelope keeps a saturated session's receiver cheap.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InboundBatch(pub Vec<Envelope>, pub HostId);

#[derive(Message)]
#[rtype(result = "()")]
pub struct RegisterActor {
    pub id: ActorId,
    pub recipient: Recipient<Deliver>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct RegisterLink {
    pub link: LinkId,
    pub dir: Direction,
    pub addr: Addr<LinkActor>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct SetPeer {
    pub host: HostId,
    pub sender: Option<Box<dyn PeerSender>>,
}

#[derive(Message)]
#[rtype(result = "RouterCounters")]
pub struct GetRouterCounters;

pub struct Router {
    host: HostId,
    host_name: String,
    cluster: Arc<Cluster>,
    clock: Clock,
    /// In virtual time an arrival is stamped with the link model's time.
    virtual_time: bool,
    actors: HashMap<ActorId, Recipient<Deliver>>,
    links: HashMap<(LinkId, Direction), Addr<LinkActor>>,
    peers: HashMap<HostId, Box<dyn PeerSender>>,
    /// Partition windows per peer, `[from, until)` in run time; a newer
    /// partition of a peer ends the older one where it starts.
    partitions: HashMap<HostId, Vec<PartitionWindow>>,
    partition_generation: u64,
    peer_listeners: Vec<Recipient<PeerStatus>>,
    events: EventLog,
    counters: RouterCounters,
    inbound: Arc<InboundGate>,
}

impl Router {
    pub fn new(
        host: HostId,
        cluster: Arc<Cluster>,
        clock: Clock,
        virtual_time: bool,
        events: EventLog,
    ) -> Self {
        let host_name = cluster
            .hosts
            .get(host.0 as usize)
            .map(|h| h.name.clone())
            .unwrap_or_default();
        Router {
            host,
            host_name,
            cluster,
            clock,
            virtual_time,
            actors: HashMap::new(),
            links: HashMap::new(),
            peers: HashMap::new(),
            partitions: HashMap::new(),
            partition_generation: 0,
            peer_listeners: Vec::new(),
            events,
            counters: RouterCounters::default(),
            inbound: Arc::new(InboundGate::new(INBOUND_LIMIT)),
        }
    }

    /// The gate the mesh must pass each inbound envelope through.
    pub fn inbound_gate(&self) -> Arc<InboundGate> {
        self.inbound.clone()
    }

    /// Subscribe to peer up/down notices (e.g. the host supervisor).
    pub fn add_peer_listener(&mut self, r: Recipient<PeerStatus>) {
        self.peer_listeners.push(r);
    }

    fn route(&mut self, env: Envelope, from_peer: bool) {
        if let Some(link) = env.via {
            let Some(spec) = self.cluster.links.get(link.0 as usize) else {
                self.counters.dropped_unknown += 1;
                return;
            };
            let Some(dir) = spec.direction_from(env.src) else {
                self.counters.dropped_bad_route += 1;
                return;
            };
            match self.links.get(&(link, dir)) {
                Some(addr) => addr.do_send(Route(env)),
                None => {
                    // The sending host owns the link actor; a packet can only
                    // enter a link where its sender lives.
                    self.counters.dropped_bad_route += 1;
                    tracing::debug!(%link, %dir, "envelope for a link direction not on this host");
                }
            }
            return;
        }
        let Some(dst) = self.cluster.actors.get(env.dst.0 as usize) else {
            self.counters.dropped_unknown += 1;
            return;
        };
        if dst.host == self.host {
            match self.actors.get(&env.dst) {
                Some(r) => {
                    let now = self.clock.now_ns();
                    let recv_ns = match (self.virtual_time, env.due_ns) {
                        (true, Some(due)) => due.max(env.sent_at_ns),
                        _ => now,
                    };
                    self.counters.delivered_local += 1;
                    r.do_send(Deliver {
                        envelope: env,
                        recv_ns,
                    });
                }
                None => self.counters.dropped_unknown += 1,
            }
            return;
        }
        if from_peer {
            // Never bounce a peer's envelope onwards: routes are one hop.
            self.counters.dropped_bad_route += 1;
            return;
        }
        if self.partitioned(dst.host, self.packet_time(&env)) {
            self.counters.dropped_partition += 1;
            return;
        }
        match self.peers.get(&dst.host) {
            Some(p) => match p.try_send(env) {
                Ok(()) => self.counters.sent_remote += 1,
                Err(PeerSendError::Full) => self.counters.dropped_queue_full += 1,
                Err(PeerSendError::Down) => self.counters.dropped_peer_down += 1,
            },
            None => self.counters.dropped_peer_down += 1,
        }
    }

    /// The time a partition is judged at: in virtual time the packet's
    /// exact model time (the paused clock wakes in whole milliseconds, so
    /// judging by `now` let a packet through at each edge of a window);
    /// in real time, now.
    fn packet_time(&self, env: &Envelope) -> u64 {
        if self.virtual_time {
            env.due_ns.unwrap_or(env.sent_at_ns)
        } else {
            self.clock.now_ns()
        }
    }

    fn partitioned(&self, peer: HostId, t_ns: u64) -> bool {
        self.partitions
            .get(&peer)
            .is_some_and(|ws| ws.iter().any(|w| w.contains(t_ns)))
    }

    /// Ends every open window of `peer` at `now`, and forgets windows that
    /// ended long ago (no packet is that late).
    fn close_partitions(&mut self, peer: HostId, now: u64) {
        if let Some(ws) = self.partitions.get_mut(&peer) {
            for w in ws.iter_mut() {
                if w.until_ns.is_none_or(|u| u > now) {
                    w.until_ns = Some(now.max(w.from_ns));
                }
            }
            ws.retain(|w| {
                w.until_ns
                    .is_none_or(|u| u.saturating_add(60_000_000_000) > now)
            });
        }
    }

    fn peer_name(&self, h: HostId) -> String {
        self.cluster
            .hosts
            .get(h.0 as usize)
            .map(|h| h.name.clone())
            .unwrap_or_else(|| h.to_string())
    }
}

impl Actor for Router {
    type Context = Context<Self>;
}

impl Handler<Route> for Router {
    type Result = ();
    fn handle(&mut self, msg: Route, _: &mut Context<Self>) {
        self.route(msg.0, false);
    }
}

impl Handler<RouteBatch> for Router {
    type Result = ();
    fn handle(&mut self, msg: RouteBatch, _: &mut Context<Self>) {
        for env in msg.0 {
            self.route(env, false);
        }
    }
}

impl Handler<Inbound> for Router {
    type Result = ();
    fn handle(&mut self, msg: Inbound, _: &mut Context<Self>) {
        self.inbound.done();
        let Inbound(env, from) = msg;
        self.receive_remote(env, from);
    }
}

impl Handler<InboundBatch> for Router {
    type Result = ();
    fn handle(&mut self, msg: InboundBatch, _: &mut Context<Self>) {
        let InboundBatch(envs, from) = msg;
        self.inbound.done_many(envs.len());
        for env in envs {
            self.receive_remote(env, from);
        }
    }
}

impl Router {
    fn receive_remote(&mut self, env: Envelope, from: HostId) {
        self.counters.received_remote += 1;
        // A peer only forwards what already crossed its link (links live on
        // the sending host), and only from actors on that peer: an envelope
        // with `via` set, or whose source lives elsewhere, would use this
        // host as a relay with a spoofed source.
        let src_host = self.cluster.actors.get(env.src.0 as usize).map(|a| a.host);
        if env.via.is_some() || src_host != Some(from) {
            self.counters.dropped_bad_route += 1;
            return;
        }
        // A partition drops in both directions, on both hosts.
        if self.partitioned(from, self.packet_time(&env)) {
            self.counters.dropped_partition += 1;
            return;
        }
        self.route(env, true);
    }
}

impl Handler<RegisterActor> for Router {
    type Result = ();
    fn handle(&mut self, msg: RegisterActor, _: &mut Context<Self>) {
        self.actors.insert(msg.id, msg.recipient);
    }
}

impl Handler<RegisterLink> for Router {
    type Result = ();
    fn handle(&mut self, msg: RegisterLink, _: &mut Context<Self>) {
        self.links.insert((msg.link, msg.dir), msg.addr);
    }
}

impl Handler<SetPeer> for Router {
    type Result = ();
    fn handle(&mut self, msg: SetPeer, _: &mut Context<Self>) {
        match msg.sender {
            Some(s) => {
                self.peers.insert(msg.host, s);
            }
            None => {
                self.peers.remove(&msg.host);
            }
        }
    }
}

impl Handler<PeerStatus> for Router {
    type Result = ();
    fn handle(&mut self, msg: PeerStatus, _: &mut Context<Self>) {
        let t_ns = self.clock.now_ns();
        self.events.record(Event {
            t_ns,
            host: self.host_name.clone(),
            source: "mesh".into(),
            kind: match (msg.up, msg.left) {
                (true, _) => "peer.up",
                (false, true) => "peer.left",
                (false, false) => "peer.down",
            }
            .into(),
            detail: serde_json::json!({ "peer": self.peer_name(msg.peer) }),
        });
        for l in &self.peer_listeners {
            l.do_send(msg.clone());
        }
    }
}

impl Handler<PeerControl> for Router {
    type Result = u64;
    fn handle(&mut self, msg: PeerControl, ctx: &mut Context<Self>) -> u64 {
        let now = self.clock.now_ns();
        match msg {
            PeerControl::Partition {
                peer,
                heal_after_ns,
            } => {
                self.partition_generation += 1;
                let generation = self.partition_generation;
                self.close_partitions(peer, now);
                self.partitions
                    .entry(peer)
                    .or_default()
                    .push(PartitionWindow {
                        from_ns: now,
                        until_ns: heal_after_ns.map(|a| now.saturating_add(a)),
                        generation,
                    });
                if let Some(after) = heal_after_ns {
                    // The window's end is exact; this only logs the heal.
                    ctx.run_later(std::time::Duration::from_nanos(after), move |act, _| {
                        let latest = act
                            .partitions
                            .get(&peer)
                            .and_then(|ws| ws.last())
                            .is_some_and(|w| w.generation == generation);
                        if latest {
                            act.events.record(Event {
                                t_ns: act.clock.now_ns(),
                                host: act.host_name.clone(),
                                source: "heal".into(),
                                kind: "host.heal".into(),
                                detail: serde_json::json!({ "peer": act.peer_name(peer) }),
                            });
                        }
                    });
                }
            }
            PeerControl::Heal { peer } => self.close_partitions(peer, now),
        }
        now
    }
}

impl Handler<GetRouterCounters> for Router {
    type Result = MessageResult<GetRouterCounters>;
    fn handle(&mut self, _: GetRouterCounters, _: &mut Context<Self>) -> Self::Result {
        let mut c = self.counters.clone();
        c.dropped_inbound_full = self.inbound.dropped();
        MessageResult(c)
    }
}
