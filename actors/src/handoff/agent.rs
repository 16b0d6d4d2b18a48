//! [`AgentActor`]: an LLM agent bound to an edge server, handing its
//! context's KV to the next agent over an emulated link, and receiving,
//! rebuilding and decoding what the previous one hands it (module docs of
//! [`super`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_config::{HandoffDeadline, HandoffTask, RebuildMode};
use edgemu_gpu::kv_cache::ContextKvCache;
use edgemu_gpu::MissingRows;
use edgemu_handoff::{
    Deadline, HandoffReceiver, HandoffReport, HandoffScenario, ReceiverConfig, SchemeSpec,
};
use edgemu_links::LinkParams;
use edgemu_policies::slot::{PolicySlot, RepairPolicies, RepairSpec};
use edgemu_protocol::{Envelope, Msg};

use super::engine::{ComputeActor, Decode, Decoded, Prefill, Prefilled, TaskSetup};
use super::error::AgentError;
use super::messages::{AgentMsg, HandoffOffer};
use super::paced::PacedSender;
use super::records::HandoffRecord;
use super::stream::{stream_port, KernelStreams, StreamProgress};
use crate::clock::Clock;
use crate::events::{Event, EventLog};
use crate::external::book::FallbackReason;
use crate::external::client::PolicyEvent;
use crate::external::{ExternalDecider, ExternalLive, Outcome};
use crate::link_actor::{LinkActor, OfferAt};
use crate::lyreo::records::CsvTable;
use crate::messages::{
    restart, restart_later, ActorFault, Deliver, FaultReply, Liveness, Route, SelfRestart,
};
use edgemu_config::agent::KERNEL_TCP_SCHEME;
use edgemu_config::agent::{MAX_CODING_WINDOW, MAX_CONTEXT_TOKENS, MAX_DECODE_TOKENS};
use edgemu_handoff::ReceivedKv;
use edgemu_policies::external::{parse_repair_action, RepairArrays, WireObs};
use edgemu_policies::repair::ActionMask;
use std::sync::atomic::Ordering;

/// Lookahead of the sender in virtual time (see [`super::paced`]).
pub const VIRTUAL_LOOKAHEAD_NS: u64 = 2_000_000;

/// After D, how long a receiver in virtual time waits before closing the
/// handoff, so that every frame that arrived by D (delivered at the next
/// millisecond wake-up) is in. Frames after D are late whatever happens.
pub const VIRTUAL_CLOSE_GRACE_NS: u64 = 2_000_000;

/// How long past the deadline a `tcp-kernel` stream's end waits, so the
/// receiver (closing at D) takes its prefix before the sender resets.
const STREAM_END_SLACK: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a decoded handoff's row waits for its sender's counts
/// (`SenderDone`), which a sender that was still sending at D sends just
/// after it: a deadline-bound stream's, or frames paced up to D.
const SENDER_COUNTS_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// Sender counts kept for handoffs still decoding, at most (a peer's
/// messages cannot grow it further).
const LATE_COUNTS: usize = 64;

/// How often a `tcp-kernel` sender looks whether its stream has ended.
const STREAM_POLL: std::time::Duration = std::time::Duration::from_millis(10);

fn clamp_u32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// Whether a peer's offer asks for no more than this agent gives: a context
/// and a decode within cluster.toml's ranges, a coding window within its
/// range, one finite utility per block, and KV (which the receiver holds
/// whole until D) within the agent's `kv_cache` budget of `kv_budget` bytes.
fn offer_within_limits(offer: &HandoffOffer, kv_budget: u64) -> Result<(), String> {
    let l = &offer.layout;
    if l.n_tokens > MAX_CONTEXT_TOKENS || offer.tokens.len() > l.n_tokens as usize {
        return Err(format!(
            "{} context tokens for a {}-token layout (at most {MAX_CONTEXT_TOKENS})",
            offer.tokens.len(),
            l.n_tokens
        ));
    }
    if offer.decode_tokens > MAX_DECODE_TOKENS {
        return Err(format!(
            "{} decode tokens (at most {MAX_DECODE_TOKENS})",
            offer.decode_tokens
        ));
    }
    if offer.k == 0 || offer.k > MAX_CODING_WINDOW {
        return Err(format!(
            "coding window {} (1 to {MAX_CODING_WINDOW})",
            offer.k
        ));
    }
    edgemu_handoff::check_utilities(l, &offer.utilities).map_err(|e| e.to_string())?;
    let bytes = l.total_bytes() as u64;
    if bytes > kv_budget {
        return Err(format!(
            "{bytes} bytes of KV, more than this agent's kv_cache of {kv_budget} bytes"
        ));
    }
    Ok(())
}

/// The source packets (block fragments, in block order) wholly inside the
/// first `bytes` bytes of the payload: a stream's decoded prefix in the
/// unit the FEC schemes report.
fn source_packets_in(layout: edgemu_handoff::BlockLayout, bytes: usize) -> u32 {
    let bb = layout.block_bytes as usize;
    let frags = u32::from(layout.fragments_per_block());
    if bb == 0 {
        return 0;
    }
    let partial = (0..layout.fragments_per_block())
        .take_while(|&f| layout.fragment_range(f).end <= bytes % bb)
        .count() as u32;
    clamp_u32((bytes / bb) as u64)
        .saturating_mul(frags)
        .saturating_add(partial)
        .min(layout.n_source_packets())
}

/// The sending side's plan: the task and the link it crosses.
#[derive(Clone)]
pub struct SendPlan {
    pub task: HandoffTask,
    pub to_name: String,
    pub spec: &'static SchemeSpec,
    /// Link direction towards `to` and back.
    pub forward: LinkParams,
    pub reverse: LinkParams,
}

