//! The FEC frame format: at most 1400 bytes, a 24-byte header and a body.
//!
//! A source frame carries one **protected area** — an 8-byte application header
//! (block id, fragment id, payload length) followed by up to 1368 payload bytes,
//! as in the paper — and a repair frame carries a linear combination of the
//! protected areas of `count` consecutive source packets, each zero-padded to the
//! longest of them (at most [`SYMBOL_SIZE`] = 1376 bytes). Because the block and
//! fragment ids live inside the protected area, a recovered packet comes back with
//! them. All integers are big-endian.
//!
//! ```text
//!  0      magic 0xEF
//!  1      version 1
//!  2      kind: 0 source, 1 repair
//!  3      DT, density threshold 0..=15 (repair; 0 in source frames)
//!  4..8   source: its id  | repair: first source id combined
//!  8..10  repair: count of source packets combined, >= 1 (0 in source frames)
//! 10..12  repair: repair key, the TinyMT32 seed (0 in source frames)
//! 12..16  session: opaque flow id chosen by the application
//! 16..20  seq: transmission sequence number over all frames of the session
//! 20..22  body length in bytes
//! 22..24  reserved, 0
//! 24..    body: source → block id u32, fragment id u16, payload length u16,
//!               payload | repair → coded symbol, 8..=1376 bytes
//! ```
//!
//! [`parse`] validates every field and returns a typed [`FecError`] for anything
//! inconsistent; it never panics. [`build`] refuses what `parse` would refuse.

use super::coefficients::MAX_DT;
use super::error::FecError;

/// Largest frame, header included.
pub const FRAME_SIZE: usize = 1400;
/// Length of the frame header.
pub const HEADER_LEN: usize = 24;
/// Length of the application header at the start of every protected area.
pub const APP_HEADER_LEN: usize = 8;
/// Largest source payload.
pub const MAX_PAYLOAD: usize = 1368;
/// Largest protected area, i.e. the length every symbol is padded to.
pub const SYMBOL_SIZE: usize = APP_HEADER_LEN + MAX_PAYLOAD;
/// First byte of every frame.
pub const MAGIC: u8 = 0xEF;
/// Frame format version.
pub const VERSION: u8 = 1;

const _: () = assert!(HEADER_LEN + SYMBOL_SIZE == FRAME_SIZE);

/// Source or repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    Source,
    Repair,
}

/// A source packet: id and application ids, and the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePacket<'a> {
    pub id: u32,
    pub block_id: u32,
    pub fragment_id: u16,
    pub payload: &'a [u8],
}

impl SourcePacket<'_> {
    /// Length of this packet's protected area.
    pub fn symbol_len(&self) -> usize {
        APP_HEADER_LEN + self.payload.len()
    }

    /// Writes the protected area (application header and payload) to the start
    /// of `out`; returns the bytes written, or `None` if `out` is too short.
    pub fn write_symbol(&self, out: &mut [u8]) -> Option<usize> {
        let n = self.symbol_len();
        let out = out.get_mut(..n)?;
        let len = u16::try_from(self.payload.len()).ok()?;
        out[0..4].copy_from_slice(&self.block_id.to_be_bytes());
        out[4..6].copy_from_slice(&self.fragment_id.to_be_bytes());
        out[6..8].copy_from_slice(&len.to_be_bytes());
        out[8..].copy_from_slice(self.payload);
        Some(n)
    }
}

/// What a repair header says: the combined range and how to regenerate the
/// coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RepairHeader {
    /// Lowest source id combined.
    pub first_id: u32,
    /// Number of consecutive source ids combined (`first_id..first_id + count`).
    pub count: u16,
    /// Repair key, the TinyMT32 seed of RFC 8681 §3.6.
    pub key: u16,
    /// Density threshold, 0..=15.
    pub dt: u8,
}

impl RepairHeader {
    /// Highest source id combined, `None` if the range overflows or is empty.
    pub fn last_id(&self) -> Option<u32> {
        self.first_id
            .checked_add(u32::from(self.count).checked_sub(1)?)
    }

