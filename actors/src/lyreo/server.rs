//! The edge server: serving's `ServerSlotCore` (prefill of a slot's batch
//! together, DEED or static decode, KV accounting) run in step with the
//! clock. With the modeled backend an iteration's duration comes from the
//! GPU class; with the real backend the iteration runs inline and its
//! measured duration is what the core advances by.
//!
//! **Faults** (`actor.kill` / `actor.restart`, [`ActorFault`]). A killed
//! server crashes its core ([`ServerSlotCore::crash`]: the running batch,
//! the queue and the batches still waiting for uploads are dropped, their
//! KV released in the ledger) and answers every request it held as
//! `Failed` with reason `"server killed"` — including answers that were
//! due after the kill — so its users record each one in `requests.csv`.
//! While dead it stops reporting (the scheduler marks it unavailable after
//! its timeout), drops uploads, and answers requests it is still assigned
//! as `Failed` with reason `"server down"` (what a client sees as a refused
//! connection). A restart (by command, or by itself at the kill's
//! `until_ns`) brings it back empty; it reports again at the next slot end.
//!
//! **Streamed requests** (a gateway's, announced by `LyreoMsg::Stream`):
//! each iteration's token goes back to the gateway as a `TokenChunk` at
//! the iteration's end, over the link joining server and gateway when the
//! file has one (its rate, delay, loss and kill apply; otherwise over the
//! mesh directly). The final chunk repeats every token and carries the
//! answer, so a chunk the link lost only delays its tokens to the end.
//! Failures are answered directly, as for users.

use super::messages::{Answer, Expected, LyreoMsg, Outcome, SlotReport, TokenChunk};
use super::records::{secs, CsvTable};
use crate::clock::Clock;
use crate::events::ActorLog;
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Liveness, Route, SelfRestart,
};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_engine::backend::Backend;
use edgemu_policies::lyreo::SlotLoad;
use edgemu_protocol::{Envelope, Msg};
use edgemu_serving::server::RequestRecord;
use edgemu_serving::{ExpectedUpload, ReleasedBatch, ServerSlotCore, UploadGathering};
use std::collections::HashMap;

pub struct ServerSetup {
    pub id: ActorId,
    pub name: String,
    pub scheduler: ActorId,
    pub slot_ns: u64,
    /// `rtx3080`, …, for the per-slot table.
    pub gpu: String,
    /// `modeled` or `real`, for the per-slot table.
    pub backend: String,
    /// The backend computes in real time (a real model under real time):
    /// iterations start no earlier than when the actor runs them.
    pub wall_clock_compute: bool,
    /// Where the server shows its state while the run goes on.
    pub live: super::live::LyreoLive,
    /// Where its faults land (`events.jsonl`).
    pub log: ActorLog,
    /// The link to each gateway of its scheduler, where the file has one:
    /// streamed tokens travel over it.
    pub downlinks: HashMap<ActorId, LinkId>,
}

/// A streamed request's output so far.
struct StreamOut {
    gateway: ActorId,
    tokens: Vec<u32>,
    /// Chunks not sent yet, each with the end of its iteration, in order:
    /// they leave in this order even when a timer fires late.
    pending: std::collections::VecDeque<(u64, TokenChunk)>,
}

pub struct ServerActor<B: Backend + 'static> {
    s: ServerSetup,
    // Boxed: a backend's cache type need not be `Unpin`, an actor must be.
    // `None`: the backend could not be built; every request is rejected.
    core: Option<Box<ServerSlotCore<B>>>,
    clock: Clock,
    router: Recipient<Route>,
    table: CsvTable,
    /// Which expected uploads are in; releases each slot's batch.
    uploads: UploadGathering,
    /// Who to answer, by request id.
    users: HashMap<u64, ActorId>,
    /// When each request's upload began (assignment at the user), by id.
    upload_start: HashMap<u64, u64>,
    slot: u64,
    /// Generation of the pending slot-end timer: a catch-up re-arms it, and
    /// a timer of an older generation then does nothing.
    slot_timer: u64,
    assigned_in_slot: usize,
    lost_in_slot: usize,
    /// Woken for this core event time already.
    armed: Option<u64>,
    pub ignored: u64,
    failed: bool,
    liveness: Liveness,
    /// Uploads and assignments that reached it while it was dead.
    pub dropped_while_dead: u64,
    /// Streamed requests, by id.
    streams: HashMap<u64, StreamOut>,
}

