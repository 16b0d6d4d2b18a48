//! The load of an edge server whose serving stack is outside edgemu (an
//! OpenAI-compatible server such as llama.cpp's or vLLM): it batches on its
//! own, so what the server shell knows is what it sent and what came back.
//! [`ExternalLoad`] turns that into the slot report a scheduler reads, with
//! the same meanings as an engine's: a request holds `(l_in + generated)·α`
//! KV bytes from when it is sent until its last token, so occupancy, its
//! peak, the memory-time workload `η_s = ∫ occupancy dt / (M_s·Δ)` and the
//! high-KV flag are measured from the tokens as they stream back; backlog is
//! the requests in flight, and `backlog_s` their tokens still to come at the
//! decode rate measured so far.

use edgemu_policies::lyreo::SlotLoad;
use std::collections::HashMap;

struct InFlight {
    input_len: u64,
    output_len: u64,
    generated: u64,
}

/// What an external server holds, measured from its requests' tokens.
pub struct ExternalLoad {
    kv_bytes_per_token: u64,
    capacity_bytes: u64,
    flights: HashMap<u64, InFlight>,
    /// Tokens held by the requests in flight.
    held_tokens: u64,
    /// Since the slot began: ∫ held bytes dt (byte·ns), and the peak.
    window_start_ns: u64,
    last_ns: u64,
    integral: f64,
    peak_bytes: u64,
    /// Decode rate seen so far (tokens per second per request), smoothed.
    tok_per_s: Option<f64>,
}

impl ExternalLoad {
    pub fn new(kv_bytes_per_token: u64, capacity_bytes: u64) -> Self {
        ExternalLoad {
            kv_bytes_per_token,
            capacity_bytes,
            flights: HashMap::new(),
            held_tokens: 0,
            window_start_ns: 0,
            last_ns: 0,
            integral: 0.0,
            peak_bytes: 0,
            tok_per_s: None,
        }
    }

    fn held_bytes(&self) -> u64 {
        self.held_tokens.saturating_mul(self.kv_bytes_per_token)
    }

    /// Integrates the occupancy up to `now_ns`.
    fn advance(&mut self, now_ns: u64) {
        let now = now_ns.max(self.last_ns);
        self.integral += self.held_bytes() as f64 * (now - self.last_ns) as f64;
        self.last_ns = now;
    }

    fn changed(&mut self) {
        self.peak_bytes = self.peak_bytes.max(self.held_bytes());
    }

    /// Request `id` was sent to the backend at `now_ns`.
    pub fn sent(&mut self, id: u64, input_len: u32, output_len: u32, now_ns: u64) {
        self.advance(now_ns);
        if let Some(old) = self.flights.insert(
            id,
            InFlight {
                input_len: u64::from(input_len),
                output_len: u64::from(output_len),
                generated: 0,
            },
        ) {
            self.held_tokens -= old.input_len + old.generated;
        }
        self.held_tokens += u64::from(input_len);
        self.changed();
    }

    /// `n` more tokens of request `id` came back at `now_ns`.
    pub fn tokens(&mut self, id: u64, n: u64, now_ns: u64) {
        self.advance(now_ns);
        if let Some(f) = self.flights.get_mut(&id) {
            f.generated += n;
            self.held_tokens += n;
        }
        self.changed();
    }

    /// Request `id` ended at `now_ns` (done or failed); `decode_s` and
    /// `tokens`: its decode time and tokens, for the measured rate.
    pub fn ended(&mut self, id: u64, now_ns: u64, decode: Option<(f64, u64)>) {
        self.advance(now_ns);
        if let Some(f) = self.flights.remove(&id) {
            self.held_tokens -= f.input_len + f.generated;
        }
        if let Some((secs, n)) = decode.filter(|&(s, n)| s > 0.0 && n > 1) {
            let rate = (n - 1) as f64 / secs;
            self.tok_per_s = Some(match self.tok_per_s {
                Some(r) => 0.8 * r + 0.2 * rate,
                None => rate,
            });
        }
    }

    /// Forgets every request (the server was killed).
    pub fn clear(&mut self, now_ns: u64) {
        self.advance(now_ns);
        self.flights.clear();
        self.held_tokens = 0;
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// Closes the slot of length `slot_ns` that ends at `now_ns`.
    pub fn end_slot(&mut self, slot_ns: u64, now_ns: u64) -> SlotLoad {
        self.advance(now_ns);
        // Over the window actually closed (one slot, unless a late timer
        // closes a longer one).
        let span = now_ns
            .saturating_sub(self.window_start_ns)
            .max(slot_ns)
            .max(1) as f64;
        let eta = self.integral / (self.capacity_bytes.max(1) as f64 * span);
        let left: u64 = self
            .flights
            .values()
            .map(|f| f.output_len.saturating_sub(f.generated))
            .sum();
        let load = SlotLoad {
            eta,
            peak_bytes: self.peak_bytes,
            high_kv: self.peak_bytes as f64 > 0.9 * self.capacity_bytes as f64,
            occupancy_bytes: self.held_bytes(),
            reserved_bytes: self
                .flights
                .values()
                .map(|f| (f.input_len + f.output_len).saturating_mul(self.kv_bytes_per_token))
                .sum(),
            waiting_kv_bytes: 0,
            backlog: self.flights.len(),
            backlog_s: match self.tok_per_s {
                Some(r) if r > 0.0 => left as f64 / r / self.flights.len().max(1) as f64,
                _ => 0.0,
            },
        };
        self.window_start_ns = now_ns;
        self.integral = 0.0;
        self.peak_bytes = self.held_bytes();
        load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_grows_with_the_tokens_that_come_back_and_the_slot_integrates_it() {
        // α = 100 B, M = 100 kB; a 1 s slot.
        let mut l = ExternalLoad::new(100, 100_000);
        l.sent(1, 100, 50, 0); // 10 kB from t = 0
        l.tokens(1, 50, 500_000_000); // 15 kB from 0.5 s
        l.ended(1, 750_000_000, Some((0.5, 50))); // free at 0.75 s
        let s = l.end_slot(1_000_000_000, 1_000_000_000);
        // ∫ = 10 kB·0.5 s + 15 kB·0.25 s = 8750 B·s over 100 kB·1 s.
        assert!((s.eta - 0.0875).abs() < 1e-9, "{}", s.eta);
        assert_eq!(s.peak_bytes, 15_000);
        assert_eq!((s.occupancy_bytes, s.backlog, s.high_kv), (0, 0, false));
        // The next slot starts from what is held now (nothing).
        l.sent(2, 1000, 100, 1_000_000_000);
        let s = l.end_slot(1_000_000_000, 2_000_000_000);
        assert!((s.eta - 1.0).abs() < 1e-9, "{}", s.eta);
        assert!(s.high_kv);
        assert_eq!(s.backlog, 1);
        assert_eq!(s.reserved_bytes, 110_000);
        // 100 tokens left at the measured 98 tok/s.
        assert!((s.backlog_s - 100.0 / 98.0).abs() < 1e-9, "{}", s.backlog_s);
        l.clear(2_000_000_000);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.end_slot(1_000_000_000, 3_000_000_000).occupancy_bytes, 0);
    }
}
