//! Typed errors of the FEC codec.
//!
//! Everything that comes from outside the process — a frame off the network, a
//! feedback message — is validated and turned into a [`FecError`] value; the codec
//! never panics on such input. Errors that describe a hostile or corrupted peer
//! (an id far ahead of the window, a repair count over the limit, an inconsistent
//! header) leave the encoder or decoder state unchanged.

use super::gf::Kernel;

/// Every way the FEC codec can refuse an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FecError {
    /// The buffer ends before the structure it should hold.
    #[error("truncated frame: need {needed} bytes, got {got}")]
    Truncated { needed: usize, got: usize },
    /// The first byte is not the FEC frame magic.
    #[error("bad magic byte {0:#04x}")]
    BadMagic(u8),
    /// The frame format version is not one this build speaks.
    #[error("unsupported frame version {0}")]
    BadVersion(u8),
    /// The kind byte is neither source nor repair.
    #[error("unknown packet kind {0}")]
    BadKind(u8),
    /// A density threshold DT outside 0..=15 (RFC 8681 §3.6).
    #[error("density threshold {0} is outside 0..=15")]
    BadDensity(u8),
    /// The frame is longer than [`FRAME_SIZE`](super::packet::FRAME_SIZE).
    #[error("frame of {0} bytes exceeds the frame size")]
    FrameTooLarge(usize),
    /// A source payload longer than [`MAX_PAYLOAD`](super::packet::MAX_PAYLOAD).
    #[error("payload of {0} bytes exceeds the maximum payload")]
    PayloadTooLarge(usize),
    /// The body length in the header disagrees with the bytes that follow it.
    #[error("header says the body has {header} bytes, the frame carries {actual}")]
    BodyLength { header: usize, actual: usize },
    /// A header whose fields contradict each other (reason given).
    #[error("inconsistent header: {0}")]
    Inconsistent(&'static str),
    /// A repair that claims to combine more source packets than allowed.
    #[error("repair count {count} exceeds the limit {limit}")]
    CountOverLimit { count: u32, limit: u32 },
    /// `first_id + count` does not fit the 32-bit id space.
    #[error("repair range starting at {first} with {count} packets overflows the id space")]
    IdOverflow { first: u32, count: u32 },
    /// A packet names an id too far beyond the decoder's window.
    #[error("id {id} is too far ahead: the window may not extend past {limit}")]
    TooFarAhead { id: u32, limit: u32 },
    /// The encoder window holds `limit` unacknowledged packets already.
    #[error("encoder window is full ({limit} unacknowledged packets)")]
    WindowFull { limit: u32 },
    /// Feedback acknowledges packets that were never sent.
    #[error("acknowledgement of {ack} packets but only {sent} were sent")]
    AckAhead { ack: u32, sent: u32 },
    /// A frame of another session reached this decoder.
    #[error("frame belongs to session {got}, this decoder serves {expected}")]
    WrongSession { expected: u32, got: u32 },
    /// A recovered symbol whose application header makes no sense (only a
    /// corrupted or hostile repair stream can cause this).
    #[error("recovered symbol of id {0} is malformed")]
    MalformedSymbol(u32),
    /// A kernel was forced that this CPU cannot run.
    #[error("kernel {0:?} is not available on this CPU")]
    KernelUnavailable(Kernel),
    /// A configuration value out of range (reason given).
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}
