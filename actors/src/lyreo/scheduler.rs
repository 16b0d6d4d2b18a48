//! The request scheduler: serving's `SchedulerCore` (the slot decision,
//! server reports and availability, Lyapunov queues and the policy) on a
//! slot timer, fed by users' requests and servers' reports; this actor only
//! holds requests until the decision, sends the placements and records them.
//!
//! **Server availability.** A server that has not reported for
//! `report_timeout_ns` (two slots by default,
//! [`edgemu_serving::availability`]) is marked unavailable — logged as
//! `server.unavailable` in `events.jsonl` — and assigned nothing while
//! another server is up (`SchedulerCore::assign_available`: the policy sees
//! it full, and what it still sends there is moved); its first report after
//! that makes it available again at the next decision (`server.available`).
//!
//! **External policy.** While the slot's active version is `external`
//! ([`crate::external`]), the decision at `t·Δ + collect` observes the slot
//! (`SchedulerCore::observe`), sends the observation to the policy process
//! and waits at most the version's deadline (an actix timer; validated
//! shorter than `Δ − collect`): a valid assignment is placed
//! (`SchedulerCore::place`), anything else — timeout, error, malformed
//! action, no connection — is decided by the version's fallback policy on
//! the same observation (`SchedulerCore::decide_observed`) and logged as a
//! `policy.fallback` event. `decisions.csv` names who decided each
//! request: `external`, or the fallback's name; the version column holds
//! `external:<url>` either way.
//!
//! **Faults** ([`ActorFault`]): a killed scheduler stops deciding. The
//! requests it held and those that reach it while dead get no answer (a
//! dead process answers nothing); their users record them as failed with
//! reason `"no assignment"` after their timeout. Server reports to a dead
//! scheduler are dropped. A restart (by command, or at the kill's
//! `until_ns`) brings it back with fresh Lyapunov queues, no reports and
//! every server available; the policy slot (and any swap) is kept.

use super::messages::{Expected, LyreoMsg};
use super::records::CsvTable;
use crate::clock::Clock;
use crate::events::ActorLog;
use crate::external::book::FallbackReason;
use crate::external::client::PolicyEvent;
use crate::external::{ExternalDecider, ExternalLive, Outcome};
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Liveness, RouteBatch, SelfRestart,
};
use actix::prelude::*;
use edgemu_codec::ids::ActorId;
use edgemu_policies::external::{parse_lyreo_action, LyreoArrays, WireObs};
use edgemu_policies::lyreo::PolicySpec;
use edgemu_policies::slot::{LoadedPolicy, LyreoPolicies, PolicySlot};
use edgemu_protocol::Envelope;
use edgemu_serving::mobility::Position;
use edgemu_serving::scheduler::{SlotDecision, SlotRequest};
use edgemu_serving::SchedulerCore;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// How often the scheduler checks whether its slot became (or stopped
/// being) external between decisions, so the connection is up by the next
/// slot.
const EXTERNAL_CHECK: Duration = Duration::from_millis(250);

pub struct SchedulerSetup {
    pub id: ActorId,
    pub slot_ns: u64,
    pub collect_ns: u64,
    /// The servers' actors, in the core's server order.
    pub servers: Vec<ActorId>,
    pub names: Vec<String>,
    /// Where the scheduler shows its decisions while the run goes on.
    pub live: super::live::LyreoLive,
    /// A server silent this long is marked unavailable (for the event log;
    /// the core applies it).
    pub report_timeout_ns: u64,
    /// Where its faults and availability changes land (`events.jsonl`).
    pub log: ActorLog,
    /// Where its external-policy counters are shown.
    pub external: ExternalLive,
    /// Whether the run may swap to an external policy (real time): the
    /// scheduler then watches its slot between decisions.
    pub external_allowed: bool,
}

struct Held {
    user: ActorId,
    slot: u64,
    input_len: u32,
    output_len: u32,
    position: Position,
    power_w: f64,
}

