//! Optional component timers for `edgemu bench handoff` (paper Table II):
//! wall time spent in state construction and feedback processing, repair
//! scheduler inference, encoding and decoding, and the latency of each
//! decision (state construction to scheduling output). Off by default: a
//! core without timers pays one `Option` test per decision or frame.

use std::time::Instant;

/// Accumulated nanoseconds per component over one handoff.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CoreTimers {
    /// Masks and observation at each decision, sender feedback processing,
    /// receiver feedback generation.
    pub state_ns: u64,
    /// The repair scheduler's `decide`.
    pub rl_ns: u64,
    /// Building source and repair frames (RLC encoding).
    pub enc_ns: u64,
    /// The receiver's frame handling (parsing, RLC decoding, block
    /// bookkeeping).
    pub dec_ns: u64,
    /// Per decision: state construction + scheduler, ns.
    pub decision_ns: Vec<u64>,
}

impl CoreTimers {
    pub fn add(&mut self, other: &CoreTimers) {
        self.state_ns += other.state_ns;
        self.rl_ns += other.rl_ns;
        self.enc_ns += other.enc_ns;
        self.dec_ns += other.dec_ns;
        self.decision_ns.extend_from_slice(&other.decision_ns);
    }
}

/// Nanoseconds since `t0`.
pub(crate) fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
