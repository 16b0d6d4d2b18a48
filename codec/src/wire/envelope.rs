//! The envelope: one actor-to-actor message, as routed between hosts.

use crate::ids::{ActorId, LinkId};
use serde::{Deserialize, Serialize};

/// One message from actor `src` to actor `dst`.
///
/// `via` names the link the message must cross before delivery; the link
/// actor on the sending host clears it (so the message is not impaired twice)
/// and sets `due_ns` to the time the link model said it arrives.
/// Times are nanoseconds since the run's epoch (the same instant on every host).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub src: ActorId,
    pub dst: ActorId,
    pub via: Option<LinkId>,
    pub sent_at_ns: u64,
    /// Arrival time the link model computed (None when no link was crossed).
    pub due_ns: Option<u64>,
    pub payload: Msg,
}

/// Application messages. Later kinds (requests, KV frames) add variants.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Msg {
    Probe(Probe),
    Ping(Ping),
    Pong(Pong),
    /// Opaque bytes; the link charges their length. Encoded as one length-
    /// prefixed byte string (serde_bytes), not element by element.
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// One packet of a probe flow. Links charge `size` bytes. By default it
/// carries only that declared size (nothing that large crosses the wire);
/// a sender with `payload = "bytes"` fills `pad` with `size` real bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub seq: u64,
    pub size: u32,
    #[serde(with = "serde_bytes")]
    pub pad: Vec<u8>,
}

/// A request of a pinger; the receiver answers with a [`Pong`] over `reply_via`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ping {
    pub seq: u64,
    pub size: u32,
    pub reply_via: Option<LinkId>,
}

/// The answer to a [`Ping`]; `ping_sent_at_ns` echoes the request's send time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pong {
    pub seq: u64,
    pub size: u32,
    pub ping_sent_at_ns: u64,
}

impl Msg {
    /// Bytes a link charges for this message.
    pub fn wire_size(&self) -> u32 {
        match self {
            Msg::Probe(p) => p.size,
            Msg::Ping(p) => p.size,
            Msg::Pong(p) => p.size,
            Msg::Bytes(b) => u32::try_from(b.len()).unwrap_or(u32::MAX),
        }
    }
}
