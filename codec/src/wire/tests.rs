//! Tests of the wire codec: frame round trips (unit and proptest), hostile
//! input, and the handshake state machine.
//!
//! The codec is generic over the application's message, command and reply;
//! these tests run it with a small stand-in protocol (probe-like messages
//! and byte strings, text commands and replies). edgemu's own protocol has
//! its round-trip and hostile-input tests in `edgemu_protocol`.

use super::*;
use crate::ids::{ActorId, LinkId};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- stand-in protocol

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Probe(Probe),
    Ping(Ping),
    Pong(Pong),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Probe {
    seq: u64,
    size: u32,
    #[serde(with = "serde_bytes")]
    pad: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Ping {
    seq: u64,
    size: u32,
    reply_via: Option<LinkId>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Pong {
    seq: u64,
    size: u32,
    ping_sent_at_ns: u64,
}

impl BulkBytes for Msg {
    fn bulk_bytes(&self) -> usize {
        match self {
            Msg::Bytes(b) => b.len(),
            Msg::Probe(p) => p.pad.len(),
            _ => 0,
        }
    }

    fn take_trailing_bulk(&mut self) -> Option<TrailingBulk> {
        match self {
            Msg::Bytes(b) => Some(TrailingBulk {
                variant: 3,
                bytes: std::mem::take(b),
            }),
            _ => None,
        }
    }

    fn from_trailing_bulk<'a>(
        variant: u32,
        bytes: impl FnOnce() -> Option<&'a [u8]>,
    ) -> Option<Self> {
        if variant != 3 {
            return None;
        }
        Some(Msg::Bytes(bytes()?.to_vec()))
    }
}

type Frame = super::Frame<Msg, String, String>;
type Envelope = super::Envelope<Msg>;

fn encode_frame(frame: &Frame) -> Result<Vec<u8>, WireError> {
    super::encode_frame(frame)
}

fn decode_frame(bytes: &[u8]) -> Result<Frame, WireError> {
    super::decode_frame(bytes)
}

fn hello_of(h: &Handshake) -> Frame {
    h.hello_frame()
}

// ---------------------------------------------------------------- fixtures

fn sample_envelope(payload: Msg) -> Envelope {
    Envelope {
        src: ActorId(1),
        dst: ActorId(70_000),
        via: Some(LinkId(3)),
        sent_at_ns: 1_234_567_890,
        due_ns: None,
        payload,
    }
}

fn sample_hello(host: &str, nonce_byte: u8) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        host: host.to_string(),
        incarnation: 0xdead_beef_0000_0000 | u64::from(nonce_byte),
        config_digest: config_digest(b"[[hosts]]\nname = \"a\"\n"),
        nonce: [nonce_byte; 32],
    }
}

/// One of every frame variant (and every `Msg` variant inside `Envelopes`).
fn all_frames() -> Vec<Frame> {
    vec![
        Frame::Hello(sample_hello("edge-a", 7)),
        Frame::Auth(Auth { mac: [0xa5; 32] }),
        Frame::Heartbeat(Heartbeat {
            seq: 9,
            sent_ns: u64::MAX,
            echo_ns: Some(17),
            echo_hold_ns: 250_000,
        }),
        Frame::Heartbeat(Heartbeat {
            seq: 0,
            sent_ns: 0,
            echo_ns: None,
            echo_hold_ns: 0,
        }),
        Frame::Envelopes(vec![]),
        Frame::Envelopes(vec![
            sample_envelope(Msg::Probe(Probe {
                seq: 1,
                size: 1500,
                pad: Vec::new(),
            })),
            sample_envelope(Msg::Ping(Ping {
                seq: 2,
                size: 64,
                reply_via: Some(LinkId(4)),
            })),
            sample_envelope(Msg::Pong(Pong {
                seq: 2,
                size: 64,
                ping_sent_at_ns: 99,
            })),
            sample_envelope(Msg::Bytes(vec![0, 1, 2, 255])),
            Envelope {
                via: None,
                due_ns: Some(5),
                ..sample_envelope(Msg::Bytes(vec![]))
            },
        ]),
        Frame::Start {
            unix_ns: 1_700_000_000_000_000_000,
        },
        Frame::ControlForward {
            id: 42,
            command: "link.kill l1".to_string(),
        },
        Frame::ControlReply {
            id: 42,
            reply: "ok: h\u{e9}llo".to_string(),
        },
        Frame::Bye {
            reason: "run over".to_string(),
        },
    ]
}

