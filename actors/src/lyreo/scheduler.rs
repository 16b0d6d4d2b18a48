//! The request scheduler: serving's `SchedulerCore` (Lyapunov queues and
//! the policy) on a slot timer, fed by users' requests and servers' reports.
//!
//! **Server availability.** A server that has not reported for
//! `report_timeout_ns` (two slots by default,
//! [`edgemu_serving::availability`]) is marked unavailable — logged as
//! `server.unavailable` in `events.jsonl` — and assigned nothing while
//! another server is up (`SchedulerCore::assign_available`: the policy sees
//! it full, and what it still sends there is moved); its first report after
//! that makes it available again at the next decision (`server.available`).
//!
//! **Faults** ([`ActorFault`]): a killed scheduler stops deciding. The
//! requests it held and those that reach it while dead get no answer (a
//! dead process answers nothing); their users record them as failed with
//! reason `"no assignment"` after their timeout. Server reports to a dead
//! scheduler are dropped. A restart (by command, or at the kill's
//! `until_ns`) brings it back with fresh Lyapunov queues, no reports and
//! every server available; the policy slot (and any swap) is kept.

use super::messages::{Expected, LyreoMsg, SlotReport};
use super::records::{secs, CsvTable};
use crate::clock::Clock;
use crate::events::ActorLog;
use crate::messages::{
    restart_later, ActorFault, Deliver, FaultReply, Liveness, Route, SelfRestart,
};
use actix::prelude::*;
use edgemu_codec::ids::ActorId;
use edgemu_policies::lyreo::{PolicySpec, RequestObs, ServerObs, SlotLoad, SlotObservation};
use edgemu_policies::slot::{LoadedPolicy, LyreoPolicies, PolicySlot};
use edgemu_protocol::Envelope;
use edgemu_serving::radio::{channel_gain, shannon_rate_bps, upload_ns};
use edgemu_serving::{Availability, SchedulerCore};
use std::sync::Arc;

/// One server as the scheduler knows it (static, from the config).
pub struct ServerInfo {
    pub actor: ActorId,
    pub position_m: (f64, f64),
    /// Class figures and `B_s` (the dynamic fields are overwritten by reports).
    pub obs: ServerObs,
}

pub struct SchedulerSetup {
    pub id: ActorId,
    pub slot_ns: u64,
    pub collect_ns: u64,
    pub epsilon: f64,
    pub nu: f64,
    pub servers: Vec<ServerInfo>,
    pub names: Vec<String>,
    /// Where the scheduler shows its decisions while the run goes on.
    pub live: super::live::LyreoLive,
    /// A server silent this long is marked unavailable (default: two
    /// slots, [`edgemu_serving::availability::DEFAULT_TIMEOUT_SLOTS`]).
    pub report_timeout_ns: u64,
    /// Where its faults and availability changes land (`events.jsonl`).
    pub log: ActorLog,
}

struct Held {
    user: ActorId,
    slot: u64,
    input_len: u32,
    output_len: u32,
    pos: (f64, f64),
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

pub struct SchedulerActor {
    s: SchedulerSetup,
    core: SchedulerCore,
    policy: SchedulerPolicy,
    clock: Clock,
    router: Recipient<Route>,
    table: CsvTable,
    /// Requests waiting for the next decision, by id.
    held: std::collections::BTreeMap<u64, Held>,
    /// Latest report of each server.
    reports: Vec<Option<SlotReport>>,
    slot: u64,
    pub ignored: u64,
    availability: Availability,
    liveness: Liveness,
    /// Requests and reports that reached it while it was dead.
    pub dropped_while_dead: u64,
}

impl SchedulerActor {
    /// `core` must run `policy`'s active version (built from `policy.seen`).
    pub fn new(
        s: SchedulerSetup,
        core: SchedulerCore,
        policy: SchedulerPolicy,
        clock: Clock,
        router: Recipient<Route>,
        table: CsvTable,
    ) -> Self {
        let n = s.servers.len();
        let availability = Availability::new(n, s.report_timeout_ns);
        SchedulerActor {
            availability,
            liveness: Liveness::default(),
            dropped_while_dead: 0,
            s,
            core,
            policy,
            clock,
            router,
            table,
            held: Default::default(),
            reports: vec![None; n],
            slot: 0,
            ignored: 0,
        }
    }

