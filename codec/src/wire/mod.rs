//! Host-to-host wire format.
//!
//! A websocket binary message holds exactly one [`Frame`]: 4 magic bytes
//! `EDGM`, one version byte ([`WIRE_VERSION`]), then the bincode-2 (serde,
//! standard config, with a decode limit) encoding of the frame. Frames larger
//! than [`MAX_FRAME_BYTES`] are refused on both encode and decode. Decoding
//! never panics: any malformed, truncated, oversized or wrong-version input is
//! a [`WireError`].
//!
//! The codec frames any application protocol: [`Frame`] and [`Envelope`]
//! are generic over the actor message, the forwarded control command and
//! its reply. edgemu's one protocol (the actors' messages, typed commands
//! and replies) is `edgemu_protocol`, which names the concrete frame.

pub mod byte_field;
mod envelope;
mod envelopes_decode;
mod error;
mod frame;
mod gather;
mod handshake;
#[cfg(test)]
mod tests;
pub mod upgrade;

pub use envelope::{BulkBytes, Envelope, TrailingBulk};
pub use error::WireError;
pub use frame::{
    decode_frame, encode_frame, encode_frame_into, encoded_len, Frame, Heartbeat, MAGIC,
    MAX_FRAME_BYTES, WIRE_VERSION,
};
pub use gather::{GatheredFrame, GATHER_MIN_BYTES};
pub use handshake::{
    auth_mac, config_digest, Auth, Handshake, HandshakeError, HandshakeOutcome, Hello,
    PROTOCOL_VERSION,
};
