//! An edge server whose serving stack runs outside edgemu (`backend =
//! "openai"`): llama.cpp's server, vLLM, or another edgemu gateway, reached
//! over OpenAI's `/v1/completions` API ([`super::openai_client`]).
//!
//! The shell takes part in the LYREO system like any server: its scheduler
//! assigns requests to it (`Expect`), their uploads arrive over the users'
//! (or a gateway's) links, and each request is sent to the external stack
//! as soon as its own upload is in. That stack batches on its own, so
//! there is no joint prefill here. A gateway's request is sent as its
//! prompt's text (chat messages rendered by the gateway: with its model's
//! template for `model = "smollm2"`, else as `role: content` lines), or as
//! token ids when the client sent ids; a user's request, whose lengths
//! only are known, as about `l_in` tokens of filler text with `ignore_eos`
//! and `max_tokens = l_out`, so it generates its full length where the
//! stack honours `ignore_eos` (vLLM, edgemu; llama.cpp's server stops at
//! its end-of-sequence token). The text
//! that streams back goes to a gateway as it comes, over the link joining
//! them (as any server's tokens), and the request is answered when its
//! stream ends: `prefill` is the time to its first token there, `decode`
//! from first to last, `wait` 0 (the external stack's queueing is inside
//! `prefill`).
//!
//! Each slot it reports its load as measured from the tokens in flight
//! ([`edgemu_serving::ExternalLoad`]) with its GPU class's capability, and
//! writes its `server_slots.csv` row (`backend` = `openai`, no
//! iterations). A request the stack fails (refused connection, an HTTP
//! error, a malformed stream, no end within `timeout`) is answered
//! `failed` with the reason (`backend: …`). A killed server aborts its
//! requests in flight (`server killed`) and refuses new ones until it is
//! restarted.
//!
//! The HTTP exchanges run on the actor's thread (the host starts it on a
//! thread of its own) as tasks that report back with messages, so the
//! actor never waits on the network.

use super::messages::{Answer, Expected, LyreoMsg, Outcome, SlotReport, TokenChunk};
use super::openai_client::{self as client, Completion, Endpoint, Prompt};
use super::records::CsvTable;
use crate::clock::Clock;
use crate::events::ActorLog;
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Liveness, Route, SelfRestart,
};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_policies::lyreo::ServerCapability;
use edgemu_protocol::{Envelope, Msg};
use edgemu_serving::ExternalLoad;
use std::collections::HashMap;
use std::time::Duration;

pub struct ExternalServerSetup {
    pub id: ActorId,
    pub name: String,
    pub scheduler: ActorId,
    pub slot_ns: u64,
    /// `rtx3080`, …: the class whose capacity and speed it declares.
    pub gpu: String,
    pub capability: ServerCapability,
    pub endpoint: Endpoint,
    pub timeout: Duration,
    pub live: super::live::LyreoLive,
    pub log: ActorLog,
    /// The link to each gateway of its scheduler (streamed tokens).
    pub downlinks: HashMap<ActorId, LinkId>,
}

/// Text that stands for a prompt whose length only is known: one word per
/// token for common BPE vocabularies.
const FILLER: &str = " edge";

