//! A frame of envelopes encoded for a gathering (vectored) write.
//!
//! [`encode_frame_into`](super::encode_frame_into) copies every byte of a
//! frame into one buffer. For a frame of KV frames or tunnelled packets
//! that copy is most of the sender's work in user space: the envelopes'
//! own byte strings are already in memory, owned by the batch being sent
//! and dropped right after. [`GatheredFrame`] encodes everything *but*
//! those byte strings into one small buffer and keeps the byte strings
//! themselves (taken out of their envelopes) as separate parts, so the
//! writer hands them to the kernel from where they lie: one `writev` of
//! alternating header and payload parts.
//!
//! The bytes on the wire are exactly [`encode_frame`](super::encode_frame)'s
//! (the receiver decodes them the same way). This relies on two facts of
//! the encoding, both checked by tests against `encode_frame`: an
//! [`Envelope`]'s payload is its last field, and a message whose byte
//! string [`BulkBytes::take_trailing_bulk`] takes encodes that string last
//! (bincode writes a byte string as a varint length and then the bytes, so
//! the envelope encoded with an empty string ends in the length `0`, which
//! the real length replaces).

use super::envelope::{BulkBytes, Envelope};
use super::error::WireError;
use super::frame::{body_config, Frame, MAGIC, MAX_FRAME_BYTES, WIRE_VERSION};
use serde::Serialize;
use std::io::IoSlice;

/// Byte strings shorter than this are copied into the header buffer: a
/// separate part costs more than copying a few hundred bytes.
pub const GATHER_MIN_BYTES: usize = 512;

/// `Frame::Envelopes` encoded as parts for a vectored write.
///
/// Wire order: `head[..cuts[0].0]`, `cuts[0].1`, `head[cuts[0].0..cuts[1].0]`,
/// `cuts[1].1`, …, `head[cuts[last].0..]`.
#[derive(Debug, Default)]
pub struct GatheredFrame {
    head: Vec<u8>,
    /// (where in `head` a byte string goes, the byte string).
    cuts: Vec<(usize, Vec<u8>)>,
    len: usize,
}

/// Appends bincode's encoding of `value` (the frame body's configuration)
/// to `out`.
fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), WireError> {
    bincode::serde::encode_into_std_write(value, out, body_config())
        .map(|_| ())
        .map_err(|e| WireError::Encode(e.to_string()))
}

/// Drops the varint `0` that ends `out` (a length about to be replaced).
fn drop_zero_length(out: &mut Vec<u8>, what: &str) -> Result<(), WireError> {
    match out.pop() {
        Some(0) => Ok(()),
        _ => Err(WireError::Encode(format!(
            "{what} does not end in an empty length; it cannot be gathered"
        ))),
    }
}

impl GatheredFrame {
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes `Frame::<M, C, R>::Envelopes` of the envelopes in `envs`,
    /// which it drains (their byte strings of [`GATHER_MIN_BYTES`] or more
    /// are moved into this frame; the rest of each envelope is encoded and
    /// dropped). Fails with [`WireError::TooLarge`] past
    /// [`MAX_FRAME_BYTES`], as `encode_frame` does; on any error the frame
    /// is left empty and `envs` drained.
    pub fn encode_envelopes<M, C, R>(
        &mut self,
        envs: &mut Vec<Envelope<M>>,
    ) -> Result<(), WireError>
    where
        M: Serialize + BulkBytes,
        C: Serialize,
        R: Serialize,
    {
        let r = self.encode_inner::<M, C, R>(envs);
        if r.is_err() {
            self.clear();
        }
        envs.clear();
        r
    }

    fn encode_inner<M, C, R>(&mut self, envs: &mut [Envelope<M>]) -> Result<(), WireError>
    where
        M: Serialize + BulkBytes,
        C: Serialize,
        R: Serialize,
    {
        self.clear();
        let head = &mut self.head;
        head.extend_from_slice(&MAGIC);
        head.push(WIRE_VERSION);
        // The variant's tag and an empty list, whose length is then replaced.
        append(&Frame::<M, C, R>::Envelopes(Vec::new()), head)?;
        drop_zero_length(head, "an empty envelope list")?;
        append(&(envs.len() as u64), head)?;
        let mut bulk_len = 0usize;
        for env in envs.iter_mut() {
            let bulk = if env.payload.bulk_bytes() >= GATHER_MIN_BYTES {
                env.payload.take_trailing_bulk()
            } else {
                None
            };
            append(env, head)?;
            if let Some(bytes) = bulk {
                drop_zero_length(head, "an envelope with its byte string taken")?;
                append(&(bytes.len() as u64), head)?;
                bulk_len += bytes.len();
                self.cuts.push((head.len(), bytes));
            }
            if head.len() + bulk_len > MAX_FRAME_BYTES {
                return Err(WireError::TooLarge {
                    len: head.len() + bulk_len,
                    max: MAX_FRAME_BYTES,
                });
            }
        }
        self.len = head.len() + bulk_len;
        Ok(())
    }

    /// Empties the frame, keeping its header buffer's room.
    pub fn clear(&mut self) {
        self.head.clear();
        self.cuts.clear();
        self.len = 0;
    }

    /// Encoded length in bytes (header and payload parts).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte strings held as separate parts.
    pub fn gathered_parts(&self) -> usize {
        self.cuts.len()
    }

    /// Calls `f` on every part, in wire order, mutably (a websocket client
    /// masks them in place), with the part's offset in the frame.
    pub fn for_each_part_mut(&mut self, mut f: impl FnMut(usize, &mut [u8])) {
        let mut offset = 0;
        let mut rest: &mut [u8] = &mut self.head;
        let mut taken = 0;
        for (at, bytes) in &mut self.cuts {
            let (part, tail) = rest.split_at_mut(*at - taken);
            taken = *at;
            rest = tail;
            f(offset, part);
            offset += part.len();
            f(offset, bytes);
            offset += bytes.len();
        }
        f(offset, rest);
    }

    /// The parts in wire order, appended to `out` (empty parts left out).
    pub fn io_slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>) {
        let mut from = 0;
        for (at, bytes) in &self.cuts {
            if *at > from {
                out.push(IoSlice::new(&self.head[from..*at]));
            }
            if !bytes.is_empty() {
                out.push(IoSlice::new(bytes));
            }
            from = *at;
        }
        if self.head.len() > from {
            out.push(IoSlice::new(&self.head[from..]));
        }
    }

    /// The frame's bytes in one buffer (for tests and for a writer without
    /// vectored writes).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        let mut slices = Vec::new();
        self.io_slices(&mut slices);
        for s in slices {
            v.extend_from_slice(&s);
        }
        v
    }
}