/// Everything an agent needs.
pub struct AgentSetup {
    pub id: ActorId,
    pub name: String,
    pub host_name: String,
    pub virtual_time: bool,
    pub plan: Option<SendPlan>,
    /// The repair scheduler slot (`policy.swap` reaches it).
    pub slot: Arc<PolicySlot<RepairPolicies>>,
    /// This agent's outgoing link directions, by the actor at the other end
    /// (the forward direction to `hand_to`, feedback directions to the
    /// agents that hand to it).
    pub links_out: BTreeMap<ActorId, (LinkId, Addr<LinkActor>)>,
    /// Actor names by id.
    pub names: Vec<String>,
    pub cache: Arc<ContextKvCache>,
    /// Where its external-policy counters are shown.
    pub external: ExternalLive,
    /// The kernel's TCP through attach points, for `tcp-kernel` handoffs
    /// it sends or receives (`None`: it has none).
    pub streams: Option<Arc<dyn KernelStreams>>,
}

/// How often the agent follows its slot to or from an external policy
/// between handoffs, and publishes its counters.
const EXTERNAL_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// A repair decision out to the external policy.
struct Asking {
    id: u64,
    mask: ActionMask,
}

/// One handoff's external decisions, for its `policy.fallback` event.
#[derive(Default)]
struct HandoffTally {
    decisions: u64,
    answered: u64,
    fallbacks: [u64; 4],
    /// The first fallback's detail.
    first: Option<(FallbackReason, String)>,
}

impl HandoffTally {
    fn fallback(&mut self, reason: FallbackReason, detail: &str) {
        self.decisions += 1;
        let i = FallbackReason::ALL
            .iter()
            .position(|&r| r == reason)
            .unwrap_or(0);
        self.fallbacks[i] += 1;
        self.first
            .get_or_insert_with(|| (reason, detail.to_string()));
    }
}

struct Sending {
    handoff: u32,
    paced: PacedSender,
    to: ActorId,
    link: LinkId,
    link_addr: Addr<LinkActor>,
}

/// A `tcp-kernel` handoff being sent: its stream's thread moves the bytes.
struct Streaming {
    handoff: u32,
    to: ActorId,
    progress: Arc<StreamProgress>,
    /// Its end, just after the deadline.
    end: SpawnHandle,
}

struct Receiving {
    offer: HandoffOffer,
    from: ActorId,
    incoming: Incoming,
    sender_counts: Option<(u32, u32)>,
    close: SpawnHandle,
}

/// How a handoff's KV arrives.
enum Incoming {
    /// Frames of the offer's scheme over the link, into the transport core.
    Frames(Box<HandoffReceiver>),
    /// `tcp-kernel`: a byte stream the host reads (no frames, and no
    /// transport core holding a second copy of the KV).
    Stream(Arc<StreamProgress>),
}

impl Receiving {
    /// The transport core's figures; a stream's before its bytes are
    /// counted at D.
    fn report(&self) -> HandoffReport {
        match &self.incoming {
            Incoming::Frames(core) => core.report(),
            Incoming::Stream(_) => HandoffReport {
                n_blocks: self.offer.layout.n_blocks(),
                n_source: self.offer.layout.n_source_packets(),
                ..HandoffReport::default()
            },
        }
    }
}

pub struct AgentActor {
    s: AgentSetup,
    clock: Clock,
    router: Recipient<Route>,
    compute: Addr<ComputeActor>,
    table: CsvTable,
    events: EventLog,
    live: Liveness,
    setup: Option<TaskSetup>,
    sending: Option<Sending>,
    streaming: Option<Streaming>,
    wake: Option<(u64, SpawnHandle)>,
    receiving: BTreeMap<ActorId, Receiving>,
    /// Decoded handoffs whose sender's counts have not come yet, by
    /// (sender, handoff): written when they come or after
    /// [`SENDER_COUNTS_GRACE`].
    awaiting_counts: BTreeMap<(ActorId, u32), HandoffRecord>,
    /// Sender counts that came after their handoff closed and before its
    /// decode ended (at most [`LATE_COUNTS`] kept).
    late_counts: BTreeMap<(ActorId, u32), (u32, u32)>,
    /// While the repair slot's version is external: connection and counters.
    external: Option<ExternalDecider>,
    asking: Option<Asking>,
    tally: HandoffTally,
    /// The run is over (`Flush`): no more connections.
    external_closed: bool,
}

impl AgentActor {
    pub fn new(
        s: AgentSetup,
        clock: Clock,
        router: Recipient<Route>,
        compute: Addr<ComputeActor>,
        table: CsvTable,
        events: EventLog,
    ) -> Self {
        AgentActor {
            s,
            clock,
            router,
            compute,
            table,
            events,
            live: Liveness::default(),
            setup: None,
            sending: None,
            streaming: None,
            awaiting_counts: BTreeMap::new(),
            late_counts: BTreeMap::new(),
            wake: None,
            receiving: BTreeMap::new(),
            external: None,
            asking: None,
            tally: HandoffTally::default(),
            external_closed: false,
        }
    }

    fn name_of(&self, id: ActorId) -> String {
        self.s
            .names
            .get(id.0 as usize)
            .cloned()
            .unwrap_or_else(|| format!("#{}", id.0))
    }

    fn event(&self, kind: &str, detail: serde_json::Value) {
        self.events.record(Event {
            t_ns: self.clock.now_ns(),
            host: self.s.host_name.clone(),
            source: self.s.name.clone(),
            kind: kind.into(),
            detail,
        });
    }

    fn send_control(&self, to: ActorId, msg: AgentMsg) {
        self.router.do_send(Route(Envelope {
            src: self.s.id,
            dst: to,
            via: None,
            sent_at_ns: self.clock.now_ns(),
            due_ns: None,
            payload: msg.into(),
        }));
    }

    // ---- sending -------------------------------------------------------

    fn schedule_handoff(&mut self, k: u32, ctx: &mut Context<Self>) {
        let Some(plan) = &self.s.plan else { return };
        if plan.task.count.is_some_and(|c| k >= c) {
            return;
        }
        let period = plan.task.every_ns.unwrap_or(0);
        let at = plan
            .task
            .start_ns
            .saturating_add(u64::from(k).saturating_mul(period));
        if k > 0 && period == 0 {
            // `count` without `every`: the next one starts when this one is
            // over (see `finish_sending`).
            return;
        }
        ctx.run_later(self.clock.until(at), move |act, ctx| {
            act.begin_handoff(k, ctx);
            act.schedule_handoff(k + 1, ctx);
        });
    }