// ---------------------------------------------------------------- strategies

fn arb_msg() -> impl Strategy<Value = Msg> {
    prop_oneof![
        (any::<u64>(), any::<u32>()).prop_map(|(seq, size)| Msg::Probe(Probe {
            seq,
            size,
            pad: Vec::new()
        })),
        (any::<u64>(), any::<u32>(), any::<Option<u32>>()).prop_map(|(seq, size, via)| {
            Msg::Ping(Ping {
                seq,
                size,
                reply_via: via.map(LinkId),
            })
        }),
        (any::<u64>(), any::<u32>(), any::<u64>()).prop_map(|(seq, size, ping_sent_at_ns)| {
            Msg::Pong(Pong {
                seq,
                size,
                ping_sent_at_ns,
            })
        }),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Msg::Bytes),
    ]
}

/// An envelope of (src, dst, via, sent, due, message).
fn envelope_of(
    (src, dst, via, sent_at_ns, due_ns, payload): (u32, u32, Option<u32>, u64, Option<u64>, Msg),
) -> Envelope {
    Envelope {
        src: ActorId(src),
        dst: ActorId(dst),
        via: via.map(LinkId),
        sent_at_ns,
        due_ns,
        payload,
    }
}

fn arb_envelope() -> impl Strategy<Value = Envelope> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<Option<u32>>(),
        any::<u64>(),
        any::<Option<u64>>(),
        arb_msg(),
    )
        .prop_map(envelope_of)
}

fn arb_hello() -> impl Strategy<Value = Hello> {
    (
        any::<u16>(),
        ".{0,40}",
        any::<u64>(),
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
    )
        .prop_map(
            |(protocol_version, host, incarnation, config_digest, nonce)| Hello {
                protocol_version,
                host,
                incarnation,
                config_digest,
                nonce,
            },
        )
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        arb_hello().prop_map(Frame::Hello),
        any::<[u8; 32]>().prop_map(|mac| Frame::Auth(Auth { mac })),
        (
            any::<u64>(),
            any::<u64>(),
            any::<Option<u64>>(),
            any::<u64>()
        )
            .prop_map(|(seq, sent_ns, echo_ns, echo_hold_ns)| Frame::Heartbeat(
                Heartbeat {
                    seq,
                    sent_ns,
                    echo_ns,
                    echo_hold_ns,
                }
            )),
        proptest::collection::vec(arb_envelope(), 0..8).prop_map(Frame::Envelopes),
        any::<u64>().prop_map(|unix_ns| Frame::Start { unix_ns }),
        (any::<u64>(), ".{0,80}").prop_map(|(id, command)| Frame::ControlForward { id, command }),
        (any::<u64>(), ".{0,80}").prop_map(|(id, reply)| Frame::ControlReply { id, reply }),
        ".{0,80}".prop_map(|reason| Frame::Bye { reason }),
    ]
}

// ---------------------------------------------------------------- frame codec

#[test]
fn every_variant_round_trips() {
    for frame in all_frames() {
        let bytes = encode_frame(&frame).expect("encodes");
        assert_eq!(&bytes[..4], b"EDGM");
        assert_eq!(bytes[4], WIRE_VERSION);
        assert_eq!(decode_frame(&bytes), Ok(frame));
    }
}

#[test]
fn encoded_len_counts_what_a_frame_body_holds() {
    let env = sample_envelope(Msg::Bytes(vec![0; 300]));
    let len = encoded_len(&env).expect("encodes");
    let one = encode_frame(&Frame::Envelopes(vec![env])).expect("encodes");
    // Header (5), variant tag (1) and the vector's length (1) around it.
    assert_eq!(one.len(), 5 + 1 + 1 + len);
}

#[test]
fn short_inputs_are_truncated() {
    let full = encode_frame(&Frame::Start { unix_ns: 5 }).expect("encodes");
    for len in 0..5 {
        assert_eq!(
            decode_frame(&full[..len]),
            Err(WireError::Truncated { len }),
            "len {len}"
        );
    }
}

