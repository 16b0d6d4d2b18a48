//! The sliding-window RLC encoder.
//!
//! **Ids.** Source packets get consecutive ids `0, 1, 2, …` in the order they are
//! handed to [`RlcEncoder::send_source`].
//!
//! **Window.** The active window is `[start, next_id)`: every packet from the
//! first one not yet known decoded by the receiver to the last one sent. The
//! encoder keeps the protected area of each of them (and nothing else), so its
//! memory is bounded by `max_window` symbols; `send_source` refuses a new packet
//! with [`FecError::WindowFull`] rather than grow past it.
//!
//! **ACK rule.** Feedback carries the receiver's cumulative decoded prefix `a`
//! (every id `< a` is decoded). [`RlcEncoder::on_ack`] moves `start` to `a` if
//! that is ahead, and frees those symbols. Since the receiver only reports ids
//! it has decoded, sliding never drops a packet it still needs; an older,
//! reordered ACK is ignored, and an ACK beyond `next_id` is an error.
//!
//! **Repair rule.** [`RlcEncoder::repair`] combines the `count = min(K,
//! max_symbols, |window|)` **oldest** packets of the window,
//! `[start, start + count)`. The oldest unresolved packets are the ones that
//! block the receiver's cumulative decoding (the prefix can only advance through
//! them), and a repair over a contiguous range needs only `first id, count` in
//! its header. Coefficients come from RFC 8681 §3.6 with a fresh repair key per
//! repair (a 16-bit counter) and the configured density DT; if a sparse draw
//! (`DT < 15`) happens to be all zero the next key is used.

use super::coefficients::{generate_coding_coefficients, MAX_DT};
use super::decoder::Feedback;
use super::error::FecError;
use super::gf::mul_add;
use super::packet::{
    write_repair_header, PacketKind, RepairHeader, SourcePacket, HEADER_LEN, MAGIC, MAX_PAYLOAD,
    VERSION,
};
use super::ring::SymbolRing;

/// Encoder parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncoderConfig {
    /// K: most source packets one repair combines (1..=65535).
    pub k: u16,
    /// Density threshold DT of RFC 8681 (15 = every coefficient nonzero).
    pub dt: u8,
    /// Most unacknowledged source packets held (the memory bound).
    pub max_window: u32,
    /// Session id written into every frame.
    pub session: u32,
    /// Repair key of the first repair (keys then count up, wrapping).
    pub first_key: u16,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        EncoderConfig {
            k: 16,
            dt: MAX_DT,
            max_window: 4096,
            session: 0,
            first_key: 1,
        }
    }
}

/// A frame ready to send, with what the scheduler may want to know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The wire bytes (≤ 1400).
    pub bytes: Vec<u8>,
    pub kind: PacketKind,
    /// Source: its id. Repair: first id combined.
    pub id: u32,
    /// Repair: packets combined (0 for a source frame).
    pub count: u16,
    /// Transmission sequence number.
    pub seq: u32,
}

/// Streaming RLC encoder over GF(2^8); see the module docs for the rules.
#[derive(Debug)]
pub struct RlcEncoder {
    cfg: EncoderConfig,
    /// First id of the window (the receiver's prefix as last acknowledged).
    start: u32,
    next_id: u32,
    /// Protected areas of `start..next_id`, unpadded.
    window: SymbolRing,
    next_key: u16,
    seq: u32,
    coeffs: Vec<u8>,
}