    fn begin_handoff(&mut self, k: u32, ctx: &mut Context<Self>) {
        if !self.live.is_alive() {
            return;
        }
        let (Some(plan), Some(setup)) = (&self.s.plan, &self.setup) else {
            return;
        };
        if self.sending.is_some() || self.streaming.is_some() {
            self.event(
                "handoff.skip",
                serde_json::json!({"handoff": k, "reason": "the previous handoff is still sending"}),
            );
            return;
        }
        let context = setup.contexts[k as usize % setup.contexts.len()].clone();
        let _ = plan;
        self.compute
            .send(Prefill(context.tokens.clone()))
            .into_actor(self)
            .map(move |res, act, ctx| {
                let res = res.map_err(AgentError::Compute).and_then(|r| r);
                match res {
                    // The handoff starts when the KV is ready. In virtual
                    // time the prefill ran inline and the handoff starts at
                    // the same instant (a prefill is the upstream agent's
                    // work before the handoff, and waiting out a wall-clock
                    // measurement would make runs differ by seed).
                    Ok(p) => act.start_sending(k, context.id, p, ctx),
                    Err(e) => act.event(
                        "handoff.error",
                        serde_json::json!({"handoff": k, "error": e.to_string()}),
                    ),
                }
            })
            .spawn(ctx);
    }

    fn start_sending(&mut self, k: u32, context_id: String, p: Prefilled, ctx: &mut Context<Self>) {
        if !self.live.is_alive() || self.sending.is_some() || self.streaming.is_some() {
            return;
        }
        // Only the layout and the utilities of the setup: cloning it would copy
        // every context's tokens per handoff.
        let (Some(plan), Some((layout, utilities))) = (
            self.s.plan.clone(),
            self.setup
                .as_ref()
                .map(|s| (s.layout, Arc::clone(&s.utilities))),
        ) else {
            return;
        };
        let t0 = self.clock.now_ns();
        let to = plan.task.to;
        let kernel_tcp = plan.task.scheme == KERNEL_TCP_SCHEME;
        let link_out = self.s.links_out.get(&to).cloned();
        // Checked before the offer goes out: a receiver told to expect a
        // stream would otherwise wait for one until D.
        let missing = match (kernel_tcp, &link_out, &self.s.streams) {
            (false, None, _) => Some(AgentError::NoLinkOut.to_string()),
            (true, _, None) => {
                Some("tcp-kernel needs attach points at both ends of `via`".to_string())
            }
            _ => None,
        };
        if let Some(error) = missing {
            self.event(
                "handoff.error",
                serde_json::json!({"handoff": k, "error": error}),
            );
            return;
        }
        let policy = self.s.slot.get();
        let repairs = !matches!(*policy.spec, RepairSpec::NoRepair);
        let deadline = match plan.task.deadline {
            HandoffDeadline::Rho(r) => Deadline::Rho(r),
            HandoffDeadline::Ttft(d) => Deadline::Ttft(d),
        };
        let built = HandoffScenario::over_link(
            layout,
            Arc::clone(&utilities),
            p.kv.payload().into(),
            plan.forward.clone(),
            plan.reverse.clone(),
            deadline,
        )
        .and_then(|mut scenario| {
            scenario.k = plan.task.coding_window;
            scenario.session = k;
            if kernel_tcp {
                // No transport core: the kernel's TCP moves the bytes.
                return Ok((scenario, None));
            }
            let mut core = scenario.sender(plan.spec, repairs, policy.spec.build(), false)?;
            if policy.external.is_some() {
                // Each epoch waits for the policy process (or its deadline).
                core.defer_decisions();
            }
            Ok((scenario, Some(core)))
        });
        let (scenario, core) = match built {
            Ok(b) => b,
            Err(e) => {
                self.event(
                    "handoff.error",
                    serde_json::json!({"handoff": k, "error": e.to_string()}),
                );
                return;
            }
        };
        let deadline = scenario.deadline_ns();
        let offer = HandoffOffer {
            handoff: k,
            t0_ns: t0,
            deadline_ns: deadline,
            rho: scenario.rho,
            layout,
            utilities: utilities.to_vec(),
            tokens: p.kv.tokens.clone(),
            context_id,
            scheme: plan.spec.scheme,
            policy: policy.name.clone(),
            // A hash is shortened; an external version is its URL.
            policy_version: if policy.external.is_some() {
                policy.version.clone()
            } else {
                policy.version.chars().take(12).collect()
            },
            rebuild: plan.task.rebuild,
            decode_tokens: plan.task.decode_tokens,
            k: scenario.k,
            feedback_every: scenario.feedback_every,
            source_packets: layout.n_source_packets(),
            cache_hit: p.hit,
            kernel_tcp: kernel_tcp.then(|| stream_port(self.s.id, k)),
        };
        let port = offer.kernel_tcp;
        let payload: Arc<[u8]> = Arc::clone(&scenario.payload);
        self.send_control(to, AgentMsg::Offer(Box::new(offer)));
        let stats = self.s.cache.stats();
        self.event(
            "handoff.start",
            serde_json::json!({
                "handoff": k, "to": plan.to_name,
                "scheme": if kernel_tcp { KERNEL_TCP_SCHEME } else { plan.spec.name },
                "policy": policy.name, "rho": scenario.rho, "deadline_ns": deadline,
                "cache_hit": p.hit, "cache": stats,
            }),
        );
        let (Some(core), Some((link, link_addr)), None) = (core, link_out, port) else {
            self.start_streaming(k, to, port.unwrap_or(0), payload, t0, deadline, ctx);
            return;
        };
        self.sending = Some(Sending {
            handoff: k,
            paced: PacedSender::new(core, t0, deadline),
            to,
            link,
            link_addr,
        });
        self.tally = HandoffTally::default();
        self.asking = None;
        self.sync_external(ctx);
        self.pump(ctx);
    }

