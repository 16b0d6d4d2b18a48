//! [`LinkModel`]: one direction of a link as a pure state machine.
//!
//! The model composes the stages in the order documented in the crate root
//! (up/down → drop-tail queue → rate → loss → delay) and keeps the packets
//! it has accepted until their due time, quinn-proto style: the caller
//! offers packets, asks [`LinkModel::next_due`] when to wake up, and
//! [`LinkModel::poll`]s arrivals out. Everything is decided at offer time,
//! so [`Offer::Accepted`] already carries the arrival time.
//!
//! Rules worth knowing:
//! - **Time.** All times are u64 ns on the caller's clock. `now` never runs
//!   backwards inside the model: an `offer`/`set_params`/`restore` with an
//!   earlier `now` than one seen before is treated as the latest seen. All
//!   arithmetic saturates at `u64::MAX`; nothing panics on any parameters.
//! - **Loss** is decided when the packet goes on the wire (its
//!   serialization start; that instant is what a loss trace is looked up
//!   at). On a `Reliable` link each loss adds one retransmission delay,
//!   2·delay + size·8/rate, and the loss model is drawn again for the
//!   retransmission (sent at start + k·retransmission delay), up to
//!   [`MAX_RETRANSMISSIONS`], after which the packet is delivered anyway.
//!   Retransmissions are drawn at offer time, before later packets' first
//!   transmissions, and do not occupy the serializer (a simplification).
//! - **Delay.** due = serialization end + delay + retransmissions + jitter,
//!   jitter uniform in [0, jitter_ns]. Without `reorder`, due is raised to
//!   the latest due so far (FIFO: jitter and retransmissions then delay the
//!   packets behind, like head-of-line blocking). With `reorder`, packets
//!   come out by due time, ties in offer order.
//! - **Randomness.** ChaCha8 seeded from `seed`, one stream for loss and one
//!   for jitter, so turning jitter on does not change which packets are lost.
//! - **Kill/restore.** `kill` drops everything queued or in flight (counted
//!   as `down_dropped`) and refuses offers until `restore`, which brings
//!   the link back idle with the loss chain in Good. Restoring a link that
//!   is up does nothing. Counters survive both.
//! - **set_params.** Accepted packets keep their due times; the new rate
//!   applies from the next serialization (which still starts no earlier
//!   than the previous packet's end); a changed rate spec restarts trace
//!   time at `now`; the loss model (and loss-trace time) is rebuilt only
//!   when the loss spec changes.

use crate::counters::LinkCounters;
use crate::loss::LossModel;
use crate::queue::DropTailQueue;
use crate::rate::{retransmission_ns, Serializer};
use crate::{Delivery, LinkParams, RateSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Retransmissions a reliable link adds to one packet at most.
pub const MAX_RETRANSMISSIONS: u64 = 64;

/// What happened to an offered packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Offer {
    /// The packet will arrive at `due_ns`.
    Accepted {
        due_ns: u64,
    },
    Dropped(DropReason),
}

/// Why a packet was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The link is killed (or its rate is 0 bps).
    Down,
    /// The drop-tail queue is full.
    QueueFull,
    /// The loss model erased it (datagram links only).
    Lost,
}

/// A packet leaving the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival<P> {
    pub due_ns: u64,
    pub offered_ns: u64,
    pub size: u32,
    pub packet: P,
}

/// A packet held until its due time. Ordered so that `BinaryHeap` (a
/// max-heap) pops the smallest (due, seq) first.
#[derive(Debug)]
struct InFlight<P> {
    due_ns: u64,
    seq: u64,
    offered_ns: u64,
    size: u32,
    packet: P,
}

