//! Fuzz target for the KV handoff feedback decoder and the sender core.
//!
//! Input: chunks of `u16 LE length + bytes`, each a feedback packet. Whatever
//! `Feedback::decode` accepts must re-encode to the same bytes; every chunk
//! goes into a `HandoffSender` between frames it sends, which must never
//! panic and never send more than its slots allow.

#![no_main]

use edgemu_codec_fuzz::chunks;
use std::sync::Arc;

use edgemu_handoff::{BlockLayout, Feedback, HandoffSender, RepairGate, SenderConfig, SourceOrder};
use edgemu_policies::repair::DeficitHeuristic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(layout) = BlockLayout::new(2, 32, 16, 3000) else {
        return;
    };
    let utilities: Arc<[f64]> = (0..layout.n_blocks()).map(f64::from).collect();
    let payload: Arc<[u8]> = vec![0x5a; layout.total_bytes()].into();
    let slots = 64;
    let Ok(mut tx) = HandoffSender::new(
        SenderConfig {
            session: 0,
            k: 8,
            slot_ns: 1000,
            slots_total: slots,
            repair_budget: 16,
            rtt_ns: 10_000,
            gate: RepairGate::Window,
            record_decisions: false,
        },
        layout,
        utilities,
        SourceOrder::Priority,
        payload,
        Box::new(DeficitHeuristic),
    ) else {
        return;
    };
    let mut now = 0u64;
    let mut sent = 0u32;
    for chunk in chunks(data) {
        if let Ok(fb) = Feedback::decode(chunk) {
            assert_eq!(fb.encode().as_slice(), chunk);
        }
        let _ = tx.handle_feedback(now, chunk);
        while let Some(_frame) = tx.poll_transmit(now) {
            sent += 1;
        }
        now += 1000;
    }
    assert!(sent <= slots);
    let s = tx.stats();
    assert!(s.repair_sent <= 16);
});
