use super::*;
use crate::backend::ModeledBackend;
use crate::profile::{CurvePoint, DecodeCurve, Profile};

fn flat_profile(alpha: u64, cap: u64) -> Profile {
    Profile {
        name: "flat".into(),
        source: String::new(),
        kv_capacity_bytes: cap,
        kv_bytes_per_token: alpha,
        prefill_tok_s: 100.0,
        prefill_overhead_s: 0.0,
        decode: vec![DecodeCurve {
            batch: 1,
            points: vec![CurvePoint {
                kv_bytes: 0,
                step_s: 0.01,
            }],
        }],
    }
}

fn modeled(cap: u64, mode: BatchMode) -> BatchEngine<ModeledBackend> {
    BatchEngine::new(
        ModeledBackend::new(flat_profile(10, cap)),
        EngineConfig {
            kv_capacity_bytes: cap,
            max_batch: 16,
            mode,
        },
    )
}

#[test]
fn admission_waits_in_order_and_frees_at_iteration_end() {
    // α = 10 B, capacity 1000 B = 100 tokens.
    let mut e = modeled(1000, BatchMode::Continuous);
    e.submit(Request::with_lengths(1, 40, 20), 0).unwrap(); // 60 tokens
    e.submit(Request::with_lengths(2, 30, 20), 0).unwrap(); // 50: does not fit next to 1
    e.submit(Request::with_lengths(3, 10, 5), 0).unwrap(); // 15: would fit but must not overtake 2
    assert!(
        e.submit(Request::with_lengths(4, 90, 20), 0).is_err(),
        "can never fit"
    );
    let o = e.step(0).unwrap();
    assert_eq!(o.admitted, vec![1]);
    // prefill 40 tokens at 100 tok/s
    assert_eq!(o.duration_ns, 400_000_000);
    assert_eq!(o.ledger.occupancy_bytes, 410);
    assert_eq!(o.ledger.reserved_bytes, 600);
    assert_eq!(e.waiting_len(), 2);
    let mut now = o.duration_ns;
    let mut admitted_2_at = None;
    let mut finished_1_at = None;
    for k in 1..40 {
        let o = e.step(now).unwrap();
        if o.admitted.contains(&2) {
            admitted_2_at = Some(k);
            assert!(o.admitted.contains(&3), "3 follows 2 in the same iteration");
        }
        for f in &o.finished {
            if f.id == 1 {
                finished_1_at = Some(k);
                assert_eq!(f.tokens.len(), 20);
            }
        }
        now += o.duration_ns;
        if e.is_idle() {
            break;
        }
    }
    // Request 1: prefill gives token 1, then 19 decode iterations (k = 1..=19).
    assert_eq!(finished_1_at, Some(19));
    assert_eq!(
        admitted_2_at,
        Some(20),
        "admitted in the iteration after 1 left"
    );
    assert!(e.is_idle());
    let s = e.ledger().snapshot();
    assert_eq!(s.occupancy_bytes, 0);
    assert_eq!(s.reserved_bytes, 0);
    // Peak: request 1 at 40 + 20 tokens = 600 B; 2 and 3 together hold at most
    // 35 + 15 = 50 tokens (3 leaves after its 5th token) = 500 B.
    assert_eq!(s.peak_bytes, 600);
}

#[test]
fn memory_time_by_hand() {
    let mut e = modeled(10_000, BatchMode::Continuous);
    e.submit(Request::with_lengths(1, 10, 3), 0).unwrap();
    // it 0: prefill 10 tok = 0.1 s, holds 11 tokens → 110 B × 0.1 s
    // it 1: decode 0.01 s, 12 tokens → 120 × 0.01
    // it 2: decode 0.01 s, 13 tokens → 130 × 0.01, finishes
    let outs = e.run_to_idle(0).unwrap();
    assert_eq!(outs.len(), 3);
    let s = e.ledger().snapshot();
    let expect = 110.0 * 0.1 + 120.0 * 0.01 + 130.0 * 0.01;
    assert!(
        (s.memory_time_byte_s - expect).abs() < 1e-9,
        "{}",
        s.memory_time_byte_s
    );
    assert_eq!(s.peak_bytes, 130);
    let f = &outs[2].finished[0];
    assert_eq!(f.finished_at, 120_000_000);
    assert_eq!(f.first_token_at, 100_000_000);
    let w = e.take_window(1_000_000_000);
    assert!((w.eta - expect / 10_000.0).abs() < 1e-12);
}

