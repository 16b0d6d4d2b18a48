//! The batching engine on the real backend: continuous batching and handed-off
//! caches give the tokens of decoding each request alone.

use candle_core::Device;
use edgemu_engine::batch::{BatchEngine, BatchMode, EngineConfig, Request};

use crate::backend::RealBackend;
use crate::model::{load_tiny, KvDtype, WeightLayout};

fn tiny_engine(mode: BatchMode) -> BatchEngine<RealBackend> {
    let lm = load_tiny(
        7,
        &Device::Cpu,
        Some(WeightLayout::for_device(&Device::Cpu)),
    )
    .unwrap();
    let be = RealBackend::new(lm.model, KvDtype::F32, None);
    BatchEngine::new(
        be,
        EngineConfig {
            kv_capacity_bytes: 1 << 30,
            max_batch: 64,
            mode,
        },
    )
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| 3 + (seed * 53 + i * 29) % 260)
        .collect()
}

#[test]
fn continuous_batching_matches_decoding_alone() {
    let mut e = tiny_engine(BatchMode::Continuous);
    // (id, prompt length, output length, iteration at which it is submitted)
    let plan = [
        (1u64, 5usize, 12usize, 0u64),
        (2, 17, 6, 0),
        (3, 9, 9, 2),
        (4, 30, 4, 3),
        (5, 2, 8, 7),
    ];
    let mut results = std::collections::HashMap::new();
    let mut now = 0u64;
    let mut it = 0;
    let mut saw_join = false;
    while results.len() < plan.len() {
        for &(id, pl, ol, at) in &plan {
            if at == it {
                e.submit(Request::with_tokens(id, prompt(id as u32, pl), ol), 0)
                    .unwrap();
            }
        }
        let o = e.step(now).unwrap();
        if !o.admitted.is_empty() && o.decode_batch > 0 {
            saw_join = true;
        }
        now += o.duration_ns;
        for f in o.finished {
            results.insert(f.id, f.tokens);
        }
        it += 1;
        assert!(it < 100);
    }
    assert!(saw_join, "some request must join a running batch");
    let model = e.backend().model();
    for &(id, pl, ol, _) in &plan {
        let alone = model.generate_alone(&prompt(id as u32, pl), ol).unwrap();
        assert_eq!(results[&id], alone, "request {id}");
    }
    assert_eq!(e.backend().live(), 0, "finished requests free their KV");
    assert_eq!(e.ledger().occupancy_bytes(), 0);
}

#[test]
fn handoff_cache_continues_the_sequence() {
    let mut e = tiny_engine(BatchMode::Continuous);
    let p = prompt(3, 12);
    let mut a = Request::with_tokens(1, p.clone(), 5);
    a.keep_cache = true;
    e.submit(a, 0).unwrap();
    let outs = e.run_to_idle(0).unwrap();
    let fin = outs.into_iter().flat_map(|o| o.finished).next().unwrap();
    let cache = fin.cache.unwrap();
    assert_eq!(cache.len(), 12 + 4);
    let mut p2 = p.clone();
    p2.extend_from_slice(&fin.tokens[..4]);
    p2.extend_from_slice(&[40, 41, 42]);
    e.submit_with_cache(Request::with_tokens(2, p2.clone(), 6), cache, 1_000_000_000)
        .unwrap();
    let outs = e.run_to_idle(1_000_000_000).unwrap();
    let got = outs
        .into_iter()
        .flat_map(|o| o.finished)
        .next()
        .unwrap()
        .tokens;
    assert_eq!(got, e.backend().model().generate_alone(&p2, 6).unwrap());
}
