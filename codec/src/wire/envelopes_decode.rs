//! Decoding a frame of envelopes with the envelope's fields and its
//! byte-string messages read directly.
//!
//! Through serde, bincode spends more per envelope on dispatch (a visitor
//! per struct, field, option and enum) than on the bytes themselves; a
//! mesh connection carries a million envelopes a second. This reads what
//! bincode's standard configuration reads for [`Envelope`]'s fields
//! (varint integers, options as a 0/1 byte) and, for a message whose enum
//! variant holds only a byte string ([`BulkBytes::from_trailing_bulk`]),
//! the string; every other message is decoded by serde where it starts.
//! It accepts and refuses exactly what the serde path does: tests decode
//! random, truncated and bit-flipped frames, every value of every byte of
//! small frames and every varint marker in every field both ways.

use super::envelope::{BulkBytes, Envelope};
use super::error::WireError;
use super::frame::body_config;
use crate::ids::{ActorId, LinkId};
use serde::de::DeserializeOwned;

/// The index of `Frame::Envelopes` among the frame's variants (a test
/// checks it against serde's).
pub(super) const ENVELOPES_VARIANT: u32 = 3;

/// The fewest bytes an envelope takes (five one-byte fields and a
/// one-byte message): bounds what a claimed count may reserve.
const MIN_ENVELOPE_BYTES: usize = 6;

fn truncated() -> WireError {
    WireError::Malformed("body truncated".into())
}

fn invalid_integer(what: &str, marker: u8) -> WireError {
    WireError::Malformed(format!("invalid varint marker {marker} for {what}"))
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, WireError> {
        let b = *self.bytes.get(self.pos).ok_or_else(truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let s = self.bytes.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// bincode's varint: one byte up to 250; 251, 252, 253 mark a 2-, 4-
    /// or 8-byte little-endian value (non-minimal forms are accepted, as
    /// bincode accepts them).
    fn varint_u64(&mut self) -> Result<u64, WireError> {
        match self.byte()? {
            b @ 0..=250 => Ok(u64::from(b)),
            251 => Ok(u64::from(u16::from_le_bytes(self.array()?))),
            252 => Ok(u64::from(u32::from_le_bytes(self.array()?))),
            253 => Ok(u64::from_le_bytes(self.array()?)),
            m => Err(invalid_integer("a u64", m)),
        }
    }

    /// As [`Self::varint_u64`], without the 8-byte form.
    fn varint_u32(&mut self) -> Result<u32, WireError> {
        match self.byte()? {
            b @ 0..=250 => Ok(u32::from(b)),
            251 => Ok(u32::from(u16::from_le_bytes(self.array()?))),
            252 => Ok(u32::from_le_bytes(self.array()?)),
            m => Err(invalid_integer("a u32", m)),
        }
    }

    fn option<T>(
        &mut self,
        value: impl FnOnce(&mut Self) -> Result<T, WireError>,
    ) -> Result<Option<T>, WireError> {
        match self.byte()? {
            0 => Ok(None),
            1 => value(self).map(Some),
            t => Err(WireError::Malformed(format!("option tag {t}"))),
        }
    }

    /// A byte string's bytes (its varint length, then as many bytes).
    fn byte_string(&mut self) -> Result<&'a [u8], WireError> {
        let len = usize::try_from(self.varint_u64()?).map_err(|_| truncated())?;
        self.take(len)
    }

    /// A message decoded by serde from here on.
    fn serde_value<M: DeserializeOwned>(&mut self) -> Result<M, WireError> {
        let rest = self.bytes.get(self.pos..).unwrap_or(&[]);
        let (m, used): (M, usize) = bincode::serde::decode_from_slice(rest, body_config())
            .map_err(super::frame::malformed)?;
        self.pos += used;
        Ok(m)
    }

    fn payload<M: DeserializeOwned + BulkBytes>(&mut self) -> Result<M, WireError> {
        let start = self.pos;
        let variant = self.varint_u32()?;
        if let Some(m) = M::from_trailing_bulk(variant, || self.byte_string().ok()) {
            return Ok(m);
        }
        self.pos = start;
        self.serde_value()
    }

    fn envelope<M: DeserializeOwned + BulkBytes>(&mut self) -> Result<Envelope<M>, WireError> {
        Ok(Envelope {
            src: ActorId(self.varint_u32()?),
            dst: ActorId(self.varint_u32()?),
            via: self.option(|r| r.varint_u32().map(LinkId))?,
            sent_at_ns: self.varint_u64()?,
            due_ns: self.option(Self::varint_u64)?,
            payload: self.payload()?,
        })
    }
}

/// The envelopes of a frame body that is `Frame::Envelopes`, decoded and
/// with every byte used; `None` when the body is another kind of frame
/// (or does not begin with a variant index at all), for serde to decode.
pub(super) fn decode_envelopes<M: DeserializeOwned + BulkBytes>(
    body: &[u8],
) -> Option<Result<Vec<Envelope<M>>, WireError>> {
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    if r.varint_u32().ok()? != ENVELOPES_VARIANT {
        return None;
    }
    Some((|| {
        let n = r.varint_u64()?;
        let room = (body.len() - r.pos) / MIN_ENVELOPE_BYTES;
        let mut envs = Vec::with_capacity(usize::try_from(n).unwrap_or(usize::MAX).min(room));
        for _ in 0..n {
            envs.push(r.envelope()?);
        }
        if r.pos != body.len() {
            return Err(WireError::Malformed(format!(
                "{} trailing bytes after the frame body",
                body.len() - r.pos
            )));
        }
        Ok(envs)
    })())
}