/// The scheduler's swappable policy: the slot the control plane swaps, the
/// version the core's policy was built from, and the seed to build with.
pub struct SchedulerPolicy {
    pub slot: Arc<PolicySlot<LyreoPolicies>>,
    pub seen: Arc<LoadedPolicy<PolicySpec>>,
    pub seed: u64,
}

impl SchedulerPolicy {
    /// A core running the slot's active policy.
    pub fn new(slot: Arc<PolicySlot<LyreoPolicies>>, seed: u64) -> Self {
        let seen = slot.get();
        SchedulerPolicy { slot, seen, seed }
    }
}

/// A slot waiting for the external policy's answer.
struct Waiting {
    id: u64,
    slot: u64,
    held: std::collections::BTreeMap<u64, Held>,
    requests: usize,
    servers: usize,
}

pub struct SchedulerActor {
    s: SchedulerSetup,
    /// While the slot's version is external: its connection and counters.
    external: Option<ExternalDecider>,
    waiting: Option<Waiting>,
    /// The run is over (`Flush`): no more connections.
    external_closed: bool,
    core: SchedulerCore,
    policy: SchedulerPolicy,
    clock: Clock,
    /// The host's router, on the host's thread: a slot's placements go to
    /// it in one message.
    router: Recipient<RouteBatch>,
    table: CsvTable,
    /// When the last dispatch handed its placements to the router (run
    /// time), for the decision's lateness.
    dispatched_ns: Option<u64>,
    /// Requests waiting for the next decision, by id.
    held: std::collections::BTreeMap<u64, Held>,
    slot: u64,
    pub ignored: u64,
    liveness: Liveness,
    /// Requests and reports that reached it while it was dead.
    pub dropped_while_dead: u64,
    /// How late the last decisions ran (their timer's lateness plus the
    /// time to decide), for the live view.
    lateness: crate::host_load::LatenessWindow,
}

/// Decisions the live view's decision lateness covers.
const LATENESS_WINDOW: usize = 100;

impl SchedulerActor {
    /// `core` must run `policy`'s active version (built from `policy.seen`).
    pub fn new(
        s: SchedulerSetup,
        core: SchedulerCore,
        policy: SchedulerPolicy,
        clock: Clock,
        router: Recipient<RouteBatch>,
        table: CsvTable,
    ) -> Self {
        SchedulerActor {
            external: None,
            waiting: None,
            external_closed: false,
            liveness: Liveness::default(),
            dropped_while_dead: 0,
            lateness: crate::host_load::LatenessWindow::new(LATENESS_WINDOW, 1_000_000),
            s,
            core,
            policy,
            clock,
            router,
            table,
            held: Default::default(),
            dispatched_ns: None,
            slot: 0,
            ignored: 0,
        }
    }

    fn envelope(&self, dst: ActorId, msg: LyreoMsg) -> Envelope {
        Envelope {
            src: self.s.id,
            dst,
            via: None,
            sent_at_ns: self.clock.now_ns(),
            due_ns: None,
            payload: msg.into(),
        }
    }

    fn decide_at(&self, slot: u64) -> u64 {
        slot.saturating_mul(self.s.slot_ns)
            .saturating_add(self.s.collect_ns)
    }

    /// Closes slot `t−1` in the queues, then assigns what is held.
    fn decide(&mut self, ctx: &mut Context<Self>) {
        let t = self.slot;
        if !self.liveness.is_alive() {
            self.slot += 1;
            let next = self.decide_at(self.slot);
            ctx.run_later(self.clock.until(next), |act, ctx| act.decide(ctx));
            return;
        }
        // A decision still waiting (its deadline shorter than the slot, so
        // only if the timer was late) falls back before the slot closes.
        if let Some(id) = self.waiting.as_ref().map(|w| w.id) {
            self.external_timeout(id);
        }
        self.update_availability();
        if t > 0 {
            self.core.end_slot();
        }
        let held = std::mem::take(&mut self.held);
        self.dispatched_ns = None;
        if !held.is_empty() {
            self.assign(t, held, ctx);
        }
        // From the planned decision time to the placements leaving (an
        // external policy's answer comes later, within its deadline; with
        // no placements, to now).
        let left = self
            .dispatched_ns
            .take()
            .unwrap_or_else(|| self.clock.now_ns());
        let late = left.saturating_sub(self.decide_at(t));
        self.lateness.push(late);
        self.show(t);
        self.slot += 1;
        let next = self.decide_at(self.slot);
        ctx.run_later(self.clock.until(next), |act, ctx| act.decide(ctx));
    }

