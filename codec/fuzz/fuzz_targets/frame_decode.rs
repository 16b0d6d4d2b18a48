//! The mesh's frame decoder on arbitrary bytes, with edgemu's real payloads
//! (`edgemu_protocol`: every actor message, forwarded commands, their
//! replies and errors): never a panic, and whatever it accepts re-encodes
//! and decodes to the same frame; a list of envelopes gathered for a
//! vectored write is the same bytes.
#![no_main]

use edgemu_codec::wire::MAX_FRAME_BYTES;
use edgemu_codec::wire::GatheredFrame;
use edgemu_protocol::{decode_frame, encode_frame, gather_envelopes, Frame};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Raw bytes, and the same bytes behind a valid header so the fuzzer
    // spends its time in the body decoder rather than on the magic.
    let _ = decode_frame(data);
    let mut framed = Vec::with_capacity(data.len() + 5);
    framed.extend_from_slice(b"EDGM");
    framed.push(edgemu_codec::wire::WIRE_VERSION);
    framed.extend_from_slice(data);
    for input in [data, &framed[..]] {
        if let Ok(frame) = decode_frame(input) {
            let again = match encode_frame(&frame) {
                Ok(bytes) => bytes,
                Err(e) => panic!("decoded frame does not re-encode: {e}"),
            };
            if let Frame::Envelopes(envs) = frame.clone() {
                let mut gathered = GatheredFrame::new();
                match gather_envelopes(envs.into_iter(), &mut gathered) {
                    Ok(()) => assert!(gathered.to_vec() == again, "gathered bytes differ"),
                    Err(e) => panic!("decoded envelopes do not gather: {e}"),
                }
            }
            // Canonical re-encoding is never longer than what was accepted.
            assert!(again.len() <= input.len() && again.len() <= MAX_FRAME_BYTES);
            // Compared by their encodings: a NaN inside (a position, a
            // probability) is unequal to itself.
            match decode_frame(&again) {
                Ok(back) => match encode_frame(&back) {
                    Ok(bytes) => assert!(bytes == again, "round trip changed the frame"),
                    Err(e) => panic!("decoded frame does not re-encode: {e}"),
                },
                Err(e) => panic!("re-encoded frame does not decode: {e}"),
            }
        }
    }
});
