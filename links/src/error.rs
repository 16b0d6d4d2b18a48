//! Errors of the links crate: everything that can be wrong with a trace file.
//! The model itself never fails — odd parameter values are clamped or treated
//! as documented on [`crate::LinkModel`].

/// An error from parsing a rate or loss trace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// A line could not be read as what the format expects there.
    #[error("trace line {line}: expected {expected}, found {found:?}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What the format expects at this point.
        expected: &'static str,
        /// The offending text (trimmed).
        found: String,
    },
    /// A timestamp is earlier than (or, where they must increase strictly,
    /// equal to) the one before it.
    #[error("trace line {line}: timestamp {ms} ms must be {order} the previous one ({prev} ms)")]
    TimeOrder {
        line: usize,
        ms: u64,
        prev: u64,
        /// "after" or "at or after".
        order: &'static str,
    },
    /// The first entry of a step trace must start at 0 ms.
    #[error("trace line {line}: the first entry must be at 0 ms, found {ms} ms")]
    FirstNotZero { line: usize, ms: u64 },
    /// The trace has no entries at all.
    #[error("trace has no entries")]
    Empty,
    /// A mahimahi trace whose last timestamp is 0 has no period.
    #[error("mahimahi trace: the last timestamp (the period) must be greater than 0 ms")]
    ZeroPeriod,
    /// A rate trace that would never finish serializing a packet.
    #[error("rate trace never carries any bits: {0}")]
    NoCapacity(&'static str),
}
