//! The crate's error type.
//!
//! Every fallible function returns [`GpuError`]. Variants say *where* (a file, a
//! tensor, a metadata key, a request) and *what* went wrong, so an error from a
//! malformed GGUF or profile file can be shown to a user as is.

use std::path::PathBuf;

/// Errors from model loading, the model's computations, KV transfer, the
/// KV-utility profile and telemetry; the tokenizer's and the batching
/// engine's errors arrive as their own variants.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The GGUF model file is not where it was looked up.
    #[error(
        "model file {path} not found; fetch it with `edgemu fetch model` (or set EDGEMU_MODEL_DIR to the folder holding it, or EDGEMU_GGUF to a .gguf file)"
    )]
    ModelMissing { path: PathBuf },
    /// Reading or parsing a GGUF file failed.
    #[error("GGUF {path}: {msg}")]
    Gguf { path: String, msg: String },
    /// A GGUF header declares a size beyond what the loader accepts (checked
    /// before anything is allocated from it).
    #[error("GGUF {path}: {what} is {value}, above the limit of {limit}")]
    GgufLimit {
        path: String,
        what: String,
        value: u64,
        limit: u64,
    },
    /// A tensor the architecture needs is absent from the GGUF file.
    #[error("GGUF {path}: missing tensor `{name}`")]
    MissingTensor { path: String, name: String },
    /// A tensor has a shape other than the config implies.
    #[error("GGUF {path}: tensor `{name}` has shape {got:?}, expected {expected:?}")]
    TensorShape {
        path: String,
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    /// A metadata key is missing or has the wrong type or value.
    #[error("GGUF {path}: metadata `{key}`: {msg}")]
    Metadata {
        path: String,
        key: String,
        msg: String,
    },
    /// A tensor operation failed (context says which).
    #[error("{context}: {source}")]
    Candle {
        context: String,
        #[source]
        source: candle_core::Error,
    },
    /// Tokenizer construction or use failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A device string could not be parsed or the device is unavailable.
    #[error("device `{device}`: {msg}")]
    Device { device: String, msg: String },
    /// The model or a backend was given an invalid request or state.
    #[error("engine: {0}")]
    Engine(String),
    /// The batching engine, a modeled backend or a server profile failed.
    #[error(transparent)]
    Batch(#[from] edgemu_engine::EngineError),
    /// KV export/import got inconsistent ranges, shapes or bytes.
    #[error("kv transfer: {0}")]
    KvTransfer(String),
    /// A KV-utility profile file is unreadable or invalid.
    #[error("profile {path}: {msg}")]
    Profile { path: String, msg: String },
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<edgemu_tokenizer::TokenizerError> for GpuError {
    /// Variant for variant: a metadata or file error reads the same from the
    /// tokenizer as from the model loader.
    fn from(e: edgemu_tokenizer::TokenizerError) -> Self {
        use edgemu_tokenizer::TokenizerError as T;
        match e {
            T::ModelMissing { path } => GpuError::ModelMissing { path },
            T::Gguf { path, msg } => GpuError::Gguf { path, msg },
            T::GgufLimit {
                path,
                what,
                value,
                limit,
            } => GpuError::GgufLimit {
                path,
                what,
                value,
                limit,
            },
            T::Metadata { path, key, msg } => GpuError::Metadata { path, key, msg },
            T::Tokenizer(msg) => GpuError::Tokenizer(msg),
            T::Io { path, source } => GpuError::Io { path, source },
        }
    }
}

impl GpuError {
    /// Wraps a candle error with a short description of what was being done.
    pub fn candle(context: impl Into<String>) -> impl FnOnce(candle_core::Error) -> GpuError {
        let context = context.into();
        move |source| GpuError::Candle { context, source }
    }
}

/// Adds context to candle results: `t.matmul(&w).ctx("layer 3 q proj")?`.
pub(crate) trait CandleContext<T> {
    fn ctx(self, context: &str) -> Result<T, GpuError>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn ctx(self, context: &str) -> Result<T, GpuError> {
        self.map_err(|source| GpuError::Candle {
            context: context.to_string(),
            source,
        })
    }
}

pub type Result<T, E = GpuError> = std::result::Result<T, E>;
