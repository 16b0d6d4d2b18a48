//! Time units. Time is integer nanoseconds (`u64`) throughout the workspace —
//! the link model's `now`, the actors' clocks, the serving and handoff cores —
//! and these are the one definition of how many make a larger unit.

/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