struct Flight {
    user: ActorId,
    /// When its upload started and arrived, and when it was sent out.
    upload_start_ns: u64,
    arrival_ns: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    pieces: Vec<String>,
    /// Set for a gateway's request (its text streams back).
    gateway: Option<ActorId>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Text {
    id: u64,
    text: String,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Ended {
    id: u64,
    result: Result<(), String>,
}

pub struct ExternalServerActor {
    s: ExternalServerSetup,
    clock: Clock,
    router: Recipient<Route>,
    table: CsvTable,
    load: ExternalLoad,
    /// Assigned requests whose upload is not in yet, by id: (slot, request).
    expected: HashMap<u64, (u64, Expected)>,
    /// Uploads that came before their `Expect`: (handed, arrival).
    early: HashMap<u64, (u64, u64)>,
    /// Prompts of a gateway's requests, by id: (gateway, token ids, text).
    streams: HashMap<u64, (ActorId, Vec<u32>, String)>,
    flights: HashMap<u64, Flight>,
    slot: u64,
    assigned_in_slot: usize,
    lost_in_slot: usize,
    liveness: Liveness,
    pub ignored: u64,
}

impl ExternalServerActor {
    pub fn new(
        s: ExternalServerSetup,
        clock: Clock,
        router: Recipient<Route>,
        table: CsvTable,
    ) -> Self {
        let load = ExternalLoad::new(s.capability.kv_bytes_per_token, s.capability.capacity_bytes);
        ExternalServerActor {
            s,
            clock,
            router,
            table,
            load,
            expected: HashMap::new(),
            early: HashMap::new(),
            streams: HashMap::new(),
            flights: HashMap::new(),
            slot: 0,
            assigned_in_slot: 0,
            lost_in_slot: 0,
            liveness: Liveness::default(),
            ignored: 0,
        }
    }

    fn send(&self, dst: ActorId, via: Option<LinkId>, msg: LyreoMsg) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst,
            via,
            sent_at_ns: self.clock.now_ns(),
            due_ns: None,
            payload: msg.into(),
        }));
    }

    fn fail(&mut self, user: ActorId, id: u64, reason: &str) {
        self.streams.remove(&id);
        let a = Answer::failed(id, self.clock.now_ns(), reason);
        self.send(user, None, LyreoMsg::Answer(a));
        self.s.live.server(&self.s.name, |l| l.failed += 1);
    }

    fn expect(&mut self, slot: u64, requests: Vec<Expected>, ctx: &mut Context<Self>) {
        if !self.liveness.is_alive() {
            for r in requests {
                self.fail(r.user, r.id, "server down");
            }
            return;
        }
        for r in requests {
            if self.expected.contains_key(&r.id) || self.flights.contains_key(&r.id) {
                self.ignored += 1;
                continue;
            }
            self.assigned_in_slot += 1;
            let id = r.id;
            self.expected.insert(id, (slot, r));
            if let Some((handed, arrival)) = self.early.remove(&id) {
                self.upload(id, handed, arrival, ctx);
            }
        }
    }

    fn upload(&mut self, id: u64, handed_ns: u64, arrival_ns: u64, ctx: &mut Context<Self>) {
        let Some((_, r)) = self.expected.remove(&id) else {
            self.early.insert(id, (handed_ns, arrival_ns));
            return;
        };
        let now = self.clock.now_ns();
        let gateway = self.streams.get(&id).map(|(g, _, _)| *g);
        // Text where the gateway has it (every stack takes text; not all
        // take token ids), else the ids, else filler of the right length.
        let prompt = match self.streams.get_mut(&id) {
            Some((_, _, t)) if !t.is_empty() => Prompt::Text(std::mem::take(t)),
            Some((_, p, _)) if !p.is_empty() => Prompt::Tokens(std::mem::take(p)),
            _ => Prompt::Text(FILLER.repeat(r.input_len as usize)),
        };
        let completion = Completion {
            prompt,
            max_tokens: r.output_len,
            // A user's request has a given length; a gateway's ends where
            // the model ends it.
            ignore_eos: gateway.is_none(),
            timeout: self.s.timeout,
        };
        let endpoint = self.s.endpoint.clone();
        let me = ctx.address();
        let task = actix_rt::spawn(async move {
            let tx = me.clone();
            let result = client::stream(&endpoint, &completion, |text| {
                tx.do_send(Text { id, text });
            })
            .await;
            me.do_send(Ended { id, result });
        });
        self.load.sent(id, r.input_len, r.output_len, now);
        self.flights.insert(
            id,
            Flight {
                user: r.user,
                upload_start_ns: handed_ns.saturating_sub(r.upload_ns),
                arrival_ns,
                first_ns: None,
                last_ns: now,
                pieces: Vec::new(),
                gateway,
                task,
            },
        );
        self.s
            .live
            .server(&self.s.name, |l| l.running = self.flights.len());
    }

    fn text(&mut self, id: u64, text: String) {
        let now = self.clock.now_ns();
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        f.first_ns.get_or_insert(now);
        f.last_ns = now;
        f.pieces.push(text);
        self.load.tokens(id, 1, now);
        if let Some(gw) = f.gateway {
            let first = (f.pieces.len() - 1) as u32;
            let piece = f.pieces[first as usize].clone();
            let chunk = TokenChunk {
                id,
                first,
                tokens: vec![0],
                placeholder: false,
                pieces: vec![piece],
                answer: None,
            };
            self.send(
                gw,
                self.s.downlinks.get(&gw).copied(),
                LyreoMsg::Tokens(chunk),
            );
        }
    }

    fn ended(&mut self, id: u64, result: Result<(), String>) {
        let now = self.clock.now_ns();
        let Some(f) = self.flights.remove(&id) else {
            return;
        };
        self.streams.remove(&id);
        let first = f.first_ns.unwrap_or(now);
        let n = f.pieces.len() as u64;
        self.load.ended(
            id,
            now,
            Some(((f.last_ns.saturating_sub(first)) as f64 * 1e-9, n)),
        );
        self.s
            .live
            .server(&self.s.name, |l| l.running = self.flights.len());
        if let Err(e) = result {
            tracing::warn!(server = %self.s.name, request = id, error = %e, "external backend failed a request");
            return self.fail(f.user, id, &format!("backend: {e}"));
        }
        self.s.live.server(&self.s.name, |l| l.served += 1);
        let a = Answer {
            id,
            outcome: Outcome::Served,
            upload_ns: f.arrival_ns.saturating_sub(f.upload_start_ns),
            wait_ns: 0,
            prefill_ns: first.saturating_sub(f.arrival_ns),
            decode_ns: f.last_ns.saturating_sub(first),
            finished_ns: f.last_ns,
            reason: String::new(),
        };
        match f.gateway {
            Some(gw) => {
                let chunk = TokenChunk {
                    id,
                    first: 0,
                    tokens: vec![0; f.pieces.len()],
                    placeholder: false,
                    pieces: f.pieces,
                    answer: Some(a),
                };
                self.send(
                    gw,
                    self.s.downlinks.get(&gw).copied(),
                    LyreoMsg::Tokens(chunk),
                );
            }
            None => self.send(f.user, None, LyreoMsg::Answer(a)),
        }
    }

    fn arm_slot_timer(&mut self, ctx: &mut Context<Self>) {
        let end = (self.slot + 1).saturating_mul(self.s.slot_ns);
        ctx.run_later(self.clock.until(end), |act, ctx| {
            act.close_slot();
            act.arm_slot_timer(ctx);
        });
    }

    /// Reports slot `self.slot` (closing every slot that ended, if the
    /// timer was late) and forgets uploads that never came.
    fn close_slot(&mut self) {
        let now = self.clock.now_ns();
        let ended = (now / self.s.slot_ns.max(1)).max(self.slot + 1);
        while self.slot < ended {
            let t = self.slot;
            self.slot += 1;
            // Assigned in an earlier slot and still no upload a slot later:
            // lost (killed or lossy link).
            let lost: Vec<(u64, ActorId)> = self
                .expected
                .iter()
                .filter(|(_, (s, _))| s + 1 < self.slot)
                .map(|(&id, (_, r))| (id, r.user))
                .collect();
            for (id, _) in &lost {
                self.expected.remove(id);
                self.streams.remove(id);
            }
            self.lost_in_slot += lost.len();
            // As a server's `UploadGathering::close_slot`: an upload whose
            // `Expect` has not come within a slot of its arrival will not be
            // matched any more.
            let horizon = now.saturating_sub(self.s.slot_ns);
            self.early.retain(|_, (_, arrival)| *arrival >= horizon);
            if !self.liveness.is_alive() {
                self.load.end_slot(self.s.slot_ns, now);
                continue;
            }
            let load = self.load.end_slot(self.s.slot_ns, now);
            self.table.row(&format!(
                "{t},{},{},openai,{},{},{:.6},{},{},{},{},0,0",
                self.s.name,
                self.s.gpu,
                self.assigned_in_slot,
                self.lost_in_slot,
                load.eta,
                load.peak_bytes,
                u8::from(load.high_kv),
                load.occupancy_bytes,
                load.backlog,
            ));
            self.s.live.server(&self.s.name, |l| {
                l.gpu = self.s.gpu.clone();
                l.backend = "openai".into();
                l.capacity_bytes = self.s.capability.capacity_bytes;
                l.slot = t;
                l.occupancy_bytes = load.occupancy_bytes;
                l.peak_bytes = load.peak_bytes;
                l.backlog = load.backlog;
                l.eta = load.eta;
                l.slots += 1;
                l.high_kv_slots += u64::from(load.high_kv);
            });
            self.assigned_in_slot = 0;
            self.lost_in_slot = 0;
            let report = SlotReport {
                slot: t,
                load,
                capability: Some(self.s.capability),
            };
            self.send(self.s.scheduler, None, LyreoMsg::Report(report));
        }
    }

    fn kill(&mut self, until_ns: Option<u64>, ctx: &mut Context<Self>) -> FaultReply {
        let now = self.clock.now_ns();
        let Some(epoch) = self.liveness.kill() else {
            return FaultReply::unchanged(now, "already dead");
        };
        let mut flights: Vec<(u64, Flight)> = self.flights.drain().collect();
        flights.sort_unstable_by_key(|(id, _)| *id);
        let expected: Vec<(u64, ActorId)> = self
            .expected
            .drain()
            .map(|(id, (_, r))| (id, r.user))
            .collect();
        for (id, f) in &flights {
            f.task.abort();
            self.fail(f.user, *id, "server killed");
        }
        for (id, user) in &expected {
            self.fail(*user, *id, "server killed");
        }
        self.streams.clear();
        self.early.clear();
        self.load.clear(now);
        self.s.live.server(&self.s.name, |l| {
            l.down = true;
            l.running = 0;
        });
        restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
        let n = (flights.len() + expected.len()) as u64;
        FaultReply::killed(
            now,
            n,
            format!(
                "killed; {n} requests failed (\"server killed\"): {} at the external backend, {} waiting for their upload",
                flights.len(),
                expected.len()
            ),
            until_ns,
        )
    }
}

