//! The crate's error type.
//!
//! Every fallible function returns [`EngineError`]. A backend's own error
//! ([`crate::Backend::Error`]) reaches the caller boxed in
//! [`EngineError::Backend`], with the engine's account of what it did about it
//! (which requests were released or kept) around it.

use std::path::PathBuf;

/// Errors from the batching engine, the KV ledger, the modeled backend and
/// profiles.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine, ledger or modeled backend was given an invalid request or
    /// state.
    #[error("engine: {0}")]
    State(String),
    /// A backend call failed.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// A profile file is unreadable or invalid.
    #[error("profile {path}: {msg}")]
    Profile { path: String, msg: String },
    /// No built-in profile has this name.
    #[error("unknown built-in profile `{0}` (known: rtx3080, rtx3090, rtx4090)")]
    UnknownProfile(String),
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl EngineError {
    /// Boxes a backend's error.
    pub fn backend(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        EngineError::Backend(Box::new(e))
    }
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
