//! Fuzz target for the FEC frame parser and decoder insertion.
//!
//! Input: the first byte picks the mode, the rest is chunks of
//! `u16 LE length + bytes`.
//! - Mode even (hostile): every chunk is a frame for `fec::parse`; whatever
//!   parses must re-build to the same bytes, and is inserted into a small
//!   decoder, whose invariants must hold after every insertion. Nothing panics.
//! - Mode odd (honest stream, fuzzed loss): every chunk is a source payload
//!   sent through an `RlcEncoder`; chunk bytes also decide which frames are lost
//!   and when repairs go out. Every id the decoder reports decoded must carry
//!   exactly the sent payload.

#![no_main]

use edgemu_codec::fec::{
    build, parse, DecoderConfig, EncoderConfig, RlcDecoder, RlcEncoder, MAX_PAYLOAD,
};
use edgemu_codec_fuzz::chunks;

fn hostile(data: &[u8]) {
    let mut dec = RlcDecoder::new(DecoderConfig {
        max_window: 256,
        max_count: 64,
        session: None,
    })
    .unwrap();
    for frame in chunks(data) {
        if let Ok(pkt) = parse(frame) {
            let again = build(&pkt).expect("a parsed frame builds");
            assert_eq!(again, frame, "parse/build round trip");
            if let Ok(p) = dec.insert(&pkt) {
                for id in p.decoded {
                    let _ = dec.get(id);
                }
            }
        }
        dec.check_invariants().expect("decoder invariants");
    }
    let _ = dec.feedback();
}

fn honest(data: &[u8]) {
    let mut enc = RlcEncoder::new(EncoderConfig {
        k: 8,
        max_window: 512,
        ..Default::default()
    })
    .unwrap();
    let mut dec = RlcDecoder::new(DecoderConfig::default()).unwrap();
    let mut sent: Vec<Vec<u8>> = Vec::new();
    for (i, chunk) in chunks(data).into_iter().enumerate() {
        let ctl = chunk.first().copied().unwrap_or(0);
        let payload = &chunk[..chunk.len().min(MAX_PAYLOAD)];
        let mut frames = Vec::new();
        if let Ok(f) = enc.send_source(i as u32, 0, payload) {
            sent.push(payload.to_vec());
            frames.push(f);
        }
        for _ in 0..(ctl >> 6) {
            if let Some(r) = enc.repair(usize::from(ctl & 7) + 1) {
                frames.push(r);
            }
        }
        for (j, f) in frames.into_iter().enumerate() {
            if (ctl >> (3 + j.min(2))) & 1 == 1 {
                continue; // lost
            }
            let p = dec
                .insert_frame(&f.bytes)
                .expect("honest frames are accepted");
            for id in p.decoded {
                let got = dec.get(id).expect("well-formed").expect("retained");
                assert_eq!(got.payload, &sent[id as usize][..], "wrong data for {id}");
            }
            dec.check_invariants().expect("decoder invariants");
        }
        let _ = enc.on_ack(&dec.feedback());
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((mode, rest)) if mode & 1 == 1 => honest(rest),
        Some((_, rest)) => hostile(rest),
        None => {}
    }
});
