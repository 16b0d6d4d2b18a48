//! The policies crate's error type.

use std::path::PathBuf;

/// What went wrong loading, saving or using a policy. Every variant names the
/// file (or `<bytes>` for an in-memory buffer) and, where it applies, the
/// tensor.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{file}: {source}")]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not a safetensors file: {what}")]
    Format { file: PathBuf, what: String },
    #[error("{file}: metadata: {what}")]
    Metadata { file: PathBuf, what: String },
    #[error("{file}: tensor `{tensor}`: {what}")]
    Tensor {
        file: PathBuf,
        tensor: String,
        what: String,
    },
    #[error("{file}: missing tensor `{tensor}`")]
    MissingTensor { file: PathBuf, tensor: String },
    #[error("{file}: unexpected tensor `{tensor}` (this policy has no such parameter)")]
    UnexpectedTensor { file: PathBuf, tensor: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    /// Naming or reading a weights file (or a built-in one) failed.
    #[error(transparent)]
    Asset(#[from] edgemu_assets::AssetError),
}