#[test]
fn every_strict_prefix_of_every_frame_is_an_error() {
    for frame in all_frames() {
        let bytes = encode_frame(&frame).expect("encodes");
        for len in 0..bytes.len() {
            assert!(
                decode_frame(&bytes[..len]).is_err(),
                "{} prefix of {len}/{} bytes decoded",
                frame.kind(),
                bytes.len()
            );
        }
    }
}

#[test]
fn header_only_is_malformed() {
    let mut bytes = MAGIC.to_vec();
    bytes.push(WIRE_VERSION);
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn wrong_magic_is_refused() {
    let mut bytes = encode_frame(&Frame::Start { unix_ns: 5 }).expect("encodes");
    bytes[0] = b'X';
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::BadMagic { found: *b"XDGM" })
    );
}

#[test]
fn wrong_version_is_refused() {
    let mut bytes = encode_frame(&Frame::Start { unix_ns: 5 }).expect("encodes");
    for v in [0u8, WIRE_VERSION + 1, 255] {
        bytes[4] = v;
        assert_eq!(
            decode_frame(&bytes),
            Err(WireError::WrongVersion {
                found: v,
                expected: WIRE_VERSION
            })
        );
    }
}

#[test]
fn every_header_bit_flip_is_refused() {
    let bytes = encode_frame(&Frame::Bye { reason: "x".into() }).expect("encodes");
    for bit in 0..5 * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let err = decode_frame(&flipped).expect_err("header flip must fail");
        assert!(
            matches!(
                err,
                WireError::BadMagic { .. } | WireError::WrongVersion { .. }
            ),
            "bit {bit}: {err:?}"
        );
    }
}

#[test]
fn body_bit_flips_never_panic_and_change_or_refuse() {
    for frame in all_frames() {
        let bytes = encode_frame(&frame).expect("encodes");
        for bit in 5 * 8..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            // A flip in a payload byte can give another valid frame, but
            // never the same one.
            if let Ok(decoded) = decode_frame(&flipped) {
                assert_ne!(decoded, frame, "bit {bit} of {}", frame.kind());
            }
        }
    }
}

