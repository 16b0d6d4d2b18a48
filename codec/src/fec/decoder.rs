//! The sliding-window RLC decoder: on-the-fly Gaussian elimination over GF(2^8).
//!
//! **State.** Ids below `base` are decoded and released. The decoder holds one
//! slot per id in `[base, end)`, where `end - 1` is the highest id any packet
//! referenced so far: *decoded* (its protected area), *unknown*, or the *pivot*
//! of one held equation. `prefix` is the cumulative decoded prefix: every id
//! `< prefix` is decoded, `prefix` itself is not. Equations live only at
//! unknown ids `>= prefix`.
//!
//! **Pivot rule.** Every held equation is normalised so that its lowest-id
//! nonzero coefficient — its pivot — is 1, and the set is kept in reduced row
//! echelon form: no equation has a nonzero coefficient at another equation's
//! pivot or at a decoded id. An equation whose only nonzero coefficient is its
//! pivot *is* that source packet, which is then decoded at once; so with RREF a
//! packet is decoded exactly when the received equations determine it.
//!
//! **Inserting a repair** first reduces its *coefficient vector* alone, lowest
//! id first: a nonzero at a decoded id is cancelled, one at a pivot is
//! cancelled by subtracting that equation (which may add nonzeros at higher,
//! non-pivot ids, reached later in the same sweep). The sweep only records which
//! symbols, times which coefficients, the payload would need. If the vector ends
//! up zero the repair is not innovative and is dropped having cost no payload
//! work. Otherwise the recorded operations are applied to the payload, the new
//! equation takes the lowest remaining id as its pivot, and that pivot is
//! eliminated from the equations below it. **A source packet** fills its slot;
//! if that id was a pivot, the displaced equation moves to its next nonzero.
//!
//! **Memory** is bounded by `max_window` slots of at most one 1376-byte symbol
//! and one coefficient vector each. Decoded symbols below `prefix` are retained
//! only while a repair may still combine them: the base moves up to the largest
//! `first_id` seen in a repair (the sender's window start only grows), and further
//! if a new id would not fit in the window. A packet reported decoded stays
//! readable ([`RlcDecoder::get`]) at least until the next insertion. A repair
//! that combines a released id is *stale* and ignored.
//!
//! **Hostile input** — an id beyond the window, a count over `max_count`, a
//! a frame of another stream, an inconsistent header — is an error value and leaves the
//! state unchanged. The decoder never returns bytes other than the linear-algebra
//! consequence of what it received, so an honest stream never yields wrong data.

use std::collections::{BTreeSet, VecDeque};

use super::coefficients::{generate_coding_coefficients, MAX_DT};
use super::error::FecError;
use super::gf::{gf_inv, mul, mul_add, xor_into};
use super::packet::{
    parse, read_symbol, FecPacket, PacketBody, RepairHeader, SourcePacket, MAX_PAYLOAD, SYMBOL_SIZE,
};

/// Decoder parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DecoderConfig {
    /// Most ids held at once (`end - base`); a packet naming an id further ahead
    /// is refused with [`FecError::TooFarAhead`].
    pub max_window: u32,
    /// Largest repair `count` accepted.
    pub max_count: u16,
    /// Only accept frames of this stream (its id in every header), if set.
    pub session: Option<u32>,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        DecoderConfig {
            max_window: 4096,
            max_count: 1024,
            session: None,
        }
    }
}

/// What the receiver reports to the sender (ACK) and the repair scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Feedback {
    /// Cumulative decoded prefix: every id `< cumulative` is decoded.
    pub cumulative: u32,
    /// Highest source id any received packet referenced.
    pub highest_seen: Option<u32>,
    /// Independent equations held (one per pivot).
    pub equations: u32,
    /// Ids in `[cumulative, highest_seen]` not decoded yet.
    pub unknowns: u32,
    /// `unknowns - equations`: how many more innovative repairs would decode the
    /// whole window.
    pub deficit: u32,
}