    fn assign(
        &mut self,
        t: u64,
        held: std::collections::BTreeMap<u64, Held>,
        ctx: &mut Context<Self>,
    ) {
        let requests: Vec<SlotRequest> = held
            .iter()
            .map(|(&id, h)| SlotRequest {
                id,
                user: h.user.0 as usize,
                input_len: h.input_len,
                output_len: h.output_len,
                position: h.position,
                power_w: h.power_w,
            })
            .collect();
        // Decision boundary: a swap that landed since the last slot takes
        // effect for this whole slot (never half a slot under each).
        if let Some(now) = self.policy.slot.changed_since(&self.policy.seen) {
            self.core.set_policy(now.spec.build(self.policy.seed));
            self.policy.seen = now;
        }
        self.sync_external(ctx);
        if let Some(ext) = self.external.as_mut() {
            let obs = self.core.observe_with_rates(t, &requests);
            let (n, servers) = (obs.requests.len(), obs.servers.len());
            let wire = WireObs::Lyreo(LyreoArrays::from_observation(obs));
            match ext.ask(self.clock.now_ns(), wire) {
                Ok(id) => {
                    let wait = Duration::from_nanos(ext.deadline_ns());
                    ctx.run_later(wait, move |act, _| act.external_timeout(id));
                    self.waiting = Some(Waiting {
                        id,
                        slot: t,
                        held,
                        requests: n,
                        servers,
                    });
                }
                Err(reason) => {
                    let detail = "no connection to the policy process".to_string();
                    self.fall_back(t, held, reason, &detail);
                }
            }
            return;
        }
        let decision = self.own_decision(t, Some(&requests));
        let policy = self.policy.seen.name.clone();
        self.dispatch(t, &held, decision, &policy);
    }

    /// The core's own policy decides slot `t` (`requests`; `None`: the
    /// slot observed for the external policy, whose fallback it is),
    /// logging its guard's first use.
    fn own_decision(&mut self, t: u64, requests: Option<&[SlotRequest]>) -> SlotDecision {
        let before = self.core.fallbacks();
        let decision = match requests {
            Some(r) => self.core.decide(t, r),
            None => self.core.decide_observed(),
        };
        let guarded = self.core.fallbacks() - before;
        if guarded > 0 && before == 0 {
            // The first time this policy version leaves its training
            // distribution; later slots only count (the live view).
            let me = name(&self.s.names, self.s.id).to_string();
            self.s.log.record(
                self.clock.now_ns(),
                &me,
                "policy.guard",
                serde_json::json!({
                    "policy": self.policy.seen.name,
                    "fallbacks": guarded,
                    "decisions": decision.placements.len(),
                    "reason": "inputs off the training distribution: placed as least-loaded",
                }),
            );
        }
        let me = name(&self.s.names, self.s.id);
        self.s.live.scheduler(me, |l| l.guarded += guarded);
        decision
    }

    /// Follows the slot's active version: an external one gets (or keeps)
    /// its connection, any other closes it. Counters are kept across.
    fn sync_external(&mut self, ctx: &mut Context<Self>) {
        match self.policy.slot.get().external.clone() {
            Some(target) if !self.external_closed => {
                let ext = self
                    .external
                    .get_or_insert_with(|| ExternalDecider::new("lyreo", Arc::clone(&target)));
                ext.retarget(target);
                ext.ensure_connected(ctx.address().recipient());
            }
            _ => {
                if let Some(ext) = self.external.as_mut() {
                    ext.disconnect();
                    self.publish();
                }
                self.external = None;
            }
        }
    }

    fn publish(&self) {
        if let Some(ext) = &self.external {
            let me = name(&self.s.names, self.s.id);
            self.s.external.publish(me, ext.stats());
        }
    }