#[test]
fn bad_variant_tag_is_malformed() {
    let mut bytes = MAGIC.to_vec();
    bytes.push(WIRE_VERSION);
    bytes.push(200); // no such Frame variant
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn invalid_utf8_is_malformed() {
    let mut bytes = encode_frame(&Frame::Bye {
        reason: "ab".into(),
    })
    .expect("encodes");
    let n = bytes.len();
    bytes[n - 1] = 0xff;
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn trailing_bytes_are_malformed() {
    let mut bytes = encode_frame(&Frame::Start { unix_ns: 5 }).expect("encodes");
    bytes.push(0);
    match decode_frame(&bytes) {
        Err(WireError::Malformed(m)) => assert!(m.contains("trailing"), "{m}"),
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn hostile_length_prefix_is_an_error_not_an_allocation() {
    // Bye { reason } whose string claims u64::MAX bytes (varint tag 253 + u64).
    let bye_tag = 7u8;
    let mut bytes = MAGIC.to_vec();
    bytes.push(WIRE_VERSION);
    bytes.push(bye_tag);
    bytes.push(253);
    bytes.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));

    // Envelopes claiming 2^40 elements: the seq visitor would try to grow.
    let mut bytes = MAGIC.to_vec();
    bytes.push(WIRE_VERSION);
    bytes.push(3); // Envelopes
    bytes.push(253);
    bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));

    // A length just over the frame limit inside a small frame.
    let mut bytes = MAGIC.to_vec();
    bytes.push(WIRE_VERSION);
    bytes.push(bye_tag);
    bytes.push(252); // u32 follows
    bytes.extend_from_slice(
        &u32::try_from(MAX_FRAME_BYTES + 1)
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let mut bytes = encode_frame(&Frame::Start { unix_ns: 5 }).expect("encodes");
    bytes.resize(MAX_FRAME_BYTES + 1, 0);
    assert_eq!(
        decode_frame(&bytes),
        Err(WireError::TooLarge {
            len: MAX_FRAME_BYTES + 1,
            max: MAX_FRAME_BYTES
        })
    );
}

#[test]
fn oversized_frame_is_refused_on_encode() {
    let big = Frame::Envelopes(vec![sample_envelope(Msg::Bytes(vec![7; MAX_FRAME_BYTES]))]);
    assert!(matches!(
        encode_frame(&big),
        Err(WireError::TooLarge { len, max }) if max == MAX_FRAME_BYTES && len > max
    ));
    let big = Frame::Bye {
        reason: "x".repeat(MAX_FRAME_BYTES),
    };
    assert!(matches!(
        encode_frame(&big),
        Err(WireError::TooLarge { .. })
    ));
}

#[test]
fn frame_at_exactly_the_limit_round_trips() {
    // Bye: tag (1) + varint u32 length (5) + string; header 5.
    let overhead = 5 + 1 + 5;
    let frame = Frame::Bye {
        reason: "y".repeat(MAX_FRAME_BYTES - overhead),
    };
    let bytes = encode_frame(&frame).expect("exactly at the limit encodes");
    assert_eq!(bytes.len(), MAX_FRAME_BYTES);
    match decode_frame(&bytes) {
        Ok(decoded) => assert!(decoded == frame, "decoded a different frame"),
        Err(e) => panic!("frame at the limit does not decode: {e}"),
    }
    let over = Frame::Bye {
        reason: "y".repeat(MAX_FRAME_BYTES - overhead + 1),
    };
    assert!(matches!(
        encode_frame(&over),
        Err(WireError::TooLarge { .. })
    ));
}

#[test]
fn full_frame_of_tiny_envelopes_decodes() {
    // Each tiny envelope takes 9 wire bytes (8, plus the empty pad's length)
    // but bincode's decode limit counts more claimed bytes for it: a frame of them at the size limit must still
    // decode (the decode limit allows 8 claimed bytes per wire byte).
    let tiny = Envelope {
        src: ActorId(0),
        dst: ActorId(0),
        via: None,
        sent_at_ns: 0,
        due_ns: None,
        payload: Msg::Probe(Probe {
            seq: 0,
            size: 0,
            pad: Vec::new(),
        }),
    };
    let n = (MAX_FRAME_BYTES - 5 - 1 - 5) / 9;
    let frame = Frame::Envelopes(vec![tiny; n]);
    let bytes = encode_frame(&frame).expect("fits");
    assert!(bytes.len() > MAX_FRAME_BYTES - 16, "{}", bytes.len());
    assert!(
        decode_frame(&bytes) == Ok(frame),
        "full frame must round trip"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn prop_frame_round_trips(frame in arb_frame()) {
        let bytes = encode_frame(&frame).expect("encodes");
        prop_assert!(bytes.len() <= MAX_FRAME_BYTES);
        prop_assert_eq!(decode_frame(&bytes), Ok(frame));
    }

    #[test]
    fn prop_envelope_round_trips(envs in proptest::collection::vec(arb_envelope(), 1..4)) {
        let frame = Frame::Envelopes(envs);
        let bytes = encode_frame(&frame).expect("encodes");
        prop_assert_eq!(decode_frame(&bytes), Ok(frame));
    }

    #[test]
    fn prop_truncation_is_an_error(frame in arb_frame(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_frame(&frame).expect("encodes");
        let len = cut.index(bytes.len());
        prop_assert!(decode_frame(&bytes[..len]).is_err());
    }

    #[test]
    fn prop_extension_is_an_error(frame in arb_frame(), extra in proptest::collection::vec(any::<u8>(), 1..16)) {
        let mut bytes = encode_frame(&frame).expect("encodes");
        bytes.extend_from_slice(&extra);
        prop_assert!(matches!(decode_frame(&bytes), Err(WireError::Malformed(_))));
    }

    #[test]
    fn prop_bit_flip_never_panics(frame in arb_frame(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut bytes = encode_frame(&frame).expect("encodes");
        let i = pos.index(bytes.len());
        bytes[i] ^= 1 << bit;
        if let Ok(decoded) = decode_frame(&bytes) {
            prop_assert_ne!(&decoded, &frame);
            // Whatever decodes re-encodes and decodes to itself.
            let again = encode_frame(&decoded).expect("re-encodes");
            prop_assert_eq!(decode_frame(&again), Ok(decoded));
        }
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(mut body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_frame(&body);
        let mut framed = MAGIC.to_vec();
        framed.push(WIRE_VERSION);
        framed.append(&mut body);
        if let Ok(decoded) = decode_frame(&framed) {
            let again = encode_frame(&decoded).expect("re-encodes");
            prop_assert_eq!(decode_frame(&again), Ok(decoded));
        }
    }
}

// ---------------------------------------------------------------- envelope fast path

fn decode_by_serde(bytes: &[u8]) -> Result<Frame, WireError> {
    super::frame::decode_frame_by_serde(bytes)
}

/// The fast path and serde decode `bytes` to the same frame, or both refuse it.
fn assert_decodes_alike(bytes: &[u8], what: &str) {
    let (fast, slow) = (decode_frame(bytes), decode_by_serde(bytes));
    assert_eq!(
        fast.as_ref().ok(),
        slow.as_ref().ok(),
        "{what}: {fast:?} / {slow:?}"
    );
    assert_eq!(fast.is_ok(), slow.is_ok(), "{what}: {fast:?} / {slow:?}");
}

/// A frame of envelopes whose integers take every varint width.
fn arb_envelope_frame() -> impl Strategy<Value = Frame> {
    let narrow = || prop_oneof![0u32..=250, 251u32..=0xffff, any::<u32>()];
    let wide = || {
        prop_oneof![
            0u64..=250,
            251u64..=0xffff,
            0x1_0000u64..=0xffff_ffff,
            any::<u64>()
        ]
    };
    let envelope = (
        narrow(),
        narrow(),
        proptest::option::of(narrow()),
        wide(),
        proptest::option::of(wide()),
        arb_msg(),
    )
        .prop_map(envelope_of);
    proptest::collection::vec(envelope, 0..8).prop_map(Frame::Envelopes)
}

/// Every value of every byte of small envelope frames (all message
/// kinds, options set and not, integers of each varint width) decodes by
/// the fast path exactly as by serde, or is refused by both.
#[test]
fn every_single_byte_change_decodes_as_serde_decodes_it() {
    let probe = Msg::Probe(Probe {
        seq: 300,
        size: 70_000,
        pad: vec![9; 2],
    });
    let ping = Msg::Ping(Ping {
        seq: 1,
        size: 2,
        reply_via: Some(LinkId(251)),
    });
    let frames = [
        Frame::Envelopes(vec![sample_envelope(Msg::Bytes(vec![1, 2, 3]))]),
        Frame::Envelopes(vec![
            Envelope {
                src: ActorId(250),
                dst: ActorId(0x1_0000),
                via: None,
                sent_at_ns: u64::MAX,
                due_ns: Some(251),
                payload: Msg::Bytes(Vec::new()),
            },
            sample_envelope(probe),
            sample_envelope(ping),
        ]),
        Frame::Envelopes(Vec::new()),
    ];
    for frame in frames {
        let bytes = encode_frame(&frame).expect("encodes");
        for i in MAGIC.len() + 1..bytes.len() {
            for v in 0..=255u8 {
                let mut changed = bytes.clone();
                changed[i] = v;
                assert_decodes_alike(&changed, &format!("byte {i} = {v}"));
            }
        }
    }
}

/// Each integer of an envelope written with every varint marker (minimal
/// or not, too wide for its type, reserved) decodes by the fast path
/// exactly as by serde, or is refused by both.
#[test]
fn every_varint_marker_in_every_field_decodes_as_serde_decodes_it() {
    // Fields of one envelope whose message is `Bytes([7])`, each the value
    // 1: src, dst, via (Some), sent, due (Some), variant (3), length.
    let fields: [(&[u8], u8); 7] = [
        (&[], 1),
        (&[], 1),
        (&[1], 1),
        (&[], 1),
        (&[1], 1),
        (&[], 3),
        (&[], 1),
    ];
    let widths = [(251u8, 2usize), (252, 4), (253, 8), (254, 16), (255, 0)];
    for at in 0..fields.len() {
        for (marker, width) in widths {
            let mut body = vec![super::envelopes_decode::ENVELOPES_VARIANT as u8, 1];
            for (i, (prefix, value)) in fields.iter().enumerate() {
                body.extend_from_slice(prefix);
                if i == at {
                    body.push(marker);
                    let mut wide = vec![0u8; width];
                    if let Some(first) = wide.first_mut() {
                        *first = *value;
                    }
                    body.extend_from_slice(&wide);
                } else {
                    body.push(*value);
                }
            }
            body.push(7);
            let mut framed = MAGIC.to_vec();
            framed.push(WIRE_VERSION);
            framed.extend_from_slice(&body);
            assert_decodes_alike(&framed, &format!("field {at}, marker {marker}"));
        }
    }
}

#[test]
fn the_envelopes_variant_index_is_serdes() {
    let bytes = encode_frame(&Frame::Envelopes(Vec::new())).expect("encodes");
    assert_eq!(
        bytes[MAGIC.len() + 1],
        super::envelopes_decode::ENVELOPES_VARIANT as u8
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The fast path decodes what serde decodes, and refuses what serde
    /// refuses: whole frames, every cut, bit flips and added bytes.
    #[test]
    fn prop_envelope_frames_decode_as_serde_decodes_them(
        frame in arb_envelope_frame(),
        cut in any::<prop::sample::Index>(),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
        extra in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let bytes = encode_frame(&frame).expect("encodes");
        prop_assert_eq!(decode_frame(&bytes), Ok(frame));
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert_eq!(decode_frame(short).is_ok(), decode_by_serde(short).is_ok());
        let mut flipped = bytes.clone();
        let i = pos.index(flipped.len());
        flipped[i] ^= 1 << bit;
        prop_assert_eq!(decode_frame(&flipped).ok(), decode_by_serde(&flipped).ok());
        prop_assert_eq!(decode_frame(&flipped).is_ok(), decode_by_serde(&flipped).is_ok());
        let mut longer = bytes;
        longer.extend_from_slice(&extra);
        prop_assert_eq!(decode_frame(&longer).ok(), decode_by_serde(&longer).ok());
    }

    /// Arbitrary bodies that claim to be a list of envelopes.
    #[test]
    fn prop_arbitrary_envelope_bodies_decode_as_serde_decodes_them(
        body in proptest::collection::vec(any::<u8>(), 0..120)
    ) {
        let mut framed = MAGIC.to_vec();
        framed.push(WIRE_VERSION);
        framed.push(super::envelopes_decode::ENVELOPES_VARIANT as u8);
        framed.extend_from_slice(&body);
        prop_assert_eq!(decode_frame(&framed).ok(), decode_by_serde(&framed).ok());
        prop_assert_eq!(decode_frame(&framed).is_ok(), decode_by_serde(&framed).is_ok());
    }
}

// ---------------------------------------------------------------- handshake

const TOKEN: &[u8] = b"cluster-secret";

fn pair(token_a: &[u8], token_b: &[u8]) -> (Handshake, Handshake) {
    // A (lower name) dials B; B accepts.
    let a = Handshake::new(
        sample_hello("edge-a", 1),
        token_a.to_vec(),
        Some("edge-b".into()),
    );
    let b = Handshake::new(sample_hello("edge-b", 2), token_b.to_vec(), None);
    (a, b)
}

/// Sends `frame` through the real codec and feeds it to `to`.
fn deliver(
    to: &mut Handshake,
    frame: Frame,
) -> Result<(Option<Frame>, Option<HandshakeOutcome>), HandshakeError> {
    let bytes = encode_frame(&frame).expect("encodes");
    to.on_frame(decode_frame(&bytes).expect("decodes"))
}

#[test]
fn digest_is_sha256() {
    // SHA-256("abc")
    let expected = [
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22,
        0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00,
        0x15, 0xad,
    ];
    assert_eq!(config_digest(b"abc"), expected);
}

#[test]
fn auth_mac_binds_token_nonce_and_host() {
    let base = auth_mac(TOKEN, &[1; 32], "edge-a");
    assert_eq!(base, auth_mac(TOKEN, &[1; 32], "edge-a"));
    assert_ne!(base, auth_mac(b"other", &[1; 32], "edge-a"));
    assert_ne!(base, auth_mac(TOKEN, &[2; 32], "edge-a"));
    assert_ne!(base, auth_mac(TOKEN, &[1; 32], "edge-b"));
    // HMAC-SHA256 with an empty key and empty host still works (loopback, no token).
    let _ = auth_mac(b"", &[0; 32], "");
}

#[test]
fn handshake_succeeds_both_ways() {
    let (mut a, mut b) = pair(TOKEN, TOKEN);
    // Both send Hello first (simultaneously).
    let hello_a = hello_of(&a);
    let hello_b = hello_of(&b);
    let (auth_from_b, done) = deliver(&mut b, hello_a).expect("b accepts a's hello");
    assert!(done.is_none());
    let (auth_from_a, done) = deliver(&mut a, hello_b).expect("a accepts b's hello");
    assert!(done.is_none());
    assert!(!a.is_done() && !b.is_done());

    let (reply, done_a) = deliver(&mut a, auth_from_b.expect("b answers")).expect("a verifies b");
    assert!(reply.is_none());
    assert_eq!(
        done_a,
        Some(HandshakeOutcome {
            peer_host: "edge-b".into(),
            peer_incarnation: sample_hello("edge-b", 2).incarnation,
        })
    );
    let (reply, done_b) = deliver(&mut b, auth_from_a.expect("a answers")).expect("b verifies a");
    assert!(reply.is_none());
    assert_eq!(
        done_b,
        Some(HandshakeOutcome {
            peer_host: "edge-a".into(),
            peer_incarnation: sample_hello("edge-a", 1).incarnation,
        })
    );
    assert!(a.is_done() && b.is_done());

    // Anything more goes to the mesh, not the handshake.
    assert!(matches!(
        a.on_frame(Frame::Start { unix_ns: 1 }),
        Err(HandshakeError::Unexpected(_))
    ));
}

#[test]
fn wrong_token_is_bad_auth_on_both_sides() {
    let (mut a, mut b) = pair(TOKEN, b"wrong token");
    let (auth_from_b, _) = deliver(&mut b, hello_of(&a)).expect("hello ok");
    let (auth_from_a, _) = deliver(&mut a, hello_of(&b)).expect("hello ok");
    assert_eq!(
        deliver(&mut a, auth_from_b.expect("auth")),
        Err(HandshakeError::BadAuth {
            host: "edge-b".into()
        })
    );
    assert_eq!(
        deliver(&mut b, auth_from_a.expect("auth")),
        Err(HandshakeError::BadAuth {
            host: "edge-a".into()
        })
    );
    assert!(!a.is_done() && !b.is_done());
}

#[test]
fn forged_and_replayed_auth_are_refused() {
    let (mut a, mut b) = pair(TOKEN, TOKEN);
    let _ = deliver(&mut a, hello_of(&b)).expect("hello ok");
    let _ = deliver(&mut b, hello_of(&a)).expect("hello ok");
    // A MAC over the wrong nonce (e.g. recorded from another connection).
    let replay = Frame::Auth(Auth {
        mac: auth_mac(TOKEN, &[9; 32], "edge-b"),
    });
    assert!(matches!(
        deliver(&mut a, replay),
        Err(HandshakeError::BadAuth { .. })
    ));
    // Truncated/garbage MAC.
    assert!(matches!(
        deliver(&mut b, Frame::Auth(Auth { mac: [0; 32] })),
        Err(HandshakeError::BadAuth { .. })
    ));
}

#[test]
fn reflection_is_refused() {
    // An attacker without the token replays A's own Hello to A, hoping A's
    // Auth answer is also valid as the peer's Auth.
    let (mut a, _) = pair(TOKEN, TOKEN);
    let mut a_accepting = Handshake::new(sample_hello("edge-a", 1), TOKEN.to_vec(), None);
    assert!(matches!(
        a_accepting.on_frame(hello_of(&a)),
        Err(HandshakeError::Unexpected(_))
    ));
    // Same nonce under another name.
    let mut echo = sample_hello("edge-b", 1);
    echo.nonce = sample_hello("edge-a", 1).nonce;
    assert!(matches!(
        a.on_frame(Frame::Hello(echo)),
        Err(HandshakeError::Unexpected(_))
    ));
}

#[test]
fn config_digest_mismatch_is_refused() {
    let (mut a, _) = pair(TOKEN, TOKEN);
    let mut peer = sample_hello("edge-b", 2);
    peer.config_digest = config_digest(b"some other config");
    assert_eq!(
        a.on_frame(Frame::Hello(peer)),
        Err(HandshakeError::ConfigMismatch {
            host: "edge-b".into()
        })
    );
}

#[test]
fn protocol_version_mismatch_is_refused() {
    let (_, mut b) = pair(TOKEN, TOKEN);
    let mut peer = sample_hello("edge-a", 1);
    peer.protocol_version = PROTOCOL_VERSION + 1;
    assert_eq!(
        b.on_frame(Frame::Hello(peer)),
        Err(HandshakeError::Version {
            found: PROTOCOL_VERSION + 1,
            expected: PROTOCOL_VERSION
        })
    );
}

#[test]
fn unexpected_host_is_refused() {
    let (mut a, _) = pair(TOKEN, TOKEN);
    assert_eq!(
        a.on_frame(Frame::Hello(sample_hello("edge-c", 3))),
        Err(HandshakeError::UnexpectedHost {
            found: "edge-c".into(),
            expected: "edge-b".into()
        })
    );
    // The accepting side takes any host name.
    let mut b = Handshake::new(sample_hello("edge-b", 2), TOKEN.to_vec(), None);
    assert!(b.on_frame(Frame::Hello(sample_hello("edge-c", 3))).is_ok());
}

#[test]
fn out_of_order_frames_are_unexpected() {
    // Auth before Hello.
    let (mut a, _) = pair(TOKEN, TOKEN);
    assert!(matches!(
        a.on_frame(Frame::Auth(Auth { mac: [0; 32] })),
        Err(HandshakeError::Unexpected(_))
    ));

    // Non-handshake frames before and between Hello and Auth.
    let others = || {
        vec![
            Frame::Envelopes(vec![sample_envelope(Msg::Bytes(vec![1]))]),
            Frame::Heartbeat(Heartbeat {
                seq: 0,
                sent_ns: 0,
                echo_ns: None,
                echo_hold_ns: 0,
            }),
            Frame::Start { unix_ns: 0 },
            Frame::ControlForward {
                id: 0,
                command: "status".into(),
            },
            Frame::ControlReply {
                id: 0,
                reply: "ok".into(),
            },
            Frame::Bye { reason: "x".into() },
        ]
    };
    for f in others() {
        let (mut a, _) = pair(TOKEN, TOKEN);
        assert!(
            matches!(a.on_frame(f.clone()), Err(HandshakeError::Unexpected(_))),
            "{} before Hello",
            f.kind()
        );
        let (mut a, b) = pair(TOKEN, TOKEN);
        a.on_frame(hello_of(&b)).expect("hello ok");
        assert!(
            matches!(a.on_frame(f.clone()), Err(HandshakeError::Unexpected(_))),
            "{} before Auth",
            f.kind()
        );
    }

    // A second Hello.
    let (mut a, b) = pair(TOKEN, TOKEN);
    a.on_frame(hello_of(&b)).expect("hello ok");
    assert!(matches!(
        a.on_frame(hello_of(&b)),
        Err(HandshakeError::Unexpected(_))
    ));
}

#[test]
fn a_failed_handshake_stays_failed() {
    let (mut a, mut b) = pair(TOKEN, TOKEN);
    let (auth_from_b, _) = b.on_frame(hello_of(&a)).expect("hello ok");
    a.on_frame(hello_of(&b)).expect("hello ok");
    assert!(a.on_frame(Frame::Auth(Auth { mac: [0; 32] })).is_err());
    // Even the right Auth is refused now.
    assert!(matches!(
        a.on_frame(auth_from_b.expect("auth")),
        Err(HandshakeError::Unexpected(_))
    ));
    assert!(!a.is_done());
}

#[test]
fn debug_does_not_print_the_token() {
    let (a, _) = pair(b"super-secret-token", TOKEN);
    let dbg = format!("{a:?}");
    assert!(!dbg.contains("super-secret"), "{dbg}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn prop_handshake_succeeds_with_equal_tokens(
        token in proptest::collection::vec(any::<u8>(), 0..80),
        na in any::<[u8; 32]>(),
        nb in any::<[u8; 32]>(),
    ) {
        prop_assume!(na != nb);
        let mut ha = sample_hello("edge-a", 0);
        ha.nonce = na;
        let mut hb = sample_hello("edge-b", 0);
        hb.nonce = nb;
        let mut a = Handshake::new(ha, token.clone(), Some("edge-b".into()));
        let mut b = Handshake::new(hb, token, None);
        let (auth_b, _) = deliver(&mut b, hello_of(&a)).expect("hello ok");
        let (auth_a, _) = deliver(&mut a, hello_of(&b)).expect("hello ok");
        let (_, done_a) = deliver(&mut a, auth_b.expect("auth")).expect("verifies");
        let (_, done_b) = deliver(&mut b, auth_a.expect("auth")).expect("verifies");
        prop_assert_eq!(done_a.map(|o| o.peer_host), Some("edge-b".to_string()));
        prop_assert_eq!(done_b.map(|o| o.peer_host), Some("edge-a".to_string()));
    }
}