    fn validate(&self) -> Result<u32, FecError> {
        if self.dt > MAX_DT {
            return Err(FecError::BadDensity(self.dt));
        }
        if self.count == 0 {
            return Err(FecError::Inconsistent("repair combines zero packets"));
        }
        self.last_id().ok_or(FecError::IdOverflow {
            first: self.first_id,
            count: u32::from(self.count),
        })
    }
}

/// A repair packet: header and coded symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPacket<'a> {
    pub header: RepairHeader,
    pub symbol: &'a [u8],
}

/// Source or repair content of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketBody<'a> {
    Source(SourcePacket<'a>),
    Repair(RepairPacket<'a>),
}

/// One parsed frame, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FecPacket<'a> {
    pub session: u32,
    pub seq: u32,
    pub body: PacketBody<'a>,
}

impl FecPacket<'_> {
    pub fn kind(&self) -> PacketKind {
        match self.body {
            PacketBody::Source(_) => PacketKind::Source,
            PacketBody::Repair(_) => PacketKind::Repair,
        }
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses one frame.
pub fn parse(buf: &[u8]) -> Result<FecPacket<'_>, FecError> {
    if buf.len() > FRAME_SIZE {
        return Err(FecError::FrameTooLarge(buf.len()));
    }
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Err(FecError::Truncated {
            needed: HEADER_LEN,
            got: buf.len(),
        });
    };
    if h[0] != MAGIC {
        return Err(FecError::BadMagic(h[0]));
    }
    if h[1] != VERSION {
        return Err(FecError::BadVersion(h[1]));
    }
    let (kind, dt) = (h[2], h[3]);
    let id = be32(h, 4);
    let count = be16(h, 8);
    let key = be16(h, 10);
    let session = be32(h, 12);
    let seq = be32(h, 16);
    let body_len = usize::from(be16(h, 20));
    if be16(h, 22) != 0 {
        return Err(FecError::Inconsistent("reserved bytes are not zero"));
    }
    let body = &buf[HEADER_LEN..];
    if body.len() != body_len {
        return Err(FecError::BodyLength {
            header: body_len,
            actual: body.len(),
        });
    }
    let body = match kind {
        0 => {
            if dt != 0 || count != 0 || key != 0 {
                return Err(FecError::Inconsistent(
                    "source frame with repair fields set",
                ));
            }
            let Some(app) = body.get(..APP_HEADER_LEN) else {
                return Err(FecError::Truncated {
                    needed: HEADER_LEN + APP_HEADER_LEN,
                    got: buf.len(),
                });
            };
            let payload_len = usize::from(be16(app, 6));
            let payload = &body[APP_HEADER_LEN..];
            if payload_len != payload.len() {
                return Err(FecError::Inconsistent(
                    "payload length disagrees with body length",
                ));
            }
            PacketBody::Source(SourcePacket {
                id,
                block_id: be32(app, 0),
                fragment_id: be16(app, 4),
                payload,
            })
        }
        1 => {
            let header = RepairHeader {
                first_id: id,
                count,
                key,
                dt,
            };
            header.validate()?;
            if body.len() < APP_HEADER_LEN {
                return Err(FecError::Truncated {
                    needed: HEADER_LEN + APP_HEADER_LEN,
                    got: buf.len(),
                });
            }
            PacketBody::Repair(RepairPacket {
                header,
                symbol: body,
            })
        }
        k => return Err(FecError::BadKind(k)),
    };
    Ok(FecPacket { session, seq, body })
}

/// Builds a frame; see [`build_into`].
pub fn build(pkt: &FecPacket<'_>) -> Result<Vec<u8>, FecError> {
    let mut out = Vec::with_capacity(FRAME_SIZE);
    build_into(pkt, &mut out)?;
    Ok(out)
}