    /// A `tcp-kernel` handoff: the host's stream thread sends the payload
    /// (the KV in block order) from this agent's attach point until the
    /// deadline; just after it, the stream is stopped and its counters go
    /// to the receiver.
    #[allow(clippy::too_many_arguments)]
    fn start_streaming(
        &mut self,
        k: u32,
        to: ActorId,
        port: u16,
        payload: Arc<[u8]>,
        t0: u64,
        deadline: u64,
        ctx: &mut Context<Self>,
    ) {
        // start_sending checked that the host gave this agent streams.
        let Some(streams) = self.s.streams.clone() else {
            return;
        };
        let horizon = self.clock.until(t0.saturating_add(deadline));
        let progress = streams.send(to, port, payload, horizon);
        let end = ctx.run_later(horizon + STREAM_END_SLACK, |act, ctx| {
            act.finish_streaming(ctx)
        });
        self.streaming = Some(Streaming {
            handoff: k,
            to,
            progress,
            end,
        });
        self.poll_streaming(k, ctx);
    }

    /// A stream whose bytes have all been read ends before its deadline:
    /// its counters reach the receiver before it closes.
    fn poll_streaming(&mut self, k: u32, ctx: &mut Context<Self>) {
        let Some(s) = self.streaming.as_ref().filter(|s| s.handoff == k) else {
            return;
        };
        if s.progress.is_finished() {
            ctx.cancel_future(s.end);
            self.finish_streaming(ctx);
            return;
        }
        ctx.run_later(STREAM_POLL, move |act, ctx| act.poll_streaming(k, ctx));
    }

    fn finish_streaming(&mut self, ctx: &mut Context<Self>) {
        let Some(s) = self.streaming.take() else {
            return;
        };
        s.progress.stop();
        let segments = s.progress.segments_out.load(Ordering::Relaxed);
        let retrans = s.progress.retransmissions.load(Ordering::Relaxed);
        let (source_sent, repair_sent) = (clamp_u32(segments), clamp_u32(retrans));
        self.send_control(
            s.to,
            AgentMsg::SenderDone {
                handoff: s.handoff,
                source_sent,
                repair_sent,
            },
        );
        self.event(
            "handoff.sent",
            serde_json::json!({"handoff": s.handoff, "segments_out": segments,
                "retransmissions": retrans, "error": s.progress.error()}),
        );
        if let Some(plan) = &self.s.plan {
            if plan.task.every_ns.is_none() && plan.task.count.is_some_and(|c| s.handoff + 1 < c) {
                self.begin_handoff(s.handoff + 1, ctx);
            }
        }
    }

    fn lookahead(&self) -> u64 {
        if self.s.virtual_time {
            VIRTUAL_LOOKAHEAD_NS
        } else {
            0
        }
    }

