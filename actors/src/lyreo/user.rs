//! The mobile user: serving's mobility and workload models on a slot timer,
//! the upload as a declared-size packet, and the per-request record.
//!
//! Every request it issues ends as exactly one row of `requests.csv`:
//! `served`, `rejected`, `failed` (with a `reason`) or, at the end of the
//! run, `unanswered`. A request not assigned within
//! [`ASSIGN_TIMEOUT_SLOTS`] slots of its issue (its scheduler killed,
//! partitioned or overloaded) is recorded as `failed` with reason `"no
//! assignment"`, so users never wait on a dead scheduler; an assignment
//! that comes later is ignored (counted).
//!
//! **Faults** ([`ActorFault`]): a killed user stops issuing requests (it
//! keeps moving: its position is where it is when it comes back); the
//! requests it had open are recorded at once as `failed` with reason
//! `"user killed"` and their later assignments and answers are ignored
//! (counted), uploads not yet sent are not sent. A restart resumes at the
//! next slot boundary.

use super::messages::{upload_packet, Answer, LyreoMsg, Outcome};
use super::records::{secs, CsvTable};
use crate::clock::Clock;
use crate::events::ActorLog;
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Flush, Liveness, Route, SelfRestart,
    StopSending,
};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_protocol::Envelope;
use edgemu_serving::mobility::{Area, Mobility, Position, UserMotion};
use edgemu_serving::radio::dbm_to_w;
use edgemu_serving::workload::Workload;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// Everything a user needs, resolved from the config by the host.
pub struct UserSetup {
    pub id: ActorId,
    pub name: String,
    pub scheduler: ActorId,
    pub slot_ns: u64,
    pub start_ns: u64,
    pub stop_ns: Option<u64>,
    pub mobility: Mobility,
    pub area: Area,
    pub power_dbm: (f64, f64),
    pub workload: Workload,
    pub max_input: u32,
    pub max_output: u32,
    pub seed: u64,
    /// (server, link joining this user to it) for every server of its scheduler.
    pub uplinks: Vec<(ActorId, Option<LinkId>)>,
    /// Actor names by id, for the records.
    pub names: Vec<String>,
    /// Where its faults land (`events.jsonl`).
    pub log: ActorLog,
}

/// Slots a request may wait for its assignment before it is recorded as
/// failed (`"no assignment"`): the scheduler decides `collect` into the
/// slot after the request, so a live one answers well within two.
pub const ASSIGN_TIMEOUT_SLOTS: u64 = 3;

struct Pending {
    slot: u64,
    issued_ns: u64,
    input_len: u32,
    output_len: u32,
    /// Set when the assignment arrives.
    assigned: Option<Assignment>,
}

struct Assignment {
    server: ActorId,
    received_ns: u64,
    policy: String,
    /// The policy version (hash) that decided.
    version: String,
}

pub struct UserActor {
    s: UserSetup,
    clock: Clock,
    router: Recipient<Route>,
    table: CsvTable,
    motion: UserMotion,
    power_w: f64,
    move_rng: ChaCha8Rng,
    work_rng: ChaCha8Rng,
    slot: u64,
    pending: BTreeMap<u64, Pending>,
    stopped: bool,
    /// Payloads that were not LYREO messages, or answers for unknown ids.
    pub ignored: u64,
    liveness: Liveness,
}

impl UserActor {
    pub fn new(s: UserSetup, clock: Clock, router: Recipient<Route>, table: CsvTable) -> Self {
        let mut topo = ChaCha8Rng::seed_from_u64(s.seed);
        let pos = s.area.uniform(&mut topo);
        let (lo, hi) = s.power_dbm;
        let power_w = dbm_to_w(lo + topo.random::<f64>() * (hi - lo));
        UserActor {
            move_rng: ChaCha8Rng::seed_from_u64(s.seed ^ 0x6d6f_7665),
            work_rng: ChaCha8Rng::seed_from_u64(s.seed ^ 0x776f_726b),
            motion: UserMotion::new(pos),
            power_w,
            slot: s.start_ns.div_ceil(s.slot_ns.max(1)),
            s,
            clock,
            router,
            table,
            pending: BTreeMap::new(),
            stopped: false,
            ignored: 0,
            liveness: Liveness::default(),
        }
    }