/// Clears `out` and writes the frame of `pkt` into it. Fails on what [`parse`]
/// would reject (payload over 1368 bytes, DT over 15, empty or overflowing
/// repair range, repair symbol shorter than 8 or longer than 1376 bytes).
pub fn build_into(pkt: &FecPacket<'_>, out: &mut Vec<u8>) -> Result<(), FecError> {
    out.clear();
    let mut h = [0u8; HEADER_LEN];
    h[0] = MAGIC;
    h[1] = VERSION;
    h[12..16].copy_from_slice(&pkt.session.to_be_bytes());
    h[16..20].copy_from_slice(&pkt.seq.to_be_bytes());
    match &pkt.body {
        PacketBody::Source(s) => {
            if s.payload.len() > MAX_PAYLOAD {
                return Err(FecError::PayloadTooLarge(s.payload.len()));
            }
            let n = s.symbol_len();
            h[2] = 0;
            h[4..8].copy_from_slice(&s.id.to_be_bytes());
            h[20..22].copy_from_slice(&(n as u16).to_be_bytes());
            out.extend_from_slice(&h);
            out.resize(HEADER_LEN + n, 0);
            s.write_symbol(&mut out[HEADER_LEN..]);
        }
        PacketBody::Repair(r) => {
            r.header.validate()?;
            let n = r.symbol.len();
            if !(APP_HEADER_LEN..=SYMBOL_SIZE).contains(&n) {
                return Err(FecError::Inconsistent("repair symbol length out of range"));
            }
            h[2] = 1;
            h[3] = r.header.dt;
            h[4..8].copy_from_slice(&r.header.first_id.to_be_bytes());
            h[8..10].copy_from_slice(&r.header.count.to_be_bytes());
            h[10..12].copy_from_slice(&r.header.key.to_be_bytes());
            h[20..22].copy_from_slice(&(n as u16).to_be_bytes());
            out.extend_from_slice(&h);
            out.extend_from_slice(r.symbol);
        }
    }
    Ok(())
}

/// Writes a repair frame header (body of `body_len` bytes) to `out[..HEADER_LEN]`;
/// used by the encoder, which computes the symbol in place behind it.
pub(crate) fn write_repair_header(
    out: &mut [u8],
    session: u32,
    seq: u32,
    header: &RepairHeader,
    body_len: usize,
) {
    out[0] = MAGIC;
    out[1] = VERSION;
    out[2] = 1;
    out[3] = header.dt;
    out[4..8].copy_from_slice(&header.first_id.to_be_bytes());
    out[8..10].copy_from_slice(&header.count.to_be_bytes());
    out[10..12].copy_from_slice(&header.key.to_be_bytes());
    out[12..16].copy_from_slice(&session.to_be_bytes());
    out[16..20].copy_from_slice(&seq.to_be_bytes());
    out[20..22].copy_from_slice(&(body_len as u16).to_be_bytes());
    out[22..24].fill(0);
}

/// A protected area read back: application ids and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppView<'a> {
    pub block_id: u32,
    pub fragment_id: u16,
    pub payload: &'a [u8],
}

