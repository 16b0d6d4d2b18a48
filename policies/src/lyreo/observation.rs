//! What a scheduling policy sees at the start of a slot.

use serde::{Deserialize, Serialize};

/// One request of the slot.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestObs {
    /// Request id (unique in the run).
    pub id: u64,
    /// The user that sent it.
    pub user: usize,
    /// Prompt length `l_in`, tokens.
    pub input_len: u32,
    /// Known output length `l_out`, tokens.
    pub output_len: u32,
    /// Upload rate to each server if it were the only request there (bit/s):
    /// the full-band Shannon rate, an upper bound on the shared one. Empty in
    /// what a scheduler shows a policy that does not read rates
    /// ([`super::SchedulingPolicy::reads_rates`]).
    pub solo_rate_bps: Vec<f64>,
}

/// A server's load at the end of a slot: what its report carries to the
/// scheduler and what a policy sees of it. One record for the modeled
/// server's report (`serving::ServerReport`), the live server actor's
/// message and the observation, so a field added here reaches all three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotLoad {
    /// Memory-time workload `η_s` of the slot.
    pub eta: f64,
    /// Peak KV of the slot, bytes.
    pub peak_bytes: u64,
    /// The slot's peak above 90 % of `M_s`.
    pub high_kv: bool,
    /// KV held at the end of the slot, bytes.
    pub occupancy_bytes: u64,
    /// KV reserved by admitted requests, bytes.
    pub reserved_bytes: u64,
    /// KV that queued (not yet admitted) requests will reserve, bytes.
    pub waiting_kv_bytes: u64,
    /// Requests queued (incl. not yet arrived) or running.
    pub backlog: usize,
    /// Seconds of work held: the prefill of the queued (and not yet
    /// arrived) prompts plus the decode iterations left, at the server's
    /// own speed (its measured profile for a real server). Unlike `η`,
    /// which is a share of KV memory-time, this grows with a queue that
    /// holds little KV but much compute.
    #[serde(default)]
    pub backlog_s: f64,
}

/// What a server can do, as a scheduler sees it: KV capacity and speed.
/// From the GPU class for a modeled server; a real server measures its own
/// speed when its model loads and sends this with every report, so the
/// scheduler never plans with a class the machine does not have.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerCapability {
    /// KV capacity `M_s`, bytes.
    pub capacity_bytes: u64,
    /// `α`, bytes per token.
    pub kv_bytes_per_token: u64,
    /// `v_pre`, tokens/s.
    pub prefill_tok_s: f64,
    /// Decode iteration time with an empty KV, seconds.
    pub decode_step_empty_s: f64,
    /// Decode iteration time with a full KV, seconds.
    pub decode_step_full_s: f64,
}

impl ServerCapability {
    /// Finite, positive figures only: anything else from a report would
    /// poison every later decision.
    pub fn is_valid(&self) -> bool {
        self.capacity_bytes > 0
            && self.kv_bytes_per_token > 0
            && self.prefill_tok_s.is_finite()
            && self.prefill_tok_s > 0.0
            && self.decode_step_empty_s.is_finite()
            && self.decode_step_empty_s >= 0.0
            && self.decode_step_full_s.is_finite()
            && self.decode_step_full_s >= 0.0
    }
}

/// One server's state at the end of the last slot plus its static class.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerObs {
    /// KV capacity `M_s`, bytes.
    pub capacity_bytes: u64,
    /// `α`, bytes per token.
    pub kv_bytes_per_token: u64,
    /// `v_pre`, tokens/s.
    pub prefill_tok_s: f64,
    /// Decode iteration time with an empty KV, seconds.
    pub decode_step_empty_s: f64,
    /// Decode iteration time with a full KV, seconds.
    pub decode_step_full_s: f64,
    /// Uplink bandwidth `B_s`, Hz.
    pub bandwidth_hz: f64,
    /// The last slot's load as the server reported it (all zero before its
    /// first report).
    pub load: SlotLoad,
}

impl ServerObs {
    /// The capability part of the observation.
    pub fn capability(&self) -> ServerCapability {
        ServerCapability {
            capacity_bytes: self.capacity_bytes,
            kv_bytes_per_token: self.kv_bytes_per_token,
            prefill_tok_s: self.prefill_tok_s,
            decode_step_empty_s: self.decode_step_empty_s,
            decode_step_full_s: self.decode_step_full_s,
        }
    }

    /// Replaces the capability (a real server's measured one).
    pub fn set_capability(&mut self, c: &ServerCapability) {
        self.capacity_bytes = c.capacity_bytes;
        self.kv_bytes_per_token = c.kv_bytes_per_token;
        self.prefill_tok_s = c.prefill_tok_s;
        self.decode_step_empty_s = c.decode_step_empty_s;
        self.decode_step_full_s = c.decode_step_full_s;
    }
}

/// Everything a policy gets for one slot.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotObservation {
    pub slot: u64,
    /// Slot length Δ, seconds.
    pub slot_s: f64,
    pub requests: Vec<RequestObs>,
    pub servers: Vec<ServerObs>,
    /// Lyapunov virtual queues `Z_s(t)`, one per server.
    pub z: Vec<f64>,
    /// Load-balancing tolerance `ε`.
    pub epsilon: f64,
    /// Drift-plus-penalty weight `ν` on latency.
    pub nu: f64,
}

/// Length of [`SlotObservation::pair_features`].
pub const PAIR_FEATURES: usize = 12;

impl SlotObservation {
    /// A normalized feature vector for assigning request `r` to server `s`
    /// (the input of a per-request categorical actor, one row per server):
    /// request lengths, the upload time estimate, the server's class
    /// (capacity, prefill and decode speed), its state (occupancy, reserved,
    /// queued KV, backlog, `η`, high-KV flag) and its virtual queue `Z_s`.
    /// Scales put typical values near [0, 1].
    pub fn pair_features(&self, r: usize, s: usize, out: &mut [f32; PAIR_FEATURES]) {
        let q = &self.requests[r];
        let v = &self.servers[s];
        let cap = v.capacity_bytes.max(1) as f64;
        let bits = q.input_len as f64 * 16.0;
        let rate = q.solo_rate_bps.get(s).copied().unwrap_or(0.0);
        let upload_s = if rate > 0.0 { bits / rate } else { 1.0 };
        *out = [
            (q.input_len as f64 / 512.0) as f32,
            (q.output_len as f64 / 512.0) as f32,
            (upload_s / self.slot_s).min(10.0) as f32,
            (cap / 24e9) as f32,
            (v.prefill_tok_s / 8000.0) as f32,
            (v.decode_step_empty_s / 0.02) as f32,
            (v.load.occupancy_bytes as f64 / cap) as f32,
            (v.load.reserved_bytes as f64 / cap) as f32,
            (v.load.waiting_kv_bytes as f64 / cap) as f32,
            v.load.eta as f32,
            if v.load.high_kv { 1.0 } else { 0.0 },
            self.z.get(s).copied().unwrap_or(0.0) as f32,
        ];
    }
}