    fn send(&self, dst: ActorId, msg: LyreoMsg) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst,
            via: None,
            sent_at_ns: self.clock.now_ns(),
            due_ns: None,
            payload: msg.into(),
        }));
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
        self.update_availability();
        if t > 0 {
            // A server whose report is missing (partitioned, slow) counts
            // with its last known workload; an unavailable one not at all.
            let etas: Vec<f64> = self
                .reports
                .iter()
                .map(|r| r.as_ref().map_or(0.0, |r| r.load.eta))
                .collect();
            self.core
                .end_slot_available(&etas, self.availability.mask());
        }
        for (info, r) in self.s.servers.iter_mut().zip(&self.reports) {
            if let Some(r) = r {
                info.obs.load = r.load;
            }
        }
        let held = std::mem::take(&mut self.held);
        if !held.is_empty() {
            self.assign(t, held);
        }
        self.show(t);
        self.slot += 1;
        let next = self.decide_at(self.slot);
        ctx.run_later(self.clock.until(next), |act, ctx| act.decide(ctx));
    }

    fn assign(&mut self, t: u64, held: std::collections::BTreeMap<u64, Held>) {
        let servers: Vec<ServerObs> = self.s.servers.iter().map(|i| i.obs.clone()).collect();
        let requests: Vec<RequestObs> = held
            .iter()
            .map(|(&id, h)| RequestObs {
                id,
                user: h.user.0 as usize,
                input_len: h.input_len,
                output_len: h.output_len,
                solo_rate_bps: self
                    .s
                    .servers
                    .iter()
                    .map(|s| {
                        let h_gain = channel_gain(dist(h.pos, s.position_m));
                        shannon_rate_bps(s.obs.bandwidth_hz, 1, h.power_w, h_gain)
                    })
                    .collect(),
            })
            .collect();
        let obs = SlotObservation {
            slot: t,
            slot_s: self.s.slot_ns as f64 / 1e9,
            requests,
            servers,
            z: self.core.queues().z().to_vec(),
            epsilon: self.s.epsilon,
            nu: self.s.nu,
        };
        // Decision boundary: a swap that landed since the last slot takes
        // effect for this whole slot (never half a slot under each).
        if let Some(now) = self.policy.slot.changed_since(&self.policy.seen) {
            self.core.set_policy(now.spec.build(self.policy.seed));
            self.policy.seen = now;
        }
        let (assignment, _moved) = self.core.assign_available(&obs, self.availability.mask());
        let assignment = assignment.to_vec();
        let policy = self.policy.seen.name.clone();
        let version = self.policy.seen.version.clone();
        let mut count = vec![0usize; self.s.servers.len()];
        for &s in &assignment {
            count[s] += 1;
        }
        let mut expect: Vec<Vec<Expected>> = vec![Vec::new(); self.s.servers.len()];
        let z = self.core.queues().z().to_vec();
        let me = name(&self.s.names, self.s.id);
        self.s.live.scheduler(me, |l| {
            l.decisions += assignment.len() as u64;
            for &s in &assignment {
                let server = name(&self.s.names, self.s.servers[s].actor).to_string();
                l.servers.entry(server).or_default().assigned += 1;
            }
        });
        for ((&id, h), &s) in held.iter().zip(&assignment) {
            let info = &self.s.servers[s];
            let gain = channel_gain(dist(h.pos, info.position_m));
            let rate = shannon_rate_bps(info.obs.bandwidth_hz, count[s], h.power_w, gain);
            let up = upload_ns(h.input_len, rate);
            expect[s].push(Expected {
                id,
                user: h.user,
                input_len: h.input_len,
                output_len: h.output_len,
                upload_ns: up,
            });
            self.send(
                h.user,
                LyreoMsg::Assign {
                    id,
                    slot: h.slot,
                    server: info.actor,
                    rate_bps: rate,
                    upload_ns: up,
                    policy: policy.clone(),
                    policy_version: version.clone(),
                },
            );
            self.table.row(&format!(
                "{t},{id},{},{},{policy},{version},{rate:.0},{},{:.6}",
                name(&self.s.names, h.user),
                name(&self.s.names, info.actor),
                secs(up),
                z[s]
            ));
        }
        for (s, requests) in expect.into_iter().enumerate() {
            if !requests.is_empty() {
                let dst = self.s.servers[s].actor;
                self.send(dst, LyreoMsg::Expect { slot: t, requests });
            }
        }
    }
}