/// What one insertion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// A source packet not known before.
    NewSource,
    /// A source packet already decoded (or released).
    DuplicateSource,
    /// A repair that added an independent equation.
    Innovative,
    /// A repair that was a combination of what the decoder already knew.
    Redundant,
    /// A repair combining ids already released (reordered or very late).
    Stale,
}

/// Result of one insertion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub outcome: Outcome,
    /// Ids that became decoded by this insertion, in no particular order: the
    /// inserted source itself if new, and every id recovered by elimination.
    pub decoded: Vec<u32>,
    /// Cumulative decoded prefix after the insertion.
    pub prefix: u32,
}

/// Counters since creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct DecoderStats {
    pub sources: u64,
    pub duplicate_sources: u64,
    pub repairs: u64,
    pub innovative: u64,
    pub redundant: u64,
    pub stale: u64,
    /// Source packets obtained through elimination rather than received.
    pub recovered: u64,
    /// Region operations (`mul_add`/`mul`) on 1376-byte symbols.
    pub payload_ops: u64,
}

/// A decoded source packet, borrowed from the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedSource<'a> {
    pub id: u32,
    pub block_id: u32,
    pub fragment_id: u16,
    pub payload: &'a [u8],
}

/// One held equation: coefficients for ids `pivot..pivot + coeffs.len()`
/// (`coeffs[0] == 1`, no trailing zeros) and the combined symbol.
#[derive(Debug)]
struct Row {
    coeffs: Vec<u8>,
    symbol: Box<[u8]>,
}

impl Row {
    fn coeff_at(&self, pivot: u32, id: u32) -> u8 {
        id.checked_sub(pivot)
            .and_then(|off| self.coeffs.get(off as usize))
            .copied()
            .unwrap_or(0)
    }

    fn trim(&mut self) {
        while self.coeffs.len() > 1 && self.coeffs.last() == Some(&0) {
            self.coeffs.pop();
        }
    }

    fn is_single(&self) -> bool {
        self.coeffs.len() == 1
    }
}

#[derive(Debug)]
enum Slot {
    Unknown,
    Pivot(Row),
    Decoded(Box<[u8]>),
}

/// Streaming RLC decoder over GF(2^8); see the module docs.
#[derive(Debug)]
pub struct RlcDecoder {
    cfg: DecoderConfig,
    base: u32,
    slots: VecDeque<Slot>,
    prefix: u32,
    highest: Option<u32>,
    /// Where `base` moves at the start of the next insertion.
    pending_base: u32,
    max_first: u32,
    equations: u32,
    /// Ids whose slot holds an equation (so eliminations visit only those).
    pivots: BTreeSet<u32>,
    /// Decoded ids in `[prefix, end)`.
    decoded_ahead: u32,
    pool: Vec<Box<[u8]>>,
    cc: Vec<u8>,
    scratch: Vec<u8>,
    ops: Vec<(u32, u8)>,
    stats: DecoderStats,
}

impl RlcDecoder {
    pub fn new(cfg: DecoderConfig) -> Result<Self, FecError> {
        if cfg.max_window == 0 || cfg.max_window == u32::MAX {
            return Err(FecError::Config("max_window must be in 1..u32::MAX"));
        }
        if cfg.max_count == 0 {
            return Err(FecError::Config("max_count must be at least 1"));
        }
        Ok(RlcDecoder {
            cfg,
            base: 0,
            slots: VecDeque::new(),
            prefix: 0,
            highest: None,
            pending_base: 0,
            max_first: 0,
            equations: 0,
            pivots: BTreeSet::new(),
            decoded_ahead: 0,
            pool: Vec::new(),
            cc: Vec::new(),
            scratch: Vec::new(),
            ops: Vec::new(),
            stats: DecoderStats::default(),
        })
    }

    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// Allocates `n` symbol buffers up front (capped at `max_window`), so that
    /// the next `n` packets need no allocation.
    // `resize` on purpose: `vec![0; n]` would be `calloc`, whose pages are
    // only mapped on first write, i.e. later, inside the hot path.
    #[allow(clippy::slow_vector_initialization)]
    pub fn reserve(&mut self, n: u32) {
        let n = n.min(self.cfg.max_window) as usize;
        while self.pool.len() < n {
            let mut b = Vec::with_capacity(SYMBOL_SIZE);
            b.resize(SYMBOL_SIZE, 0u8);
            self.pool.push(b.into_boxed_slice());
        }
    }

