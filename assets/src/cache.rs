//! Where edgemu keeps what it fetches or measures per machine: one cache
//! directory for the whole project.
//!
//! The cache is `$EDGEMU_CACHE_DIR`, else `$XDG_CACHE_HOME/edgemu`, else
//! `$HOME/.cache/edgemu` (an empty variable counts as unset). Inside it:
//!
//! - `models/`: the SmolLM2 GGUF (`edgemu_tokenizer::locate`; `$EDGEMU_MODEL_DIR`
//!   names another folder),
//! - `data/`: the ShareGPT JSON (`edgemu_data::locate`; `$EDGEMU_DATA_DIR`
//!   names another folder),
//! - `profiles/`: the speed a real server measured of itself
//!   (`edgemu_gpu::calibrate`).
//!
//! The binary's first-use fetch and `scripts/fetch-model.sh` /
//! `scripts/fetch-data.sh` compute the same folders, so a file fetched by
//! either is found by both, from any working directory and by an installed
//! binary alike. Where no variable names a place (no `HOME`), the folders
//! are relative to the working directory: `./models`, `./data`.
//!
//! Every rule here takes its environment as a lookup function (`*_with`), so
//! tests can try settings without touching the process environment.

use std::ffi::OsString;
use std::path::PathBuf;

/// The variable naming the cache directory itself.
pub const CACHE_DIR_ENV: &str = "EDGEMU_CACHE_DIR";

/// The process environment as a lookup, empty values as unset.
pub fn process_env(key: &str) -> Option<OsString> {
    std::env::var_os(key).filter(|v| !v.is_empty())
}

/// An environment of fixed `(name, value)` pairs, as a lookup for the
/// `*_with` rules (tests; callers that pass settings explicitly).
pub fn fixed_env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| OsString::from(v))
    }
}

/// [`cache_dir`] under the environment `var` (empty values count as unset).
pub fn cache_dir_with(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |k: &str| var(k).filter(|v| !v.is_empty());
    var(CACHE_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("edgemu")))
        .or_else(|| var("HOME").map(|d| PathBuf::from(d).join(".cache/edgemu")))
}

/// The cache directory (module docs); `None` when no variable names one.
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_with(process_env)
}

/// A fetched asset's folder under the environment `var`: `$dir_env` if set,
/// else `<cache>/<sub>`, else `./<sub>`.
pub fn asset_dir_with(var: impl Fn(&str) -> Option<OsString>, dir_env: &str, sub: &str) -> PathBuf {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    set(dir_env).map(PathBuf::from).unwrap_or_else(|| {
        cache_dir_with(&var)
            .map(|c| c.join(sub))
            .unwrap_or_else(|| PathBuf::from(sub))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use super::fixed_env as env;

    #[test]
    fn the_cache_is_the_first_variable_that_is_set() {
        let all = [
            ("EDGEMU_CACHE_DIR", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir_with(env(&all)), Some(PathBuf::from("/c")));
        assert_eq!(
            cache_dir_with(env(&all[1..])),
            Some(PathBuf::from("/x/edgemu"))
        );
        assert_eq!(
            cache_dir_with(env(&all[2..])),
            Some(PathBuf::from("/h/.cache/edgemu"))
        );
        assert_eq!(cache_dir_with(env(&[])), None);
    }

    #[test]
    fn an_empty_variable_counts_as_unset() {
        let e = [
            ("EDGEMU_CACHE_DIR", ""),
            ("XDG_CACHE_HOME", ""),
            ("HOME", "/h"),
        ];
        assert_eq!(
            cache_dir_with(env(&e)),
            Some(PathBuf::from("/h/.cache/edgemu"))
        );
        let e = [("EDGEMU_MODEL_DIR", ""), ("EDGEMU_CACHE_DIR", "/c")];
        assert_eq!(
            asset_dir_with(env(&e), "EDGEMU_MODEL_DIR", "models"),
            Path::new("/c/models")
        );
    }

    #[test]
    fn an_asset_folder_is_its_variable_else_under_the_cache() {
        let e = [("EDGEMU_DATA_DIR", "/d"), ("HOME", "/h")];
        assert_eq!(
            asset_dir_with(env(&e), "EDGEMU_DATA_DIR", "data"),
            Path::new("/d")
        );
        assert_eq!(
            asset_dir_with(env(&e[1..]), "EDGEMU_DATA_DIR", "data"),
            Path::new("/h/.cache/edgemu/data")
        );
        assert_eq!(
            asset_dir_with(env(&[]), "EDGEMU_DATA_DIR", "data"),
            Path::new("data")
        );
    }
}
