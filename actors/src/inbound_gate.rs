//! Bounds the envelopes from peers waiting in the router's mailbox.
//!
//! The mesh [`InboundGate::admit_many`]s each frame's envelopes before
//! handing them to the router, and the router lets them go when handled,
//! so nothing from a peer is queued without limit. A session reader that
//! finds the router behind first waits for room ([`InboundGate::room`]):
//! the router runs on the same host thread, so a reader that kept reading
//! would decode frames only to drop them while the router starved (in a
//! saturated debug build, whole 600 ms windows passed with every envelope
//! dropped). Waiting stops reading from the socket, so TCP pushes back on
//! the sending host, whose bounded outbound queue then refuses envelopes
//! and counts them there. The wait is bounded; past it, what has no room
//! is dropped and counted, and reading goes on (heartbeats keep flowing).
//! An attach point bounds the packets its reader thread hands its actor
//! the same way.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Envelopes from peers that may wait in a router's mailbox.
pub const INBOUND_LIMIT: usize = 65_536;

#[derive(Debug)]
pub struct InboundGate {
    pending: AtomicUsize,
    limit: usize,
    dropped: AtomicU64,
    /// Woken when `pending` falls to the low-water mark.
    drained: Notify,
}

impl InboundGate {
    pub fn new(limit: usize) -> Self {
        InboundGate {
            pending: AtomicUsize::new(0),
            limit,
            dropped: AtomicU64::new(0),
            drained: Notify::new(),
        }
    }

    /// Below this many pending, a reader waiting in [`Self::room`] goes on:
    /// half the limit, so a woken reader has room for many frames.
    fn low_water(&self) -> usize {
        self.limit / 2
    }

    /// True if one more envelope may be queued (and counts it); false drops it.
    pub fn admit(&self) -> bool {
        self.admit_many(1) == 1
    }

    /// Admits as many of `n` envelopes as there is room for (counting
    /// them) and returns how many; the rest are counted as dropped.
    pub fn admit_many(&self, n: usize) -> usize {
        let mut admitted = 0;
        let _ = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                admitted = n.min(self.limit.saturating_sub(p));
                (admitted > 0).then_some(p + admitted)
            });
        if admitted < n {
            self.dropped
                .fetch_add((n - admitted) as u64, Ordering::Relaxed);
        }
        admitted
    }

    /// One admitted envelope was handled.
    pub fn done(&self) {
        self.done_many(1);
    }

    /// `n` admitted envelopes were handled.
    pub fn done_many(&self, n: usize) {
        let before = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                Some(p.saturating_sub(n))
            })
            .unwrap_or(0);
        let low = self.low_water();
        if before > low && before.saturating_sub(n) <= low {
            self.drained.notify_waiters();
        }
    }

    /// Envelopes admitted and not yet handled.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Envelopes refused for want of room.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until at most half the limit is pending, or `wait` has
    /// passed; true if there is room. Returns at once when there is.
    pub async fn room(&self, wait: Duration) -> bool {
        // The common case, once per frame: room, nothing to register.
        if self.pending() <= self.low_water() {
            return true;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so a drain in between wakes it.
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.pending() <= self.low_water() {
                return true;
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return self.pending() <= self.low_water();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::InboundGate;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn the_gate_admits_a_batch_up_to_its_room_and_counts_the_rest() {
        let gate = InboundGate::new(10);
        assert_eq!(gate.admit_many(4), 4);
        assert_eq!(gate.admit_many(8), 6, "room for 6 of 8");
        assert_eq!(gate.dropped(), 2);
        assert!(!gate.admit(), "full");
        assert_eq!(gate.dropped(), 3);
        gate.done_many(5);
        assert_eq!(gate.admit_many(0), 0);
        assert_eq!(gate.admit_many(7), 5);
        assert_eq!(gate.dropped(), 5);
        gate.done_many(100);
        assert!(gate.admit(), "done never goes below zero");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_for_the_router_to_drain_to_half() {
        let gate = Arc::new(InboundGate::new(10));
        assert!(
            gate.room(Duration::from_secs(1)).await,
            "empty: room at once"
        );
        assert_eq!(gate.admit_many(10), 10);
        // The handler drains in steps; the waiter is woken only at 5.
        let drainer = {
            let gate = gate.clone();
            tokio::spawn(async move {
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    gate.done();
                }
            })
        };
        let t0 = tokio::time::Instant::now();
        assert!(gate.room(Duration::from_secs(1)).await);
        assert_eq!(t0.elapsed(), Duration::from_millis(50));
        assert_eq!(gate.pending(), 5);
        drainer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_router_that_does_not_drain_ends_the_wait_at_its_bound() {
        let gate = InboundGate::new(4);
        assert_eq!(gate.admit_many(4), 4);
        let t0 = tokio::time::Instant::now();
        assert!(!gate.room(Duration::from_millis(100)).await);
        assert_eq!(t0.elapsed(), Duration::from_millis(100));
        assert_eq!(gate.dropped(), 0, "waiting drops nothing");
    }
}