    fn send(&self, dst: ActorId, via: Option<LinkId>, payload: edgemu_protocol::Msg) {
        self.send_stamped(dst, via, payload, self.clock.now_ns());
    }

    fn send_stamped(
        &self,
        dst: ActorId,
        via: Option<LinkId>,
        payload: edgemu_protocol::Msg,
        sent_at_ns: u64,
    ) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst,
            via,
            sent_at_ns,
            due_ns: None,
            payload,
        }));
    }

    fn slot_start(&self, slot: u64) -> u64 {
        slot.saturating_mul(self.s.slot_ns)
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        let t0 = self.slot_start(self.slot);
        if self.stopped || self.s.stop_ns.is_some_and(|s| t0 >= s) {
            self.stopped = true;
            return;
        }
        if t0 > self.s.start_ns {
            let dt_s = self.s.slot_ns as f64 / 1e9;
            self.motion
                .advance(&self.s.mobility, &self.s.area, dt_s, &mut self.move_rng);
        }
        if !self.liveness.is_alive() {
            self.slot += 1;
            let next = self.slot_start(self.slot);
            ctx.run_later(self.clock.until(next), |act, ctx| act.tick(ctx));
            return;
        }
        let (lin, lout) = self.s.workload.sample(&mut self.work_rng);
        let (lin, lout) = (lin.min(self.s.max_input), lout.min(self.s.max_output));
        // Unique in the run: the user's id in the high bits, the slot below.
        let id = (u64::from(self.s.id.0) << 32) | (self.slot & 0xffff_ffff);
        let Position { x, y } = self.motion.pos;
        let msg = LyreoMsg::Request {
            id,
            slot: self.slot,
            input_len: lin,
            output_len: lout,
            x_m: x,
            y_m: y,
            power_w: self.power_w,
        };
        self.send(self.s.scheduler, None, msg.into());
        self.pending.insert(
            id,
            Pending {
                slot: self.slot,
                issued_ns: self.clock.now_ns().max(t0),
                input_len: lin,
                output_len: lout,
                assigned: None,
            },
        );
        let deadline = t0.saturating_add(ASSIGN_TIMEOUT_SLOTS.saturating_mul(self.s.slot_ns));
        ctx.run_later(self.clock.until(deadline), move |act, _| {
            if act.pending.get(&id).is_some_and(|p| p.assigned.is_none()) {
                act.fail_open(id, "no assignment");
            }
        });
        self.slot += 1;
        let next = self.slot_start(self.slot);
        ctx.run_later(self.clock.until(next), |act, ctx| act.tick(ctx));
    }

    /// Records open request `id` as failed now, with `reason`.
    fn fail_open(&mut self, id: u64, reason: &str) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let (server, policy, version, sched) = match &p.assigned {
            Some(x) => (
                self.name(x.server).to_string(),
                x.policy.clone(),
                x.version.clone(),
                secs(x.received_ns.saturating_sub(p.issued_ns)),
            ),
            None => (String::new(), String::new(), String::new(), String::new()),
        };
        self.table.row(&format!(
            "{},{id},{},{server},{policy},{version},{},{},failed,{sched},,,,,,{reason}",
            p.slot, self.s.name, p.input_len, p.output_len
        ));
    }

    fn kill(&mut self, until_ns: Option<u64>, ctx: &mut Context<Self>) -> FaultReply {
        let now = self.clock.now_ns();
        let Some(epoch) = self.liveness.kill() else {
            return FaultReply::unchanged(now, "already dead");
        };
        let open: Vec<u64> = self.pending.keys().copied().collect();
        for &id in &open {
            self.fail_open(id, "user killed");
        }
        restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
        let n = open.len() as u64;
        FaultReply::killed(
            now,
            n,
            format!("killed; {n} open requests failed (\"user killed\")"),
            until_ns,
        )
    }

    fn assigned(&mut self, id: u64, a: Assignment, upload_ns: u64, ctx: &mut Context<Self>) {
        let Some(p) = self.pending.get_mut(&id) else {
            self.ignored += 1;
            return;
        };
        let (server, now) = (a.server, a.received_ns);
        p.assigned = Some(a);
        let via = self
            .s
            .uplinks
            .iter()
            .find(|(s, _)| *s == server)
            .and_then(|(_, l)| *l);
        let packet = upload_packet(id, p.input_len);
        // The radio transmission takes l_in·β/R; the packet enters the link
        // (its delay, loss, kill state) when its last bit is sent. It is
        // stamped with that modeled time, so the server recovers the upload
        // start exactly (`sent_at − upload_ns`); a late timer wake-up shows
        // in the upload time, as a late radio would.
        let at = now.saturating_add(upload_ns);
        ctx.run_later(self.clock.until(at), move |act, _| {
            // Not if the user was killed meanwhile (the request failed then).
            if act.pending.contains_key(&id) {
                act.send_stamped(server, via, packet, at);
            }
        });
    }

    fn record(&mut self, a: &Answer) {
        let Some(p) = self.pending.remove(&a.id) else {
            self.ignored += 1;
            return;
        };
        let (server, policy, version, sched) = match &p.assigned {
            Some(x) => (
                self.name(x.server),
                x.policy.as_str(),
                x.version.as_str(),
                x.received_ns.saturating_sub(p.issued_ns),
            ),
            None => ("?", "?", "", 0),
        };
        let outcome = match a.outcome {
            Outcome::Served => "served",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
        };
        let e2e = a.finished_ns.saturating_sub(p.issued_ns);
        let line = format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.slot,
            a.id,
            self.s.name,
            server,
            policy,
            version,
            p.input_len,
            p.output_len,
            outcome,
            secs(sched),
            secs(a.upload_ns),
            secs(a.wait_ns),
            secs(a.prefill_ns),
            secs(a.decode_ns),
            if a.outcome == Outcome::Served {
                secs(e2e)
            } else {
                String::new()
            },
            csv_field(&a.reason),
        );
        self.table.row(&line);
    }

    fn name(&self, id: ActorId) -> &str {
        self.s
            .names
            .get(id.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Requests still open at the end of the run: recorded as `unanswered`
    /// (lost upload, killed link, or still running), never dropped.
    fn flush_open(&mut self) {
        let open = std::mem::take(&mut self.pending);
        for (id, p) in open {
            let (server, policy, version) = match &p.assigned {
                Some(x) => (
                    self.name(x.server).to_string(),
                    x.policy.clone(),
                    x.version.clone(),
                ),
                None => (String::new(), String::new(), String::new()),
            };
            self.table.row(&format!(
                "{},{id},{},{server},{policy},{version},{},{},unanswered,,,,,,,",
                p.slot, self.s.name, p.input_len, p.output_len
            ));
        }
    }
}

/// A reason as one CSV field (reasons are ours, but an answer comes from
/// the mesh: no comma, quote or line break gets through).
pub(crate) fn csv_field(s: &str) -> String {
    s.chars()
        .take(80)
        .map(|c| {
            if matches!(c, ',' | '"' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

impl Actor for UserActor {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        let first = self.slot_start(self.slot);
        ctx.run_later(self.clock.until(first), |act, ctx| act.tick(ctx));
    }
}

impl Handler<Deliver> for UserActor {
    type Result = ();
    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        match LyreoMsg::from_msg(msg.envelope.payload) {
            Some(LyreoMsg::Assign {
                id,
                server,
                upload_ns,
                policy,
                policy_version,
                ..
            }) => {
                let a = Assignment {
                    server,
                    received_ns: msg.recv_ns,
                    policy,
                    version: policy_version,
                };
                self.assigned(id, a, upload_ns, ctx)
            }
            Some(LyreoMsg::Answer(a)) => self.record(&a),
            _ => self.ignored += 1,
        }
    }
}

impl Handler<ActorFault> for UserActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl SelfRestart for UserActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "restarted; requests resume at the next slot"
    }
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        Some((&self.s.log, &self.s.name))
    }
}

impl Handler<StopSending> for UserActor {
    type Result = ();
    fn handle(&mut self, _: StopSending, _: &mut Context<Self>) {
        self.stopped = true;
    }
}

/// After the run's drain: what is still open is recorded as unanswered.
impl Handler<Flush> for UserActor {
    type Result = MessageResult<Flush>;
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.stopped = true;
        self.flush_open();
        MessageResult(Vec::new())
    }
}
