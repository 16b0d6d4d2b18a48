//! The two link directions a reliable run drives, and the outcome built
//! from them.

use super::{seeds, DeliveryLog, ReliableError, ReliableOutcome, ReliableProtocol, ReliableRun};
use edgemu_links::LinkModel;

/// Forward (data) and reverse (ACK) link models carrying raw packets.
pub(crate) struct Path {
    pub(crate) forward: LinkModel<Vec<u8>>,
    pub(crate) reverse: LinkModel<Vec<u8>>,
}

impl Path {
    pub(crate) fn new(run: &ReliableRun) -> Self {
        Path {
            forward: LinkModel::new(
                run.forward.clone(),
                seeds::derive(run.seed, seeds::FORWARD_LINK),
            ),
            reverse: LinkModel::new(
                run.reverse.clone(),
                seeds::derive(run.seed, seeds::REVERSE_LINK),
            ),
        }
    }

    /// The earliest arrival due on either direction.
    pub(crate) fn next_due(&self) -> Option<u64> {
        min_opt(self.forward.next_due(), self.reverse.next_due())
    }
}

/// The smaller of two optional times.
pub(crate) fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// What the protocol-specific loop hands back for the outcome.
pub(crate) struct RunEnd {
    pub(crate) protocol: ReliableProtocol,
    pub(crate) completion_ns: Option<u64>,
    pub(crate) retransmissions: u64,
    pub(crate) end_ns: u64,
    pub(crate) delivery: DeliveryLog,
}

pub(crate) fn outcome(run: &ReliableRun, path: &Path, end: RunEnd) -> ReliableOutcome {
    let f = path.forward.counters();
    let r = path.reverse.counters();
    ReliableOutcome {
        protocol: end.protocol,
        bytes: run.bytes,
        delivered_in_order_at_deadline: end.delivery.delivered_at(run.deadline_ns),
        completion_ns: end.completion_ns,
        packets_sent: f.offered,
        reverse_packets_sent: r.offered,
        retransmissions: end.retransmissions,
        forward_lost: f.lost,
        forward_queue_dropped: f.queue_dropped,
        reverse_dropped: r.lost + r.queue_dropped + r.down_dropped,
        forward_bytes: f.bytes_offered,
        end_ns: end.end_ns,
        delivery: end.delivery,
    }
}

/// Guards an event loop against spinning at one instant without progress.
pub(crate) struct SpinGuard {
    at_ns: u64,
    count: u32,
    /// For the stall error: which protocol, and the transfer's size.
    protocol: &'static str,
    bytes: u64,
}

impl SpinGuard {
    /// Iterations allowed at one instant before the loop is declared stuck.
    const LIMIT: u32 = 10_000;

    pub(crate) fn new(protocol: &'static str, bytes: u64) -> Self {
        SpinGuard {
            at_ns: u64::MAX,
            count: 0,
            protocol,
            bytes,
        }
    }

    /// Counts an iteration at `now_ns`; false when too many ran at it.
    pub(crate) fn tick(&mut self, now_ns: u64) -> bool {
        if now_ns != self.at_ns {
            self.at_ns = now_ns;
            self.count = 0;
        }
        self.count += 1;
        self.count <= Self::LIMIT
    }

    /// The event loop's next instant: the earliest of the stacks' `timers`
    /// and the path's arrivals, never before `now_ns`; `None` once that is
    /// past `stop_ns`. Nothing pending, or too many iterations at one
    /// instant, is a [`ReliableError::Stalled`] with `delivered` bytes read.
    pub(crate) fn next_instant(
        &mut self,
        now_ns: u64,
        timers: Option<u64>,
        path: &Path,
        stop_ns: u64,
        delivered: u64,
    ) -> Result<Option<u64>, ReliableError> {
        let (protocol, bytes) = (self.protocol, self.bytes);
        let stalled = move |at_ns| ReliableError::Stalled {
            protocol,
            at_ns,
            delivered,
            bytes,
        };
        let next = min_opt(timers, path.next_due())
            .ok_or_else(|| stalled(now_ns))?
            .max(now_ns);
        if next > stop_ns {
            return Ok(None);
        }
        if !self.tick(next) {
            return Err(stalled(next));
        }
        Ok(Some(next))
    }
}
