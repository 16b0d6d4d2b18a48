//! Creates the actors of one host from the resolved cluster.

use actix::prelude::*;
use edgemu_actors::clock::{Clock, Timer};
use edgemu_actors::events::EventLog;
use edgemu_actors::link_actor::LinkActor;
use edgemu_actors::messages::{Deliver, Flush, StopSending};
use edgemu_actors::probes::{DiscardLog, Pinger, ProbeLog, Sender, SenderPattern, Sink};
use edgemu_actors::router::{RegisterActor, RegisterLink, Router};
use edgemu_codec::ids::{Direction, HostId, LinkId};
use edgemu_config::{ActorKind, Cluster};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Addresses of everything running on one host.
#[derive(Clone)]
pub struct HostActors {
    pub router: Addr<Router>,
    /// Bounds what the mesh queues into the router.
    pub inbound: std::sync::Arc<edgemu_actors::router::InboundGate>,
    pub links: BTreeMap<(LinkId, Direction), Addr<LinkActor>>,
    pub senders: Vec<Recipient<StopSending>>,
    pub flushers: Vec<Recipient<Flush>>,
    /// The host's result tables (requests, server slots, decisions,
    /// handoffs), flushed by the supervisor each sample and at the end.
    pub tables: Vec<edgemu_actors::lyreo::records::CsvTable>,
    /// The agents' context-KV caches.
    pub kv_caches: super::KvCaches,
    /// Policy slots of this host's actors (see [`super::policies`]).
    pub policies: super::policies::PolicyRegistry,
    /// Actors that `actor.kill` / `actor.restart` reach (see [`super::faults`]).
    pub faults: super::faults::FaultRegistry,
    /// The live state of this host's LYREO actors (dashboard, metrics).
    pub lyreo: edgemu_actors::lyreo::live::LyreoLive,
    /// The external-policy counters of this host's deciders.
    pub external: edgemu_actors::external::ExternalLive,
    /// This host's attach points (closed when the run ends: their
    /// namespaces removed).
    pub attaches: Vec<std::sync::Arc<crate::attach::AttachGuard>>,
    /// This host's gateways (their HTTP servers start with the run).
    pub gateways: Vec<(
        edgemu_codec::ids::ActorId,
        Addr<edgemu_actors::lyreo::gateway::GatewayActor>,
    )>,
}

