//! What the LYREO actors of one host show while a run goes on: the
//! dashboard's servers and scheduler panels and the Prometheus families
//! (server KV bytes, batch size, requests by state, Z_s, decisions per
//! server, the active policy version).
//!
//! Each actor writes its latest state here at its own slot boundary (a copy
//! of a few numbers under a lock held for microseconds, once a slot); a
//! reader (a scrape, the page's snapshot) copies the whole state out. The
//! lock is never held across anything that waits, so neither side can stall
//! the other.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The live state of one host's LYREO actors. Cheap to clone (shared).
#[derive(Clone, Default, Debug)]
pub struct LyreoLive(Arc<Mutex<LiveState>>);

#[derive(Clone, Default, Debug, Serialize, PartialEq)]
pub struct LiveState {
    /// By server name.
    pub servers: BTreeMap<String, ServerLive>,
    /// By scheduler name.
    pub schedulers: BTreeMap<String, SchedulerLive>,
}

/// A server at the end of its latest slot.
#[derive(Clone, Default, Debug, Serialize, PartialEq)]
pub struct ServerLive {
    pub gpu: String,
    pub backend: String,
    /// `M_s`.
    pub capacity_bytes: u64,
    /// The slot last closed.
    pub slot: u64,
    pub occupancy_bytes: u64,
    pub peak_bytes: u64,
    /// Requests decoding (the running batch).
    pub running: usize,
    /// Requests queued in the engine (waiting for KV room or a batch slot).
    pub queued: usize,
    /// Requests not finished (arriving, queued or running).
    pub backlog: usize,
    /// Memory-time η_s of the slot.
    pub eta: f64,
    /// Slots closed, and how many had peak KV above 90 % of `M_s`.
    pub slots: u64,
    pub high_kv_slots: u64,
    /// Requests answered, by outcome.
    pub served: u64,
    pub rejected: u64,
    /// Requests failed by a fault (`actor.kill` of the server).
    pub failed: u64,
    /// Killed (`actor.kill`) and not restarted yet.
    pub down: bool,
}

/// A scheduler after its latest decision.
#[derive(Clone, Default, Debug, Serialize, PartialEq)]
pub struct SchedulerLive {
    pub policy: String,
    /// The version hash of the active policy (what `policy.get` reports).
    pub version: String,
    /// The slot last decided.
    pub slot: u64,
    pub decisions: u64,
    /// Of those, how many a learned policy's guard placed with
    /// Least-Loaded (inputs off its training distribution).
    pub guarded: u64,
    /// How late the last 100 decisions left (from the planned decision
    /// time to the placements sent), p99 and max, ms: a host too loaded
    /// for its scheduler shows here first.
    pub decision_late_p99_ms: f64,
    pub decision_late_max_ms: f64,
    /// By server name.
    pub servers: BTreeMap<String, SchedulerServer>,
}

#[derive(Clone, Default, Debug, Serialize, PartialEq)]
pub struct SchedulerServer {
    /// Requests assigned to the server so far.
    pub assigned: u64,
    /// Its Lyapunov virtual queue Z_s.
    pub z: f64,
    /// Marked unavailable (no report for the timeout): assigned nothing.
    pub unavailable: bool,
}

impl LyreoLive {
    fn with<R>(&self, f: impl FnOnce(&mut LiveState) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Updates (or creates) server `name`'s entry.
    pub fn server(&self, name: &str, f: impl FnOnce(&mut ServerLive)) {
        self.with(|s| f(s.servers.entry(name.to_string()).or_default()))
    }

    /// Updates (or creates) scheduler `name`'s entry.
    pub fn scheduler(&self, name: &str, f: impl FnOnce(&mut SchedulerLive)) {
        self.with(|s| f(s.schedulers.entry(name.to_string()).or_default()))
    }

    /// A copy of the whole state.
    pub fn snapshot(&self) -> LiveState {
        self.with(|s| s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_update_their_own_entry_and_readers_copy() {
        let live = LyreoLive::default();
        let other = live.clone();
        live.server("s0", |s| {
            s.slots += 1;
            s.served += 3;
        });
        other.server("s0", |s| s.slots += 1);
        live.scheduler("sched", |s| {
            s.policy = "random".into();
            s.servers.entry("s0".into()).or_default().assigned += 2;
        });
        let snap = other.snapshot();
        assert_eq!(snap.servers["s0"].slots, 2);
        assert_eq!(snap.servers["s0"].served, 3);
        assert_eq!(snap.schedulers["sched"].servers["s0"].assigned, 2);
        live.server("s1", |_| {});
        assert_eq!(snap.servers.len(), 1, "a snapshot is a copy");
        assert_eq!(live.snapshot().servers.len(), 2);
    }
}
