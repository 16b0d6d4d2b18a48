//! Feeds decoded frames into a `Handshake` (as the mesh does): never a panic,
//! and never an outcome without the peer's valid `Auth`.
//!
//! Input: a sequence of chunks, each a 2-byte little-endian length and that
//! many bytes, decoded with `decode_frame`. The first input byte picks the
//! side (dialing or accepting) and whether the fuzzer gets a head start: an
//! honest peer's `Hello` fed first (so the `Auth` path is reached), possibly
//! followed by its valid `Auth` (so frames after a finished handshake are).
#![no_main]

use edgemu_codec::wire::{
    auth_mac, config_digest, Auth, Handshake, HandshakeError, Hello, PROTOCOL_VERSION,
};
use edgemu_protocol::{decode_frame, Frame};

const TOKEN: &[u8] = b"fuzz-token";

fn hello(host: &str, nonce: u8) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        host: host.into(),
        incarnation: u64::from(nonce),
        config_digest: config_digest(b"fuzz config"),
        nonce: [nonce; 32],
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let expected = (mode & 1 == 1).then(|| "peer".to_string());
    let mut hs = Handshake::new(hello("local", 1), TOKEN.to_vec(), expected);
    let _: Frame = hs.hello_frame();
    let mut peer_hello_ok = false;
    let mut peer_host = String::new();
    if mode & 2 == 2 {
        let (reply, done) = match hs.on_frame(Frame::Hello(hello("peer", 2))) {
            Ok(r) => r,
            Err(e) => panic!("honest Hello refused: {e}"),
        };
        assert!(matches!(reply, Some(Frame::Auth(_))) && done.is_none());
        peer_hello_ok = true;
        peer_host = "peer".into();
    }
    // Mode bits 2 and 4: the honest peer's Auth follows and must succeed.
    if mode & 6 == 6 {
        let mac = auth_mac(TOKEN, &[1; 32], "peer");
        match hs.on_frame(Frame::Auth(Auth { mac })) {
            Ok((None, Some(outcome))) => assert_eq!(outcome.peer_host, "peer"),
            other => panic!("honest Auth refused: {other:?}"),
        }
    }
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let len = usize::from(u16::from_le_bytes(*len)).min(tail.len());
        let (chunk, tail) = tail.split_at(len);
        rest = tail;
        let Ok(frame) = decode_frame(chunk) else {
            continue;
        };
        let before_done = hs.is_done();
        let claimed = match &frame {
            Frame::Hello(h) => Some(h.host.clone()),
            _ => None,
        };
        let auth_mac_ok = match &frame {
            Frame::Auth(a) => peer_hello_ok && a.mac == auth_mac(TOKEN, &[1; 32], &peer_host),
            _ => false,
        };
        match hs.on_frame(frame) {
            Ok((reply, Some(outcome))) => {
                // An outcome only for the right MAC over our nonce.
                assert!(!before_done && auth_mac_ok && reply.is_none());
                assert_eq!(outcome.peer_host, peer_host);
                assert!(hs.is_done());
            }
            Ok((reply, None)) => {
                assert!(matches!(reply, Some(Frame::Auth(_))));
                assert!(!peer_hello_ok, "second Hello accepted");
                peer_hello_ok = true;
                peer_host = claimed.unwrap_or_default();
            }
            Err(HandshakeError::BadAuth { .. }) => assert!(!auth_mac_ok),
            Err(_) => {}
        }
    }
});