    /// Cumulative decoded prefix.
    pub fn prefix(&self) -> u32 {
        self.prefix
    }

    pub fn stats(&self) -> &DecoderStats {
        &self.stats
    }

    fn end(&self) -> u32 {
        self.base + self.slots.len() as u32
    }

    /// What the sender (ACK) and the repair scheduler need.
    pub fn feedback(&self) -> Feedback {
        let span = self.end().saturating_sub(self.prefix);
        let unknowns = span - self.decoded_ahead;
        Feedback {
            cumulative: self.prefix,
            highest_seen: self.highest,
            equations: self.equations,
            unknowns,
            deficit: unknowns.saturating_sub(self.equations),
        }
    }

    /// Whether `id` is decoded (ids released below the base count as decoded).
    pub fn is_decoded(&self, id: u32) -> bool {
        id < self.base || matches!(self.slot(id), Some(Slot::Decoded(_)))
    }

    fn slot(&self, id: u32) -> Option<&Slot> {
        self.slots.get(id.checked_sub(self.base)? as usize)
    }

    /// The zero-padded protected area of a decoded, still retained id.
    pub fn symbol(&self, id: u32) -> Option<&[u8]> {
        match self.slot(id)? {
            Slot::Decoded(s) => Some(s),
            _ => None,
        }
    }

