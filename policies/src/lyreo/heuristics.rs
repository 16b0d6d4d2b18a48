//! The paper's non-learned baselines: Least-Loaded and Random.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{SchedulingPolicy, ServerObs, SlotObservation};

/// Least-Loaded: each request goes to the server with the lowest *predicted
/// memory-time workload*, the paper's load metric `η_s`, updated as requests
/// of this slot are placed (otherwise a whole slot would pile onto the one
/// server that was lightest at its start).
///
/// Workload of server `s` = `η_s` of the last slot + the KV it has queued
/// (not yet admitted, normalized by `M_s`) + for each request placed on it in
/// this slot, its predicted memory-time `α·(l_in + l_out/2) · d / (M_s·Δ)`
/// with `d = l_in/v_pre + l_out·t_dec` (prefill plus decode at the empty-KV
/// iteration time): the mean KV it holds times how long it holds it.
/// Ties go to the lowest index.
#[derive(Debug, Clone, Default)]
pub struct LeastLoaded {
    load: Vec<f64>,
}

impl LeastLoaded {
    pub fn new() -> Self {
        LeastLoaded::default()
    }

    /// The load a server starts a slot with: its last reported `η_s` plus the
    /// KV its queued requests will reserve, as a share of `M_s`.
    pub fn server_load(v: &ServerObs) -> f64 {
        v.load.eta + v.load.waiting_kv_bytes as f64 / v.capacity_bytes.max(1) as f64
    }

    /// Predicted memory-time share (of `M_s·Δ`) of one request on a server.
    pub fn request_workload(obs: &SlotObservation, r: usize, s: usize) -> f64 {
        let q = &obs.requests[r];
        let v = &obs.servers[s];
        let (lin, lout) = (q.input_len as f64, q.output_len as f64);
        let mean_bytes = v.kv_bytes_per_token as f64 * (lin + lout / 2.0);
        let dur = lin / v.prefill_tok_s + lout * v.decode_step_empty_s;
        mean_bytes * dur / (v.capacity_bytes.max(1) as f64 * obs.slot_s)
    }
}

impl SchedulingPolicy for LeastLoaded {
    fn name(&self) -> &str {
        "least-loaded"
    }

    fn reads_rates(&self) -> bool {
        false
    }

    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
        out.clear();
        self.load.clear();
        self.load.extend(obs.servers.iter().map(Self::server_load));
        for r in 0..obs.requests.len() {
            let mut best = 0;
            for s in 1..self.load.len() {
                if self.load[s] < self.load[best] {
                    best = s;
                }
            }
            self.load[best] += Self::request_workload(obs, r, best);
            out.push(best);
        }
    }
}

/// Random: each request to a server drawn uniformly (seeded, reproducible).
#[derive(Debug, Clone)]
pub struct RandomPolicy {
    rng: ChaCha8Rng,
}

impl RandomPolicy {
    pub fn new(seed: u64) -> Self {
        RandomPolicy {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

impl SchedulingPolicy for RandomPolicy {
    fn name(&self) -> &str {
        "random"
    }

    fn reads_rates(&self) -> bool {
        false
    }

    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>) {
        out.clear();
        let n = obs.servers.len();
        for _ in &obs.requests {
            out.push(if n == 0 {
                0
            } else {
                self.rng.random_range(0..n)
            });
        }
    }
}
