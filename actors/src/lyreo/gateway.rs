//! The gateway: the actor behind an OpenAI-compatible HTTP endpoint. Each
//! HTTP request it is handed ([`Submit`]) becomes a LYREO user's request
//! from the gateway's position in the cell:
//!
//! 1. at once, a `Request` to its scheduler (decided at the next
//!    `t·Δ + collect`, like a user's);
//! 2. on the `Assign`, a `Stream` to the chosen server (the prompt's token
//!    ids when the gateway tokenized it), then, after the radio
//!    transmission time, the declared-size upload over the link joining the
//!    gateway to the server (its delay, loss and chaos apply);
//! 3. the server sends each iteration's tokens back as they are produced
//!    (over the link when there is one); the gateway delivers them to the
//!    HTTP side in order, holding back tokens behind a gap;
//! 4. the server's final chunk repeats every token and carries the answer:
//!    the request ends `stop` (the model ended it) or `length`.
//!
//! A request ends with an error when it is not assigned within
//! [`crate::lyreo::user::ASSIGN_TIMEOUT_SLOTS`] slots (`no assignment`),
//! when its server fails it (`server killed`, `server down`, rejected:
//! `does not fit`) or when no final answer came within the gateway's
//! `timeout` (a lost upload, a killed link, a stalled server). Every
//! request ends as exactly one row of `requests.csv`, the users' table
//! (user = the gateway's name), and in the live counters vLLM exports:
//! TTFT, time per output token, e2e and queue time, measured on the run
//! clock from the request's arrival at the gateway.
//!
//! A killed gateway fails its open requests (`gateway killed`) and refuses
//! new ones until restarted.

use super::messages::{upload_packet, Answer, LyreoMsg, Outcome, TokenChunk};
use super::records::{secs, CsvTable};
use crate::clock::Clock;
use crate::deadlines::DeadlineQueue;
use crate::events::ActorLog;
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Flush, Liveness, Route, SelfRestart,
};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_protocol::{Envelope, Msg};
use std::collections::{BTreeMap, HashMap};
use tokio::sync::mpsc::UnboundedSender;

/// Everything a gateway needs, resolved from the config by the host.
pub struct GatewaySetup {
    pub id: ActorId,
    pub name: String,
    /// The model id it serves (its live counters' label).
    pub model: String,
    pub scheduler: ActorId,
    pub slot_ns: u64,
    pub position_m: (f64, f64),
    pub power_w: f64,
    /// (server, link joining the gateway to it) for every server of its
    /// scheduler.
    pub uplinks: Vec<(ActorId, Option<LinkId>)>,
    pub timeout_ns: u64,
    /// Actor names by id, for the records.
    pub names: Vec<String>,
    pub live: super::live::LyreoLive,
    pub log: ActorLog,
}

/// What the HTTP side hands the gateway: one completion to run.
#[derive(Message)]
#[rtype(result = "Result<u64, Refused>")]
pub struct Submit {
    /// The prompt's token ids, or empty when only its length is known.
    pub prompt: Vec<u32>,
    /// The prompt as text (chat messages rendered), for a server whose
    /// serving stack takes text; empty when the client sent token ids.
    pub text: String,
    pub input_len: u32,
    pub max_tokens: u32,
    /// Where the request's tokens and end go, in order.
    pub events: UnboundedSender<StreamEvent>,
}

/// Why a request was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the gateway is down (killed)")]
    Down,
    #[error("the run is over")]
    Stopped,
}

/// What the gateway tells the HTTP side about one request, in order: any
/// number of `Tokens`, then one `Done` or one `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The next tokens of the output.
    Tokens {
        tokens: Vec<u32>,
        /// Only the count and timing are real (a modeled server).
        placeholder: bool,
        /// The tokens' text, one piece each, when the server sent text
        /// (an external serving stack); empty: decode `tokens`.
        pieces: Vec<String>,
    },
    /// Every token was delivered.
    Done {
        /// The model ended the output before `max_tokens` (`stop`), or it
        /// reached `max_tokens` (`length`).
        stopped: bool,
        output_tokens: u32,
        /// Arrival at the gateway actor to the last token delivered to it.
        e2e_ns: u64,
    },
    /// The request failed; no more tokens come.
    Failed {
        /// `timeout`, `no assignment`, `server killed`, `server down`,
        /// `does not fit`, `gateway killed`, `run stopped`.
        reason: String,
    },
}

struct Open {
    slot: u64,
    arrived_ns: u64,
    input_len: u32,
    max_tokens: u32,
    prompt: Vec<u32>,
    text: String,
    events: UnboundedSender<StreamEvent>,
    assigned: Option<Assigned>,
    /// Tokens delivered, in order.
    delivered: u32,
    /// Chunks past a gap, by first index: (tokens, pieces).
    ahead: BTreeMap<u32, (Vec<u32>, Vec<String>)>,
    first_token_ns: Option<u64>,
    last_token_ns: u64,
}