impl RlcEncoder {
    pub fn new(cfg: EncoderConfig) -> Result<Self, FecError> {
        if cfg.k == 0 {
            return Err(FecError::Config("K must be at least 1"));
        }
        if cfg.dt > MAX_DT {
            return Err(FecError::BadDensity(cfg.dt));
        }
        if cfg.max_window == 0 {
            return Err(FecError::Config("max_window must be at least 1"));
        }
        Ok(RlcEncoder {
            cfg,
            start: 0,
            next_id: 0,
            window: SymbolRing::default(),
            next_key: cfg.first_key,
            seq: 0,
            coeffs: Vec::new(),
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.cfg
    }

    /// The active window `[start, next_id)`.
    pub fn window(&self) -> std::ops::Range<u32> {
        self.start..self.next_id
    }

    /// Number of packets in the active window.
    pub fn window_len(&self) -> u32 {
        self.next_id - self.start
    }

    /// Id the next source packet will get.
    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Allocates (and maps) the window buffer for `n` symbols up front, capped
    /// at `max_window`, so that sending never allocates for the window.
    pub fn reserve(&mut self, n: u32) {
        self.window.reserve(n.min(self.cfg.max_window) as usize);
    }

    /// Frames built so far (the next frame's `seq`).
    pub fn frames_sent(&self) -> u32 {
        self.seq
    }

    /// Assigns the next id to a source packet, keeps its protected area in the
    /// window and returns its frame.
    pub fn send_source(
        &mut self,
        block_id: u32,
        fragment_id: u16,
        payload: &[u8],
    ) -> Result<Frame, FecError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(FecError::PayloadTooLarge(payload.len()));
        }
        if self.window_len() >= self.cfg.max_window {
            return Err(FecError::WindowFull {
                limit: self.cfg.max_window,
            });
        }
        if self.next_id == u32::MAX {
            return Err(FecError::IdOverflow {
                first: self.next_id,
                count: 1,
            });
        }
        let id = self.next_id;
        let src = SourcePacket {
            id,
            block_id,
            fragment_id,
            payload,
        };
        // The protected area goes into the window ring first; the frame is the
        // header followed by a copy of it.
        let sym = self
            .window
            .push_with(|slot| src.write_symbol(slot).unwrap_or(0));
        let mut bytes = Vec::with_capacity(HEADER_LEN + sym.len());
        let mut h = [0u8; HEADER_LEN];
        h[0] = MAGIC;
        h[1] = VERSION;
        h[4..8].copy_from_slice(&id.to_be_bytes());
        h[12..16].copy_from_slice(&self.cfg.session.to_be_bytes());
        h[16..20].copy_from_slice(&self.seq.to_be_bytes());
        h[20..22].copy_from_slice(&(sym.len() as u16).to_be_bytes());
        bytes.extend_from_slice(&h);
        bytes.extend_from_slice(sym);
        self.next_id += 1;
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        Ok(Frame {
            bytes,
            kind: PacketKind::Source,
            id,
            count: 0,
            seq,
        })
    }

    /// Applies receiver feedback: slides the window start to its cumulative
    /// prefix. Returns how many packets were freed.
    pub fn on_ack(&mut self, feedback: &Feedback) -> Result<u32, FecError> {
        self.on_cumulative_ack(feedback.cumulative)
    }

    /// [`on_ack`](Self::on_ack) with just the cumulative prefix.
    pub fn on_cumulative_ack(&mut self, cumulative: u32) -> Result<u32, FecError> {
        if cumulative > self.next_id {
            return Err(FecError::AckAhead {
                ack: cumulative,
                sent: self.next_id,
            });
        }
        if cumulative <= self.start {
            return Ok(0);
        }
        let freed = cumulative - self.start;
        self.window.pop_front(freed as usize);
        self.start = cumulative;
        Ok(freed)
    }

