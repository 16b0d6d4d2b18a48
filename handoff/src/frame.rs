//! KV frames: the codec's 1400-byte FEC frames, read against a block layout.
//!
//! The frame format is `edgemu_codec::fec::packet` (24-byte FEC header, then
//! the protected area: an 8-byte application header — block id u32, fragment
//! id u16, payload length u16 — and at most 1 368 payload bytes). The byte
//! offset of a fragment inside its block is not sent: it is `fragment · 1368`
//! by construction, and [`decode_frame`] checks that the payload length is the
//! one that place implies, so block, fragment, offset and length are all
//! validated against the [`BlockLayout`] before anything is stored.
//!
//! [`decode_frame`] is a decoder of outside bytes: any input gives a frame or
//! a typed [`HandoffError`], never a panic (proptest below, fuzz target
//! `handoff_frame` in `codec/fuzz`).

use edgemu_codec::fec::{parse, FecPacket, PacketBody, RepairHeader};

use crate::blocks::BlockLayout;
use crate::error::HandoffError;

/// A validated KV frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvFrame<'a> {
    Source {
        /// Transmission sequence number.
        seq: u32,
        /// Source packet id (position in the send order).
        id: u32,
        block: u32,
        fragment: u16,
        /// Byte offset of the payload inside the block.
        offset: usize,
        payload: &'a [u8],
    },
    Repair {
        seq: u32,
        header: RepairHeader,
        symbol: &'a [u8],
    },
}

/// Parses and validates one frame; returns the codec packet too (what the
/// RLC decoder takes).
pub fn decode_frame<'a>(
    bytes: &'a [u8],
    layout: &BlockLayout,
    session: Option<u32>,
) -> Result<(KvFrame<'a>, FecPacket<'a>), HandoffError> {
    let pkt = parse(bytes)?;
    if let Some(expected) = session {
        if pkt.session != expected {
            return Err(HandoffError::WrongSession {
                expected,
                got: pkt.session,
            });
        }
    }
    let frame = match pkt.body {
        PacketBody::Source(s) => {
            layout.check_fragment(s.block_id, s.fragment_id, s.payload.len())?;
            KvFrame::Source {
                seq: pkt.seq,
                id: s.id,
                block: s.block_id,
                fragment: s.fragment_id,
                offset: layout.fragment_range(s.fragment_id).start,
                payload: s.payload,
            }
        }
        PacketBody::Repair(r) => KvFrame::Repair {
            seq: pkt.seq,
            header: r.header,
            symbol: r.symbol,
        },
    };
    Ok((frame, pkt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_codec::fec::{build, SourcePacket, FRAME_SIZE};
    use proptest::prelude::*;

    fn layout() -> BlockLayout {
        BlockLayout::smollm2(64).unwrap()
    }

    fn source(block: u32, fragment: u16, len: usize) -> Vec<u8> {
        let payload = vec![7u8; len];
        build(&FecPacket {
            session: 5,
            seq: 1,
            body: PacketBody::Source(SourcePacket {
                id: 3,
                block_id: block,
                fragment_id: fragment,
                payload: &payload,
            }),
        })
        .unwrap()
    }

    #[test]
    fn good_and_hostile_frames() {
        let l = layout();
        let ok = source(2, 8, 1344);
        let (f, _) = decode_frame(&ok, &l, Some(5)).unwrap();
        assert!(matches!(
            f,
            KvFrame::Source {
                block: 2,
                fragment: 8,
                offset: 10_944,
                ..
            }
        ));
        assert_eq!(
            decode_frame(&ok, &l, Some(6)).unwrap_err(),
            HandoffError::WrongSession {
                expected: 6,
                got: 5
            }
        );
        assert!(matches!(
            decode_frame(&source(120, 0, 1368), &l, None),
            Err(HandoffError::BadBlock { .. })
        ));
        assert!(matches!(
            decode_frame(&source(0, 9, 1368), &l, None),
            Err(HandoffError::BadFragment { .. })
        ));
        assert!(matches!(
            decode_frame(&source(0, 0, 1000), &l, None),
            Err(HandoffError::FragmentLength { .. })
        ));
        assert!(matches!(
            decode_frame(&ok[..20], &l, None),
            Err(HandoffError::Frame(_))
        ));
        assert!(matches!(
            decode_frame(&[], &l, None),
            Err(HandoffError::Frame(_))
        ));
    }

    proptest! {
        /// Arbitrary bytes and bit flips of a valid frame: a value or a typed
        /// error, never a panic.
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..FRAME_SIZE + 8)) {
            let _ = decode_frame(&bytes, &layout(), None);
        }

        #[test]
        fn flipped_frames_never_panic(at in 0usize..1376, bit in 0u8..8) {
            let mut b = source(1, 3, 1368);
            if at < b.len() {
                b[at] ^= 1 << bit;
            }
            let _ = decode_frame(&b, &layout(), Some(5));
        }
    }
}
