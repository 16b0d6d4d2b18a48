//! The supervisor of one host: runs its part of the chaos timeline, samples
//! link counters into `links.csv`, executes control commands (forwarding the
//! parts that other hosts own), and ends the run: stop senders, let packets
//! in flight drain, flush everything, write the host summary.

use super::chaos_timeline::ChaosTimeline;
use super::commands;
use super::route::{self, Plan};
use super::spawn::HostActors;
use crate::results::{HostResults, LinkRow};
use actix::prelude::*;
use edgemu_actors::clock::Clock;
use edgemu_actors::events::{Event, EventLog};
use edgemu_actors::messages::{GetLinkStats, LinkStatus, PeerStatus, StopSending};
use edgemu_actors::probes::FlowSummary;
use edgemu_actors::router::{GetRouterCounters, RouterCounters};
use edgemu_codec::ids::{Direction, HostId, LinkId};
use edgemu_config::command::{
    Applied, AppliedTarget, Command, CommandReply, HostStatus, MeshPeerStatus, StatusReply,
};
use edgemu_config::{ChaosSpec, Cluster, ControlError};
use futures_util::future::BoxFuture;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Sends a typed control command to another host and waits for its typed
/// reply (an error the other host answered with is
/// [`ControlError::Remote`]).
pub trait ControlForwarder: Send + Sync {
    /// Per-peer mesh counters (malformed frames, dropped control frames,
    /// write timeouts, silences) for `status`, by peer host name.
    fn counters(&self) -> BTreeMap<String, MeshPeerStatus>;
    fn forward(
        &self,
        host: HostId,
        command: Command,
    ) -> BoxFuture<'static, Result<CommandReply, ControlError>>;
}

/// A control command (from the control websocket, a peer or the chaos
/// timeline), parsed at the edge (off the actor thread, see
/// [`commands::parse_off_thread`]) and resolved.
#[derive(Message)]
#[rtype(result = "Result<CommandReply, ControlError>")]
pub struct Control {
    pub request: commands::Request,
    /// The typed command as received: what is forwarded to the hosts that
    /// own other targets (the client's token never leaves the control socket).
    pub command: Command,
    /// Came from another host: apply locally only, never forward again.
    pub forwarded: bool,
    pub source: String,
}

/// End the run now (Ctrl-C, `run.stop`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopRun {
    pub reason: String,
}

/// What one host measured, written to `<host>/summary.json`.
#[derive(Debug, Clone, Serialize)]
pub struct HostSummary {
    pub host: String,
    pub end_ns: u64,
    pub stop_reason: String,
    pub links: Vec<LinkRow>,
    pub flows: Vec<FlowSummary>,
    pub router: RouterCounters,
    /// This host's results folder (not serialized: it differs between runs).
    #[serde(skip)]
    pub dir: Option<std::path::PathBuf>,
}

pub struct Supervisor {
    cluster: Arc<Cluster>,
    host: HostId,
    host_name: String,
    clock: Clock,
    actors: HostActors,
    events: EventLog,
    results: Option<HostResults>,
    forwarder: Option<Arc<dyn ControlForwarder>>,
    progress: Option<indicatif::ProgressBar>,
    last_sample: BTreeMap<(LinkId, Direction), (u64, u64)>,
    done: Option<oneshot::Sender<HostSummary>>,
    /// This host's part of the `[[chaos]]` timeline (one timer at a time).
    chaos: ChaosTimeline,
    stopping: bool,
    /// How long the stop sequence waits for packets in flight: twice the
    /// longest one-way delay plus jitter, plus 0.3 s, at most 3 s.
    drain_ns: u64,
    /// What this host's control socket refused (it asks for this at start).
    control: Arc<crate::control::ControlCounters>,
    /// The last dashboard / `/metrics` snapshot (see [`crate::metrics`]).
    pub(crate) snapshots: crate::metrics::snapshot::SnapshotCache,
    /// The host's load probe's figures (real time only).
    load: edgemu_actors::host_load::HostLoadLive,
}

