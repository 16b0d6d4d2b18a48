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
    /// By gateway name.
    pub gateways: BTreeMap<String, GatewayLive>,
}

/// A gateway's requests so far, with the latency distributions vLLM's
/// server exports (same names and buckets on `/metrics`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GatewayLive {
    /// The model id clients name.
    pub model: String,
    /// Requests open now (waiting for assignment, upload, service or
    /// their last token).
    pub running: u64,
    /// Finished requests by finish reason (`stop`, `length`).
    pub success: BTreeMap<String, u64>,
    /// Failed requests by reason (`timeout`, `server killed`, …).
    pub errors: BTreeMap<String, u64>,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// Arrival → first token delivered.
    pub ttft: Histogram,
    /// Between consecutive tokens delivered, per request
    /// `(last − first) / (n − 1)`.
    pub tpot: Histogram,
    /// Arrival → last token delivered.
    pub e2e: Histogram,
    /// Arrival → prefill start (assignment, upload, waiting at the server).
    pub queue: Histogram,
    /// What the HTTP side adds to a finished request: its time from the
    /// request read to the response's last byte written, less the
    /// request's time inside the emulator (`e2e`).
    pub overhead: Histogram,
}

impl GatewayLive {
    pub fn new(model: &str) -> Self {
        GatewayLive {
            model: model.to_string(),
            running: 0,
            success: BTreeMap::new(),
            errors: BTreeMap::new(),
            prompt_tokens: 0,
            generation_tokens: 0,
            ttft: Histogram::new(&TTFT_BUCKETS_S),
            tpot: Histogram::new(&TPOT_BUCKETS_S),
            e2e: Histogram::new(&E2E_BUCKETS_S),
            queue: Histogram::new(&E2E_BUCKETS_S),
            overhead: Histogram::new(&OVERHEAD_BUCKETS_S),
        }
    }
}

/// vLLM's `time_to_first_token_seconds` buckets.
pub const TTFT_BUCKETS_S: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's `time_per_output_token_seconds` buckets.
pub const TPOT_BUCKETS_S: [f64; 19] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request latency buckets (`e2e_request_latency_seconds`,
/// `request_queue_time_seconds`).
pub const E2E_BUCKETS_S: [f64; 21] = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Gateway overhead buckets, 10 µs to 1 s; 0.1 ms apart from 0.5 to 1.3 ms,
/// so a p99 near the 1 ms aim reads to a tenth of it.
pub const OVERHEAD_BUCKETS_S: [f64; 27] = [
    1e-5, 2e-5, 5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4, 9e-4, 1e-3, 1.1e-3,
    1.2e-3, 1.3e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 1.0,
];

/// A fixed-bucket histogram of seconds: `counts[i]` values fell at most
/// `bounds_s[i]` and above the bound before; the last count is above every
/// bound (+Inf).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Histogram {
    pub bounds_s: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum_s: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds_s: &[f64]) -> Self {
        Histogram {
            bounds_s: bounds_s.to_vec(),
            counts: vec![0; bounds_s.len() + 1],
            sum_s: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v_s: f64) {
        let i = self
            .bounds_s
            .iter()
            .position(|&b| v_s <= b)
            .unwrap_or(self.bounds_s.len());
        self.counts[i] += 1;
        self.sum_s += v_s;
        self.count += 1;
    }

    /// The smallest bound at or below which a fraction `q` of the values
    /// fell (the bucket resolution's upper estimate of the q-quantile);
    /// `None` when empty, infinity when it is above every bound.
    pub fn quantile_upper(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let cum = self.cumulative();
        Some(
            cum.iter()
                .position(|&c| c >= want)
                .and_then(|i| self.bounds_s.get(i).copied())
                .unwrap_or(f64::INFINITY),
        )
    }

    /// Counts at or below each bound, then the total (+Inf).
    pub fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0u64, |sum, n| {
                *sum += n;
                Some(*sum)
            })
            .collect()
    }
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

    /// Updates gateway `name`'s entry (created for model `model`).
    pub fn gateway(&self, name: &str, model: &str, f: impl FnOnce(&mut GatewayLive)) {
        self.with(|s| {
            f(s.gateways
                .entry(name.to_string())
                .or_insert_with(|| GatewayLive::new(model)))
        })
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
        live.gateway("gw", "m", |g| {
            g.ttft.observe(0.03);
            g.ttft.observe(0.03);
            g.ttft.observe(1e9);
        });
        let g = &live.snapshot().gateways["gw"];
        assert_eq!(
            g.ttft.cumulative()[3],
            0,
            "0.03 s is above the 0.02 s bound"
        );
        assert_eq!(g.ttft.cumulative()[4], 2);
        assert_eq!(*g.ttft.cumulative().last().unwrap(), 3);
        assert_eq!(g.ttft.count, 3);
        assert_eq!(g.ttft.quantile_upper(0.5), Some(0.04));
        assert_eq!(g.ttft.quantile_upper(0.99), Some(f64::INFINITY));
        assert_eq!(Histogram::new(&[1.0]).quantile_upper(0.5), None);
        live.server("s1", |_| {});
        assert_eq!(snap.servers.len(), 1, "a snapshot is a copy");
        assert_eq!(live.snapshot().servers.len(), 2);
    }
}
