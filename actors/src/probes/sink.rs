//! The sink: records every probe packet and answers pings.

use super::{ProbeLog, ProbeRecord, RecordKind};
use crate::clock::Clock;
use crate::messages::{Deliver, Flush, Route};
use actix::prelude::*;
use edgemu_codec::ids::ActorId;
use edgemu_protocol::{Envelope, Msg, Pong};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a flow looked like at its sink (or, for pings, at the pinger).
#[derive(Debug, Clone, Serialize)]
pub struct FlowSummary {
    pub flow: String,
    pub at: String,
    pub kind: RecordKind,
    pub packets: u64,
    pub bytes: u64,
    /// Packets the sender numbered up to the highest one seen, minus those seen.
    pub missing: u64,
    pub first_recv_ns: Option<u64>,
    pub last_recv_ns: Option<u64>,
    /// Received bits per second between the first and last arrival.
    pub throughput_bps: f64,
    /// One-way delay (or round trip for pings), ns.
    pub delay_p50_ns: u64,
    pub delay_p99_ns: u64,
    pub delay_max_ns: u64,
    /// |receive − model arrival|, ns (one-way probes that crossed a link).
    pub delay_err_p50_ns: Option<u64>,
    pub delay_err_p99_ns: Option<u64>,
}

pub(crate) struct FlowStats {
    flow: String,
    at: String,
    kind: RecordKind,
    pub(crate) sent: u64,
    packets: u64,
    bytes: u64,
    max_seq: Option<u64>,
    first: Option<u64>,
    last: Option<u64>,
    bytes_after_first: u64,
    delay: Histogram<u64>,
    err: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // 3 significant digits, auto-resizing: cannot fail with these bounds.
    let mut h = Histogram::new(3).unwrap_or_else(|_| unreachable!("valid sigfig"));
    h.auto(true);
    h
}

impl FlowStats {
    pub(crate) fn new(flow: String, at: String, kind: RecordKind) -> Self {
        FlowStats {
            flow,
            at,
            kind,
            sent: 0,
            packets: 0,
            bytes: 0,
            max_seq: None,
            first: None,
            last: None,
            bytes_after_first: 0,
            delay: histogram(),
            err: histogram(),
        }
    }

    pub(crate) fn add(&mut self, r: &ProbeRecord) {
        self.packets += 1;
        self.bytes += u64::from(r.size);
        self.max_seq = Some(self.max_seq.map_or(r.seq, |m| m.max(r.seq)));
        if self.first.is_some() {
            self.bytes_after_first += u64::from(r.size);
        }
        self.first.get_or_insert(r.recv_ns);
        self.last = Some(r.recv_ns);
        let _ = self.delay.record(r.recv_ns.saturating_sub(r.sent_ns));
        if r.kind == RecordKind::Packet {
            if let Some(due) = r.due_ns {
                let _ = self.err.record(r.recv_ns.abs_diff(due));
            }
        }
    }

    pub(crate) fn summary(&self) -> FlowSummary {
        let span = match (self.first, self.last) {
            (Some(f), Some(l)) if l > f => (l - f) as f64 / 1e9,
            _ => 0.0,
        };
        let seen_range = self.max_seq.map_or(0, |m| m + 1);
        FlowSummary {
            flow: self.flow.clone(),
            at: self.at.clone(),
            kind: self.kind,
            packets: self.packets,
            bytes: self.bytes,
            missing: match self.kind {
                RecordKind::Packet => seen_range.saturating_sub(self.packets),
                RecordKind::Rtt => self.sent.saturating_sub(self.packets),
            },
            first_recv_ns: self.first,
            last_recv_ns: self.last,
            throughput_bps: if span > 0.0 {
                self.bytes_after_first as f64 * 8.0 / span
            } else {
                0.0
            },
            delay_p50_ns: self.delay.value_at_quantile(0.5),
            delay_p99_ns: self.delay.value_at_quantile(0.99),
            delay_max_ns: self.delay.max(),
            delay_err_p50_ns: (!self.err.is_empty()).then(|| self.err.value_at_quantile(0.5)),
            delay_err_p99_ns: (!self.err.is_empty()).then(|| self.err.value_at_quantile(0.99)),
        }
    }
}

pub struct Sink {
    id: ActorId,
    name: String,
    /// Names of all actors, to label flows.
    names: Vec<String>,
    clock: Clock,
    router: Recipient<Route>,
    log: Box<dyn ProbeLog>,
    flows: BTreeMap<ActorId, FlowStats>,
}

impl Sink {
    pub fn new(
        id: ActorId,
        name: String,
        names: Vec<String>,
        clock: Clock,
        router: Recipient<Route>,
        log: Box<dyn ProbeLog>,
    ) -> Self {
        Sink {
            id,
            name,
            names,
            clock,
            router,
            log,
            flows: BTreeMap::new(),
        }
    }
}

impl Actor for Sink {
    type Context = Context<Self>;
}

impl Handler<Deliver> for Sink {
    type Result = ();
    fn handle(&mut self, msg: Deliver, _: &mut Context<Self>) {
        let env = msg.envelope;
        match &env.payload {
            Msg::Probe(p) => {
                let r = ProbeRecord {
                    kind: RecordKind::Packet,
                    flow: env.src,
                    at: self.id,
                    seq: p.seq,
                    size: p.size,
                    sent_ns: env.sent_at_ns,
                    due_ns: env.due_ns,
                    recv_ns: msg.recv_ns,
                };
                // Names are looked up once per flow, not per packet.
                let (names, at) = (&self.names, &self.name);
                self.flows
                    .entry(env.src)
                    .or_insert_with(|| {
                        let flow = names
                            .get(env.src.0 as usize)
                            .cloned()
                            .unwrap_or_else(|| env.src.to_string());
                        FlowStats::new(flow, at.clone(), RecordKind::Packet)
                    })
                    .add(&r);
                self.log.record(&r);
            }
            Msg::Ping(p) => {
                // Answer at the (virtual-exact) arrival time.
                let now = self.clock.now_ns().max(msg.recv_ns);
                self.router.do_send(Route(Envelope {
                    src: self.id,
                    dst: env.src,
                    via: p.reply_via,
                    sent_at_ns: now,
                    due_ns: None,
                    payload: Msg::Pong(Pong {
                        seq: p.seq,
                        size: p.size,
                        ping_sent_at_ns: env.sent_at_ns,
                    }),
                }));
            }
            Msg::Pong(_)
            | Msg::Lyreo(_)
            | Msg::Agent(_)
            | Msg::KvFrame(_)
            | Msg::KvFeedback(_)
            | Msg::IpPacket(_) => {}
        }
    }
}

impl Handler<Flush> for Sink {
    type Result = MessageResult<Flush>;
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.log.flush();
        MessageResult(self.flows.values().map(FlowStats::summary).collect())
    }
}