    /// Slot `t` is decided by the external version's fallback on the kept
    /// observation (the decision was counted by the book).
    fn fall_back(
        &mut self,
        t: u64,
        held: std::collections::BTreeMap<u64, Held>,
        reason: FallbackReason,
        detail: &str,
    ) {
        let fallback = self
            .policy
            .seen
            .external
            .as_ref()
            .map_or_else(|| self.policy.seen.name.clone(), |e| e.fallback.clone());
        let decision = self.own_decision(t, None);
        let me = name(&self.s.names, self.s.id).to_string();
        self.s.log.record(
            self.clock.now_ns(),
            &me,
            "policy.fallback",
            serde_json::json!({
                "problem": "lyreo",
                "slot": t,
                "reason": reason.label(),
                "detail": detail,
                "fallback": fallback,
                "requests": decision.placements.len(),
                "version": self.policy.seen.version,
            }),
        );
        self.dispatch(t, &held, decision, &fallback);
        self.publish();
    }

    /// The deadline of decision `id`: if it is still waiting, the fallback
    /// decides its slot.
    fn external_timeout(&mut self, id: u64) {
        if self.waiting.as_ref().map(|w| w.id) != Some(id) {
            return;
        }
        let expired = self.external.as_mut().is_some_and(|e| e.expire(id));
        if let Some(w) = self.waiting.take() {
            let detail = format!(
                "no answer within the deadline ({} ms)",
                self.policy
                    .seen
                    .external
                    .as_ref()
                    .map_or(0.0, |e| e.deadline_ns as f64 / 1e6)
            );
            let reason = if expired {
                FallbackReason::Timeout
            } else {
                FallbackReason::Disconnected
            };
            self.fall_back(w.slot, w.held, reason, &detail);
        }
    }

    /// An answer (or a connection change) from the policy process.
    fn external_event(&mut self, ev: PolicyEvent) {
        let now = self.clock.now_ns();
        let Some(ext) = self.external.as_mut() else {
            return;
        };
        match ext.on_event(now, ev) {
            Outcome::Nothing => {}
            Outcome::Link { up, detail } => {
                let me = name(&self.s.names, self.s.id).to_string();
                self.s.log.record(
                    now,
                    &me,
                    "policy.connection",
                    serde_json::json!({"problem": "lyreo", "up": up, "detail": detail}),
                );
                self.publish();
            }
            Outcome::Fallback { id, reason, detail } => {
                if let Some(w) = self.waiting.take_if(|w| w.id == id) {
                    self.fall_back(w.slot, w.held, reason, &detail);
                }
            }
            Outcome::Action { id, action } => {
                let Some(w) = self.waiting.take_if(|w| w.id == id) else {
                    return;
                };
                let placed = parse_lyreo_action(&action, w.requests, w.servers)
                    .map_err(|e| e.to_string())
                    .and_then(|a| self.core.place(&a).map_err(|e| e.to_string()));
                match placed {
                    Ok(decision) => {
                        if let Some(ext) = self.external.as_mut() {
                            ext.accept(id);
                        }
                        self.dispatch(w.slot, &w.held, decision, "external");
                        self.publish();
                    }
                    Err(detail) => {
                        if let Some(ext) = self.external.as_mut() {
                            ext.refuse(id);
                        }
                        self.fall_back(w.slot, w.held, FallbackReason::Malformed, &detail);
                    }
                }
            }
        }
    }