impl<B: Backend + 'static> ServerActor<B> {
    pub fn new(
        s: ServerSetup,
        core: ServerSlotCore<B>,
        clock: Clock,
        router: Recipient<Route>,
        table: CsvTable,
    ) -> Self {
        Self::with_core(s, Some(Box::new(core)), clock, router, table)
    }

    fn with_core(
        s: ServerSetup,
        core: Option<Box<ServerSlotCore<B>>>,
        clock: Clock,
        router: Recipient<Route>,
        table: CsvTable,
    ) -> Self {
        ServerActor {
            s,
            failed: core.is_none(),
            core,
            clock,
            router,
            table,
            uploads: UploadGathering::new(),
            users: HashMap::new(),
            upload_start: HashMap::new(),
            slot: 0,
            slot_timer: 0,
            assigned_in_slot: 0,
            lost_in_slot: 0,
            armed: None,
            ignored: 0,
            liveness: Liveness::default(),
            dropped_while_dead: 0,
            streams: HashMap::new(),
        }
    }

    /// A server whose backend failed to build (`why` is logged): it answers
    /// every request it is assigned as rejected, so nothing is dropped
    /// silently, and reports an empty state.
    pub fn unavailable(
        s: ServerSetup,
        why: &str,
        clock: Clock,
        router: Recipient<Route>,
        table: CsvTable,
    ) -> Self {
        tracing::error!(server = %s.name, error = %why, "server backend unavailable; its requests are rejected");
        Self::with_core(s, None, clock, router, table)
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

    /// Sends a streamed request's chunk to its gateway, over their link
    /// when there is one.
    fn send_chunk(&self, gateway: ActorId, chunk: TokenChunk) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst: gateway,
            via: self.s.downlinks.get(&gateway).copied(),
            sent_at_ns: self.clock.now_ns(),
            due_ns: None,
            payload: LyreoMsg::Tokens(chunk).into(),
        }));
    }

    /// A gateway's request `id` is to be streamed (with its prompt's tokens,
    /// when the gateway knows them).
    fn stream(&mut self, gateway: ActorId, id: u64, prompt: Vec<u32>) {
        if !self.liveness.is_alive() {
            self.dropped_while_dead += 1;
            return;
        }
        let Some(core) = self.core.as_mut() else {
            return;
        };
        core.stream(id, prompt);
        self.streams.insert(
            id,
            StreamOut {
                gateway,
                tokens: Vec::new(),
                pending: Default::default(),
            },
        );
    }

    /// Sends the tokens the core produced for streamed requests, each
    /// iteration's at the iteration's end.
    fn send_tokens(&mut self, now: u64, ctx: &mut Context<Self>) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let placeholder = !core.produces_tokens();
        let events = core.take_token_events();
        let mut i = 0;
        while i < events.len() {
            let (id, at) = (events[i].id, events[i].at_ns);
            let mut j = i;
            while j < events.len() && events[j].id == id && events[j].at_ns == at {
                j += 1;
            }
            let tokens: Vec<u32> = events[i..j].iter().map(|e| e.token).collect();
            i = j;
            let Some(out) = self.streams.get_mut(&id) else {
                continue;
            };
            let chunk = TokenChunk {
                id,
                first: out.tokens.len() as u32,
                tokens,
                placeholder,
                pieces: Vec::new(),
                answer: None,
            };
            out.tokens.extend_from_slice(&chunk.tokens);
            out.pending.push_back((at, chunk));
            if at <= now {
                self.flush_stream(id, now);
            } else {
                // Not if the request ended meanwhile (a kill): then the
                // stream is gone and this finds nothing.
                ctx.run_later(self.clock.until(at), move |act, _| {
                    let now = act.clock.now_ns();
                    act.flush_stream(id, now);
                });
            }
        }
    }

    /// Sends stream `id`'s chunks due by `now`, in order.
    fn flush_stream(&mut self, id: u64, now: u64) {
        let Some(out) = self.streams.get_mut(&id) else {
            return;
        };
        let gateway = out.gateway;
        let mut due = Vec::new();
        while out.pending.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, c)) = out.pending.pop_front() {
                due.push(c);
            }
        }
        for c in due {
            self.send_chunk(gateway, c);
        }
    }

    fn fail(&mut self, user: ActorId, id: u64, reason: &str) {
        self.streams.remove(&id);
        let a = Answer::failed(id, self.clock.now_ns(), reason);
        self.send(user, LyreoMsg::Answer(a));
    }

    /// `actor.kill`: crash, fail every request held, stop until restarted.
    fn kill(&mut self, until_ns: Option<u64>, ctx: &mut Context<Self>) -> FaultReply {
        let now = self.clock.now_ns();
        if !self.liveness.is_alive() {
            return FaultReply::unchanged(now, "already dead");
        }
        // Run the core up to the kill: what finished before it is served.
        self.pump(ctx);
        let epoch = self.liveness.kill().unwrap_or_default();
        let dropped = self.core.as_mut().map(|c| c.crash(now)).unwrap_or_default();
        let forming = self.uploads.clear();
        let mut users: Vec<(u64, ActorId)> = self.users.drain().collect();
        users.sort_unstable();
        for &(id, user) in &users {
            self.fail(user, id, "server killed");
        }
        self.streams.clear();
        let finishing = users.len().saturating_sub(dropped.len() + forming);
        self.upload_start.clear();
        self.armed = None;
        // The slot in progress has no row (a dead server writes none).
        self.assigned_in_slot = 0;
        self.lost_in_slot = 0;
        let n = users.len() as u64;
        self.s.live.server(&self.s.name, |l| {
            l.down = true;
            l.failed += n;
            l.running = 0;
            l.queued = 0;
            l.backlog = 0;
            l.occupancy_bytes = 0;
        });
        restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
        FaultReply::killed(
            now,
            n,
            format!(
                "killed; {n} requests failed (\"server killed\"): {} running, {} queued, {} in a batch not yet due, {forming} in a batch still collecting its uploads, {finishing} finishing",
                dropped.running.len(),
                dropped.queued.len(),
                dropped.pending.len(),
            ),
            until_ns,
        )
    }

    fn expect(&mut self, slot: u64, requests: Vec<Expected>, ctx: &mut Context<Self>) {
        if !self.liveness.is_alive() {
            self.dropped_while_dead += 1;
            let n = requests.len() as u64;
            for r in requests {
                self.fail(r.user, r.id, "server down");
            }
            self.s.live.server(&self.s.name, |l| l.failed += n);
            return;
        }
        if self.core.is_none() {
            let now = self.clock.now_ns();
            for r in requests {
                let a = Answer {
                    id: r.id,
                    outcome: Outcome::Rejected,
                    upload_ns: 0,
                    wait_ns: 0,
                    prefill_ns: 0,
                    decode_ns: 0,
                    finished_ns: now,
                    reason: String::new(),
                };
                self.send(r.user, LyreoMsg::Answer(a));
            }
            return;
        }
        // `self.slot` counts closed slots; its timers fire late while this
        // actor's thread is busy (a real backend's forward passes run
        // inline), and the scheduler's assignment for the current slot can
        // come first. Close the slots that have ended by run time before
        // judging the assignment.
        if slot > self.slot.saturating_add(2) {
            self.catch_up_slots(ctx);
        }
        // A slot still far ahead of this server's clock would never be
        // released (only past slots are): refuse it rather than hold it for
        // ever, and answer, so that the user records a failure with its
        // reason instead of an unanswered request.
        if slot > self.slot.saturating_add(2) {
            self.ignored += 1;
            for r in requests {
                self.fail(
                    r.user,
                    r.id,
                    "assigned to a slot ahead of the server's clock",
                );
            }
            return;
        }
        let mut fresh = Vec::with_capacity(requests.len());
        for r in requests {
            if self.users.contains_key(&r.id) {
                // Already expected or in service: a repeat, not a new request.
                self.ignored += 1;
                continue;
            }
            self.users.insert(r.id, r.user);
            fresh.push(ExpectedUpload {
                id: r.id,
                user: r.user.0 as usize,
                input_len: r.input_len,
                output_len: r.output_len,
                upload_ns: r.upload_ns,
            });
        }
        if let Some(b) = self.uploads.expect(slot, fresh) {
            self.hand_over(b, ctx);
        }
    }

    fn upload(&mut self, id: u64, start_ns: u64, arrival_ns: u64, ctx: &mut Context<Self>) {
        if let Some(b) = self.uploads.upload(id, start_ns, arrival_ns) {
            self.hand_over(b, ctx);
        }
    }

    /// Hands a released batch to the core; its lost uploads are counted.
    fn hand_over(&mut self, b: ReleasedBatch, ctx: &mut Context<Self>) {
        for id in &b.lost {
            self.lost_in_slot += 1;
            self.users.remove(id);
            self.streams.remove(id);
            if let Some(core) = self.core.as_mut() {
                core.unstream(*id);
            }
        }
        for a in &b.assigned {
            self.upload_start.insert(a.id, a.created_ns);
        }
        self.assigned_in_slot += b.assigned.len();
        let rejected = match self.core.as_mut() {
            Some(core) => core.assign(b.assigned),
            None => return,
        };
        for r in rejected {
            self.answer(&r);
        }
        self.pump(ctx);
    }

    fn answer(&mut self, r: &RequestRecord) {
        let Some(user) = self.users.remove(&r.id) else {
            return;
        };
        let start = self.upload_start.remove(&r.id).unwrap_or(0);
        self.s.live.server(&self.s.name, |l| {
            if r.rejected {
                l.rejected += 1
            } else {
                l.served += 1
            }
        });
        let a = Answer {
            id: r.id,
            outcome: if r.rejected {
                Outcome::Rejected
            } else {
                Outcome::Served
            },
            upload_ns: r.upload_ns,
            wait_ns: r.wait_ns,
            prefill_ns: r.prefill_ns,
            decode_ns: r.decode_ns,
            finished_ns: start.saturating_add(r.e2e_ns),
            reason: String::new(),
        };
        // The last iteration's chunk (due now) goes before the answer.
        self.flush_stream(r.id, u64::MAX);
        match self.streams.remove(&r.id) {
            Some(out) => {
                let placeholder = self.core.as_ref().is_none_or(|c| !c.produces_tokens());
                if let Some(core) = self.core.as_mut() {
                    core.unstream(r.id);
                }
                let chunk = TokenChunk {
                    id: r.id,
                    first: 0,
                    tokens: out.tokens,
                    placeholder,
                    pieces: Vec::new(),
                    answer: Some(a),
                };
                self.send_chunk(out.gateway, chunk);
            }
            None => self.send(user, LyreoMsg::Answer(a)),
        }
    }

    /// Runs the core up to now and arms a wake-up for its next event.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if !self.liveness.is_alive() {
            return;
        }
        let Some(core) = self.core.as_mut().filter(|_| !self.failed) else {
            return;
        };
        let now = self.clock.now_ns();
        if self.s.wall_clock_compute {
            core.hold_until(now);
        }
        let mut done = Vec::new();
        let res = core.advance(now.saturating_add(1), &mut done);
        let next = core.next_event_ns();
        if let Err(e) = res {
            tracing::error!(server = %self.s.name, error = %e, "server core failed; it stops serving");
            self.failed = true;
        }
        if !self.streams.is_empty() {
            self.send_tokens(now, ctx);
        }
        for r in &done {
            // Answer when the last token is out (the modeled core may have
            // run an iteration that ends a little after now).
            let at = self
                .upload_start
                .get(&r.id)
                .map_or(now, |s| s.saturating_add(r.e2e_ns));
            if at <= now {
                self.answer(r);
            } else {
                let r = *r;
                ctx.run_later(self.clock.until(at), move |act, _| act.answer(&r));
            }
        }
        if let Some(next) = next.filter(|_| !self.failed) {
            if self.armed.is_none_or(|a| a > next || a <= now) {
                self.armed = Some(next);
                ctx.run_later(self.clock.until(next), |act, ctx| {
                    act.armed = None;
                    act.pump(ctx);
                });
            }
        }
    }

    /// Arms the timer for the end of slot `self.slot`.
    fn arm_slot_timer(&mut self, ctx: &mut Context<Self>) {
        self.slot_timer = self.slot_timer.wrapping_add(1);
        let generation = self.slot_timer;
        let end = (self.slot + 1).saturating_mul(self.s.slot_ns);
        ctx.run_later(self.clock.until(end), move |act, ctx| {
            if act.slot_timer == generation {
                act.close_slot(ctx);
                act.catch_up_slots(ctx);
                act.arm_slot_timer(ctx);
            }
        });
    }

    /// Closes every slot that has ended by run time (a late timer's
    /// backlog), then re-arms the timer; a no-op when the clock is current.
    fn catch_up_slots(&mut self, ctx: &mut Context<Self>) {
        let ended = self.clock.now_ns() / self.s.slot_ns.max(1);
        if self.slot >= ended {
            return;
        }
        while self.slot < ended {
            self.close_slot(ctx);
        }
        self.arm_slot_timer(ctx);
    }

    /// Ends slot `self.slot`: releases what is overdue, reports to the
    /// scheduler, writes the slot's row, and moves the clock on by one.
    fn close_slot(&mut self, ctx: &mut Context<Self>) {
        if !self.liveness.is_alive() {
            // Dead: no report, no row; the slot clock goes on.
            if let Some(core) = self.core.as_mut() {
                core.end_slot(self.slot, self.s.slot_ns);
            }
            self.slot += 1;
            return;
        }
        self.pump(ctx);
        let t = self.slot;
        // Uploads of slot t−1 that have not arrived a full slot after their
        // own slot ended are lost (killed or lossy link): serve the rest.
        // Uploads whose `Expect` never came within a slot will not be
        // matched any more: forget them, so unknown ids cannot pile up.
        let horizon = self.clock.now_ns().saturating_sub(self.s.slot_ns);
        for b in self.uploads.close_slot(t, horizon) {
            self.hand_over(b, ctx);
        }
        let r = match self.core.as_mut() {
            Some(core) => core.end_slot(t, self.s.slot_ns),
            None => edgemu_serving::ServerReport {
                server: 0,
                slot: t,
                load: SlotLoad::default(),
                iterations: 0,
                busy_ns: 0,
            },
        };
        let report = SlotReport {
            slot: t,
            load: r.load,
            capability: self.core.as_ref().map(|c| c.capability()),
        };
        self.send(self.s.scheduler, LyreoMsg::Report(report));
        let (capacity, running, queued) = self.core.as_ref().map_or((0, 0, 0), |c| {
            (c.profile().kv_capacity_bytes, c.running(), c.queued())
        });
        self.s.live.server(&self.s.name, |l| {
            l.gpu.clone_from(&self.s.gpu);
            l.backend.clone_from(&self.s.backend);
            l.capacity_bytes = capacity;
            l.slot = t;
            l.occupancy_bytes = r.load.occupancy_bytes;
            l.peak_bytes = r.load.peak_bytes;
            l.running = running;
            l.queued = queued;
            l.backlog = r.load.backlog;
            l.eta = r.load.eta;
            l.slots += 1;
            l.high_kv_slots += u64::from(r.load.high_kv);
        });
        self.table.row(&format!(
            "{t},{},{},{},{},{},{:.6},{},{},{},{},{},{}",
            self.s.name,
            self.s.gpu,
            self.s.backend,
            self.assigned_in_slot,
            self.lost_in_slot,
            r.load.eta,
            r.load.peak_bytes,
            u8::from(r.load.high_kv),
            r.load.occupancy_bytes,
            r.load.backlog,
            r.iterations,
            secs(r.busy_ns)
        ));
        self.assigned_in_slot = 0;
        self.lost_in_slot = 0;
        self.slot += 1;
    }
}