/// Mixes the run seed with an object's index so every link direction has its
/// own reproducible random stream.
pub fn derive_seed(run_seed: u64, salt: u64) -> u64 {
    let mut z = run_seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Starts the router, the link actors whose sending end is on `host`, and
/// the probe and LYREO actors placed on `host` (LYREO tables go to
/// `results`, the host's folder). Must run inside an actix system.
#[allow(clippy::too_many_arguments)]
pub fn spawn_host_actors(
    cluster: &Arc<Cluster>,
    host: HostId,
    clock: Clock,
    timer: &Timer,
    virtual_time: bool,
    events: &EventLog,
    probe_log: &dyn Fn() -> Box<dyn ProbeLog>,
    results: Option<&std::path::Path>,
) -> anyhow::Result<HostActors> {
    let host_name = cluster.host(host).name.clone();
    let router = Router::new(host, cluster.clone(), clock, virtual_time, events.clone());
    let inbound = router.inbound_gate();
    let router = router.start();
    let route = router.clone().recipient();
    // Actors with a swappable policy register their slot here.
    let policies = super::policies::PolicyRegistry::default();
    let lyreo = edgemu_actors::lyreo::live::LyreoLive::default();
    // Actors that can be killed register their fault recipient here.
    let faults = super::faults::FaultRegistry::default();
    let shared = super::spawn_lyreo::HostShared {
        policies: policies.clone(),
        live: lyreo.clone(),
        faults: faults.clone(),
        events: events.clone(),
        kv_caches: super::KvCaches::default(),
        external: edgemu_actors::external::ExternalLive::default(),
    };

    let mut links = BTreeMap::new();
    for l in &cluster.links {
        for dir in [Direction::AtoB, Direction::BtoA] {
            let sender_actor = match dir {
                Direction::AtoB => l.a,
                Direction::BtoA => l.b,
            };
            if cluster.actor(sender_actor).host != host {
                continue;
            }
            let params = match dir {
                Direction::AtoB => l.ab.clone(),
                Direction::BtoA => l.ba.clone(),
            };
            let salt = u64::from(l.id.0) * 2 + u64::from(dir == Direction::BtoA);
            let addr = LinkActor::new(
                l.id,
                l.name.clone(),
                dir,
                host_name.clone(),
                params,
                l.seed(dir)
                    .unwrap_or_else(|| derive_seed(cluster.run.seed, salt)),
                clock,
                timer.clone(),
                route.clone(),
                events.clone(),
            )
            .start();
            router.do_send(RegisterLink {
                link: l.id,
                dir,
                addr: addr.clone(),
            });
            links.insert((l.id, dir), addr);
        }
    }

    let names: Vec<String> = cluster.actors.iter().map(|a| a.name.clone()).collect();
    let mut senders = Vec::new();
    let mut flushers = Vec::new();
    let mut gateways = Vec::new();
    let mut attaches = Vec::new();
    let mut tables = super::spawn_lyreo::Tables::new(results);
    for a in cluster.actors.iter().filter(|a| a.host == host) {
        let deliver: Option<Recipient<Deliver>> = match &a.kind {
            ActorKind::Attach(spec) => {
                let link = spec.route.via.and_then(|via| {
                    let dir = cluster.links.get(via.0 as usize)?.direction_from(a.id)?;
                    links.get(&(via, dir)).cloned()
                });
                let (deliver, guard) =
                    crate::attach::spawn(a.id, &a.name, spec, clock, route.clone(), link)?;
                attaches.push(std::sync::Arc::new(guard));
                Some(deliver)
            }
            ActorKind::ConstantSender {
                route: r,
                rate_bps,
                size,
                real_bytes,
                start_ns,
                stop_ns,
            } => {
                let gap_ns =
                    (u64::from(*size) * 8).saturating_mul(1_000_000_000) / (*rate_bps).max(1);
                let addr = Sender::new(
                    a.id,
                    r.to,
                    r.via,
                    *size,
                    SenderPattern::Constant { gap_ns },
                    *start_ns,
                    *stop_ns,
                    clock,
                    route.clone(),
                )
                .with_real_bytes(*real_bytes)
                .start();
                senders.push(addr.recipient());
                None
            }
            ActorKind::BurstySender {
                route: r,
                burst,
                size,
                interval_ns,
                start_ns,
                stop_ns,
            } => {
                let addr = Sender::new(
                    a.id,
                    r.to,
                    r.via,
                    *size,
                    SenderPattern::Bursty {
                        burst: *burst,
                        interval_ns: *interval_ns,
                    },
                    *start_ns,
                    *stop_ns,
                    clock,
                    route.clone(),
                )
                .start();
                senders.push(addr.recipient());
                None
            }
            ActorKind::Pinger {
                route: r,
                reply_via,
                size,
                interval_ns,
                start_ns,
                stop_ns,
            } => {
                let addr = Pinger::new(
                    a.id,
                    a.name.clone(),
                    r.to,
                    r.via,
                    *reply_via,
                    *size,
                    *interval_ns,
                    *start_ns,
                    *stop_ns,
                    clock,
                    route.clone(),
                    probe_log(),
                )
                .start();
                senders.push(addr.clone().recipient());
                flushers.push(addr.clone().recipient());
                Some(addr.recipient())
            }
            ActorKind::Sink => {
                let addr = Sink::new(
                    a.id,
                    a.name.clone(),
                    names.clone(),
                    clock,
                    route.clone(),
                    probe_log(),
                )
                .start();
                flushers.push(addr.clone().recipient());
                Some(addr.recipient())
            }
            ActorKind::Agent(spec) => {
                let (deliver, flush) = super::spawn_agents::spawn(
                    cluster,
                    a,
                    spec,
                    virtual_time,
                    clock,
                    &route,
                    &links,
                    &mut tables,
                    &shared,
                )?;
                if !virtual_time {
                    // At the end it closes its external policy's connection.
                    flushers.push(flush);
                }
                Some(deliver)
            }
            ActorKind::User(_)
            | ActorKind::Server(_)
            | ActorKind::Scheduler(_)
            | ActorKind::Gateway(_) => super::spawn_lyreo::spawn(
                cluster,
                a,
                virtual_time,
                clock,
                &router,
                &mut tables,
                &shared,
            )?
            .map(|s| {
                senders.extend(s.stop);
                flushers.extend(s.flush);
                gateways.extend(s.gateway.map(|g| (a.id, g)));
                s.deliver
            }),
        };
        if let Some(recipient) = deliver {
            router.do_send(RegisterActor {
                id: a.id,
                recipient,
            });
        }
    }
    Ok(HostActors {
        router,
        inbound,
        policies,
        faults,
        lyreo,
        links,
        senders,
        flushers,
        tables: tables.all(),
        kv_caches: shared.kv_caches.clone(),
        external: shared.external.clone(),
        gateways,
        attaches,
    })
}

/// A probe log factory that keeps nothing.
pub fn discard_probe_log() -> Box<dyn ProbeLog> {
    Box::new(DiscardLog)
}
