//! Errors of the wire codec.

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame is {len} bytes, over the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("frame of {len} bytes is shorter than the 5-byte header")]
    Truncated { len: usize },
    #[error("bad magic {found:02x?}, expected \"EDGM\"")]
    BadMagic { found: [u8; 4] },
    #[error("wire version {found}, this build speaks {expected}")]
    WrongVersion { found: u8, expected: u8 },
    #[error("malformed frame body: {0}")]
    Malformed(String),
    #[error("encoding failed: {0}")]
    Encode(String),
}