    /// Commits what is due up to the clock minus the lookahead, asks the
    /// external policy at a parked decision epoch (or lets the fallback
    /// decide at once when it cannot be asked), then schedules the next
    /// wake-up. While a decision is out, the answer or its deadline pumps
    /// again.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        loop {
            let now = self.clock.now_ns();
            let horizon = now.saturating_sub(self.lookahead());
            let Some(s) = &mut self.sending else { return };
            let mut frames = Vec::new();
            s.paced.pump(horizon, &mut frames);
            for (at, bytes) in frames {
                s.link_addr.do_send(OfferAt {
                    envelope: Envelope {
                        src: self.s.id,
                        dst: s.to,
                        via: Some(s.link),
                        sent_at_ns: at,
                        due_ns: None,
                        payload: Msg::KvFrame(bytes),
                    },
                    at_ns: at,
                });
            }
            if let Some((obs, mask)) = s.paced.pending_decision() {
                if self.asking.is_some() {
                    return;
                }
                let asked = match self.external.as_mut() {
                    Some(ext) => ext
                        .ask(now, WireObs::Repair(RepairArrays::new(&obs, mask)))
                        .map(|id| (id, ext.deadline_ns())),
                    None => Err(FallbackReason::Disconnected),
                };
                match asked {
                    Ok((id, deadline)) => {
                        self.asking = Some(Asking { id, mask });
                        ctx.run_later(
                            std::time::Duration::from_nanos(deadline),
                            move |act, ctx| act.repair_timeout(id, ctx),
                        );
                        return;
                    }
                    Err(reason) => {
                        self.tally
                            .fallback(reason, "no connection to the policy process");
                        s.paced.apply_decision(None, None);
                        continue;
                    }
                }
            }
            match s.paced.next_event_ns() {
                Some(t) => self.wake_at(t + self.lookahead(), ctx),
                None => self.finish_sending(ctx),
            }
            return;
        }
    }

    /// Answers the decision out (`action`: the external policy's, checked;
    /// `None`: the fallback's) at the current time, and pumps on.
    fn answer(
        &mut self,
        action: Option<edgemu_policies::repair::RepairAction>,
        ctx: &mut Context<Self>,
    ) {
        self.asking = None;
        let now = self.clock.now_ns();
        if let Some(s) = self.sending.as_mut() {
            s.paced.apply_decision(Some(now), action);
        }
        self.pump(ctx);
    }

    /// Decision `id`'s deadline: if it is still out, the fallback decides.
    fn repair_timeout(&mut self, id: u64, ctx: &mut Context<Self>) {
        if self.asking.as_ref().map(|a| a.id) != Some(id) {
            return;
        }
        let expired = self.external.as_mut().is_some_and(|e| e.expire(id));
        let reason = if expired {
            FallbackReason::Timeout
        } else {
            FallbackReason::Disconnected
        };
        self.tally.fallback(reason, "no answer within the deadline");
        self.answer(None, ctx);
    }

    /// An answer (or a connection change) from the policy process.
    fn external_event(&mut self, ev: PolicyEvent, ctx: &mut Context<Self>) {
        let now = self.clock.now_ns();
        let Some(ext) = self.external.as_mut() else {
            return;
        };
        let asking = self.asking.as_ref().map(|a| (a.id, a.mask));
        match ext.on_event(now, ev) {
            Outcome::Nothing => {}
            Outcome::Link { up, detail } => {
                self.event(
                    "policy.connection",
                    serde_json::json!({"problem": "repair", "up": up, "detail": detail}),
                );
                self.publish();
            }
            Outcome::Fallback { id, reason, detail } => {
                if asking.is_some_and(|(a, _)| a == id) {
                    self.tally.fallback(reason, &detail);
                    self.answer(None, ctx);
                }
            }
            Outcome::Action { id, action } => {
                let Some((_, mask)) = asking.filter(|(a, _)| *a == id) else {
                    return;
                };
                match parse_repair_action(&action, mask) {
                    Ok(a) => {
                        ext.accept(id);
                        self.tally.decisions += 1;
                        self.tally.answered += 1;
                        self.answer(Some(a), ctx);
                    }
                    Err(e) => {
                        ext.refuse(id);
                        self.tally
                            .fallback(FallbackReason::Malformed, &e.to_string());
                        self.answer(None, ctx);
                    }
                }
            }
        }
    }

    /// Follows the repair slot's active version: an external one gets (or
    /// keeps) its connection, any other closes it. Counters are kept.
    fn sync_external(&mut self, ctx: &mut Context<Self>) {
        match self.s.slot.get().external.clone() {
            Some(target) if !self.external_closed => {
                let ext = self
                    .external
                    .get_or_insert_with(|| ExternalDecider::new("repair", Arc::clone(&target)));
                ext.retarget(target);
                ext.ensure_connected(ctx.address().recipient());
            }
            _ => {
                // A handoff that started external finishes with its fallback.
                if self.asking.is_none() {
                    if let Some(ext) = self.external.as_mut() {
                        ext.disconnect();
                        self.publish();
                    }
                    self.external = None;
                }
            }
        }
    }

    fn publish(&self) {
        if let Some(ext) = &self.external {
            self.s.external.publish(&self.s.name, ext.stats());
        }
    }

    /// The handoff's external decisions, one event (not one per decision).
    fn log_tally(&mut self, handoff: u32) {
        let t = std::mem::take(&mut self.tally);
        if t.decisions == 0 {
            return;
        }
        self.publish();
        let fallbacks: u64 = t.fallbacks.iter().sum();
        if fallbacks == 0 {
            return;
        }
        let by_reason: serde_json::Map<String, serde_json::Value> = FallbackReason::ALL
            .iter()
            .zip(t.fallbacks)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (r.label().to_string(), n.into()))
            .collect();
        let (first_reason, first_detail) = t
            .first
            .map(|(r, d)| (r.label(), d))
            .unwrap_or(("", String::new()));
        let fallback = self
            .s
            .slot
            .get()
            .external
            .as_ref()
            .map(|e| e.fallback.clone());
        self.event(
            "policy.fallback",
            serde_json::json!({
                "problem": "repair", "handoff": handoff, "decisions": t.decisions,
                "answered": t.answered, "fallbacks": fallbacks, "by_reason": by_reason,
                "first": {"reason": first_reason, "detail": first_detail},
                "fallback": fallback,
            }),
        );
    }

    fn wake_at(&mut self, at: u64, ctx: &mut Context<Self>) {
        if let Some((t, h)) = self.wake {
            if t <= at {
                return;
            }
            ctx.cancel_future(h);
        }
        let h = ctx.run_later(self.clock.until(at), |act, ctx| {
            act.wake = None;
            act.pump(ctx);
        });
        self.wake = Some((at, h));
    }

    fn finish_sending(&mut self, ctx: &mut Context<Self>) {
        let Some(s) = self.sending.take() else { return };
        if let Some((_, h)) = self.wake.take() {
            ctx.cancel_future(h);
        }
        let st = *s.paced.core().stats();
        self.send_control(
            s.to,
            AgentMsg::SenderDone {
                handoff: s.handoff,
                source_sent: st.source_sent,
                repair_sent: st.repair_sent,
            },
        );
        self.event(
            "handoff.sent",
            serde_json::json!({"handoff": s.handoff, "source_sent": st.source_sent, "repair_sent": st.repair_sent}),
        );
        self.log_tally(s.handoff);
        // `count` without `every`: the next handoff follows this one.
        if let Some(plan) = &self.s.plan {
            if plan.task.every_ns.is_none() && plan.task.count.is_some_and(|c| s.handoff + 1 < c) {
                let k = s.handoff + 1;
                self.begin_handoff(k, ctx);
            }
        }
    }

    fn abort_sending(&mut self, reason: &str, ctx: &mut Context<Self>) -> u64 {
        if let Some(s) = self.streaming.take() {
            ctx.cancel_future(s.end);
            s.progress.stop();
            self.send_control(
                s.to,
                AgentMsg::Abort {
                    handoff: s.handoff,
                    reason: reason.to_string(),
                    repair_sent: 0,
                },
            );
            self.event(
                "handoff.abort",
                serde_json::json!({"handoff": s.handoff, "side": "sender", "reason": reason}),
            );
            return 1;
        }
        let Some(s) = self.sending.take() else {
            return 0;
        };
        if let Some((_, h)) = self.wake.take() {
            ctx.cancel_future(h);
        }
        let repair_sent = s.paced.core().stats().repair_sent;
        if self.asking.take().is_some() {
            if let Some(ext) = self.external.as_mut() {
                ext.abandon();
            }
        }
        self.log_tally(s.handoff);
        self.send_control(
            s.to,
            AgentMsg::Abort {
                handoff: s.handoff,
                reason: reason.to_string(),
                repair_sent,
            },
        );
        self.event(
            "handoff.abort",
            serde_json::json!({"handoff": s.handoff, "side": "sender", "reason": reason}),
        );
        1
    }

    // ---- receiving -----------------------------------------------------

    fn offer(&mut self, from: ActorId, offer: HandoffOffer, ctx: &mut Context<Self>) {
        if !self.live.is_alive() {
            return;
        }
        // The offer comes from a peer: bound the work and the memory it asks
        // of this host (the limits cluster.toml puts on a task, and this
        // agent's KV budget, `kv_cache`) before anything is allocated.
        if let Err(why) = offer_within_limits(&offer, self.s.cache.capacity_bytes()) {
            self.event(
                "handoff.error",
                serde_json::json!({"handoff": offer.handoff, "from": self.name_of(from),
                    "error": format!("offer refused: {why}")}),
            );
            return;
        }
        if let Some(old) = self.receiving.remove(&from) {
            ctx.cancel_future(old.close);
            self.record_aborted(old, "superseded by a newer handoff");
        }
        let grace = if self.s.virtual_time {
            VIRTUAL_CLOSE_GRACE_NS
        } else {
            0
        };
        // Peer-supplied times: saturate rather than overflow.
        let close_at = offer
            .t0_ns
            .saturating_add(offer.deadline_ns)
            .saturating_add(grace);
        let incoming = match offer.kernel_tcp {
            Some(port) => Incoming::Stream(match &self.s.streams {
                Some(streams) => streams.receive(
                    from,
                    port,
                    offer.layout.total_bytes(),
                    self.clock.until(close_at) + STREAM_END_SLACK,
                ),
                None => {
                    StreamProgress::failed("tcp-kernel needs attach points at both ends of `via`")
                }
            }),
            None => {
                let cfg = ReceiverConfig {
                    session: offer.handoff,
                    deadline_ns: offer.deadline_ns,
                    feedback_every: offer.feedback_every,
                    max_repair_count: offer.k,
                };
                let core = match HandoffReceiver::new(
                    cfg,
                    offer.layout,
                    offer.utilities.clone().into(),
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        self.event(
                            "handoff.error",
                            serde_json::json!({"handoff": offer.handoff, "from": self.name_of(from), "error": e.to_string()}),
                        );
                        return;
                    }
                };
                Incoming::Frames(Box::new(core))
            }
        };
        let close = ctx.run_later(self.clock.until(close_at), move |act, ctx| {
            act.close(from, ctx)
        });
        self.receiving.insert(
            from,
            Receiving {
                offer,
                from,
                incoming,
                sender_counts: None,
                close,
            },
        );
    }

    fn frame(&mut self, from: ActorId, recv_ns: u64, bytes: &[u8]) {
        if !self.live.is_alive() {
            return;
        }
        let Some(r) = self.receiving.get_mut(&from) else {
            return;
        };
        // A stream's handoff takes no frames.
        let Incoming::Frames(core) = &mut r.incoming else {
            return;
        };
        let t = recv_ns.saturating_sub(r.offer.t0_ns);
        // A rejected frame is counted by the core.
        let _ = core.handle_packet(t, bytes);
        if let Some(fb) = core.poll_transmit(t) {
            if let Some((link, addr)) = self.s.links_out.get(&from) {
                addr.do_send(OfferAt {
                    envelope: Envelope {
                        src: self.s.id,
                        dst: from,
                        via: Some(*link),
                        sent_at_ns: recv_ns,
                        due_ns: None,
                        payload: Msg::KvFeedback(fb),
                    },
                    at_ns: recv_ns,
                });
            }
        }
    }

    fn base_record(&self, r: &Receiving) -> HandoffRecord {
        let o = &r.offer;
        let rep = r.report();
        HandoffRecord {
            handoff: o.handoff,
            from: self.name_of(r.from),
            to: self.s.name.clone(),
            scheme: if o.kernel_tcp.is_some() {
                KERNEL_TCP_SCHEME.to_string()
            } else {
                o.scheme.name().to_string()
            },
            policy: o.policy.clone(),
            policy_version: o.policy_version.clone(),
            context: o.context_id.clone(),
            rho: o.rho,
            deadline_ns: o.deadline_ns,
            start_ns: o.t0_ns,
            bytes: o.layout.total_bytes() as u64,
            source_packets: o.source_packets,
            source_sent: r.sender_counts.map(|c| c.0),
            repair_sent: r.sender_counts.map(|c| c.1),
            packets_received: rep.frames_received,
            repairs_received: rep.repairs_received,
            recovered_utility: rep.recovered_utility,
            blocks_complete: rep.blocks_complete,
            n_blocks: rep.n_blocks,
            decoded_prefix: rep.decoded_prefix,
            sender_cache_hit: o.cache_hit,
            ..HandoffRecord::default()
        }
    }

    fn record_aborted(&self, r: Receiving, reason: &str) {
        if let Incoming::Stream(stream) = &r.incoming {
            stream.stop();
        }
        let mut rec = self.base_record(&r);
        rec.outcome = format!("aborted:{reason}");
        rec.write(&self.table);
        self.event(
            "handoff.abort",
            serde_json::json!({"handoff": rec.handoff, "side": "receiver", "from": rec.from, "reason": reason}),
        );
    }

    /// D: rebuild and decode with the server's engine.
    fn close(&mut self, from: ActorId, ctx: &mut Context<Self>) {
        let Some(r) = self.receiving.remove(&from) else {
            return;
        };
        let mut rec = self.base_record(&r);
        let decode_start = if self.s.virtual_time {
            r.offer.t0_ns.saturating_add(r.offer.deadline_ns)
        } else {
            self.clock.now_ns()
        };
        let mode = match r.offer.rebuild {
            RebuildMode::Mask => MissingRows::Mask,
            RebuildMode::ZeroFill => MissingRows::ZeroFill,
        };
        let n = r.offer.decode_tokens as usize;
        let t0 = r.offer.t0_ns;
        let context = r.offer.tokens.clone();
        let received = match r.incoming {
            // The stream's in-order prefix, in block order.
            Incoming::Stream(stream) => {
                stream.stop();
                let bytes = stream.take_bytes();
                let kv = ReceivedKv::from_prefix(r.offer.layout, &bytes);
                rec.recovered_utility = kv.recovered_utility(&r.offer.utilities);
                rec.blocks_complete = kv.blocks.iter().filter(|b| b.is_complete()).count() as u32;
                rec.decoded_prefix = source_packets_in(r.offer.layout, bytes.len());
                if let Some(e) = stream.error() {
                    self.event(
                        "handoff.stream",
                        serde_json::json!({"handoff": rec.handoff, "from": rec.from, "error": e}),
                    );
                }
                kv
            }
            Incoming::Frames(core) => core.into_received(),
        };
        self.compute
            .send(Decode {
                context,
                received,
                mode,
                tokens: n,
            })
            .into_actor(self)
            .map(move |res, act, ctx| {
                let res: Result<Decoded, AgentError> =
                    res.map_err(AgentError::Compute).and_then(|r| r);
                let mut rec = rec;
                match res {
                    Ok(d) => {
                        // Virtual: D plus the decode's modeled time; wall
                        // clock: the decode ran on the engine's thread.
                        let first = decode_start.saturating_add(d.first_token_ns);
                        rec.ttft_ms = Some(first.saturating_sub(t0) as f64 / 1e6);
                        rec.tokens_decoded = d.tokens.len() as u32;
                        rec.agreement = Some(d.agreement);
                        rec.text = d.text;
                        rec.outcome = "ok".into();
                    }
                    Err(e) => rec.outcome = format!("aborted:decode failed: {e}"),
                }
                act.finish_record(from, rec, ctx);
            })
            .spawn(ctx);
    }

    /// A decoded handoff's row: written now if the sender's counts are in,
    /// else when they come, or after [`SENDER_COUNTS_GRACE`] without them.
    fn finish_record(&mut self, from: ActorId, mut rec: HandoffRecord, ctx: &mut Context<Self>) {
        let key = (from, rec.handoff);
        if rec.source_sent.is_none() {
            if let Some((source, repair)) = self.late_counts.remove(&key) {
                rec.source_sent = Some(source);
                rec.repair_sent = Some(repair);
            } else if !self.s.virtual_time {
                self.awaiting_counts.insert(key, rec);
                ctx.run_later(SENDER_COUNTS_GRACE, move |act, _| {
                    if let Some(rec) = act.awaiting_counts.remove(&key) {
                        act.write_record(rec);
                    }
                });
                return;
            }
        }
        self.write_record(rec);
    }

    fn write_record(&self, rec: HandoffRecord) {
        rec.write(&self.table);
        self.event(
            "handoff.done",
            serde_json::json!({
                "handoff": rec.handoff, "from": rec.from, "utility": rec.recovered_utility,
                "ttft_ms": rec.ttft_ms, "tokens": rec.tokens_decoded, "outcome": rec.outcome,
            }),
        );
    }

    /// A sender's counts for a handoff this agent no longer receives.
    fn late_sender_counts(&mut self, from: ActorId, handoff: u32, counts: (u32, u32)) {
        let key = (from, handoff);
        if let Some(mut rec) = self.awaiting_counts.remove(&key) {
            (rec.source_sent, rec.repair_sent) = (Some(counts.0), Some(counts.1));
            self.write_record(rec);
            return;
        }
        if self.late_counts.len() >= LATE_COUNTS {
            self.late_counts.pop_first();
        }
        self.late_counts.insert(key, counts);
    }

    fn control(&mut self, from: ActorId, msg: AgentMsg, ctx: &mut Context<Self>) {
        match msg {
            AgentMsg::Offer(o) => self.offer(from, *o, ctx),
            AgentMsg::Abort {
                handoff,
                reason,
                repair_sent,
            } => {
                let matches = self
                    .receiving
                    .get(&from)
                    .is_some_and(|r| r.offer.handoff == handoff);
                if matches {
                    if let Some(mut r) = self.receiving.remove(&from) {
                        ctx.cancel_future(r.close);
                        r.sender_counts = Some((r.report().frames_received, repair_sent));
                        self.record_aborted(r, &format!("sender {reason}"));
                    }
                }
            }
            AgentMsg::SenderDone {
                handoff,
                source_sent,
                repair_sent,
            } => match self.receiving.get_mut(&from) {
                Some(r) if r.offer.handoff == handoff => {
                    r.sender_counts = Some((source_sent, repair_sent));
                }
                _ => self.late_sender_counts(from, handoff, (source_sent, repair_sent)),
            },
        }
    }
}

