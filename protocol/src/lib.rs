//! The one typed protocol of edgemu's hosts: every message actors exchange
//! ([`Msg`]), and the control commands hosts forward to each other with
//! their replies ([`ForwardedCommand`], [`ForwardedReply`]). The codec
//! (`edgemu_codec::wire`) frames it; [`Frame`] and [`Envelope`] name the
//! concrete types, and [`encode_frame`] / [`decode_frame`] are the codec's
//! for them.
//!
//! Everything is bincode (serde) in the frame body: no JSON crosses the
//! mesh. A message handed to the router on one host reaches an actor on
//! another through exactly one encoding and one decoding; a control
//! command is parsed from JSON once, at the control socket that received
//! it, and travels as the typed [`Command`] (its reply as a typed
//! [`CommandReply`] or [`ControlError`]) — JSON again only where that
//! socket answers its client.
//!
//! Decoding is the codec's: a malformed payload (an unknown variant, a
//! truncated field, a string that is not UTF-8) makes the whole frame
//! malformed, which the mesh counts, logs and drops. Nothing here nests
//! without bound, and every type keeps the codec's decode-limit contract
//! (see `decode_frame` in the codec); `tests.rs` checks both with frames
//! at the size limit.
//!
//! The types live in their own crate, below the actors, so that the frame
//! decoder's fuzz target (`codec/fuzz`) decodes the real payloads without
//! building the model (candle).

pub mod handoff;
pub mod lyreo;
mod probe;
#[cfg(test)]
mod tests;

pub use handoff::{AgentMsg, HandoffOffer};
pub use lyreo::LyreoMsg;
pub use probe::{Ping, Pong, Probe};

use edgemu_codec::wire::{self, BulkBytes, WireError};
use edgemu_config::command::{Command, CommandReply};
use edgemu_config::ControlError;
use serde::{Deserialize, Serialize};

/// Everything one actor says to another across hosts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    /// A packet of a probe flow, or a LYREO prompt upload (declared size).
    Probe(Probe),
    Ping(Ping),
    Pong(Pong),
    /// Users, edge servers and the request scheduler. Boxed: the largest
    /// of these is several times any other message, and every envelope
    /// is moved through queues and mailboxes by value (the same bytes on
    /// the wire).
    Lyreo(Box<LyreoMsg>),
    /// Handoff control between agents (offer, abort, sender done).
    Agent(AgentMsg),
    /// One KV handoff frame (`edgemu_handoff::KvFrame`'s encoding), sender
    /// to receiver over the emulated link.
    KvFrame(#[serde(with = "edgemu_codec::wire::byte_field")] Vec<u8>),
    /// The receiver's feedback (`edgemu_handoff::Feedback`'s encoding),
    /// back over the reverse direction.
    KvFeedback(#[serde(with = "edgemu_codec::wire::byte_field")] Vec<u8>),
    /// An IP packet an unmodified program sent through an attached TUN
    /// device (`kind = "attach"`), to the attach point at the link's
    /// other end.
    IpPacket(#[serde(with = "edgemu_codec::wire::byte_field")] Vec<u8>),
}

impl Msg {
    /// Bytes a link charges for this message: a probe's declared size, a
    /// KV frame's or feedback's own bytes (exactly the transport core's),
    /// and for the control messages (which travel without a link unless a
    /// file routes them) the bytes they take in a frame.
    pub fn wire_size(&self) -> u32 {
        match self {
            Msg::Probe(p) => p.size,
            Msg::Ping(p) => p.size,
            Msg::Pong(p) => p.size,
            Msg::KvFrame(b) | Msg::KvFeedback(b) | Msg::IpPacket(b) => {
                u32::try_from(b.len()).unwrap_or(u32::MAX)
            }
            Msg::Lyreo(_) | Msg::Agent(_) => wire::encoded_len(self)
                .ok()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(u32::MAX),
        }
    }
}

/// Indexes of the variants of [`Msg`] that hold only a byte string, in
/// declaration order as serde numbers them (the gathered-frame and
/// decoding tests compare the bytes with serde's).
const KV_FRAME_VARIANT: u32 = 5;
const KV_FEEDBACK_VARIANT: u32 = 6;
const IP_PACKET_VARIANT: u32 = 7;

impl BulkBytes for Msg {
    fn bulk_bytes(&self) -> usize {
        match self {
            Msg::Probe(p) => p.pad.len(),
            Msg::KvFrame(b) | Msg::KvFeedback(b) | Msg::IpPacket(b) => b.len(),
            Msg::Agent(AgentMsg::Offer(o)) => o.utilities.len() * 8 + o.tokens.len() * 5,
            _ => 0,
        }
    }

    fn take_trailing_bulk(&mut self) -> Option<wire::TrailingBulk> {
        let (variant, bytes) = match self {
            Msg::KvFrame(b) => (KV_FRAME_VARIANT, b),
            Msg::KvFeedback(b) => (KV_FEEDBACK_VARIANT, b),
            Msg::IpPacket(b) => (IP_PACKET_VARIANT, b),
            _ => return None,
        };
        Some(wire::TrailingBulk {
            variant,
            bytes: std::mem::take(bytes),
        })
    }

    fn from_trailing_bulk<'a>(
        variant: u32,
        bytes: impl FnOnce() -> Option<&'a [u8]>,
    ) -> Option<Self> {
        let holding: fn(Vec<u8>) -> Msg = match variant {
            KV_FRAME_VARIANT => Msg::KvFrame,
            KV_FEEDBACK_VARIANT => Msg::KvFeedback,
            IP_PACKET_VARIANT => Msg::IpPacket,
            _ => return None,
        };
        Some(holding(bytes()?.to_vec()))
    }
}

/// A control command forwarded to the host that owns its target (the
/// typed [`Command`] in its binary form, see
/// `edgemu_config::command_wire`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForwardedCommand(#[serde(with = "edgemu_config::command_wire::command")] pub Command);

/// What the owning host answers a [`ForwardedCommand`] with.
pub type ForwardedReply = Result<CommandReply, ControlError>;

/// One websocket binary message between two hosts.
pub type Frame = wire::Frame<Msg, ForwardedCommand, ForwardedReply>;

/// One actor message as routed between hosts.
pub type Envelope = wire::Envelope<Msg>;

/// Encodes `frame` (see `edgemu_codec::wire::encode_frame`).
pub fn encode_frame(frame: &Frame) -> Result<Vec<u8>, WireError> {
    wire::encode_frame(frame)
}

/// [`encode_frame`] into a buffer the caller keeps (see
/// `edgemu_codec::wire::encode_frame_into`).
pub fn encode_frame_into(frame: &Frame, out: &mut Vec<u8>) -> Result<(), WireError> {
    wire::encode_frame_into(frame, out)
}

/// Encodes `Frame::Envelopes` of `envs` (consumed) as parts for a vectored
/// write: KV frames, feedback and packets are written from their own
/// buffers (see `edgemu_codec::wire::GatheredFrame`). The bytes are
/// [`encode_frame`]'s.
pub fn gather_envelopes(
    envs: impl ExactSizeIterator<Item = Envelope>,
    out: &mut wire::GatheredFrame,
) -> Result<(), WireError> {
    out.encode_envelopes::<Msg, ForwardedCommand, ForwardedReply>(envs)
}

/// Decodes one frame from a peer; never panics (see
/// `edgemu_codec::wire::decode_frame`).
pub fn decode_frame(bytes: &[u8]) -> Result<Frame, WireError> {
    wire::decode_frame(bytes)
}