    /// Builds a repair over the `min(K, max_symbols, |window|)` oldest packets of
    /// the window; `None` if that is zero.
    pub fn repair(&mut self, max_symbols: usize) -> Option<Frame> {
        let count = usize::from(self.cfg.k)
            .min(max_symbols)
            .min(self.window.len());
        if count == 0 {
            return None;
        }
        let count16 = count as u16; // count <= K <= u16::MAX
        self.coeffs.resize(count, 0);
        let mut key = self.next_key;
        // (15/16)^1024 < 1e-28: even one packet at DT = 0 finds a nonzero draw.
        for _ in 0..1024 {
            // Cannot fail: DT was validated in `new`.
            let _ = generate_coding_coefficients(key, &mut self.coeffs, self.cfg.dt);
            if self.coeffs.iter().any(|&c| c != 0) {
                break;
            }
            key = key.wrapping_add(1);
        }
        self.next_key = key.wrapping_add(1);
        let sym_len = (0..count)
            .map(|i| self.window.get(i).len())
            .max()
            .unwrap_or(0);
        let mut bytes = vec![0u8; HEADER_LEN + sym_len];
        {
            let body = &mut bytes[HEADER_LEN..];
            for (i, &c) in self.coeffs.iter().enumerate() {
                mul_add(body, self.window.get(i), c);
            }
        }
        let header = RepairHeader {
            first_id: self.start,
            count: count16,
            key,
            dt: self.cfg.dt,
        };
        write_repair_header(&mut bytes, self.cfg.session, self.seq, &header, sym_len);
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        Some(Frame {
            bytes,
            kind: PacketKind::Repair,
            id: header.first_id,
            count: count16,
            seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::gf::gf_mul;
    use super::super::packet::{build, parse, PacketBody, SYMBOL_SIZE};
    use super::*;

    #[test]
    fn ids_window_and_ack() {
        let mut e = RlcEncoder::new(EncoderConfig {
            max_window: 4,
            ..Default::default()
        })
        .unwrap();
        for i in 0..4u32 {
            let f = e.send_source(1, i as u16, b"x").unwrap();
            assert_eq!((f.id, f.seq, f.kind), (i, i, PacketKind::Source));
            // The hand-built source frame is exactly what `build` makes.
            let pkt = parse(&f.bytes).unwrap();
            assert_eq!(build(&pkt).unwrap(), f.bytes);
            let PacketBody::Source(sp) = pkt.body else {
                panic!("not a source")
            };
            assert_eq!(
                (sp.id, sp.block_id, sp.fragment_id, sp.payload),
                (i, 1, i as u16, &b"x"[..])
            );
        }
        assert_eq!(
            e.send_source(1, 4, b"x"),
            Err(FecError::WindowFull { limit: 4 })
        );
        assert_eq!(e.on_cumulative_ack(2), Ok(2));
        assert_eq!(e.window(), 2..4);
        assert_eq!(e.on_cumulative_ack(1), Ok(0)); // stale ACK ignored
        assert_eq!(e.window(), 2..4);
        assert_eq!(
            e.on_cumulative_ack(5),
            Err(FecError::AckAhead { ack: 5, sent: 4 })
        );
        assert_eq!(e.send_source(1, 4, b"x").unwrap().id, 4);
        assert_eq!(
            e.send_source(1, 5, &[0; MAX_PAYLOAD + 1]),
            Err(FecError::PayloadTooLarge(MAX_PAYLOAD + 1))
        );
    }

    #[test]
    fn repair_covers_the_oldest_k_and_is_the_rfc_combination() {
        let mut e = RlcEncoder::new(EncoderConfig {
            k: 3,
            ..Default::default()
        })
        .unwrap();
        assert!(e.repair(10).is_none());
        let payloads: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8 + 1; 10 + i * 7]).collect();
        let mut syms = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let f = e.send_source(9, i as u16, p).unwrap();
            syms.push(f.bytes[HEADER_LEN..].to_vec());
        }
        e.on_cumulative_ack(1).unwrap();
        let f = e.repair(100).unwrap();
        let pkt = parse(&f.bytes).unwrap();
        let PacketBody::Repair(r) = pkt.body else {
            panic!("not a repair")
        };
        assert_eq!((r.header.first_id, r.header.count), (1, 3));
        let mut cc = [0u8; 3];
        generate_coding_coefficients(r.header.key, &mut cc, 15).unwrap();
        let mut expect = vec![0u8; syms[1..4].iter().map(Vec::len).max().unwrap()];
        for (s, &c) in syms[1..4].iter().zip(&cc) {
            for (d, &x) in expect.iter_mut().zip(s) {
                *d ^= gf_mul(c, x);
            }
        }
        assert_eq!(r.symbol, &expect[..]);
        assert!(r.symbol.len() <= SYMBOL_SIZE);
        // max_symbols caps the count too; keys advance.
        let f2 = e.repair(2).unwrap();
        let PacketBody::Repair(r2) = parse(&f2.bytes).unwrap().body else {
            panic!()
        };
        assert_eq!(r2.header.count, 2);
        assert_ne!(r2.header.key, r.header.key);
        assert!(e.repair(0).is_none());
    }

    #[test]
    fn sparse_repairs_are_never_all_zero() {
        let mut e = RlcEncoder::new(EncoderConfig {
            k: 1,
            dt: 0,
            ..Default::default()
        })
        .unwrap();
        e.send_source(0, 0, b"abc").unwrap();
        for _ in 0..200 {
            let f = e.repair(1).unwrap();
            let PacketBody::Repair(r) = parse(&f.bytes).unwrap().body else {
                panic!()
            };
            let mut cc = [0u8; 1];
            generate_coding_coefficients(r.header.key, &mut cc, 0).unwrap();
            assert_ne!(cc[0], 0);
        }
    }

    #[test]
    fn bad_config() {
        let bad = |cfg| RlcEncoder::new(cfg).err();
        let d = EncoderConfig::default();
        assert!(bad(EncoderConfig { k: 0, ..d }).is_some());
        assert_eq!(
            bad(EncoderConfig { dt: 16, ..d }),
            Some(FecError::BadDensity(16))
        );
        assert!(bad(EncoderConfig { max_window: 0, ..d }).is_some());
    }
}
