//! The rate stage: when each packet's serialization starts and ends.
//!
//! Packets are serialized one after another in offer order: a packet starts
//! at `max(now, free_at)`, where `free_at` is when the previous accepted
//! packet finished, and lasts
//! - `Unlimited`: 0;
//! - `Fixed { bps }`: `size·8 / bps` seconds, rounded up to the next ns (so
//!   back-to-back packets lose at most 1 ns each to rounding);
//! - `Trace`: as long as the trace needs to carry `size` bytes (see
//!   [`crate::trace`]); under a step trace the start is the first instant
//!   with a non-zero rate, under mahimahi the first opportunity the packet
//!   uses.
//!
//! `Fixed { bps: 0 }` carries nothing: [`Serializer::plan`] returns `None`
//! and the model drops the packet as `Down` (config validation rejects a 0
//! rate; the model only promises not to divide by zero). Packets lost on a
//! datagram link still use their serialization time — loss happens on the
//! wire.

use crate::trace::{RateTraceKind, MAHIMAHI_MTU};
use crate::RateSpec;

/// [`crate::time::NS_PER_S`] for exact products of bits and nanoseconds.
const NS_PER_S: u128 = crate::time::NS_PER_S as u128;

/// When a packet would be serialized; apply with [`Serializer::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    cursor: u128,
    leftover: u32,
}

/// Serialization state of one link direction.
#[derive(Clone, Debug)]
pub(crate) struct Serializer {
    /// When the last accepted packet finished serializing.
    free_at_ns: u64,
    /// Time 0 of the rate trace.
    origin_ns: u64,
    /// mahimahi: absolute index of the next untouched opportunity.
    cursor: u128,
    /// mahimahi: bytes left in the opportunity at `free_at_ns`.
    leftover: u32,
}

fn to_abs(origin: u64, rel: u128) -> u64 {
    u64::try_from(u128::from(origin).saturating_add(rel)).unwrap_or(u64::MAX)
}

impl Serializer {
    pub(crate) fn new(origin_ns: u64) -> Self {
        Serializer {
            free_at_ns: 0,
            origin_ns,
            cursor: 0,
            leftover: 0,
        }
    }

    /// Where a packet of `size` bytes offered at `now_ns` would go, without
    /// changing any state (a queue-dropped packet must not use capacity).
    /// `None` when the rate is 0 bps.
    pub(crate) fn plan(&self, rate: &RateSpec, now_ns: u64, size: u32) -> Option<Slot> {
        let ready = now_ns.max(self.free_at_ns);
        let same = |start_ns, end_ns| Slot {
            start_ns,
            end_ns,
            cursor: self.cursor,
            leftover: self.leftover,
        };
        if let RateSpec::Fixed { bps: 0 } = rate {
            return None;
        }
        if size == 0 {
            return Some(same(ready, ready));
        }
        match rate {
            RateSpec::Unlimited | RateSpec::Fixed { bps: 0 } => Some(same(ready, ready)),
            &RateSpec::Fixed { bps } => {
                let dur = (u128::from(size) * 8 * NS_PER_S).div_ceil(u128::from(bps));
                let dur = u64::try_from(dur).unwrap_or(u64::MAX);
                Some(same(ready, ready.saturating_add(dur)))
            }
            RateSpec::Trace(trace) => {
                let origin = u128::from(self.origin_ns);
                let ready_rel = u128::from(ready).saturating_sub(origin);
                match trace.kind() {
                    RateTraceKind::Steps(steps) => {
                        let (start, end) = steps.serialize(ready_rel, size);
                        Some(same(
                            to_abs(self.origin_ns, start),
                            to_abs(self.origin_ns, end),
                        ))
                    }
                    RateTraceKind::Opportunities(opp) => {
                        let now_rel = u128::from(now_ns).saturating_sub(origin);
                        let free_rel = u128::from(self.free_at_ns).saturating_sub(origin);
                        let mut rem = size;
                        let mut start = None;
                        let mut leftover = 0;
                        // Leftover of the opportunity the previous packet
                        // finished in: ours if we were already waiting.
                        if self.leftover > 0 && now_rel <= free_rel {
                            let take = self.leftover.min(rem);
                            rem -= take;
                            leftover = self.leftover - take;
                            start = Some(free_rel);
                        }
                        let mut cursor = self.cursor;
                        let mut end = free_rel;
                        if rem > 0 {
                            let first = cursor.max(opp.first_at_or_after(ready_rel));
                            let k = u128::from(rem.div_ceil(MAHIMAHI_MTU));
                            let last = first.saturating_add(k - 1);
                            end = opp.time_ns(last);
                            start.get_or_insert(opp.time_ns(first));
                            leftover =
                                u32::try_from(k * u128::from(MAHIMAHI_MTU) - u128::from(rem))
                                    .unwrap_or(0);
                            cursor = last.saturating_add(1);
                        }
                        let start = start.unwrap_or(free_rel);
                        Some(Slot {
                            start_ns: to_abs(self.origin_ns, start),
                            end_ns: to_abs(self.origin_ns, end),
                            cursor,
                            leftover,
                        })
                    }
                }
            }
        }
    }

    pub(crate) fn commit(&mut self, slot: &Slot) {
        self.free_at_ns = self.free_at_ns.max(slot.end_ns);
        self.cursor = slot.cursor;
        self.leftover = slot.leftover;
    }

    /// A new rate spec from `now_ns`: trace time restarts at `now_ns`;
    /// packets already serialized keep their times (`free_at` stays).
    pub(crate) fn retrace(&mut self, now_ns: u64) {
        self.origin_ns = now_ns;
        self.cursor = 0;
        self.leftover = 0;
    }

    /// Fresh state after a restore: idle from `now_ns`, trace origin kept
    /// (a recorded trace follows the experiment's clock, not the outage).
    pub(crate) fn reset(&mut self, now_ns: u64) {
        self.free_at_ns = now_ns;
        self.cursor = 0;
        self.leftover = 0;
    }
}

/// The delay one retransmission adds on a reliable link: the loss is
/// noticed one RTT (2·delay) after sending, and the packet is serialized
/// again at the link's rate, `size·8/rate` (the long-run rate for a trace,
/// 0 when unlimited). Retransmissions do not occupy the link's serializer.
pub(crate) fn retransmission_ns(rate: &RateSpec, delay_ns: u64, size: u32) -> u64 {
    let bits = u128::from(size) * 8;
    let ser = match rate {
        RateSpec::Unlimited | RateSpec::Fixed { bps: 0 } => 0,
        &RateSpec::Fixed { bps } => {
            u64::try_from((bits * NS_PER_S).div_ceil(u128::from(bps))).unwrap_or(u64::MAX)
        }
        // f64 → u64 saturates, NaN → 0.
        RateSpec::Trace(t) => (bits as f64 * NS_PER_S as f64 / t.long_run_bps()).ceil() as u64,
    };
    delay_ns.saturating_mul(2).saturating_add(ser)
}