    /// Sends `decision`'s placements (decided by `policy`) and records them.
    fn dispatch(
        &mut self,
        t: u64,
        held: &std::collections::BTreeMap<u64, Held>,
        decision: SlotDecision,
        policy: &str,
    ) {
        let policy = policy.to_string();
        let version = self.policy.seen.version.clone();
        let mut expect: Vec<Vec<Expected>> = vec![Vec::new(); self.s.servers.len()];
        // The slot's envelopes, to the router in one message (in the order
        // they were sent one at a time: users' assignments, then servers'
        // expectations).
        let mut out = Vec::with_capacity(decision.placements.len() + self.s.servers.len());
        let z = self.core.queues().z().to_vec();
        for ((&id, h), p) in held.iter().zip(&decision.placements) {
            let server = self.s.servers[p.server];
            expect[p.server].push(Expected {
                id,
                user: h.user,
                input_len: h.input_len,
                output_len: h.output_len,
                upload_ns: p.upload_ns,
            });
            out.push(self.envelope(
                h.user,
                LyreoMsg::Assign {
                    id,
                    slot: h.slot,
                    server,
                    rate_bps: p.rate_bps,
                    upload_ns: p.upload_ns,
                    policy: policy.clone(),
                    policy_version: version.clone(),
                },
            ));
        }
        for (s, requests) in expect.into_iter().enumerate() {
            if !requests.is_empty() {
                let dst = self.s.servers[s];
                out.push(self.envelope(dst, LyreoMsg::Expect { slot: t, requests }));
            }
        }
        self.router.do_send(RouteBatch(out));
        self.dispatched_ns = Some(self.clock.now_ns());
        let me = name(&self.s.names, self.s.id);
        // One live-view entry per server that got requests, not one per
        // placement: a large slot places thousands.
        self.s.live.scheduler(me, |l| {
            l.decisions += decision.placements.len() as u64;
            for (s, &n) in decision
                .per_server
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
            {
                let server = name(&self.s.names, self.s.servers[s]).to_string();
                l.servers.entry(server).or_default().assigned += n as u64;
            }
        });
        // The slot's `decisions.csv` rows, once the placements are on
        // their way (formatting them is most of a large slot's dispatch);
        // `upload_s` as `secs` writes it.
        let mut rows = String::with_capacity(decision.placements.len() * 80);
        for ((&id, h), p) in held.iter().zip(&decision.placements) {
            let _ = writeln!(
                rows,
                "{t},{id},{},{},{policy},{version},{:.0},{:.6},{:.6}",
                name(&self.s.names, h.user),
                name(&self.s.names, self.s.servers[p.server]),
                p.rate_bps,
                p.upload_ns as f64 / 1e9,
                z[p.server]
            );
        }
        self.table.rows(&rows);
    }
}

impl SchedulerActor {
    /// Marks servers silent for the timeout unavailable (and those that
    /// reported again available), logging each change.
    fn update_availability(&mut self) {
        let now = self.clock.now_ns();
        let changes = self.core.update_availability(now);
        if changes.is_empty() {
            return;
        }
        let me = name(&self.s.names, self.s.id).to_string();
        for c in changes {
            let Some(&actor) = self.s.servers.get(c.server) else {
                continue;
            };
            let server = name(&self.s.names, actor).to_string();
            let kind = if c.available {
                "server.available"
            } else {
                "server.unavailable"
            };
            self.s.log.record(
                now,
                &me,
                kind,
                serde_json::json!({
                    "scheduler": me,
                    "server": server,
                    "last_report_ns": c.last_report_ns,
                    "timeout_ns": self.s.report_timeout_ns,
                }),
            );
            self.s.live.scheduler(&me, |l| {
                l.servers.entry(server).or_default().unavailable = !c.available;
            });
        }
    }

    fn kill(&mut self, until_ns: Option<u64>, ctx: &mut Context<Self>) -> FaultReply {
        let now = self.clock.now_ns();
        let Some(epoch) = self.liveness.kill() else {
            return FaultReply::unchanged(now, "already dead");
        };
        let mut n = self.held.len() as u64;
        self.held.clear();
        // A slot waiting for the external policy is dropped like held requests.
        if let Some(w) = self.waiting.take() {
            n += w.held.len() as u64;
            if let Some(ext) = self.external.as_mut() {
                ext.abandon();
            }
        }
        restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
        FaultReply::killed(
            now,
            n,
            format!(
                "killed; {n} held requests dropped (their users record them failed, \"no assignment\", {} slots after issuing them)",
                super::user::ASSIGN_TIMEOUT_SLOTS
            ),
            until_ns,
        )
    }

