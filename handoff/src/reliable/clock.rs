//! Our clock (u64 ns from the start of a run) mapped to the protocol
//! stacks' time types: quinn-proto's `std::time::Instant` through a fixed
//! base (only differences matter to it; it never reads the system clock in
//! the paths we use), smoltcp's microsecond `Instant` by flooring.

use std::time::{Duration, Instant};

/// A fixed `Instant` for ns 0 of one run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuicClock {
    base: Instant,
}

impl QuicClock {
    pub(crate) fn new() -> Self {
        QuicClock {
            base: Instant::now(),
        }
    }

    pub(crate) fn instant(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    /// ns of `t` (an instant before the base reads as 0).
    pub(crate) fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// smoltcp's time at `ns` (floored to its microsecond resolution).
pub(crate) fn smoltcp_instant(ns: u64) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(i64::try_from(ns / 1_000).unwrap_or(i64::MAX))
}

/// ns of a smoltcp time (negative reads as 0).
pub(crate) fn smoltcp_ns(t: smoltcp::time::Instant) -> u64 {
    u64::try_from(t.total_micros())
        .unwrap_or(0)
        .saturating_mul(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_clock_round_trips() {
        let c = QuicClock::new();
        for ns in [0, 1, 112_000, 10_000_000_000] {
            assert_eq!(c.ns(c.instant(ns)), ns);
        }
    }

    #[test]
    fn smoltcp_clock_floors_to_micros() {
        assert_eq!(smoltcp_ns(smoltcp_instant(1_999)), 1_000);
        assert_eq!(smoltcp_ns(smoltcp_instant(2_000)), 2_000);
    }
}