impl Supervisor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: Arc<Cluster>,
        host: HostId,
        clock: Clock,
        actors: HostActors,
        events: EventLog,
        results: Option<HostResults>,
        forwarder: Option<Arc<dyn ControlForwarder>>,
        progress: Option<indicatif::ProgressBar>,
        done: oneshot::Sender<HostSummary>,
    ) -> Self {
        let max_delay = cluster
            .links
            .iter()
            .flat_map(|l| [&l.ab, &l.ba])
            .map(|p| p.delay_ns.saturating_add(p.jitter_ns))
            .max()
            .unwrap_or(0);
        let chaos = ChaosTimeline::new(
            cluster
                .chaos
                .iter()
                .filter(|s| commands::concerns_host(&cluster, &s.request, host))
                .cloned()
                .collect(),
            cluster.run.duration_ns,
        );
        Supervisor {
            host_name: cluster.host(host).name.clone(),
            cluster,
            host,
            clock,
            actors,
            events,
            results,
            forwarder,
            progress,
            last_sample: BTreeMap::new(),
            done: Some(done),
            chaos,
            stopping: false,
            drain_ns: max_delay
                .saturating_mul(2)
                .saturating_add(300_000_000)
                .min(3_000_000_000),
            control: Default::default(),
            snapshots: Default::default(),
            load: Default::default(),
        }
    }

    fn log(&self, t_ns: u64, source: &str, kind: &str, detail: serde_json::Value) {
        self.events.record(Event {
            t_ns,
            host: self.host_name.clone(),
            source: source.into(),
            kind: kind.into(),
            detail,
        });
    }

    fn link_stats(&self) -> impl std::future::Future<Output = Vec<LinkStatus>> + 'static {
        let addrs: Vec<_> = self.actors.links.values().cloned().collect();
        async move {
            let mut out = Vec::with_capacity(addrs.len());
            for a in addrs {
                if let Ok(s) = a.send(GetLinkStats).await {
                    out.push(s);
                }
            }
            out
        }
    }

    fn sample(&mut self, ctx: &mut Context<Self>) {
        let fut = self.link_stats();
        ctx.spawn(
            fut.into_actor(self)
                .map(|stats, act, _| act.write_sample(&stats)),
        );
    }

    fn write_sample(&mut self, stats: &[LinkStatus]) {
        let now = self.clock.now_ns();
        if let Some(p) = &self.progress {
            p.set_position((now / 1_000_000_000).min(self.cluster.run.duration_ns / 1_000_000_000));
        }
        let Some(res) = self.results.as_mut() else {
            return;
        };
        for s in stats {
            let key = (s.link, s.dir);
            let (t0, b0) = self.last_sample.get(&key).copied().unwrap_or((0, 0));
            let dt = s.t_ns.saturating_sub(t0) as f64 / 1e9;
            let bps = if dt > 0.0 {
                s.bytes_delivered.saturating_sub(b0) as f64 * 8.0 / dt
            } else {
                0.0
            };
            self.last_sample.insert(key, (s.t_ns, s.bytes_delivered));
            if let Err(e) = res.links.row(s, bps) {
                tracing::warn!("writing links.csv: {e:#}");
            }
        }
        let _ = res.links.flush();
        edgemu_actors::probes::ProbeLog::flush(&mut res.probes);
        for t in &self.actors.tables {
            t.flush();
        }
        self.events.flush();
    }

    /// Arms the one chaos timer for the timeline's next firing.
    fn arm_chaos(&mut self, ctx: &mut Context<Self>) {
        let Some(at) = self.chaos.next_due() else {
            return;
        };
        ctx.run_later(self.clock.until(at), |act, ctx| {
            let now = act.clock.now_ns();
            // In virtual time the wake may come a rounding step early.
            let due = act.chaos.next_due().map_or(now, |at| at.max(now));
            for spec in act.chaos.take_due(due) {
                act.fire_chaos(&spec, ctx);
            }
            act.arm_chaos(ctx);
        });
    }

    /// Runs this host's part of a chaos entry through the same path as a
    /// control request forwarded to this host: act on local targets only.
    fn fire_chaos(&mut self, spec: &ChaosSpec, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let source = format!("chaos#{}", spec.index);
        let kind = spec.command.name();
        self.snapshots.clear();
        let fut = self.handle_request(
            spec.request.clone(),
            spec.command.clone(),
            true,
            source.clone(),
            ctx,
        );
        ctx.spawn(fut.map(move |r, act, _| {
            act.snapshots.clear();
            if let Err(e) = r {
                let t = act.clock.now_ns();
                act.log(
                    t,
                    &source,
                    kind,
                    serde_json::json!({ "error": e.to_string() }),
                );
            }
        }));
    }

    /// Ends the run: stop senders, drain, flush, summarize.
    fn finish(&mut self, reason: String, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let t = self.clock.now_ns();
        self.log(t, "run", "run.end", serde_json::json!({ "reason": reason }));
        for s in &self.actors.senders {
            s.do_send(StopSending);
        }
        let end_ns = t;
        ctx.run_later(Duration::from_nanos(self.drain_ns), move |act, ctx| {
            let stats = act.link_stats();
            let flushers = act.actors.flushers.clone();
            let router = act.actors.router.clone();
            let fut = async move {
                let stats = stats.await;
                let mut flows = Vec::new();
                for f in flushers {
                    if let Ok(v) = f.send(edgemu_actors::messages::Flush).await {
                        flows.extend(v);
                    }
                }
                let counters = router.send(GetRouterCounters).await.unwrap_or_default();
                (stats, flows, counters)
            };
            ctx.spawn(
                fut.into_actor(act)
                    .map(move |(stats, flows, router), act, _| {
                        act.write_sample(&stats);
                        let active_s = end_ns as f64 / 1e9;
                        let links = stats
                            .iter()
                            .map(|s| LinkRow::new(&act.host_name, s, active_s))
                            .collect();
                        let summary = HostSummary {
                            host: act.host_name.clone(),
                            end_ns,
                            stop_reason: reason,
                            links,
                            flows,
                            router,
                            dir: act.results.as_ref().map(|r| r.dir.clone()),
                        };
                        if let Some(res) = &act.results {
                            let external = act.actors.external.snapshot();
                            if let Err(e) = crate::results::external::write(&res.dir, &external) {
                                tracing::error!("{e:#}");
                            }
                            match serde_json::to_vec_pretty(&summary) {
                                Ok(bytes) => {
                                    if let Err(e) = crate::results::write_file(
                                        &res.dir.join("summary.json"),
                                        &bytes,
                                    ) {
                                        tracing::error!("{e:#}");
                                    }
                                }
                                Err(e) => tracing::error!("summary.json: {e}"),
                            }
                        }
                        act.events.flush();
                        if let Some(done) = act.done.take() {
                            let _ = done.send(summary);
                        }
                    }),
            );
        });
    }

    /// Executes the [`route::plan`] of one request: the decisions are there.
    fn handle_request(
        &mut self,
        parsed: commands::Request,
        command: Command,
        forwarded: bool,
        source: String,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<CommandReply, ControlError>> {
        let host = self.host_name.clone();
        let plan = route::plan(
            &self.cluster,
            self.host,
            &parsed,
            forwarded,
            self.forwarder.is_some(),
        );
        match plan {
            Plan::Refuse(e) => Box::pin(async move { Err(e) }.into_actor(self)),
            Plan::Status { peers } => {
                let stats = self.link_stats();
                let router = self.actors.router.clone();
                let now = self.clock.now_ns();
                let fwd = self.forwarder.clone();
                let mesh = self
                    .forwarder
                    .as_ref()
                    .map(|f| f.counters())
                    .unwrap_or_default();
                let control = self.control.clone();
                let load = self.load.get();
                let peers: Vec<(HostId, String)> = peers
                    .into_iter()
                    .map(|p| {
                        let name = self.cluster.get_host(p).map(|h| h.name.clone());
                        (p, name.unwrap_or_else(|| format!("host#{}", p.0)))
                    })
                    .collect();
                // The counters by name, as the status protocol carries them.
                let kv_caches = self
                    .kv_caches()
                    .into_iter()
                    .filter_map(|(agent, c)| {
                        serde_json::from_value(serde_json::to_value(c.stats()).ok()?)
                            .ok()
                            .map(|m| (agent, m))
                    })
                    .collect();
                Box::pin(
                    async move {
                        let links = stats.await;
                        let counters = router.send(GetRouterCounters).await.unwrap_or_default();
                        let mut reply = StatusReply {
                            hosts: vec![HostStatus {
                                host,
                                t_ns: now,
                                links,
                                router: commands::router_status(&counters),
                                mesh,
                                control: control.status(),
                                kv_caches,
                                load,
                                error: None,
                            }],
                        };
                        if let Some(f) = fwd {
                            for (p, name) in peers {
                                let theirs = match f.forward(p, command.clone()).await {
                                    Ok(CommandReply::Status(t)) => Ok(t),
                                    Ok(_) => Err("bad status reply: not a status".to_string()),
                                    Err(e) => Err(e.to_string()),
                                };
                                match theirs {
                                    Ok(mut t) => reply.hosts.append(&mut t.hosts),
                                    Err(e) => reply.hosts.push(HostStatus {
                                        host: name,
                                        t_ns: now,
                                        links: Vec::new(),
                                        router: Default::default(),
                                        mesh: BTreeMap::new(),
                                        control: Default::default(),
                                        kv_caches: BTreeMap::new(),
                                        load: None,
                                        error: Some(e),
                                    }),
                                }
                            }
                        }
                        Ok(CommandReply::Status(reply))
                    }
                    .into_actor(self),
                )
            }
            Plan::Policy { actor, forward_to } => {
                let commands::Request::Policy { op, .. } = parsed else {
                    let e = ControlError::RouteMismatch("not a policy command".into());
                    return Box::pin(async { Err(e) }.into_actor(self));
                };
                if let Some(owner) = forward_to {
                    let fwd = self.forwarder.clone();
                    return Box::pin(
                        async move {
                            match fwd {
                                Some(f) => f.forward(owner, command).await,
                                None => Err(ControlError::NoMesh),
                            }
                        }
                        .into_actor(self),
                    );
                }
                let kind = match op {
                    edgemu_config::command::PolicyOp::Get => "policy.get",
                    edgemu_config::command::PolicyOp::Rollback => "policy.rollback",
                    edgemu_config::command::PolicyOp::Swap { .. } => "policy.swap",
                };
                let fut = super::policies::apply_off_thread(
                    self.actors.policies.clone(),
                    self.cluster.clone(),
                    self.host_name.clone(),
                    actor,
                    op,
                    self.clock.now_ns(),
                    source.clone(),
                );
                let actor_name = self
                    .cluster
                    .get_actor(actor)
                    .map(|a| a.name.clone())
                    .unwrap_or_default();
                Box::pin(fut.into_actor(self).map(move |r, act, _| {
                    let t = act.clock.now_ns();
                    match &r {
                        Ok(reply) => act.log(
                            t,
                            &source,
                            kind,
                            serde_json::to_value(reply).unwrap_or_default(),
                        ),
                        Err(e) => act.log(
                            t,
                            &source,
                            kind,
                            serde_json::json!({ "actor": actor_name, "error": e.to_string() }),
                        ),
                    }
                    r.map(CommandReply::Policy)
                }))
            }
            Plan::Stop { peers } => {
                let t = self.clock.now_ns();
                self.log(t, &source, "run.stop", serde_json::json!({}));
                if let Some(f) = self.forwarder.clone() {
                    for h in peers {
                        let fut = f.forward(h, command.clone());
                        ctx.spawn(
                            async move {
                                let _ = fut.await;
                            }
                            .into_actor(self),
                        );
                    }
                }
                self.finish(format!("{source}: run.stop"), ctx);
                let applied = Applied {
                    applied: vec![AppliedTarget {
                        host,
                        target: "run".into(),
                        effective_ns: t,
                        detail: None,
                        error: None,
                    }],
                    errors: Vec::new(),
                };
                Box::pin(async move { Ok(CommandReply::Applied(applied)) }.into_actor(self))
            }
            Plan::Apply { local, remote } => {
                let commands::Request::Action { action, for_ns } = parsed else {
                    let e = ControlError::RouteMismatch("not an action".into());
                    return Box::pin(async { Err(e) }.into_actor(self));
                };
                let fut = commands::apply(
                    self.actors.clone(),
                    self.cluster.clone(),
                    self.host_name.clone(),
                    local,
                    action.clone(),
                    for_ns,
                    self.clock.now_ns(),
                    source.clone(),
                );
                let fwd = self.forwarder.clone();
                let kind = action.command();
                Box::pin(
                    async move {
                        let local_applied: Vec<commands::Applied> = fut.await;
                        let mut reply = Applied {
                            applied: local_applied.iter().map(|a| a.typed()).collect(),
                            errors: Vec::new(),
                        };
                        if let Some(f) = fwd {
                            for h in remote {
                                match f.forward(h, command.clone()).await {
                                    Ok(CommandReply::Applied(mut theirs)) => {
                                        reply.applied.append(&mut theirs.applied);
                                        reply.errors.append(&mut theirs.errors);
                                    }
                                    Ok(_) => reply.errors.push(format!(
                                        "host#{}: bad reply: not what was applied",
                                        h.0
                                    )),
                                    Err(e) => reply.errors.push(format!("host#{}: {e}", h.0)),
                                }
                            }
                        }
                        (local_applied, reply)
                    }
                    .into_actor(self)
                    .map(move |(local_applied, reply), act, _| {
                        for a in &local_applied {
                            act.log(a.at_ns, &source, kind, a.detail());
                        }
                        if reply.applied.is_empty() && !reply.errors.is_empty() {
                            return Err(ControlError::NothingApplied(reply.errors));
                        }
                        Ok(CommandReply::Applied(reply))
                    }),
                )
            }
        }
    }
}

