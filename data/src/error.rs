//! The crate's error type: every variant says which file (or built-in source)
//! and where in it.

use std::path::PathBuf;

/// Errors from reading conversations and building contexts.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The ShareGPT JSON is not where it was looked up.
    #[error(
        "ShareGPT data {path} not found; fetch it with `edgemu fetch data` (or set EDGEMU_DATA_DIR to the folder holding it)"
    )]
    Missing { path: PathBuf },
    /// Opening or reading the file failed.
    #[error("{source_name}: {error}")]
    Io {
        source_name: String,
        #[source]
        error: std::io::Error,
    },
    /// The text is not valid JSON, or is JSON of the wrong shape.
    #[error("{source_name}: line {line}, column {column} (conversation #{index}): {msg}")]
    Json {
        source_name: String,
        line: usize,
        column: usize,
        /// Index of the conversation being read when the error occurred.
        index: usize,
        msg: String,
    },
    /// A conversation parsed but breaks a rule (e.g. an empty id).
    #[error("{source_name}: conversation #{index} (id `{id}`): {msg}")]
    Conversation {
        source_name: String,
        index: usize,
        id: String,
        msg: String,
    },
    /// Building token contexts failed (e.g. not enough long conversations).
    #[error("contexts: {0}")]
    Contexts(String),
}
