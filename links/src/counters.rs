//! Per-link counters, the numbers a run reports for every link direction.
//!
//! Balance: at any time `offered = delivered + lost + queue_dropped +
//! down_dropped + in flight` (see [`crate::LinkModel::in_flight`]). A packet
//! is `delivered` when [`crate::LinkModel::poll`] hands it out, and only then
//! is its delay (due − offered) recorded.

use hdrhistogram::Histogram;

/// Counters of one link direction. Reset only by building a new model:
/// kill and restore keep them.
#[derive(Clone, Debug)]
pub struct LinkCounters {
    /// Every call to `offer`.
    pub offered: u64,
    /// Packets handed out by `poll`.
    pub delivered: u64,
    /// Datagrams erased by the loss model.
    pub lost: u64,
    /// Packets refused by the drop-tail queue.
    pub queue_dropped: u64,
    /// Packets offered while down, plus those a `kill` dropped.
    pub down_dropped: u64,
    /// Loss events a reliable link turned into retransmissions.
    pub retransmissions: u64,
    pub bytes_offered: u64,
    pub bytes_delivered: u64,
    /// Delay (due − offered) of delivered packets, ns; 3 significant digits,
    /// auto-resizing.
    pub delay_ns: Histogram<u64>,
}

impl LinkCounters {
    /// All zero, with an empty histogram.
    pub fn new() -> Self {
        LinkCounters {
            offered: 0,
            delivered: 0,
            lost: 0,
            queue_dropped: 0,
            down_dropped: 0,
            retransmissions: 0,
            bytes_offered: 0,
            bytes_delivered: 0,
            // 3 significant digits is within hdrhistogram's 0..=5.
            delay_ns: Histogram::new(3).expect("3 significant digits is a valid precision"),
        }
    }

    pub(crate) fn record_delay(&mut self, delay_ns: u64) {
        if self.delay_ns.record(delay_ns).is_err() {
            self.delay_ns.saturating_record(delay_ns);
        }
    }
}

impl Default for LinkCounters {
    fn default() -> Self {
        Self::new()
    }
}