#[test]
fn static_batching_waits_for_longest() {
    let mut e = modeled(1_000_000, BatchMode::Static);
    e.submit(Request::with_lengths(1, 10, 2), 0).unwrap();
    e.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    let o = e.step(0).unwrap();
    assert_eq!(o.admitted, vec![1, 2]);
    e.submit(Request::with_lengths(3, 10, 1), 0).unwrap();
    let mut now = o.duration_ns;
    let mut fin = Vec::new();
    for _ in 0..10 {
        let o = e.step(now).unwrap();
        assert!(
            !o.admitted.contains(&3) || fin.len() == 2,
            "no joining a running static batch"
        );
        now += o.duration_ns;
        for f in o.finished {
            fin.push((f.id, f.finished_at, f.tokens.len()));
        }
        if e.is_idle() {
            break;
        }
    }
    assert_eq!(fin.len(), 3);
    // 1 and 2 leave together, after 2's 5th token.
    assert_eq!(fin[0].1, fin[1].1);
    assert_eq!(fin[0].2, 2);
    assert_eq!(fin[1].2, 5);
    assert!(fin[2].1 > fin[1].1);

    // The same workload under continuous batching lets 1 leave early.
    let mut c = modeled(1_000_000, BatchMode::Continuous);
    c.submit(Request::with_lengths(1, 10, 2), 0).unwrap();
    c.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    let outs = c.run_to_idle(0).unwrap();
    let f1 = outs
        .iter()
        .flat_map(|o| &o.finished)
        .find(|f| f.id == 1)
        .unwrap();
    let f2 = outs
        .iter()
        .flat_map(|o| &o.finished)
        .find(|f| f.id == 2)
        .unwrap();
    assert!(f1.finished_at < f2.finished_at);
}

#[test]
fn modeled_decode_time_follows_profile() {
    let mut p = flat_profile(10, 1_000_000);
    p.decode[0].points = vec![
        CurvePoint {
            kv_bytes: 0,
            step_s: 0.01,
        },
        CurvePoint {
            kv_bytes: 1000,
            step_s: 0.02,
        },
    ];
    let mut e = BatchEngine::new(ModeledBackend::new(p), EngineConfig::default());
    e.submit(Request::with_lengths(1, 50, 3), 0).unwrap();
    let o = e.step(0).unwrap();
    assert_eq!(o.prefill_ns, 500_000_000);
    let o = e.step(500_000_000).unwrap();
    // occupancy before the iteration: 51 tokens = 510 B → 0.0151 s
    assert_eq!(o.decode_ns, 15_100_000);
}

/// A modeled backend that fails or short-changes on demand (issue 9).
struct FaultyBackend {
    inner: ModeledBackend,
    fail_decode: bool,
    short_prefill: bool,
    short_decode: bool,
}