impl SchedulerActor {
    /// Marks servers silent for the timeout unavailable (and those that
    /// reported again available), logging each change.
    fn update_availability(&mut self) {
        let now = self.clock.now_ns();
        let changes = self.availability.update(now);
        if changes.is_empty() {
            return;
        }
        let me = name(&self.s.names, self.s.id).to_string();
        for c in changes {
            let Some(info) = self.s.servers.get(c.server) else {
                continue;
            };
            let server = name(&self.s.names, info.actor).to_string();
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
        let n = self.held.len() as u64;
        self.held.clear();
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

    /// Back from a kill: fresh Lyapunov queues, no reports, every server
    /// available and seen now, server states as at the start.
    fn restarted(&mut self) -> u64 {
        let now = self.clock.now_ns();
        self.core.reset_queues();
        self.reports.iter_mut().for_each(|r| *r = None);
        self.availability.reset(now);
        for info in &mut self.s.servers {
            info.obs.load = SlotLoad::default();
        }
        let me = name(&self.s.names, self.s.id).to_string();
        self.s.live.scheduler(&me, |l| {
            for v in l.servers.values_mut() {
                v.unavailable = false;
            }
        });
        now
    }

    /// Publishes the slot's policy, version and Z_s (see [`super::live`]).
    fn show(&self, t: u64) {
        let z = self.core.queues().z();
        let me = name(&self.s.names, self.s.id);
        self.s.live.scheduler(me, |l| {
            l.policy.clone_from(&self.policy.seen.name);
            l.version.clone_from(&self.policy.seen.version);
            l.slot = t;
            for (i, info) in self.s.servers.iter().enumerate() {
                let e = l
                    .servers
                    .entry(name(&self.s.names, info.actor).to_string())
                    .or_default();
                e.z = z.get(i).copied().unwrap_or(0.0);
            }
        });
    }
}

fn dist(a: (f64, f64), b: (f64, f64)) -> f64 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
}

fn name(names: &[String], id: ActorId) -> &str {
    names.get(id.0 as usize).map(String::as_str).unwrap_or("?")
}

impl Actor for SchedulerActor {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        let first = self.decide_at(0);
        ctx.run_later(self.clock.until(first), |act, ctx| act.decide(ctx));
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
                        pos: (x_m, y_m),
                        power_w,
                    },
                );
            }
            Some(LyreoMsg::Report(r)) => match self.s.servers.iter().position(|s| s.actor == src) {
                // η_s is a share of the slot's memory-time (≤ 1 up to
                // rounding): anything else would poison the Lyapunov queues
                // for the rest of the run; an older slot's report never
                // replaces a newer one.
                Some(i)
                    if r.load.eta.is_finite()
                        && (0.0..=1.5).contains(&r.load.eta)
                        && self.reports[i]
                            .as_ref()
                            .is_none_or(|old| old.slot <= r.slot) =>
                {
                    self.reports[i] = Some(r);
                    self.availability.report(i, msg.recv_ns);
                }
                _ => self.ignored += 1,
            },
            _ => self.ignored += 1,
        }
    }
}

impl Handler<ActorFault> for SchedulerActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { .. } => {
                if self.liveness.restart() {
                    FaultReply {
                        at_ns: self.restarted(),
                        changed: true,
                        dropped: 0,
                        detail: "restarted: fresh Lyapunov queues, every server available".into(),
                    }
                } else {
                    FaultReply::unchanged(self.clock.now_ns(), "not dead; nothing to restart")
                }
            }
        }
    }
}

impl SelfRestart for SchedulerActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn restart_by_itself(&mut self, _: &mut Context<Self>) {
        let at = self.restarted();
        let me = name(&self.s.names, self.s.id);
        self.s
            .log
            .self_restart(at, me, "restarted by itself (kill `for`), fresh queues");
    }
}
