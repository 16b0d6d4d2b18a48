//! Request/response prober.

use super::{ProbeLog, ProbeRecord, RecordKind};
use crate::clock::Clock;
use crate::messages::{Deliver, Flush, Route, StopSending};
use crate::probes::sink::FlowStats;
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_protocol::{Envelope, Msg, Ping};

pub struct Pinger {
    id: ActorId,
    to: ActorId,
    via: Option<LinkId>,
    reply_via: Option<LinkId>,
    size: u32,
    interval_ns: u64,
    start_ns: u64,
    stop_ns: Option<u64>,
    clock: Clock,
    router: Recipient<Route>,
    log: Box<dyn ProbeLog>,
    seq: u64,
    stopped: bool,
    rtt: FlowStats,
}

impl Pinger {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: ActorId,
        name: String,
        to: ActorId,
        via: Option<LinkId>,
        reply_via: Option<LinkId>,
        size: u32,
        interval_ns: u64,
        start_ns: u64,
        stop_ns: Option<u64>,
        clock: Clock,
        router: Recipient<Route>,
        log: Box<dyn ProbeLog>,
    ) -> Self {
        Pinger {
            id,
            to,
            via,
            reply_via,
            size,
            interval_ns: interval_ns.max(1),
            start_ns,
            stop_ns,
            clock,
            router,
            log,
            seq: 0,
            stopped: false,
            rtt: FlowStats::new(name.clone(), name, RecordKind::Rtt),
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.stopped {
            return;
        }
        let now = self.clock.now_ns();
        if self.stop_ns.is_some_and(|s| now >= s) {
            self.stopped = true;
            return;
        }
        let env = Envelope {
            src: self.id,
            dst: self.to,
            via: self.via,
            sent_at_ns: now,
            due_ns: None,
            payload: Msg::Ping(Ping {
                seq: self.seq,
                size: self.size,
                reply_via: self.reply_via,
            }),
        };
        self.seq += 1;
        self.rtt.sent = self.seq;
        self.router.do_send(Route(env));
        let next = self.start_ns + self.seq.saturating_mul(self.interval_ns);
        ctx.run_later(self.clock.until(next), |act, ctx| act.tick(ctx));
    }
}

impl Actor for Pinger {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_later(self.clock.until(self.start_ns), |act, ctx| act.tick(ctx));
    }
}

impl Handler<Deliver> for Pinger {
    type Result = ();
    fn handle(&mut self, msg: Deliver, _: &mut Context<Self>) {
        if let Msg::Pong(p) = &msg.envelope.payload {
            let r = ProbeRecord {
                kind: RecordKind::Rtt,
                flow: self.id,
                at: self.id,
                seq: p.seq,
                size: p.size,
                sent_ns: p.ping_sent_at_ns,
                due_ns: msg.envelope.due_ns,
                recv_ns: msg.recv_ns,
            };
            self.rtt.add(&r);
            self.log.record(&r);
        }
    }
}

impl Handler<StopSending> for Pinger {
    type Result = ();
    fn handle(&mut self, _: StopSending, _: &mut Context<Self>) {
        self.stopped = true;
    }
}

impl Handler<Flush> for Pinger {
    type Result = MessageResult<Flush>;
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.log.flush();
        MessageResult(vec![self.rtt.summary()])
    }
}