impl Backend for FaultyBackend {
    type Cache = crate::backend::ModeledCache;
    type Error = EngineError;
    fn kv_bytes_per_token(&self) -> u64 {
        self.inner.kv_bytes_per_token()
    }
    fn eos_token(&self) -> Option<u32> {
        None
    }
    fn prefill(&mut self, items: &[PrefillItem<'_>]) -> Result<crate::backend::BackendStep> {
        let mut s = self.inner.prefill(items)?;
        if self.short_prefill {
            s.tokens.pop();
        }
        Ok(s)
    }
    fn decode(
        &mut self,
        items: &[DecodeItem],
        occupancy_bytes: u64,
    ) -> Result<crate::backend::BackendStep> {
        if self.fail_decode {
            return Err(EngineError::State("injected decode fault".into()));
        }
        let mut s = self.inner.decode(items, occupancy_bytes)?;
        if self.short_decode {
            s.tokens.pop();
        }
        Ok(s)
    }
    fn adopt(&mut self, seq: u64, cache: Self::Cache) -> Result<usize> {
        self.inner.adopt(seq, cache)
    }
    fn take(&mut self, seq: u64) -> Option<Self::Cache> {
        self.inner.take(seq)
    }
}

fn faulty() -> BatchEngine<FaultyBackend> {
    BatchEngine::new(
        FaultyBackend {
            inner: ModeledBackend::new(flat_profile(10, 1_000_000)),
            fail_decode: false,
            short_prefill: false,
            short_decode: false,
        },
        EngineConfig {
            kv_capacity_bytes: 1_000_000,
            max_batch: 16,
            mode: BatchMode::Continuous,
        },
    )
}

#[test]
fn decode_failure_after_prefill_keeps_admitted_requests_and_their_kv() {
    let mut e = faulty();
    e.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
    let o = e.step(0).unwrap();
    e.submit(Request::with_lengths(2, 20, 3), o.ended_at())
        .unwrap();
    e.backend_mut().fail_decode = true;
    // Request 2 is prefilled, then the decode of request 1 fails.
    let err = e.step(o.ended_at()).unwrap_err().to_string();
    assert!(err.contains("decode"), "{err}");
    assert_eq!(e.running_len(), 2, "the prefilled request is not lost");
    assert_eq!(e.ledger().reserved_bytes(), (15 + 23) * 10);
    // 1 holds 11 tokens, 2 holds 21 (prompt + its first token).
    assert_eq!(e.ledger().occupancy_bytes(), (11 + 21) * 10);
    e.backend_mut().fail_decode = false;
    let outs = e.run_to_idle(1_000_000_000).unwrap();
    let mut fin: Vec<(u64, usize)> = outs
        .iter()
        .flat_map(|o| &o.finished)
        .map(|f| (f.id, f.tokens.len()))
        .collect();
    fin.sort();
    assert_eq!(fin, vec![(1, 5), (2, 3)]);
    assert_eq!(e.ledger().reserved_bytes(), 0);
    assert_eq!(e.ledger().occupancy_bytes(), 0);
}

#[test]
fn abort_frees_the_reservation() {
    let mut e = faulty();
    e.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
    e.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    e.step(0).unwrap();
    assert!(e.abort(1));
    assert!(!e.abort(1));
    assert_eq!(e.ledger().reserved_bytes(), 150);
    assert!(e.abort(2));
    assert!(e.is_idle());
    assert_eq!(e.ledger().reserved_bytes(), 0);
    assert_eq!(e.ledger().occupancy_bytes(), 0);
}

#[test]
fn short_token_lists_are_errors_not_truncation() {
    let mut e = faulty();
    e.backend_mut().short_prefill = true;
    e.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
    e.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    let err = e.step(0).unwrap_err().to_string();
    assert!(err.contains("returned 1 tokens for 2"), "{err}");
    assert_eq!(e.ledger().reserved_bytes(), 0, "released, not leaked");
    assert_eq!(e.running_len(), 0);

    let mut e = faulty();
    e.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
    e.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    e.step(0).unwrap();
    e.backend_mut().short_decode = true;
    let err = e.step(100).unwrap_err().to_string();
    assert!(err.contains("returned 1 tokens for 2"), "{err}");
    assert_eq!(e.running_len(), 2);
}

#[test]
fn submit_records_its_own_time_after_an_idle_spell() {
    let mut e = modeled(1_000_000, BatchMode::Continuous);
    e.submit(Request::with_lengths(1, 10, 1), 0).unwrap();
    e.run_to_idle(0).unwrap();
    // Idle for 5 s, then a new request arrives.
    let t = 5_000_000_000;
    e.submit(Request::with_lengths(2, 10, 1), t).unwrap();
    let outs = e.run_to_idle(t + 7).unwrap();
    let f = &outs[0].finished[0];
    assert_eq!(f.submitted_at, t, "not the last step's time");
    assert_eq!(f.admitted_at, t + 7);
    assert_eq!(f.first_token_at, t + 7 + 100_000_000);
}

#[test]
fn an_id_is_refused_while_held_and_free_again_once_it_left() {
    let mut e = modeled(1_000_000, BatchMode::Continuous);
    e.submit(Request::with_lengths(1, 10, 2), 0).unwrap();
    let err = e.submit(Request::with_lengths(1, 5, 1), 0).unwrap_err();
    assert!(err.to_string().contains("already in use"), "waiting: {err}");
    e.step(0).unwrap();
    assert_eq!(e.running_len(), 1);
    assert!(
        e.submit(Request::with_lengths(1, 5, 1), 0).is_err(),
        "running"
    );
    let outs = e.run_to_idle(1).unwrap();
    assert_eq!(
        outs.last().unwrap().finished[0].tokens,
        vec![0, 0],
        "placeholders"
    );
    e.submit(Request::with_lengths(1, 5, 1), 9).unwrap();
    assert!(e.abort(1));
    e.submit(Request::with_lengths(1, 5, 1), 9).unwrap();
    // A failed prefill drops its requests: their ids are free too.
    let mut f = faulty();
    f.backend_mut().short_prefill = true;
    f.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
    f.submit(Request::with_lengths(2, 10, 5), 0).unwrap();
    assert!(f.step(0).is_err());
    f.backend_mut().short_prefill = false;
    f.submit(Request::with_lengths(1, 10, 5), 0).unwrap();
}

/// The ledger's occupancy, kept as one addition per iteration, equals the
/// tokens each live request holds (its prompt once admitted, plus every
/// token it was given), counted from the steps' outputs through
/// submissions, aborts and exits in both modes.
#[test]
fn occupancy_is_what_the_live_requests_hold() {
    for mode in [BatchMode::Continuous, BatchMode::Static] {
        let mut e = modeled(2_000, mode);
        let mut held: std::collections::HashMap<u64, u64> = Default::default();
        let input = |id: u64| 5 + id % 17;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut now, mut next_id) = (0u64, 0u64);
        for _ in 0..400 {
            match rand() % 5 {
                0 | 1 => {
                    let out = 1 + (rand() % 30) as usize;
                    let r = Request::with_lengths(next_id, input(next_id) as usize, out);
                    e.submit(r, now).unwrap();
                    next_id += 1;
                }
                2 if next_id > 0 => {
                    let id = rand() % next_id;
                    if e.abort(id) {
                        held.remove(&id);
                    }
                }
                _ => {
                    let o = e.step(now).unwrap();
                    for id in &o.admitted {
                        held.insert(*id, input(*id));
                    }
                    for (id, _) in &o.tokens {
                        *held.get_mut(id).expect("a token of an admitted request") += 1;
                    }
                    for f in &o.finished {
                        let h = held.remove(&f.id).expect("an admitted request finished");
                        assert_eq!(h, (f.input_len + f.tokens.len()) as u64);
                    }
                    now = o.ended_at();
                }
            }
            let want: u64 = held.values().sum::<u64>() * 10;
            assert_eq!(e.ledger().occupancy_bytes(), want, "{mode:?}");
        }
    }
}