    /// A decoded, still retained source packet; `Ok(None)` if it is not decoded
    /// or was released. An error means the recovered bytes do not form a valid
    /// protected area, which only a corrupted or hostile stream can cause.
    pub fn get(&self, id: u32) -> Result<Option<DecodedSource<'_>>, FecError> {
        let Some(sym) = self.symbol(id) else {
            return Ok(None);
        };
        let v = read_symbol(sym).ok_or(FecError::MalformedSymbol(id))?;
        Ok(Some(DecodedSource {
            id,
            block_id: v.block_id,
            fragment_id: v.fragment_id,
            payload: v.payload,
        }))
    }

    /// Parses a frame and inserts it.
    pub fn insert_frame(&mut self, frame: &[u8]) -> Result<Progress, FecError> {
        let pkt = parse(frame)?;
        self.insert(&pkt)
    }

    /// Inserts a parsed packet.
    pub fn insert(&mut self, pkt: &FecPacket<'_>) -> Result<Progress, FecError> {
        if let Some(expected) = self.cfg.session {
            if pkt.session != expected {
                return Err(FecError::WrongSession {
                    expected,
                    got: pkt.session,
                });
            }
        }
        match &pkt.body {
            PacketBody::Source(s) => self.insert_source(s),
            PacketBody::Repair(r) => self.insert_repair(&r.header, r.symbol),
        }
    }

    fn progress(&self, outcome: Outcome, decoded: Vec<u32>) -> Progress {
        Progress {
            outcome,
            decoded,
            prefix: self.prefix,
        }
    }

    /// Checks that the slots can reach `id` (possibly after releasing decoded
    /// ids below the prefix) without changing anything.
    fn check_room(&self, id: u32) -> Result<(), FecError> {
        if id == u32::MAX {
            return Err(FecError::IdOverflow {
                first: id,
                count: 1,
            });
        }
        if id < self.end() {
            return Ok(());
        }
        // Decoded ids below the prefix can be released to make room, no more.
        let need = u64::from(id) + 1 - u64::from(self.prefix);
        if need > u64::from(self.cfg.max_window) {
            return Err(FecError::TooFarAhead {
                id,
                limit: self.prefix.saturating_add(self.cfg.max_window - 1),
            });
        }
        Ok(())
    }

    fn release_to(&mut self, to: u32) {
        let to = to.min(self.prefix);
        while self.base < to {
            if let Some(Slot::Decoded(b)) = self.slots.pop_front() {
                if self.pool.len() < 256 {
                    self.pool.push(b);
                }
            }
            self.base += 1;
        }
    }

    /// Extends the slots to cover `id` (room was checked).
    fn extend_to(&mut self, id: u32) {
        if id >= self.end() {
            let need_base = (id + 1).saturating_sub(self.cfg.max_window);
            if need_base > self.base {
                self.release_to(need_base);
            }
            while self.end() <= id {
                self.slots.push_back(Slot::Unknown);
            }
        }
        self.highest = Some(self.highest.map_or(id, |h| h.max(id)));
    }

    fn buffer(&mut self) -> Box<[u8]> {
        self.pool
            .pop()
            .unwrap_or_else(|| vec![0u8; SYMBOL_SIZE].into_boxed_slice())
    }

    fn begin(&mut self) {
        let to = self.pending_base;
        self.release_to(to);
    }

    fn finish(&mut self) {
        while self.prefix < self.end() {
            match self.slots.get((self.prefix - self.base) as usize) {
                Some(Slot::Decoded(_)) => {
                    self.prefix += 1;
                    self.decoded_ahead -= 1;
                }
                _ => break,
            }
        }
        self.pending_base = self.prefix.min(self.max_first.max(self.base));
    }

    fn insert_source(&mut self, s: &SourcePacket<'_>) -> Result<Progress, FecError> {
        if s.payload.len() > MAX_PAYLOAD {
            return Err(FecError::PayloadTooLarge(s.payload.len()));
        }
        if s.id < self.prefix || self.is_decoded(s.id) {
            self.stats.sources += 1;
            self.stats.duplicate_sources += 1;
            return Ok(self.progress(Outcome::DuplicateSource, Vec::new()));
        }
        self.check_room(s.id)?;
        self.begin();
        self.stats.sources += 1;
        self.extend_to(s.id);
        let mut sym = self.buffer();
        let n = s.write_symbol(&mut sym).unwrap_or(0);
        sym[n..].fill(0);
        let mut decoded = vec![s.id];
        let idx = (s.id - self.base) as usize;
        let old = std::mem::replace(&mut self.slots[idx], Slot::Unknown);
        match old {
            Slot::Decoded(b) => {
                // Unreachable (checked above); restore.
                self.slots[idx] = Slot::Decoded(b);
                self.pool.push(sym);
                return Ok(self.progress(Outcome::DuplicateSource, Vec::new()));
            }
            Slot::Unknown => {
                // Cancel this id in the equations below it.
                let mut singles = Vec::new();
                for &p in self.pivots.range(..s.id) {
                    let i = (p - self.base) as usize;
                    if let Slot::Pivot(row) = &mut self.slots[i] {
                        let c = row.coeff_at(p, s.id);
                        if c != 0 {
                            row.coeffs[(s.id - p) as usize] = 0;
                            mul_add(&mut row.symbol, &sym, c);
                            self.stats.payload_ops += 1;
                            row.trim();
                            if row.is_single() {
                                singles.push(p);
                            }
                        }
                    }
                }
                self.slots[idx] = Slot::Decoded(sym);
                self.decoded_ahead += 1;
                for p in singles {
                    self.decode_pivot(p, &mut decoded);
                }
            }
            Slot::Pivot(mut row) => {
                // The equation pivoted here loses this id and moves to its next
                // nonzero (a non-pivot unknown, by RREF). No other equation has a
                // nonzero here.
                self.equations -= 1;
                self.pivots.remove(&s.id);
                xor_into(&mut row.symbol, &sym);
                self.stats.payload_ops += 1;
                self.slots[idx] = Slot::Decoded(sym);
                self.decoded_ahead += 1;
                if let Some(off) = row.coeffs.iter().skip(1).position(|&c| c != 0) {
                    let off = off + 1;
                    row.coeffs.drain(..off);
                    self.install_row(s.id + off as u32, row, &mut decoded);
                }
            }
        }
        self.finish();
        Ok(self.progress(Outcome::NewSource, decoded))
    }

    fn insert_repair(&mut self, h: &RepairHeader, symbol: &[u8]) -> Result<Progress, FecError> {
        if h.dt > MAX_DT {
            return Err(FecError::BadDensity(h.dt));
        }
        if h.count == 0 {
            return Err(FecError::Inconsistent("repair combines zero packets"));
        }
        if h.count > self.cfg.max_count {
            return Err(FecError::CountOverLimit {
                count: u32::from(h.count),
                limit: u32::from(self.cfg.max_count),
            });
        }
        if symbol.len() > SYMBOL_SIZE {
            return Err(FecError::Inconsistent("repair symbol longer than a symbol"));
        }
        let last = h.last_id().ok_or(FecError::IdOverflow {
            first: h.first_id,
            count: u32::from(h.count),
        })?;
        if last < self.prefix {
            self.stats.repairs += 1;
            self.stats.redundant += 1;
            return Ok(self.progress(Outcome::Redundant, Vec::new()));
        }
        self.check_room(last)?;
        self.begin();
        self.stats.repairs += 1;
        let first = h.first_id;
        self.cc.resize(usize::from(h.count), 0);
        generate_coding_coefficients(h.key, &mut self.cc, h.dt)?;
        if first < self.base {
            let released = (self.base - first) as usize;
            if self.cc[..released.min(self.cc.len())]
                .iter()
                .any(|&c| c != 0)
            {
                self.stats.stale += 1;
                self.finish();
                return Ok(self.progress(Outcome::Stale, Vec::new()));
            }
        }
        self.max_first = self.max_first.max(first);
        self.extend_to(last);

        // 1. Reduce the coefficient vector alone, recording payload operations.
        let lo = first.max(self.base);
        // The vector starts as wide as the repair range and grows only when an
        // equation subtracted from it reaches further.
        let width = (last + 1 - lo) as usize;
        let Self {
            slots,
            scratch: v,
            ops,
            cc,
            base,
            ..
        } = self;
        let base = *base;
        v.clear();
        v.resize(width, 0);
        let skip = (lo - first) as usize;
        v[..cc.len() - skip].copy_from_slice(&cc[skip..]);
        ops.clear();
        // `v` may grow inside the loop, hence `while` over its current length.
        let mut off = 0;
        while off < v.len() {
            let c = v[off];
            if c != 0 {
                let id = lo + off as u32;
                match &slots[(id - base) as usize] {
                    Slot::Decoded(_) => {
                        ops.push((id, c));
                        v[off] = 0;
                    }
                    Slot::Pivot(row) => {
                        ops.push((id, c));
                        let need = off + row.coeffs.len();
                        if need > v.len() {
                            v.resize(need, 0);
                        }
                        mul_add(&mut v[off..], &row.coeffs, c);
                    }
                    Slot::Unknown => {}
                }
            }
            off += 1;
        }
        let Some(q_off) = v.iter().position(|&c| c != 0) else {
            self.stats.redundant += 1;
            self.finish();
            return Ok(self.progress(Outcome::Redundant, Vec::new()));
        };
        let hi_off = v.iter().rposition(|&c| c != 0).unwrap_or(q_off);
        let coeffs = v[q_off..=hi_off].to_vec();

        // 2. Innovative: now do the payload work.
        let mut sym = self.buffer();
        sym[..symbol.len()].copy_from_slice(symbol);
        sym[symbol.len()..].fill(0);
        for &(id, c) in &self.ops {
            match &self.slots[(id - self.base) as usize] {
                Slot::Decoded(b) => mul_add(&mut sym, b, c),
                Slot::Pivot(row) => mul_add(&mut sym, &row.symbol, c),
                Slot::Unknown => {}
            }
        }
        self.stats.payload_ops += self.ops.len() as u64;
        self.stats.innovative += 1;
        let mut decoded = Vec::new();
        self.install_row(
            lo + q_off as u32,
            Row {
                coeffs,
                symbol: sym,
            },
            &mut decoded,
        );
        self.finish();
        Ok(self.progress(Outcome::Innovative, decoded))
    }

    /// Normalises `row` (pivot `q`, nonzero first coefficient, reduced against
    /// every other equation and every decoded id), eliminates `q` from the
    /// equations below it, stores it, and decodes every equation left with a
    /// single coefficient.
    fn install_row(&mut self, q: u32, mut row: Row, decoded: &mut Vec<u32>) {
        let Some(inv) = row.coeffs.first().and_then(|&c| gf_inv(c)) else {
            return;
        };
        mul(&mut row.coeffs, inv);
        mul(&mut row.symbol, inv);
        self.stats.payload_ops += u64::from(inv != 1);
        row.trim();
        let mut singles = Vec::new();
        for &p in self.pivots.range(..q) {
            let i = (p - self.base) as usize;
            if let Slot::Pivot(other) = &mut self.slots[i] {
                let c = other.coeff_at(p, q);
                if c != 0 {
                    let at = (q - p) as usize;
                    let need = at + row.coeffs.len();
                    if other.coeffs.len() < need {
                        other.coeffs.resize(need, 0);
                    }
                    mul_add(&mut other.coeffs[at..], &row.coeffs, c);
                    mul_add(&mut other.symbol, &row.symbol, c);
                    self.stats.payload_ops += 1;
                    other.trim();
                    if other.is_single() {
                        singles.push(p);
                    }
                }
            }
        }
        let single = row.is_single();
        let i = (q - self.base) as usize;
        self.slots[i] = Slot::Pivot(row);
        self.equations += 1;
        self.pivots.insert(q);
        if single {
            singles.push(q);
        }
        for p in singles {
            self.decode_pivot(p, decoded);
        }
    }

    fn decode_pivot(&mut self, p: u32, decoded: &mut Vec<u32>) {
        let i = (p - self.base) as usize;
        let old = std::mem::replace(&mut self.slots[i], Slot::Unknown);
        if let Slot::Pivot(row) = old {
            self.slots[i] = Slot::Decoded(row.symbol);
            self.equations -= 1;
            self.pivots.remove(&p);
            self.decoded_ahead += 1;
            self.stats.recovered += 1;
            decoded.push(p);
        } else {
            self.slots[i] = old;
        }
    }

    /// Checks the internal invariants (for tests and fuzzing); returns a
    /// description of the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        if !(self.base <= self.prefix && self.prefix <= self.end()) {
            return Err(format!(
                "base {} prefix {} end {}",
                self.base,
                self.prefix,
                self.end()
            ));
        }
        if self.slots.len() > self.cfg.max_window as usize {
            return Err("window over max_window".into());
        }
        let (mut eq, mut dec) = (0u32, 0u32);
        for (i, s) in self.slots.iter().enumerate() {
            let id = self.base + i as u32;
            match s {
                Slot::Decoded(_) => {
                    if id >= self.prefix {
                        dec += 1;
                    }
                }
                Slot::Unknown => {
                    if id < self.prefix {
                        return Err(format!("unknown {id} below prefix"));
                    }
                }
                Slot::Pivot(row) => {
                    eq += 1;
                    if id < self.prefix {
                        return Err(format!("pivot {id} below prefix"));
                    }
                    if row.coeffs.first() != Some(&1) || row.coeffs.len() < 2 {
                        return Err(format!("row {id} not normalised or single"));
                    }
                    if row.coeffs.last() == Some(&0) {
                        return Err(format!("row {id} has trailing zeros"));
                    }
                    for (k, &c) in row.coeffs.iter().enumerate().skip(1) {
                        let other = id + k as u32;
                        if c != 0 && !matches!(self.slot(other), Some(Slot::Unknown)) {
                            return Err(format!("row {id} has a nonzero at {other}"));
                        }
                    }
                }
            }
        }
        if eq as usize != self.pivots.len() {
            return Err("pivot set out of sync".into());
        }
        if eq != self.equations || dec != self.decoded_ahead {
            return Err(format!(
                "counters: equations {eq}/{} decoded_ahead {dec}/{}",
                self.equations, self.decoded_ahead
            ));
        }
        Ok(())
    }
}
