//! The crate's error type.

use std::path::PathBuf;

/// Errors from naming or reading an [`crate::Asset`].
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    /// Reading the file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than its reader accepts (refused before reading).
    #[error("{path}: {len} bytes, more than the {limit}-byte limit for {what}")]
    TooLarge {
        path: PathBuf,
        len: u64,
        limit: u64,
        what: &'static str,
    },
    /// `built-in:<name>` names no shipped file of its kind.
    #[error("no built-in {what} `{name}` (built in: {known})")]
    UnknownBuiltIn {
        what: &'static str,
        name: String,
        known: String,
    },
}