impl Actor for AgentActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // External policies are refused in virtual time (cluster.toml and
        // policy.swap): only a real-time agent watches its slot.
        if !self.s.virtual_time && self.s.plan.is_some() {
            if self.s.slot.get().external.is_some() {
                self.sync_external(ctx);
            }
            ctx.run_interval(EXTERNAL_CHECK, |act, ctx| {
                if act.s.slot.get().external.is_some() || act.external.is_some() {
                    act.sync_external(ctx);
                    act.publish();
                }
            });
        }
        let Some(plan) = &self.s.plan else { return };
        let t = &plan.task;
        let msg = super::engine::SetupTask {
            source: t.contexts,
            n_tokens: t.context_tokens,
            count: t.context_count,
            seed: t.context_seed,
        };
        self.compute
            .send(msg)
            .into_actor(self)
            .map(
                |res, act, ctx| match res.map_err(AgentError::Compute).and_then(|r| r) {
                    Ok(setup) => {
                        act.event(
                            "agent.ready",
                            serde_json::json!({
                                "contexts": setup.contexts.len(), "blocks": setup.layout.n_blocks(),
                                "source_packets": setup.layout.n_source_packets(),
                                "utilities": setup.utilities_from,
                            }),
                        );
                        act.setup = Some(setup);
                        act.schedule_handoff(0, ctx);
                    }
                    Err(e) => {
                        tracing::error!(agent = %act.s.name, error = %e, "agent cannot hand off");
                        act.event("agent.error", serde_json::json!({"error": e.to_string()}));
                    }
                },
            )
            .spawn(ctx);
    }
}