    /// Publishes the slot's policy, version and Z_s (see [`super::live`]).
    fn show(&self, t: u64) {
        let z = self.core.queues().z();
        let me = name(&self.s.names, self.s.id);
        self.s.live.scheduler(me, |l| {
            l.policy.clone_from(&self.policy.seen.name);
            l.version.clone_from(&self.policy.seen.version);
            l.slot = t;
            if let Some(f) = self.lateness.figures(0.0, 0.0) {
                l.decision_late_p99_ms = f.timer_late_p99_ms;
                l.decision_late_max_ms = f.timer_late_max_ms;
            }
            for (i, &actor) in self.s.servers.iter().enumerate() {
                let e = l
                    .servers
                    .entry(name(&self.s.names, actor).to_string())
                    .or_default();
                e.z = z.get(i).copied().unwrap_or(0.0);
            }
        });
    }
}

fn name(names: &[String], id: ActorId) -> &str {
    names.get(id.0 as usize).map(String::as_str).unwrap_or("?")
}

impl Actor for SchedulerActor {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.core.start(self.clock.now_ns());
        let first = self.decide_at(0);
        ctx.run_later(self.clock.until(first), |act, ctx| act.decide(ctx));
        // External policies are refused in virtual time (cluster.toml and
        // policy.swap), so this only connects in real time: at once when
        // the slot starts external, so the first slot can be asked.
        if self.s.external_allowed {
            if self.policy.slot.get().external.is_some() {
                self.sync_external(ctx);
            }
            ctx.run_interval(EXTERNAL_CHECK, |act, ctx| {
                let active = act.policy.slot.get().external.is_some();
                if active || act.external.is_some() {
                    act.sync_external(ctx);
                }
            });
        }
    }
}

/// The end of the run: the external policy's connection closes (with a
/// websocket close, so the policy process sees a clean end) and the final
/// counters are published.
impl Handler<crate::messages::Flush> for SchedulerActor {
    type Result = Vec<crate::probes::FlowSummary>;
    fn handle(&mut self, _: crate::messages::Flush, ctx: &mut Context<Self>) -> Self::Result {
        self.external_closed = true;
        self.sync_external(ctx);
        Vec::new()
    }
}

impl Handler<PolicyEvent> for SchedulerActor {
    type Result = ();
    fn handle(&mut self, ev: PolicyEvent, _: &mut Context<Self>) {
        self.external_event(ev);
    }
}

impl Handler<Deliver> for SchedulerActor {
    type Result = ();
    fn handle(&mut self, msg: Deliver, _: &mut Context<Self>) {
        let src = msg.envelope.src;
        if !self.liveness.is_alive() {
            self.dropped_while_dead += 1;
            return;
        }
        match LyreoMsg::from_msg(msg.envelope.payload) {
            Some(LyreoMsg::Request {
                id,
                slot,
                input_len,
                output_len,
                x_m,
                y_m,
                power_w,
            }) => {
                self.held.insert(
                    id,
                    Held {
                        user: src,
                        slot,
                        input_len,
                        output_len,
                        position: Position { x: x_m, y: y_m },
                        power_w,
                    },
                );
            }
            Some(LyreoMsg::Report(r)) => {
                let taken = self.s.servers.iter().position(|&s| s == src).map(|i| {
                    self.core
                        .report(i, r.slot, r.load, r.capability.as_ref(), msg.recv_ns)
                });
                if !matches!(taken, Some(Ok(()))) {
                    self.ignored += 1;
                }
            }
            _ => self.ignored += 1,
        }
    }
}

impl Handler<ActorFault> for SchedulerActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl SelfRestart for SchedulerActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "restarted: fresh Lyapunov queues, every server available"
    }
    /// Back from a kill: fresh Lyapunov queues, no reports, every server
    /// available and seen now, server states as at the start.
    fn come_back(&mut self, _: &mut Context<Self>) {
        let now = self.clock.now_ns();
        self.core.restart(now);
        let me = name(&self.s.names, self.s.id).to_string();
        self.s.live.scheduler(&me, |l| {
            for v in l.servers.values_mut() {
                v.unavailable = false;
            }
        });
    }
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        Some((&self.s.log, name(&self.s.names, self.s.id)))
    }
}