impl Supervisor {
    /// What a `/metrics` scrape or dashboard poll reads, taken the way
    /// `status` takes it (see [`crate::metrics::snapshot`]).
    pub(crate) fn snapshot_sources(&self) -> crate::metrics::snapshot::Sources {
        crate::metrics::snapshot::Sources {
            host: self.host_name.clone(),
            t_ns: self.clock.now_ns(),
            links: self.actors.links.values().cloned().collect(),
            router: self.actors.router.clone(),
            // Through serde, so the snapshot reads whatever shape `status` gives.
            mesh: self
                .forwarder
                .as_ref()
                .and_then(|f| serde_json::to_value(f.counters()).ok()),
            lyreo: self.actors.lyreo.clone(),
            kv_caches: self.kv_caches(),
            external: self.actors.external.clone(),
            load: self.load.get(),
        }
    }

    /// The agents' context-KV caches, by agent name.
    fn kv_caches(&self) -> Vec<(String, Arc<edgemu_gpu::kv_cache::ContextKvCache>)> {
        self.actors
            .kv_caches
            .entries()
            .into_iter()
            .map(|(id, c)| {
                let name = self.cluster.get_actor(id).map(|a| a.name.clone());
                (name.unwrap_or_else(|| format!("actor#{}", id.0)), c)
            })
            .collect()
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let period = Duration::from_nanos(self.cluster.run.sample_ns.max(1_000_000));
        ctx.run_interval(period, |act, ctx| {
            if !act.stopping {
                act.sample(ctx);
            }
        });
        self.arm_chaos(ctx);
        if self.cluster.run.time == edgemu_config::TimeMode::Real {
            // On this host's actix system: its lateness is the actors'.
            edgemu_actors::host_load::LoadProbe::new(self.load.clone()).start();
        }
        let end = self.cluster.run.duration_ns;
        ctx.run_later(self.clock.until(end), |act, ctx| {
            act.finish("duration reached".into(), ctx)
        });
        let t = self.clock.now_ns();
        self.log(
            t,
            "run",
            "run.start",
            serde_json::json!({ "duration_ns": end }),
        );
    }
}

