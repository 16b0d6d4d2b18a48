//! Fuzz target for the KV handoff frame decoder and the receiver core.
//!
//! Input: chunks of `u16 LE length + bytes`, each a frame off the network.
//! Every chunk goes through `decode_frame` against a small layout (whatever it
//! accepts must lie inside its block) and into a `HandoffReceiver`, which must
//! never panic; every feedback it then emits must decode to itself.

#![no_main]

use edgemu_codec_fuzz::chunks;
use std::sync::Arc;

use edgemu_handoff::{
    decode_frame, BlockLayout, Feedback, HandoffReceiver, KvFrame, ReceiverConfig,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(layout) = BlockLayout::new(2, 32, 16, 3000) else {
        return;
    };
    let utilities: Arc<[f64]> = vec![1.0; layout.n_blocks() as usize].into();
    let Ok(mut rx) = HandoffReceiver::new(
        ReceiverConfig {
            session: 0,
            deadline_ns: u64::MAX,
            feedback_every: 1,
            max_repair_count: 16,
        },
        layout,
        utilities,
    ) else {
        return;
    };
    for (i, chunk) in chunks(data).into_iter().enumerate() {
        if let Ok((
            KvFrame::Source {
                offset, payload, ..
            },
            _,
        )) = decode_frame(chunk, &layout, None)
        {
            assert!(offset + payload.len() <= layout.block_bytes as usize);
        }
        let _ = rx.handle_packet(i as u64, chunk);
        if let Some(fb) = rx.poll_transmit(i as u64) {
            let decoded = Feedback::decode(&fb).expect("own feedback decodes");
            assert_eq!(decoded.encode().as_slice(), fb.as_slice());
        }
    }
    let r = rx.report();
    assert!((0.0..=1.0).contains(&r.recovered_utility));
    let kv = rx.into_received();
    for b in &kv.blocks {
        for r in &b.present {
            assert!(r.end <= b.bytes.len());
        }
    }
});