impl Handler<Deliver> for AgentActor {
    type Result = ();
    fn handle(&mut self, msg: Deliver, ctx: &mut Context<Self>) {
        let env = msg.envelope;
        if !self.live.is_alive() {
            return;
        }
        match env.payload {
            Msg::Agent(m) => self.control(env.src, m, ctx),
            Msg::KvFrame(bytes) => self.frame(env.src, msg.recv_ns, &bytes),
            Msg::KvFeedback(bytes) => {
                // Feedback of the handoff this agent is sending, from its receiver.
                if let Some(s) = self.sending.as_mut().filter(|s| s.to == env.src) {
                    s.paced.feedback(msg.recv_ns, bytes);
                    let at = msg.recv_ns.saturating_add(self.lookahead());
                    self.wake_at(at, ctx);
                }
            }
            _ => {}
        }
    }
}

/// The end of the run: the external policy's connection closes (with a
/// websocket close) and the final counters are published.
impl Handler<crate::messages::Flush> for AgentActor {
    type Result = Vec<crate::probes::FlowSummary>;
    fn handle(&mut self, _: crate::messages::Flush, ctx: &mut Context<Self>) -> Self::Result {
        self.external_closed = true;
        // The run is over: rows still waiting for their sender's counts are
        // written without them.
        for (_, rec) in std::mem::take(&mut self.awaiting_counts) {
            self.write_record(rec);
        }
        if self.asking.take().is_some() {
            if let Some(ext) = self.external.as_mut() {
                ext.abandon();
            }
        }
        self.sync_external(ctx);
        Vec::new()
    }
}

