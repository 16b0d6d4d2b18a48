//! Link probes: packets whose size a link charges without carrying it.

use edgemu_codec::ids::LinkId;
use serde::{Deserialize, Serialize};

/// One packet of a probe flow. Links charge `size` bytes. By default it
/// carries only that declared size (nothing that large crosses the wire);
/// a sender with `payload = "bytes"` fills `pad` with `size` real bytes.
/// A LYREO prompt upload is one too (`seq` the request id).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub seq: u64,
    pub size: u32,
    #[serde(with = "edgemu_codec::wire::byte_field")]
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
