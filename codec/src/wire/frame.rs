//! Frames: what one websocket binary message carries between two hosts.
//!
//! The frame is generic over the application's three types: `M`, what one
//! actor says to another (the payload of an [`Envelope`]); `C`, a control
//! command forwarded to the host that owns its target; `R`, its reply.
//! edgemu's concrete protocol names them once (`edgemu_protocol::Frame`);
//! the codec only frames, bounds and decodes them.

use super::envelope::{BulkBytes, Envelope};
use super::error::WireError;
use super::handshake::{Auth, Hello};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const MAGIC: [u8; 4] = *b"EDGM";
pub const WIRE_VERSION: u8 = 2;
/// Largest encoded frame (header included) accepted or produced.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// Application heartbeat, sent every second by both sides of a mesh link.
/// `echo_ns` returns the peer's last `sent_ns` (with the local hold time
/// subtracted) so each side measures the base RTT between the two hosts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub seq: u64,
    /// Sender's clock (ns since the run epoch, or since process start before it).
    pub sent_ns: u64,
    /// The last heartbeat `sent_ns` received from the peer, if any.
    pub echo_ns: Option<u64>,
    /// How long the echoed heartbeat waited here before this one left.
    pub echo_hold_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame<M, C, R> {
    /// First frame each side sends.
    Hello(Hello),
    /// Answer to the peer's `Hello` nonce.
    Auth(Auth),
    Heartbeat(Heartbeat),
    /// One or more envelopes for actors on the receiving host.
    Envelopes(Vec<Envelope<M>>),
    /// The run starts at this unix time (ns); sent by the coordinator host.
    Start {
        unix_ns: u64,
    },
    /// A control-plane command forwarded to the host that owns its target,
    /// answered by `ControlReply` with the same id.
    ControlForward {
        id: u64,
        command: C,
    },
    ControlReply {
        id: u64,
        reply: R,
    },
    /// The sender is leaving cleanly (run over or stopped).
    Bye {
        reason: String,
    },
}

impl<M, C, R> Frame<M, C, R> {
    /// A short name of the variant, for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "Hello",
            Frame::Auth(_) => "Auth",
            Frame::Heartbeat(_) => "Heartbeat",
            Frame::Envelopes(_) => "Envelopes",
            Frame::Start { .. } => "Start",
            Frame::ControlForward { .. } => "ControlForward",
            Frame::ControlReply { .. } => "ControlReply",
            Frame::Bye { .. } => "Bye",
        }
    }
}

const HEADER_LEN: usize = MAGIC.len() + 1;

/// bincode's decode limit for a frame body.
///
/// bincode counts against it the bytes every decoded value *claims* (a
/// `u64` claims 8 even when its varint took 1 byte on the wire; a string or
/// byte vector claims its declared length before it is allocated). Among the
/// types a frame may hold no value may claim more than 8 bytes per wire byte,
/// so with the body itself at most [`MAX_FRAME_BYTES`] every well-formed body
/// stays under this limit, while a hostile length prefix can make the decoder
/// reserve at most this much (zeroed, untouched memory) before it fails.
/// A field that claims more per wire byte (a `u128`: 16 from 1) would break
/// that bound. The application's types are part of that contract: their
/// serde forms must be plain (integers, floats, bools, strings, byte
/// strings, sequences, options, externally tagged enums). The codec's
/// `full_frame_of_tiny_envelopes_decodes` test and the concrete protocol's
/// own densest-frame test guard it.
const DECODE_LIMIT: usize = 8 * MAX_FRAME_BYTES;

/// bincode configuration of the frame body: standard (little endian, varint
/// integers) with a decode limit, so a hostile length prefix inside a small
/// frame cannot make the decoder reserve gigabytes.
pub(super) fn body_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Bytes `value` takes in a frame body (the same encoding, counted without
/// writing anything). For messages whose wire size is their encoded size.
pub fn encoded_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, WireError> {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, body_config())
        .map_err(|e| WireError::Encode(e.to_string()))?;
    Ok(size.bytes_written)
}

/// A `Vec` writer that refuses to grow past [`MAX_FRAME_BYTES`], so encoding
/// an oversized frame fails early instead of building the whole buffer.
struct BoundedVec<'a> {
    buf: &'a mut Vec<u8>,
    overflowed: bool,
}

impl bincode::enc::write::Writer for BoundedVec<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        if bytes.len() > MAX_FRAME_BYTES - self.buf.len() {
            self.overflowed = true;
            return Err(bincode::error::EncodeError::Other(
                "frame over MAX_FRAME_BYTES",
            ));
        }
        // Most writes are one byte (a small varint, a tag); pushing it
        // spares a call to memcpy per field.
        match *bytes {
            [b] => self.buf.push(b),
            _ => self.buf.extend_from_slice(bytes),
        }
        Ok(())
    }
}

