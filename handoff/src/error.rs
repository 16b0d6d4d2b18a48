//! Typed errors of the handoff cores. Everything that comes from outside —
//! a frame, a feedback packet, a layout or utility vector from a file — is
//! checked and refused with one of these, never a panic.

use edgemu_codec::fec::FecError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandoffError {
    /// The FEC frame itself is malformed (codec's verdict).
    #[error("KV frame: {0}")]
    Frame(#[from] FecError),
    /// A frame names a block the layout does not have.
    #[error("KV frame names block {block}, the layout has {n_blocks}")]
    BadBlock { block: u32, n_blocks: u32 },
    /// A frame names a fragment past the end of its block.
    #[error("KV frame names fragment {fragment} of block {block}, which has {fragments}")]
    BadFragment {
        block: u32,
        fragment: u16,
        fragments: u16,
    },
    /// A fragment's payload length is not the one its position implies.
    #[error(
        "fragment {fragment} of block {block} carries {got} bytes, its place holds {expected}"
    )]
    FragmentLength {
        block: u32,
        fragment: u16,
        expected: usize,
        got: usize,
    },
    /// A frame of another handoff session.
    #[error("frame of session {got}, this handoff is session {expected}")]
    WrongSession { expected: u32, got: u32 },
    /// A feedback packet shorter than its fixed length.
    #[error("feedback packet truncated: need {needed} bytes, got {got}")]
    FeedbackTruncated { needed: usize, got: usize },
    /// A feedback packet longer than its fixed length.
    #[error("feedback packet of {0} bytes is longer than the format")]
    FeedbackTooLong(usize),
    /// The first byte is not the feedback magic.
    #[error("feedback packet: bad magic byte {0:#04x}")]
    FeedbackMagic(u8),
    /// A feedback version this build does not speak.
    #[error("feedback packet: unsupported version {0}")]
    FeedbackVersion(u8),
    /// Feedback fields that contradict each other or what was sent.
    #[error("feedback packet: {0}")]
    FeedbackInconsistent(&'static str),
    /// A block layout that cannot be cut into frames (reason given).
    #[error("block layout: {0}")]
    Layout(String),
    /// A utility vector that does not fit the layout (reason given).
    #[error("block utilities: {0}")]
    Utilities(String),
    /// A sender/receiver/harness configuration out of range (reason given).
    #[error("handoff configuration: {0}")]
    Config(String),
    /// A KV payload buffer of the wrong size.
    #[error("KV payload has {got} bytes, the layout needs {expected}")]
    PayloadSize { expected: usize, got: usize },
    /// A scheme name the registry does not know.
    #[error("unknown scheme {0:?}")]
    UnknownScheme(String),
    /// A scheme that needs an externally built scheduler (the DDQN) got none.
    #[error("scheme {0} needs a repair scheduler built elsewhere (the DDQN)")]
    NeedsScheduler(&'static str),
}