/// Reads a zero-padded protected area; checks the payload length fits and the
/// padding after it is zero (a recovered symbol that fails this can only come
/// from a corrupted or hostile repair stream).
pub(crate) fn read_symbol(sym: &[u8]) -> Option<AppView<'_>> {
    let app = sym.get(..APP_HEADER_LEN)?;
    let len = usize::from(be16(app, 6));
    if len > MAX_PAYLOAD {
        return None;
    }
    let payload = sym.get(APP_HEADER_LEN..APP_HEADER_LEN + len)?;
    if sym[APP_HEADER_LEN + len..].iter().any(|&b| b != 0) {
        return None;
    }
    Some(AppView {
        block_id: be32(app, 0),
        fragment_id: be16(app, 4),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(payload: &[u8]) -> FecPacket<'_> {
        FecPacket {
            session: 0xdead_beef,
            seq: 41,
            body: PacketBody::Source(SourcePacket {
                id: 7,
                block_id: 3,
                fragment_id: 9,
                payload,
            }),
        }
    }

    #[test]
    fn source_round_trip() {
        for len in [0usize, 1, 100, MAX_PAYLOAD] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let pkt = source(&payload);
            let bytes = build(&pkt).unwrap();
            assert_eq!(bytes.len(), HEADER_LEN + APP_HEADER_LEN + len);
            assert!(bytes.len() <= FRAME_SIZE);
            assert_eq!(parse(&bytes).unwrap(), pkt);
        }
        assert_eq!(
            build(&source(&[0; MAX_PAYLOAD + 1])),
            Err(FecError::PayloadTooLarge(MAX_PAYLOAD + 1))
        );
    }

    #[test]
    fn repair_round_trip() {
        let sym = vec![0x5a; SYMBOL_SIZE];
        let pkt = FecPacket {
            session: 1,
            seq: 2,
            body: PacketBody::Repair(RepairPacket {
                header: RepairHeader {
                    first_id: 100,
                    count: 16,
                    key: 0xabcd,
                    dt: 15,
                },
                symbol: &sym,
            }),
        };
        let bytes = build(&pkt).unwrap();
        assert_eq!(bytes.len(), FRAME_SIZE);
        assert_eq!(parse(&bytes).unwrap(), pkt);
    }

    #[test]
    fn rejects_bad_frames() {
        let good = build(&source(b"hello")).unwrap();
        assert!(matches!(
            parse(&good[..10]),
            Err(FecError::Truncated { .. })
        ));
        let mut b = good.clone();
        b[0] = 0;
        assert_eq!(parse(&b), Err(FecError::BadMagic(0)));
        let mut b = good.clone();
        b[1] = 2;
        assert_eq!(parse(&b), Err(FecError::BadVersion(2)));
        let mut b = good.clone();
        b[2] = 9;
        assert_eq!(parse(&b), Err(FecError::BadKind(9)));
        let mut b = good.clone();
        b[3] = 1;
        assert!(matches!(parse(&b), Err(FecError::Inconsistent(_))));
        let mut b = good.clone();
        b[23] = 1;
        assert!(matches!(parse(&b), Err(FecError::Inconsistent(_))));
        let mut b = good.clone();
        b.push(0);
        assert!(matches!(parse(&b), Err(FecError::BodyLength { .. })));
        let mut b = good.clone();
        b[31] = 4; // payload length 4 ≠ 5
        assert!(matches!(parse(&b), Err(FecError::Inconsistent(_))));
        assert!(matches!(
            parse(&[0xEF; FRAME_SIZE + 1]),
            Err(FecError::FrameTooLarge(_))
        ));
        // Repair: DT 16, count 0, range overflow, short symbol.
        let sym = [0u8; 8];
        let mk = |first_id, count, dt| {
            let mut out = vec![0u8; HEADER_LEN];
            write_repair_header(
                &mut out,
                0,
                0,
                &RepairHeader {
                    first_id,
                    count,
                    key: 1,
                    dt,
                },
                sym.len(),
            );
            out.extend_from_slice(&sym);
            out
        };
        assert!(parse(&mk(0, 1, 15)).is_ok());
        assert_eq!(parse(&mk(0, 1, 16)), Err(FecError::BadDensity(16)));
        assert!(matches!(
            parse(&mk(0, 0, 15)),
            Err(FecError::Inconsistent(_))
        ));
        assert!(matches!(
            parse(&mk(u32::MAX, 2, 15)),
            Err(FecError::IdOverflow { .. })
        ));
        let mut short = mk(0, 1, 15);
        short.truncate(HEADER_LEN + 4);
        short[20..22].copy_from_slice(&4u16.to_be_bytes());
        assert!(matches!(parse(&short), Err(FecError::Truncated { .. })));
    }

    #[test]
    fn read_symbol_checks_padding() {
        let mut sym = [0u8; SYMBOL_SIZE];
        let n = SourcePacket {
            id: 0,
            block_id: 5,
            fragment_id: 6,
            payload: b"abc",
        }
        .write_symbol(&mut sym)
        .unwrap();
        assert_eq!(n, 11);
        let v = read_symbol(&sym).unwrap();
        assert_eq!((v.block_id, v.fragment_id, v.payload), (5, 6, &b"abc"[..]));
        sym[20] = 1;
        assert!(read_symbol(&sym).is_none());
        sym[20] = 0;
        sym[6..8].copy_from_slice(&2000u16.to_be_bytes());
        assert!(read_symbol(&sym).is_none());
    }
}
