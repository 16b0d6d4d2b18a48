//! edgemu's wire formats.
//!
//! - [`ids`]: the numeric ids every host derives from the same `cluster.toml`.
//! - [`wire`]: the envelope that carries one actor message between hosts, the
//!   binary websocket frame that carries envelopes and mesh messages, and the
//!   host-to-host handshake (version, config digest, HMAC challenge).
//! - [`fec`]: streaming random linear FEC over GF(2^8) for the KV-cache handoff.
//! - [`openai`]: OpenAI's API at the edge: request and response bodies, HTTP
//!   heads, chunked bodies and server-sent events.

pub mod fec;
mod http;
pub mod ids;
pub mod openai;
pub mod wire;
