//! Streaming (sliding-window) random linear FEC over GF(2^8) for the KV-cache
//! handoff (PriorityFEC, issue 3). A core without I/O: plain structs driven by
//! packets and feedback, returning frames and events.
//!
//! Model:
//!
//! - Source packets get consecutive ids `0, 1, 2, …` as they are sent.
//! - The **active window** of the encoder is every packet from the first one not
//!   yet known decoded (the receiver's cumulative decoded prefix, learnt from
//!   [`Feedback`]) to the last one sent. An ACK of prefix `a` slides the window
//!   start to `a` and frees those packets.
//! - A **repair packet** is a random linear combination over GF(2^8)/0x11D of
//!   the `count ≤ K` **oldest** packets of the window, with coefficients
//!   generated as RFC 8681 §3.6 specifies (TinyMT32 seeded by the repair key,
//!   density DT), so a repair header carries only first id, count, key and DT.
//! - The decoder runs on-the-fly Gaussian elimination, pivoting on the lowest id,
//!   and reports newly decoded ids and its cumulative decoded prefix.
//!
//! Modules: [`gf`] (field and region kernels), [`tinymt32`], [`coefficients`],
//! [`packet`] (frame format), [`encoder`], [`decoder`], [`bench`].

pub mod bench;
pub mod coefficients;
pub mod decoder;
pub mod encoder;
pub mod error;
pub mod gf;
pub mod packet;
mod ring;
pub mod tinymt32;

#[cfg(test)]
mod tests;

pub use bench::{run_fec_bench, FecBenchOptions, FecBenchReport, KernelFigures};
pub use coefficients::generate_coding_coefficients;
pub use decoder::{DecodedSource, DecoderConfig, DecoderStats, Outcome, Progress, RlcDecoder};
pub use encoder::{EncoderConfig, Frame, RlcEncoder};
pub use error::FecError;
pub use gf::{active_kernel, force_kernel, gf_inv, gf_mul, mul, mul_add, Kernel};
pub use packet::{
    build, build_into, parse, FecPacket, PacketBody, PacketKind, RepairHeader, RepairPacket,
    SourcePacket, APP_HEADER_LEN, FRAME_SIZE, HEADER_LEN, MAX_PAYLOAD, SYMBOL_SIZE,
};
pub use tinymt32::TinyMt32;

/// What the receiver tells the sender and the repair scheduler (see
/// [`RlcDecoder::feedback`]).
pub use decoder::Feedback;
