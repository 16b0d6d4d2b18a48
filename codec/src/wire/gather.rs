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
//! (the receiver decodes them the same way): the envelope's fields are
//! written as bincode writes them (varints, options as a 0/1 byte), and a
//! message whose byte string [`BulkBytes::take_trailing_bulk`] takes as
//! its variant's index and the string (a varint length, then the bytes);
//! any other message goes through serde. Tests compare frames with
//! `encode_frame`'s.

use super::envelope::{BulkBytes, Envelope, TrailingBulk};
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
}

/// Appends bincode's encoding of `value` (the frame body's configuration)
/// to `out`.
fn append<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), WireError> {
    bincode::serde::encode_into_std_write(value, out, body_config())
        .map(|_| ())
        .map_err(|e| WireError::Encode(e.to_string()))
}

/// bincode's varint (standard configuration) of an unsigned integer: one
/// byte up to 250, else a marker byte and the value in 2, 4 or 8 bytes
/// (little endian).
fn push_varint(out: &mut Vec<u8>, v: u64) {
    if v <= 250 {
        out.push(v as u8);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(251);
        out.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(252);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// An envelope's fields before its payload, as bincode encodes them
/// through serde (ids as varints, an option as a 0/1 byte and its value):
/// written directly, as they are on every envelope of a frame (the tests
/// compare the whole frame with `encode_frame`'s).
fn push_envelope_fields<M>(out: &mut Vec<u8>, e: &Envelope<M>) {
    push_varint(out, u64::from(e.src.0));
    push_varint(out, u64::from(e.dst.0));
    match e.via {
        None => out.push(0),
        Some(link) => {
            out.push(1);
            push_varint(out, u64::from(link.0));
        }
    }
    push_varint(out, e.sent_at_ns);
    match e.due_ns {
        None => out.push(0),
        Some(due) => {
            out.push(1);
            push_varint(out, due);
        }
    }
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

    /// Encodes `Frame::<M, C, R>::Envelopes` of `envs`, consuming them
    /// (their byte strings of [`GATHER_MIN_BYTES`] or more are moved into
    /// this frame; the rest of each envelope is encoded and dropped).
    /// Fails with [`WireError::TooLarge`] past [`MAX_FRAME_BYTES`], as
    /// `encode_frame` does; on any error the frame is left empty.
    pub fn encode_envelopes<M, C, R>(
        &mut self,
        envs: impl ExactSizeIterator<Item = Envelope<M>>,
    ) -> Result<(), WireError>
    where
        M: Serialize + BulkBytes,
        C: Serialize,
        R: Serialize,
    {
        self.clear();
        let (head, cuts) = (&mut self.head, &mut self.cuts);
        let encoded = (|| {
            head.extend_from_slice(&MAGIC);
            head.push(WIRE_VERSION);
            // The variant's tag and an empty list, whose length is then replaced.
            append(&Frame::<M, C, R>::Envelopes(Vec::new()), head)?;
            drop_zero_length(head, "an empty envelope list")?;
            push_varint(head, envs.len() as u64);
            let mut bulk_len = 0usize;
            for mut env in envs {
                let bulk = if env.payload.bulk_bytes() >= GATHER_MIN_BYTES {
                    env.payload.take_trailing_bulk()
                } else {
                    None
                };
                push_envelope_fields(head, &env);
                match bulk {
                    Some(TrailingBulk { variant, bytes }) => {
                        push_varint(head, u64::from(variant));
                        push_varint(head, bytes.len() as u64);
                        bulk_len += bytes.len();
                        cuts.push((head.len(), bytes));
                    }
                    None => append(&env.payload, head)?,
                }
                if head.len() + bulk_len > MAX_FRAME_BYTES {
                    return Err(WireError::TooLarge {
                        len: head.len() + bulk_len,
                        max: MAX_FRAME_BYTES,
                    });
                }
            }
            Ok(())
        })();
        if encoded.is_err() {
            self.clear();
        }
        encoded
    }

    /// Empties the frame, keeping its header buffer's room.
    pub fn clear(&mut self) {
        self.head.clear();
        self.cuts.clear();
    }

    /// Encoded length in bytes (header and payload parts).
    pub fn len(&self) -> usize {
        self.head.len() + self.cuts.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
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
        let mut v = Vec::with_capacity(self.len());
        let mut slices = Vec::new();
        self.io_slices(&mut slices);
        for s in slices {
            v.extend_from_slice(&s);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ActorId, LinkId};

    /// At every width boundary, the varint is bincode's.
    #[test]
    fn varints_are_bincodes() {
        let edges = [
            0u64,
            1,
            250,
            251,
            252,
            0xfffe,
            0xffff,
            0x1_0000,
            0xffff_fffe,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX - 1,
            u64::MAX,
        ];
        for v in edges {
            let mut ours = Vec::new();
            push_varint(&mut ours, v);
            let mut theirs = Vec::new();
            append(&v, &mut theirs).expect("encodes");
            assert_eq!(ours, theirs, "{v}");
            if let Ok(v32) = u32::try_from(v) {
                let mut theirs = Vec::new();
                append(&v32, &mut theirs).expect("encodes");
                assert_eq!(ours, theirs, "{v} as u32");
            }
        }
    }

    /// An envelope's fields before the payload are bincode's through serde,
    /// with and without the options, at width boundaries.
    #[test]
    fn envelope_fields_are_bincodes() {
        for (id, t) in [
            (250u32, 250u64),
            (251, 251),
            (0xffff, 0x1_0000),
            (u32::MAX, u64::MAX),
        ] {
            for (via, due) in [(None, None), (Some(LinkId(id)), Some(t))] {
                let e = Envelope {
                    src: ActorId(id),
                    dst: ActorId(id / 2),
                    via,
                    sent_at_ns: t,
                    due_ns: due,
                    payload: (),
                };
                let mut ours = Vec::new();
                push_envelope_fields(&mut ours, &e);
                let mut theirs = Vec::new();
                append(&e, &mut theirs).expect("encodes");
                // `()` encodes to nothing: the whole envelope is its fields.
                assert_eq!(ours, theirs, "{e:?}");
            }
        }
    }
}