struct Assigned {
    server: ActorId,
    received_ns: u64,
    policy: String,
    version: String,
}

/// What an open request must have by a deadline.
#[derive(Clone, Copy, Debug)]
enum Due {
    /// An assignment from the scheduler.
    Assignment(u64),
    /// Its end (the gateway's `timeout`).
    End(u64),
}

pub struct GatewayActor {
    s: GatewaySetup,
    clock: Clock,
    router: Recipient<Route>,
    table: CsvTable,
    open: HashMap<u64, Open>,
    /// Every open request's deadlines, behind one timer.
    deadlines: DeadlineQueue<Due>,
    /// The timer armed for the earliest deadline, and its time.
    armed: Option<(u64, SpawnHandle)>,
    next_seq: u32,
    liveness: Liveness,
    stopped: bool,
    /// Payloads it did not expect (counted).
    pub ignored: u64,
}

impl GatewayActor {
    pub fn new(s: GatewaySetup, clock: Clock, router: Recipient<Route>, table: CsvTable) -> Self {
        s.live.gateway(&s.name, &s.model, |_| {});
        GatewayActor {
            s,
            clock,
            router,
            table,
            open: HashMap::new(),
            deadlines: DeadlineQueue::default(),
            armed: None,
            next_seq: 0,
            liveness: Liveness::default(),
            stopped: false,
            ignored: 0,
        }
    }

