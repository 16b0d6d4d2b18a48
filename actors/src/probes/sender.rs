//! Constant-rate and bursty senders.

use crate::clock::Clock;
use crate::messages::{Route, StopSending};
use actix::prelude::*;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_protocol::{Envelope, Msg, Probe};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub enum SenderPattern {
    /// One packet every `gap_ns`.
    Constant { gap_ns: u64 },
    /// `burst` packets at once every `interval_ns`.
    Bursty { burst: u32, interval_ns: u64 },
}

pub struct Sender {
    id: ActorId,
    to: ActorId,
    via: Option<LinkId>,
    size: u32,
    pattern: SenderPattern,
    start_ns: u64,
    stop_ns: Option<u64>,
    clock: Clock,
    router: Recipient<Route>,
    next_ns: u64,
    seq: u64,
    stopped: bool,
    real_bytes: bool,
}

/// Senders wake at most this often; everything due since the last wake-up
/// is sent at once, and the link's serialization paces it.
const MIN_TICK: Duration = Duration::from_micros(500);

impl Sender {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: ActorId,
        to: ActorId,
        via: Option<LinkId>,
        size: u32,
        pattern: SenderPattern,
        start_ns: u64,
        stop_ns: Option<u64>,
        clock: Clock,
        router: Recipient<Route>,
    ) -> Self {
        Sender {
            id,
            to,
            via,
            size,
            pattern,
            start_ns,
            stop_ns,
            clock,
            router,
            next_ns: start_ns,
            seq: 0,
            stopped: false,
            real_bytes: false,
        }
    }

    /// Each packet carries `size` real bytes instead of a declared size.
    pub fn with_real_bytes(mut self, real_bytes: bool) -> Self {
        self.real_bytes = real_bytes;
        self
    }

    pub fn sent(&self) -> u64 {
        self.seq
    }

    fn send_one(&mut self, now: u64) {
        let env = Envelope {
            src: self.id,
            dst: self.to,
            via: self.via,
            sent_at_ns: now,
            due_ns: None,
            payload: Msg::Probe(Probe {
                seq: self.seq,
                size: self.size,
                pad: if self.real_bytes {
                    vec![0x5a; self.size as usize]
                } else {
                    Vec::new()
                },
            }),
        };
        self.seq += 1;
        self.router.do_send(Route(env));
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.stopped {
            return;
        }
        let now = self.clock.now_ns();
        while self.next_ns <= now {
            if self.stop_ns.is_some_and(|s| self.next_ns >= s) {
                self.stopped = true;
                return;
            }
            match self.pattern {
                SenderPattern::Constant { gap_ns } => {
                    self.send_one(now);
                    self.next_ns = self.next_ns.saturating_add(gap_ns.max(1));
                }
                SenderPattern::Bursty { burst, interval_ns } => {
                    for _ in 0..burst {
                        self.send_one(now);
                    }
                    self.next_ns = self.next_ns.saturating_add(interval_ns.max(1));
                }
            }
        }
        let wait = self.clock.until(self.next_ns).max(MIN_TICK);
        ctx.run_later(wait, |act, ctx| act.tick(ctx));
    }
}

impl Actor for Sender {
    type Context = Context<Self>;
    fn started(&mut self, ctx: &mut Context<Self>) {
        let wait = self.clock.until(self.start_ns);
        ctx.run_later(wait, |act, ctx| act.tick(ctx));
    }
}

impl Handler<StopSending> for Sender {
    type Result = ();
    fn handle(&mut self, _: StopSending, _: &mut Context<Self>) {
        self.stopped = true;
    }
}
