//! KV-cache accounting (the LYREO server model).
//!
//! Every request admitted to a server *reserves* KV for its whole life —
//! `(input + known output length) × bytes_per_token` — and admission checks that
//! the sum of reservations stays within the capacity `M_s`. What a request
//! actually *holds* grows by one token per iteration; the server's occupancy in
//! iteration `k` is `m(k) = α · Σ_j (l_in_j + l_gen_j(k))`, recorded after the
//! iteration's tokens were appended (its largest value within the iteration).
//! The engine tells the ledger how many tokens an iteration added across its
//! running requests ([`KvLedger::hold`]) and how many a request held when it
//! leaves ([`KvLedger::release`]): one addition per iteration rather than one
//! map update per running request, which was most of a modeled iteration.
//! From the per-iteration occupancies and durations `τ(k)` the ledger keeps the
//! peak, the memory-time `∫ m dt = Σ_k m(k)·τ(k)` (byte·seconds), and the same
//! over a window that the caller resets every slot, giving the workload
//! `η = Σ m·τ / (M_s·Δ)` and the high-KV flag `peak > 90 % of M_s`.
//!
//! `bytes_per_token` comes from the model config and the KV dtype
//! (`edgemu_gpu::LlamaConfig::kv_bytes_per_token`) or from a profile (α).

use rustc_hash::FxHashMap as HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// Fraction of capacity above which a peak counts as high-KV.
pub const HIGH_KV_FRACTION: f64 = 0.9;

/// Per-request KV bookkeeping and occupancy statistics.
#[derive(Debug, Clone)]
pub struct KvLedger {
    bytes_per_token: u64,
    capacity_bytes: u64,
    reserved: HashMap<u64, u64>,
    reserved_total: u64,
    occupancy: u64,
    peak: u64,
    memory_time: f64,
    elapsed: f64,
    iterations: u64,
    window: Window,
}

#[derive(Debug, Clone, Default)]
struct Window {
    peak: u64,
    memory_time: f64,
    duration: f64,
    iterations: u64,
}

/// A point-in-time view of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LedgerSnapshot {
    pub bytes_per_token: u64,
    pub capacity_bytes: u64,
    /// Bytes held by cached tokens now.
    pub occupancy_bytes: u64,
    /// Bytes reserved by admitted requests (input + output lengths).
    pub reserved_bytes: u64,
    /// Largest occupancy recorded in any iteration.
    pub peak_bytes: u64,
    /// `Σ m(k)·τ(k)` in byte·seconds.
    pub memory_time_byte_s: f64,
    /// Time covered by recorded iterations, seconds.
    pub busy_s: f64,
    pub iterations: u64,
    /// `peak > 90 % of capacity`.
    pub high_kv: bool,
}

/// Statistics of one window (e.g. one scheduling slot).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowStats {
    pub peak_bytes: u64,
    pub memory_time_byte_s: f64,
    /// Busy time inside the window.
    pub busy_s: f64,
    pub iterations: u64,
    /// Workload `η = memory_time / (capacity · slot)`.
    pub eta: f64,
    pub high_kv: bool,
}

impl KvLedger {
    /// A ledger for `capacity_bytes` of KV at `bytes_per_token`.
    pub fn new(bytes_per_token: u64, capacity_bytes: u64) -> Self {
        KvLedger {
            bytes_per_token,
            capacity_bytes,
            reserved: HashMap::default(),
            reserved_total: 0,
            occupancy: 0,
            peak: 0,
            memory_time: 0.0,
            elapsed: 0.0,
            iterations: 0,
            window: Window::default(),
        }
    }

    pub fn bytes_per_token(&self) -> u64 {
        self.bytes_per_token
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Bytes of `tokens` tokens.
    pub fn bytes_for(&self, tokens: u64) -> u64 {
        tokens.saturating_mul(self.bytes_per_token)
    }

    /// Whether a reservation of `tokens` more would fit now.
    pub fn fits(&self, tokens: u64) -> bool {
        self.reserved_total.saturating_add(self.bytes_for(tokens)) <= self.capacity_bytes
    }

    /// Whether `tokens` could ever fit (in an empty server).
    pub fn could_ever_fit(&self, tokens: u64) -> bool {
        self.bytes_for(tokens) <= self.capacity_bytes
    }

    /// Reserves `tokens` for request `id`; fails if it does not fit or `id` is known.
    pub fn reserve(&mut self, id: u64, tokens: u64) -> Result<()> {
        if self.reserved.contains_key(&id) {
            return Err(EngineError::State(format!(
                "request {id} already holds a reservation"
            )));
        }
        if !self.fits(tokens) {
            return Err(EngineError::State(format!(
                "request {id}: {} B of KV does not fit ({} of {} B reserved)",
                self.bytes_for(tokens),
                self.reserved_total,
                self.capacity_bytes
            )));
        }
        let b = self.bytes_for(tokens);
        self.reserved.insert(id, b);
        self.reserved_total += b;
        Ok(())
    }

    /// The running requests hold `tokens` more tokens between them (an
    /// iteration's: each prefilled prompt with its first token, one for
    /// each decoded request).
    pub fn hold(&mut self, tokens: u64) {
        self.occupancy = self.occupancy.saturating_add(self.bytes_for(tokens));
    }

    /// Request `id` leaves holding `held_tokens`: its reservation and what
    /// it held are freed.
    pub fn release(&mut self, id: u64, held_tokens: u64) {
        if let Some(b) = self.reserved.remove(&id) {
            self.reserved_total -= b;
        }
        self.occupancy = self.occupancy.saturating_sub(self.bytes_for(held_tokens));
    }

    /// Records one iteration of `duration_s` at the current occupancy.
    pub fn record_iteration(&mut self, duration_s: f64) {
        let m = self.occupancy;
        let dt = duration_s.max(0.0);
        self.peak = self.peak.max(m);
        self.memory_time += m as f64 * dt;
        self.elapsed += dt;
        self.iterations += 1;
        self.window.peak = self.window.peak.max(m);
        self.window.memory_time += m as f64 * dt;
        self.window.duration += dt;
        self.window.iterations += 1;
    }

    /// Current occupancy in bytes.
    pub fn occupancy_bytes(&self) -> u64 {
        self.occupancy
    }

    /// Reserved bytes.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved_total
    }