impl<P> InFlight<P> {
    fn key(&self) -> (u64, u64) {
        (self.due_ns, self.seq)
    }
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<P> Eq for InFlight<P> {}

impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// One direction of a link (see the module docs).
#[derive(Debug)]
pub struct LinkModel<P> {
    params: LinkParams,
    up: bool,
    clock_ns: u64,
    serializer: Serializer,
    queue: DropTailQueue,
    loss: LossModel,
    loss_origin_ns: u64,
    loss_rng: ChaCha8Rng,
    jitter_rng: ChaCha8Rng,
    in_flight: BinaryHeap<InFlight<P>>,
    next_seq: u64,
    last_due_ns: u64,
    counters: LinkCounters,
}

impl<P> LinkModel<P> {
    /// An idle, up link at time 0, deterministic given `seed`.
    pub fn new(params: LinkParams, seed: u64) -> Self {
        let mut loss_rng = ChaCha8Rng::seed_from_u64(seed);
        loss_rng.set_stream(0);
        let mut jitter_rng = ChaCha8Rng::seed_from_u64(seed);
        jitter_rng.set_stream(1);
        LinkModel {
            loss: LossModel::from_spec(&params.loss),
            params,
            up: true,
            clock_ns: 0,
            serializer: Serializer::new(0),
            queue: DropTailQueue::default(),
            loss_origin_ns: 0,
            loss_rng,
            jitter_rng,
            in_flight: BinaryHeap::new(),
            next_seq: 0,
            last_due_ns: 0,
            counters: LinkCounters::new(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Whether the link is up (not killed).
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Packets accepted and not yet polled out.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Bytes accepted whose serialization has not started by `now_ns` (the
    /// drop-tail queue's occupancy; see [`crate::queue`]).
    pub fn queued_bytes(&self, now_ns: u64) -> u64 {
        self.queue.waiting_bytes(now_ns)
    }

    fn tick(&mut self, now_ns: u64) -> u64 {
        self.clock_ns = self.clock_ns.max(now_ns);
        self.clock_ns
    }

    /// Offers a packet of `size` bytes at `now_ns`.
    pub fn offer(&mut self, now_ns: u64, size: u32, packet: P) -> Offer {
        let now = self.tick(now_ns);
        self.counters.offered += 1;
        self.counters.bytes_offered = self.counters.bytes_offered.saturating_add(u64::from(size));
        if !self.up {
            self.counters.down_dropped += 1;
            return Offer::Dropped(DropReason::Down);
        }
        // Stage 2 needs the start time stage 3 computes, but stage 3 only
        // commits once the queue has accepted.
        let Some(slot) = self.serializer.plan(&self.params.rate, now, size) else {
            self.counters.down_dropped += 1;
            return Offer::Dropped(DropReason::Down);
        };
        self.queue.release(now);
        let waits = slot.start_ns > now;
        if waits && !self.queue.admits(self.params.queue_bytes, size) {
            self.counters.queue_dropped += 1;
            return Offer::Dropped(DropReason::QueueFull);
        }
        self.serializer.commit(&slot);
        if waits {
            self.queue.push(slot.start_ns, size);
        }

        let retx_ns = retransmission_ns(&self.params.rate, self.params.delay_ns, size);
        let mut losses: u64 = 0;
        loop {
            let sent_ns = slot.start_ns.saturating_add(losses.saturating_mul(retx_ns));
            let trace_ns = sent_ns.saturating_sub(self.loss_origin_ns);
            if !self.loss.lose(&mut self.loss_rng, trace_ns) {
                break;
            }
            match self.params.delivery {
                Delivery::Datagram => {
                    self.counters.lost += 1;
                    return Offer::Dropped(DropReason::Lost);
                }
                Delivery::Reliable => {
                    losses += 1;
                    if losses >= MAX_RETRANSMISSIONS {
                        break;
                    }
                }
            }
        }
        self.counters.retransmissions += losses;

        let jitter = match self.params.jitter_ns {
            0 => 0,
            j => self.jitter_rng.random_range(0..=j),
        };
        let mut due_ns = slot
            .end_ns
            .saturating_add(self.params.delay_ns)
            .saturating_add(losses.saturating_mul(retx_ns))
            .saturating_add(jitter);
        if !self.params.reorder {
            due_ns = due_ns.max(self.last_due_ns);
        }
        self.last_due_ns = self.last_due_ns.max(due_ns);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight.push(InFlight {
            due_ns,
            seq,
            offered_ns: now,
            size,
            packet,
        });
        Offer::Accepted { due_ns }
    }

    /// The earliest due time of the packets held.
    pub fn next_due(&self) -> Option<u64> {
        self.in_flight.peek().map(|p| p.due_ns)
    }

    /// Pops one packet due at or before `now_ns`; call until `None` to
    /// release everything due.
    pub fn poll(&mut self, now_ns: u64) -> Option<Arrival<P>> {
        if self.in_flight.peek()?.due_ns > now_ns {
            return None;
        }
        let p = self.in_flight.pop()?;
        self.counters.delivered += 1;
        self.counters.bytes_delivered = self
            .counters
            .bytes_delivered
            .saturating_add(u64::from(p.size));
        self.counters
            .record_delay(p.due_ns.saturating_sub(p.offered_ns));
        Some(Arrival {
            due_ns: p.due_ns,
            offered_ns: p.offered_ns,
            size: p.size,
            packet: p.packet,
        })
    }

    /// Takes the link down, dropping every packet queued or in flight;
    /// returns how many.
    pub fn kill(&mut self, now_ns: u64) -> usize {
        self.tick(now_ns);
        let n = self.in_flight.len();
        self.in_flight.clear();
        self.queue.clear();
        self.counters.down_dropped += n as u64;
        self.up = false;
        n
    }

    /// Brings a killed link back with fresh state: idle from `now_ns`, empty
    /// queue, loss chain in Good. Does nothing to a link that is up.
    pub fn restore(&mut self, now_ns: u64) {
        let now = self.tick(now_ns);
        if self.up {
            return;
        }
        self.up = true;
        self.serializer.reset(now);
        self.queue.clear();
        self.loss.reset();
        self.last_due_ns = 0;
    }

    /// Replaces the parameters from `now_ns` (see the module docs).
    pub fn set_params(&mut self, now_ns: u64, params: LinkParams) {
        let now = self.tick(now_ns);
        if params.rate != self.params.rate {
            self.serializer.retrace(now);
        }
        if params.loss != self.params.loss {
            self.loss = LossModel::from_spec(&params.loss);
            self.loss_origin_ns = now;
        }
        self.params = params;
    }

    /// Whether the rate spec can carry anything (a `Fixed { bps: 0 }` link
    /// drops every offer as `Down`).
    pub fn carries(&self) -> bool {
        !matches!(self.params.rate, RateSpec::Fixed { bps: 0 })
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