    fn send(&self, dst: ActorId, via: Option<LinkId>, payload: Msg, sent_at_ns: u64) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst,
            via,
            sent_at_ns,
            due_ns: None,
            payload,
        }));
    }

    fn live(&self, f: impl FnOnce(&mut super::live::GatewayLive)) {
        self.s.live.gateway(&self.s.name, &self.s.model, f);
    }

    fn submit(&mut self, m: Submit, ctx: &mut Context<Self>) -> Result<u64, Refused> {
        if self.stopped {
            return Err(Refused::Stopped);
        }
        if !self.liveness.is_alive() {
            return Err(Refused::Down);
        }
        let now = self.clock.now_ns();
        let slot = now / self.s.slot_ns.max(1);
        // Unique in the run: the gateway's id in the high bits, a counter below.
        let id = (u64::from(self.s.id.0) << 32) | u64::from(self.next_seq);
        self.next_seq = self.next_seq.wrapping_add(1);
        let (x_m, y_m) = self.s.position_m;
        let msg = LyreoMsg::Request {
            id,
            slot,
            input_len: m.input_len,
            output_len: m.max_tokens,
            x_m,
            y_m,
            power_w: self.s.power_w,
        };
        self.send(self.s.scheduler, None, msg.into(), now);
        self.open.insert(
            id,
            Open {
                slot,
                arrived_ns: now,
                input_len: m.input_len,
                max_tokens: m.max_tokens,
                prompt: m.prompt,
                text: m.text,
                events: m.events,
                assigned: None,
                delivered: 0,
                ahead: BTreeMap::new(),
                first_token_ns: None,
                last_token_ns: now,
            },
        );
        self.live(|l| {
            l.running += 1;
            l.prompt_tokens += u64::from(m.input_len);
        });
        let assign_by = (slot + super::user::ASSIGN_TIMEOUT_SLOTS).saturating_mul(self.s.slot_ns);
        self.deadlines.push(assign_by, Due::Assignment(id));
        self.deadlines
            .push(now.saturating_add(self.s.timeout_ns), Due::End(id));
        self.arm(ctx);
        Ok(id)
    }

    /// Keeps one timer armed for the earliest deadline.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let Some(next) = self.deadlines.next_at() else {
            return;
        };
        if let Some((at, handle)) = self.armed {
            if at <= next {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(self.clock.until(next), |act, ctx| {
            act.armed = None;
            act.deadlines_due(ctx);
        });
        self.armed = Some((next, handle));
    }

    /// Fails the open requests whose deadlines passed.
    fn deadlines_due(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_ns();
        while let Some(due) = self.deadlines.pop_due(now) {
            match due {
                Due::Assignment(id) => {
                    if self.open.get(&id).is_some_and(|o| o.assigned.is_none()) {
                        self.fail(id, "no assignment");
                    }
                }
                Due::End(id) => self.fail(id, "timeout"),
            }
        }
        self.arm(ctx);
    }

    fn assigned(&mut self, id: u64, a: Assigned, upload_ns: u64, ctx: &mut Context<Self>) {
        let Some(o) = self.open.get_mut(&id) else {
            self.ignored += 1;
            return;
        };
        if o.assigned.is_some() {
            self.ignored += 1;
            return;
        }
        let server = a.server;
        let received = a.received_ns;
        o.assigned = Some(a);
        let prompt = std::mem::take(&mut o.prompt);
        let text = std::mem::take(&mut o.text);
        let input_len = o.input_len;
        // The server learns first that this request streams (direct, so it
        // is there before the upload that releases the batch).
        self.send(
            server,
            None,
            LyreoMsg::Stream { id, prompt, text }.into(),
            received,
        );
        let via = self
            .s
            .uplinks
            .iter()
            .find(|(s, _)| *s == server)
            .and_then(|(_, l)| *l);
        let packet = upload_packet(id, input_len);
        let at = received.saturating_add(upload_ns);
        ctx.run_later(self.clock.until(at), move |act, _| {
            if act.open.contains_key(&id) {
                act.send(server, via, packet, at);
            }
        });
    }

    /// Delivers what of `chunk` continues the output; holds the rest.
    fn tokens(&mut self, chunk: TokenChunk, recv_ns: u64) {
        let Some(o) = self.open.get_mut(&chunk.id) else {
            // A request already ended (timed out, or a repeat): nothing to do.
            self.ignored += 1;
            return;
        };
        let placeholder = chunk.placeholder;
        let mut fresh = Fresh::default();
        if chunk.first > o.delivered {
            o.ahead
                .insert(chunk.first, (chunk.tokens.clone(), chunk.pieces.clone()));
        } else {
            take(o, chunk.first, &chunk.tokens, &chunk.pieces, &mut fresh);
        }
        while let Some((&first, _)) = o.ahead.first_key_value() {
            if first > o.delivered {
                break;
            }
            if let Some((t, p)) = o.ahead.remove(&first) {
                take(o, first, &t, &p, &mut fresh);
            }
        }
        if !fresh.tokens.is_empty() {
            if o.first_token_ns.is_none() {
                o.first_token_ns = Some(recv_ns);
            }
            o.last_token_ns = recv_ns;
            let _ = o.events.send(StreamEvent::Tokens {
                tokens: fresh.tokens,
                placeholder,
                pieces: fresh.pieces,
            });
        }
        if let Some(a) = chunk.answer {
            self.answered(&a, recv_ns);
        }
    }

    /// The server's answer: the end of the request.
    fn answered(&mut self, a: &Answer, recv_ns: u64) {
        match a.outcome {
            Outcome::Served => {}
            Outcome::Rejected => return self.fail(a.id, "does not fit"),
            Outcome::Failed => {
                let reason = if a.reason.is_empty() {
                    "failed"
                } else {
                    a.reason.as_str()
                };
                return self.fail(a.id, reason);
            }
        }
        let Some(mut o) = self.open.remove(&a.id) else {
            self.ignored += 1;
            return;
        };
        if o.delivered == 0 {
            // Served without a stream (its `Stream` never reached the
            // server): the count is known, the tokens are not.
            o.first_token_ns = Some(recv_ns);
            o.delivered = o.max_tokens;
            let _ = o.events.send(StreamEvent::Tokens {
                tokens: vec![0; o.max_tokens as usize],
                placeholder: true,
                pieces: Vec::new(),
            });
        }
        o.last_token_ns = recv_ns.max(o.last_token_ns);
        let stopped = o.delivered < o.max_tokens;
        let first = o.first_token_ns.unwrap_or(recv_ns);
        let ttft = first.saturating_sub(o.arrived_ns);
        let e2e = o.last_token_ns.saturating_sub(o.arrived_ns);
        let _ = o.events.send(StreamEvent::Done {
            stopped,
            output_tokens: o.delivered,
            e2e_ns: e2e,
        });
        // Queue time: arrival to the start of the prefill on the server.
        let queue = o
            .assigned
            .as_ref()
            .map_or(0, |x| x.received_ns.saturating_sub(o.arrived_ns))
            .saturating_add(a.upload_ns)
            .saturating_add(a.wait_ns);
        let n = o.delivered;
        self.live(|l| {
            l.running = l.running.saturating_sub(1);
            *l.success
                .entry(if stopped { "stop" } else { "length" }.to_string())
                .or_default() += 1;
            l.generation_tokens += u64::from(n);
            l.ttft.observe(ttft as f64 * 1e-9);
            l.e2e.observe(e2e as f64 * 1e-9);
            l.queue.observe(queue as f64 * 1e-9);
            if n > 1 {
                let tpot = o.last_token_ns.saturating_sub(first) as f64 * 1e-9 / f64::from(n - 1);
                l.tpot.observe(tpot);
            }
        });
        self.record(a.id, &o, "served", Some(a), Some(e2e), "");
    }

    /// Ends open request `id` with an error (`reason`); nothing if it ended.
    fn fail(&mut self, id: u64, reason: &str) {
        let Some(o) = self.open.remove(&id) else {
            return;
        };
        let _ = o.events.send(StreamEvent::Failed {
            reason: reason.to_string(),
        });
        self.live(|l| {
            l.running = l.running.saturating_sub(1);
            *l.errors.entry(reason.to_string()).or_default() += 1;
        });
        self.record(id, &o, "failed", None, None, reason);
    }

    /// One row of `requests.csv`, the users' columns.
    fn record(
        &self,
        id: u64,
        o: &Open,
        outcome: &str,
        a: Option<&Answer>,
        e2e: Option<u64>,
        reason: &str,
    ) {
        let (server, policy, version, sched) = match &o.assigned {
            Some(x) => (
                self.name(x.server),
                x.policy.as_str(),
                x.version.as_str(),
                secs(x.received_ns.saturating_sub(o.arrived_ns)),
            ),
            None => ("", "", "", String::new()),
        };
        let part = |f: fn(&Answer) -> u64| a.map(|a| secs(f(a))).unwrap_or_default();
        self.table.row(&format!(
            "{},{id},{},{server},{policy},{version},{},{},{outcome},{sched},{},{},{},{},{},{}",
            o.slot,
            self.s.name,
            o.input_len,
            o.max_tokens,
            part(|a| a.upload_ns),
            part(|a| a.wait_ns),
            part(|a| a.prefill_ns),
            part(|a| a.decode_ns),
            e2e.map(secs).unwrap_or_default(),
            super::user::csv_field(reason),
        ));
    }

    fn name(&self, id: ActorId) -> &str {
        self.s
            .names
            .get(id.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    fn kill(&mut self, until_ns: Option<u64>, ctx: &mut Context<Self>) -> FaultReply {
        let now = self.clock.now_ns();
        let Some(epoch) = self.liveness.kill() else {
            return FaultReply::unchanged(now, "already dead");
        };
        let mut ids: Vec<u64> = self.open.keys().copied().collect();
        ids.sort_unstable();
        for &id in &ids {
            self.fail(id, "gateway killed");
        }
        restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
        let n = ids.len() as u64;
        FaultReply::killed(
            now,
            n,
            format!(
                "killed; {n} open requests failed (\"gateway killed\"); new ones are refused (503)"
            ),
            until_ns,
        )
    }
}

/// Tokens (and their text pieces, when sent) ready to deliver.
#[derive(Default)]
struct Fresh {
    tokens: Vec<u32>,
    pieces: Vec<String>,
}

/// Appends to `fresh` the part of `tokens` (starting at output index
/// `first`, with `pieces` when the server sent text) that continues what
/// `o` delivered.
fn take(o: &mut Open, first: u32, tokens: &[u32], pieces: &[String], fresh: &mut Fresh) {
    let end = first as usize + tokens.len();
    if end > o.delivered as usize && first <= o.delivered {
        let skip = (o.delivered - first) as usize;
        fresh.tokens.extend_from_slice(&tokens[skip..]);
        if pieces.len() == tokens.len() {
            fresh.pieces.extend_from_slice(&pieces[skip..]);
        }
        o.delivered = end as u32;
    }
}

impl Actor for GatewayActor {
    type Context = Context<Self>;
}

impl Handler<Submit> for GatewayActor {
    type Result = Result<u64, Refused>;
    fn handle(&mut self, m: Submit, ctx: &mut Context<Self>) -> Self::Result {
        self.submit(m, ctx)
    }
}

impl Handler<Deliver> for GatewayActor {
    type Result = ();
    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        if !self.liveness.is_alive() {
            self.ignored += 1;
            return;
        }
        let recv_ns = msg.recv_ns;
        match LyreoMsg::from_msg(msg.envelope.payload) {
            Some(LyreoMsg::Assign {
                id,
                server,
                upload_ns,
                policy,
                policy_version,
                ..
            }) => {
                let a = Assigned {
                    server,
                    received_ns: recv_ns,
                    policy,
                    version: policy_version,
                };
                self.assigned(id, a, upload_ns, ctx);
            }
            Some(LyreoMsg::Tokens(chunk)) => self.tokens(chunk, recv_ns),
            Some(LyreoMsg::Answer(a)) => self.answered(&a, recv_ns),
            _ => self.ignored += 1,
        }
    }
}

impl Handler<ActorFault> for GatewayActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        match msg {
            ActorFault::Kill { until_ns, .. } => self.kill(until_ns, ctx),
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl SelfRestart for GatewayActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.liveness
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "restarted; requests are taken again"
    }
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        Some((&self.s.log, &self.s.name))
    }
}

/// At the end of the run: what is still open fails (`run stopped`), so
/// every client gets an answer and every request a row.
impl Handler<Flush> for GatewayActor {
    type Result = MessageResult<Flush>;
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.stopped = true;
        let mut ids: Vec<u64> = self.open.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.fail(id, "run stopped");
        }
        MessageResult(Vec::new())
    }
}