    fn high(&self, peak: u64) -> bool {
        peak as f64 > HIGH_KV_FRACTION * self.capacity_bytes as f64
    }

    /// A snapshot of totals since creation.
    pub fn snapshot(&self) -> LedgerSnapshot {
        LedgerSnapshot {
            bytes_per_token: self.bytes_per_token,
            capacity_bytes: self.capacity_bytes,
            occupancy_bytes: self.occupancy,
            reserved_bytes: self.reserved_total,
            peak_bytes: self.peak,
            memory_time_byte_s: self.memory_time,
            busy_s: self.elapsed,
            iterations: self.iterations,
            high_kv: self.high(self.peak),
        }
    }

    /// Statistics since the last call (a slot of `slot_s` seconds), then resets
    /// the window. The new window's peak starts at the current occupancy.
    pub fn take_window(&mut self, slot_s: f64) -> WindowStats {
        let w = std::mem::take(&mut self.window);
        self.window.peak = self.occupancy;
        let denom = self.capacity_bytes as f64 * slot_s;
        WindowStats {
            peak_bytes: w.peak,
            memory_time_byte_s: w.memory_time,
            busy_s: w.duration,
            iterations: w.iterations,
            eta: if denom > 0.0 {
                w.memory_time / denom
            } else {
                0.0
            },
            high_kv: self.high(w.peak),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed() {
        // α = 1000 B/token, M = 100 kB.
        let mut l = KvLedger::new(1000, 100_000);
        assert!(l.fits(100));
        assert!(!l.fits(101));
        l.reserve(1, 60).unwrap(); // 10 in + 50 out
        assert!(l.fits(40));
        assert!(!l.fits(41));
        assert!(l.reserve(2, 41).is_err());
        l.reserve(2, 30).unwrap(); // 20 in + 10 out
        assert_eq!(l.reserved_bytes(), 90_000);
        // Iteration 1 (prefill): 11 and 21 tokens held, 0.5 s.
        l.hold(11 + 21);
        l.record_iteration(0.5);
        // Iteration 2: 12 and 22 tokens, 0.25 s.
        l.hold(2);
        l.record_iteration(0.25);
        let s = l.snapshot();
        assert_eq!(s.occupancy_bytes, 34_000);
        assert_eq!(s.peak_bytes, 34_000);
        // 32 000 × 0.5 + 34 000 × 0.25 = 24 500 B·s
        assert!((s.memory_time_byte_s - 24_500.0).abs() < 1e-9);
        assert!(!s.high_kv);
        let w = l.take_window(1.0);
        assert!((w.eta - 24_500.0 / 100_000.0).abs() < 1e-12);
        assert_eq!(w.iterations, 2);
        // Request 2 leaves; request 3 (60 tokens) now fits.
        l.release(2, 22);
        assert_eq!(l.occupancy_bytes(), 12_000);
        assert_eq!(l.reserved_bytes(), 60_000);
        assert!(l.fits(40));
        l.reserve(3, 40).unwrap();
        // Request 3's 40 tokens in, request 1 from 12 to 51.
        l.hold(40 + 39);
        l.record_iteration(2.0);
        let s = l.snapshot();
        assert_eq!(s.peak_bytes, 91_000);
        assert!(s.high_kv, "91 % > 90 %");
        let w = l.take_window(2.0);
        assert_eq!(w.peak_bytes, 91_000);
        assert!((w.eta - 91_000.0 * 2.0 / (100_000.0 * 2.0)).abs() < 1e-12);
        assert!(w.high_kv);
        // Exactly 90 % is not high.
        let mut l = KvLedger::new(1, 100);
        l.reserve(1, 90).unwrap();
        l.hold(90);
        l.record_iteration(1.0);
        assert!(!l.snapshot().high_kv);
    }
}