impl Actor for ExternalServerActor {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.slot = self.clock.now_ns() / self.s.slot_ns.max(1);
        self.s.live.server(&self.s.name, |l| {
            l.gpu = self.s.gpu.clone();
            l.backend = "openai".into();
            l.capacity_bytes = self.s.capability.capacity_bytes;
        });
        self.arm_slot_timer(ctx);
    }
}

impl Handler<Text> for ExternalServerActor {
    type Result = ();
    fn handle(&mut self, m: Text, _: &mut Context<Self>) {
        self.text(m.id, m.text);
    }
}

impl Handler<Ended> for ExternalServerActor {
    type Result = ();
    fn handle(&mut self, m: Ended, _: &mut Context<Self>) {
        self.ended(m.id, m.result);
    }
}

impl Handler<Deliver> for ExternalServerActor {
    type Result = ();
    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        let src = msg.envelope.src;
        if let Msg::Probe(p) = &msg.envelope.payload {
            if self.liveness.is_alive() {
                self.upload(p.seq, msg.envelope.sent_at_ns, msg.recv_ns, ctx);
            }
            return;
        }
        match LyreoMsg::from_msg(msg.envelope.payload) {
            Some(LyreoMsg::Expect { slot, requests }) => self.expect(slot, requests, ctx),
            Some(LyreoMsg::Stream { id, prompt, text }) if self.liveness.is_alive() => {
                self.streams.insert(id, (src, prompt, text));
            }
            _ => self.ignored += 1,
        }
    }
}

impl Handler<ActorFault> for ExternalServerActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl SelfRestart for ExternalServerActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "restarted, empty"
    }
    fn come_back(&mut self, _: &mut Context<Self>) {
        self.s.live.server(&self.s.name, |l| l.down = false);
    }
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        Some((&self.s.log, &self.s.name))
    }
}
