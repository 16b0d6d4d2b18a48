//! The crate's error type.
//!
//! Variants say *where* (a file, a metadata key) and *what* went wrong, so an
//! error from a missing or malformed model file can be shown to a user as is.

use std::path::PathBuf;

/// Errors from finding the model file, reading its GGUF metadata and building
/// the tokenizer or chat template from it.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The GGUF model file is not where it was looked up.
    #[error(
        "model file {path} not found; fetch it with `edgemu fetch model` (or set EDGEMU_MODEL_DIR to the folder holding it, or EDGEMU_GGUF to a .gguf file)"
    )]
    ModelMissing { path: PathBuf },
    /// Reading or parsing a GGUF header failed.
    #[error("GGUF {path}: {msg}")]
    Gguf { path: String, msg: String },
    /// A metadata value is beyond what its user accepts (checked before
    /// anything is sized by it).
    #[error("GGUF {path}: {what} is {value}, above the limit of {limit}")]
    GgufLimit {
        path: String,
        what: String,
        value: u64,
        limit: u64,
    },
    /// A metadata key is missing or has the wrong type or value.
    #[error("GGUF {path}: metadata `{key}`: {msg}")]
    Metadata {
        path: String,
        key: String,
        msg: String,
    },
    /// Tokenizer or chat-template construction failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