/// A close upper estimate of the encoded size, so a large batch is encoded
/// into one allocation instead of a chain of doublings (each a full copy).
fn size_hint<M: BulkBytes, C, R>(frame: &Frame<M, C, R>) -> usize {
    let body = match frame {
        Frame::Envelopes(envs) => envs
            .iter()
            .map(|e| 48 + e.payload.bulk_bytes())
            .sum::<usize>(),
        _ => 128,
    };
    (body + 16).min(MAX_FRAME_BYTES)
}

/// Encodes `frame` with header. Fails with [`WireError::TooLarge`] past [`MAX_FRAME_BYTES`].
///
/// On `TooLarge`, `len` is a lower bound (encoding stops at the limit), always
/// more than `max`.
pub fn encode_frame<M, C, R>(frame: &Frame<M, C, R>) -> Result<Vec<u8>, WireError>
where
    M: Serialize + BulkBytes,
    C: Serialize,
    R: Serialize,
{
    let mut out = Vec::new();
    encode_frame_into(frame, &mut out)?;
    Ok(out)
}

/// [`encode_frame`] into `out` (cleared first): a sender that keeps one
/// buffer allocates once rather than once per frame. On an error `out`
/// holds a partial frame.
pub fn encode_frame_into<M, C, R>(
    frame: &Frame<M, C, R>,
    out: &mut Vec<u8>,
) -> Result<(), WireError>
where
    M: Serialize + BulkBytes,
    C: Serialize,
    R: Serialize,
{
    out.clear();
    out.reserve(size_hint(frame));
    out.extend_from_slice(&MAGIC);
    out.push(WIRE_VERSION);
    let mut w = BoundedVec {
        buf: out,
        overflowed: false,
    };
    match bincode::serde::encode_into_writer(frame, &mut w, body_config()) {
        Ok(()) => Ok(()),
        Err(_) if w.overflowed => Err(WireError::TooLarge {
            len: MAX_FRAME_BYTES + 1,
            max: MAX_FRAME_BYTES,
        }),
        Err(e) => Err(WireError::Encode(e.to_string())),
    }
}

/// Decodes one frame. Never panics on any input.
///
/// Checks, in order: the size limit ([`WireError::TooLarge`]), the 5-byte
/// header ([`WireError::Truncated`]), the magic ([`WireError::BadMagic`]), the
/// version ([`WireError::WrongVersion`]); then the body must decode and use
/// every remaining byte ([`WireError::Malformed`] otherwise, including a body
/// cut short and trailing garbage).
pub fn decode_frame<M, C, R>(bytes: &[u8]) -> Result<Frame<M, C, R>, WireError>
where
    M: DeserializeOwned + BulkBytes,
    C: DeserializeOwned,
    R: DeserializeOwned,
{
    let body = frame_body(bytes)?;
    if let Some(envelopes) = super::envelopes_decode::decode_envelopes(body) {
        return envelopes.map(Frame::Envelopes);
    }
    decode_body(body)
}

/// The body of a frame after the size and header checks.
fn frame_body(bytes: &[u8]) -> Result<&[u8], WireError> {
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(WireError::TooLarge {
            len: bytes.len(),
            max: MAX_FRAME_BYTES,
        });
    }
    let (header, body) = match bytes.split_first_chunk::<HEADER_LEN>() {
        Some(split) => split,
        None => return Err(WireError::Truncated { len: bytes.len() }),
    };
    let [m0, m1, m2, m3, version] = *header;
    let magic = [m0, m1, m2, m3];
    if magic != MAGIC {
        return Err(WireError::BadMagic { found: magic });
    }
    if version != WIRE_VERSION {
        return Err(WireError::WrongVersion {
            found: version,
            expected: WIRE_VERSION,
        });
    }
    Ok(body)
}

/// A bincode decode error as the codec reports it.
pub(super) fn malformed(e: bincode::error::DecodeError) -> WireError {
    match e {
        bincode::error::DecodeError::UnexpectedEnd { additional } => {
            WireError::Malformed(format!("body truncated ({additional} more bytes needed)"))
        }
        bincode::error::DecodeError::LimitExceeded => {
            WireError::Malformed("body declares a length over the decode limit".into())
        }
        other => WireError::Malformed(other.to_string()),
    }
}

/// A frame body decoded by serde, every byte used.
fn decode_body<M, C, R>(body: &[u8]) -> Result<Frame<M, C, R>, WireError>
where
    M: DeserializeOwned,
    C: DeserializeOwned,
    R: DeserializeOwned,
{
    let (frame, used): (Frame<M, C, R>, usize) =
        bincode::serde::decode_from_slice(body, body_config()).map_err(malformed)?;
    if used != body.len() {
        return Err(WireError::Malformed(format!(
            "{} trailing bytes after the frame body",
            body.len().saturating_sub(used)
        )));
    }
    Ok(frame)
}

/// [`decode_frame`] through serde alone (what the envelope fast path is
/// compared with in tests).
#[cfg(test)]
pub(super) fn decode_frame_by_serde<M, C, R>(bytes: &[u8]) -> Result<Frame<M, C, R>, WireError>
where
    M: DeserializeOwned,
    C: DeserializeOwned,
    R: DeserializeOwned,
{
    decode_body(frame_body(bytes)?)
}