impl Handler<Control> for Supervisor {
    type Result = ResponseActFuture<Self, Result<CommandReply, ControlError>>;
    fn handle(&mut self, msg: Control, ctx: &mut Context<Self>) -> Self::Result {
        if matches!(msg.request, commands::Request::Status) {
            return self.handle_request(msg.request, msg.command, msg.forwarded, msg.source, ctx);
        }
        // A snapshot taken before or while it applies must not outlive it.
        self.snapshots.clear();
        Box::pin(
            self.handle_request(msg.request, msg.command, msg.forwarded, msg.source, ctx)
                .map(|r, act, _| {
                    act.snapshots.clear();
                    r
                }),
        )
    }
}

impl Handler<crate::control::GetControlCounters> for Supervisor {
    type Result = MessageResult<crate::control::GetControlCounters>;
    fn handle(
        &mut self,
        _: crate::control::GetControlCounters,
        _: &mut Context<Self>,
    ) -> Self::Result {
        MessageResult(self.control.clone())
    }
}

impl Handler<StopRun> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: StopRun, ctx: &mut Context<Self>) {
        self.finish(msg.reason, ctx);
    }
}

impl Handler<PeerStatus> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: PeerStatus, _: &mut Context<Self>) {
        let name = self
            .cluster
            .hosts
            .get(msg.peer.0 as usize)
            .map(|h| h.name.clone())
            .unwrap_or_default();
        if msg.up {
            tracing::info!(host = %self.host_name, peer = %name, "peer up");
        } else if msg.left {
            tracing::info!(host = %self.host_name, peer = %name, "peer left (run over)");
        } else {
            tracing::warn!(host = %self.host_name, peer = %name, "peer down");
        }
    }
}

impl Handler<crate::mesh::BaseRtt> for Supervisor {
    type Result = ();
    fn handle(&mut self, msg: crate::mesh::BaseRtt, _: &mut Context<Self>) {
        let lead_ns = msg.rtt_ns / 2;
        for ((link, dir), addr) in &self.actors.links {
            let Some(l) = self.cluster.links.get(link.0 as usize) else {
                continue;
            };
            let dst = match dir {
                Direction::AtoB => l.b,
                Direction::BtoA => l.a,
            };
            if self.cluster.actors.get(dst.0 as usize).map(|a| a.host) == Some(msg.peer) {
                addr.do_send(edgemu_actors::messages::SetLead { lead_ns });
            }
        }
        tracing::debug!(host = %self.host_name, peer = msg.peer.0, rtt_us = msg.rtt_ns / 1000, "base rtt");
    }
}