impl Handler<PolicyEvent> for AgentActor {
    type Result = ();
    fn handle(&mut self, ev: PolicyEvent, ctx: &mut Context<Self>) {
        self.external_event(ev, ctx);
    }
}

impl Handler<ActorFault> for AgentActor {
    type Result = FaultReply;
    fn handle(&mut self, msg: ActorFault, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_ns();
        match msg {
            ActorFault::Kill { until_ns, by } => {
                let Some(epoch) = self.live.kill() else {
                    return FaultReply::unchanged(now, "already dead");
                };
                let reason = format!("killed by {by}");
                let mut dropped = self.abort_sending(&reason, ctx);
                let receiving: Vec<ActorId> = self.receiving.keys().copied().collect();
                for from in receiving {
                    if let Some(r) = self.receiving.remove(&from) {
                        ctx.cancel_future(r.close);
                        self.record_aborted(r, &reason);
                        dropped += 1;
                    }
                }
                restart_later(ctx, until_ns.map(|u| self.clock.until(u)), epoch);
                self.event(
                    "agent.kill",
                    serde_json::json!({"by": by, "handoffs_dropped": dropped}),
                );
                FaultReply::killed(
                    now,
                    dropped,
                    format!("aborted {dropped} handoff(s)"),
                    until_ns,
                )
            }
            ActorFault::Restart { by } => restart(self, &by, ctx),
        }
    }
}

impl SelfRestart for AgentActor {
    fn liveness(&mut self) -> &mut Liveness {
        &mut self.live
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn restarted_detail(&self) -> &'static str {
        "idle, ready for the next handoff"
    }
    fn log_restart(&mut self, _: u64, by: Option<&str>) {
        self.event(
            "agent.restart",
            serde_json::json!({"by": by.unwrap_or("kill for")}),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cluster_toml_default_window_is_the_harness_default() {
        assert_eq!(
            edgemu_config::agent::DEFAULT_CODING_WINDOW,
            edgemu_handoff::scenario::DEFAULT_K
        );
        const _: () = assert!(edgemu_handoff::scenario::DEFAULT_K <= super::MAX_CODING_WINDOW);
    }

    fn offer(layout: edgemu_handoff::BlockLayout) -> super::HandoffOffer {
        super::HandoffOffer {
            handoff: 1,
            t0_ns: 0,
            deadline_ns: 1_000_000_000,
            rho: 0.8,
            layout,
            utilities: vec![1.0; layout.n_blocks() as usize],
            tokens: vec![1; layout.n_tokens as usize],
            context_id: "c".into(),
            scheme: edgemu_handoff::Scheme::PriorityFec,
            policy: "p".into(),
            policy_version: "1".into(),
            rebuild: edgemu_config::RebuildMode::ZeroFill,
            decode_tokens: 8,
            k: 256,
            feedback_every: 4,
            source_packets: layout.n_source_packets(),
            cache_hit: false,
            kernel_tcp: None,
        }
    }

    #[test]
    fn an_offer_is_held_to_the_tasks_limits_and_the_agents_kv_budget() {
        use edgemu_handoff::BlockLayout;
        let budget = 256 << 20;
        // SmolLM2 at the longest context cluster.toml allows: 94 MB.
        let longest = BlockLayout::smollm2(super::MAX_CONTEXT_TOKENS).expect("layout");
        assert_eq!(super::offer_within_limits(&offer(longest), budget), Ok(()));
        // A layout BlockLayout::new accepts but no task makes: 64 GiB of KV.
        let huge = BlockLayout::new(4096, 4096, 16, 65536).expect("a checked layout");
        let why = super::offer_within_limits(&offer(huge), budget).expect_err("refused");
        assert!(why.contains("kv_cache"), "{why}");
        let long = BlockLayout::smollm2(super::MAX_CONTEXT_TOKENS + 16).expect("layout");
        let why = super::offer_within_limits(&offer(long), u64::MAX).expect_err("refused");
        assert!(why.contains("at most 4096"), "{why}");
        // Within the task's limits but over a small agent's budget.
        assert!(super::offer_within_limits(&offer(longest), 1 << 20).is_err());
        let mut o = offer(longest);
        o.decode_tokens = super::MAX_DECODE_TOKENS + 1;
        assert!(super::offer_within_limits(&o, budget).is_err());
        let mut o = offer(longest);
        o.k = 0;
        assert!(super::offer_within_limits(&o, budget).is_err());
    }
}