impl<B: Backend + 'static> Actor for ServerActor<B> {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        // A server that starts late — in real time the real model loads on
        // this actor's own thread first, ≈ 3 s — begins at the slot the run
        // is in. Counting its slot ends up from 0 would put it slots behind
        // the scheduler, and the assignments queued meanwhile would look
        // "ahead of the server's clock" and be refused. The slots it missed
        // have no row, as for a dead server. (In virtual time and for the
        // modeled servers it starts at run time 0: slot 0.)
        self.slot = self.slot.max(self.clock.now_ns() / self.s.slot_ns.max(1));
        self.arm_slot_timer(ctx);
    }
}

impl<B: Backend + 'static> Handler<Deliver> for ServerActor<B> {
    type Result = ();
    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        let env = &msg.envelope;
        if !self.liveness.is_alive() && matches!(env.payload, Msg::Probe(_)) {
            self.dropped_while_dead += 1;
            return;
        }
        if let Msg::Probe(p) = &env.payload {
            // The user hands the packet to the link when its last bit is
            // sent (`sent_at_ns`); the start is fixed up with the
            // transmission time once the `Expect` is known.
            self.upload(p.seq, env.sent_at_ns, msg.recv_ns, ctx);
            return;
        }
        match LyreoMsg::from_msg(msg.envelope.payload) {
            Some(LyreoMsg::Expect { slot, requests }) => self.expect(slot, requests, ctx),
            Some(LyreoMsg::Stream { id, prompt, .. }) => self.stream(msg.envelope.src, id, prompt),
            _ => self.ignored += 1,
        }
    }
}

impl<B: Backend + 'static> Handler<ActorFault> for ServerActor<B> {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl<B: Backend + 'static> SelfRestart for ServerActor<B> {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "restarted, empty"
    }
    /// Back from a kill, empty.
    fn come_back(&mut self, ctx: &mut Context<Self>) {
        // A core that had failed comes back usable (it was emptied by the crash).
        self.failed = self.core.is_none();
        self.s.live.server(&self.s.name, |l| l.down = false);
        self.pump(ctx);
    }
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        Some((&self.s.log, &self.s.name))
    }
}
