//! Shipped files compiled into the binary, and where a file comes from.
//!
//! A crate that ships a file (the policies crate its trained weights, the
//! model crate its KV-utility profiles) embeds it with `include_bytes!` as an
//! [`Embedded`] and lists its embedded files in a table. An [`Asset`] is then
//! either one of them ([`Asset::BuiltIn`]) or a file a user names
//! ([`Asset::File`]); both are read as bytes ([`Asset::read`]) and handed to
//! the same validation, so the built-in copy gives the same results as the
//! file it was built from. Messages and results name a built-in file
//! `built-in <its path in the repository>` ([`Asset::label`]).
//!
//! On the command line an asset is a path, or `built-in:<name>` for an
//! embedded one ([`Asset::parse`]; [`Asset`]'s `Display` writes the same
//! form back, so it can be a clap default: `[default:
//! built-in:smollm2-135m-kvu]`).

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::AssetError;

/// How a built-in asset is written on the command line: `built-in:<name>`.
pub const BUILT_IN_PREFIX: &str = "built-in:";

/// One shipped file, compiled in.
#[derive(Debug, PartialEq, Eq)]
pub struct Embedded {
    /// The name it is asked for by (`lyreo`, `smollm2-135m-kvu`).
    pub name: &'static str,
    /// Its path in the repository it was built from
    /// (`policies/weights/lyreo.safetensors`), for labels.
    pub path: &'static str,
    /// The file's bytes.
    pub bytes: &'static [u8],
}

impl Embedded {
    /// How it is named in messages and results: `built-in <path>`.
    pub fn label(&self) -> PathBuf {
        PathBuf::from(format!("built-in {}", self.path))
    }

    /// The entry of `table` named `name`.
    pub fn find(table: &[&'static Embedded], name: &str) -> Option<&'static Embedded> {
        table.iter().copied().find(|e| e.name == name)
    }
}

/// Where a file comes from (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asset {
    BuiltIn(&'static Embedded),
    File(PathBuf),
}

impl Asset {
    /// `built-in:<name>` (an entry of `table`, whose files are `what`, e.g.
    /// "policy weights") or a path.
    pub fn parse(
        s: &str,
        table: &[&'static Embedded],
        what: &'static str,
    ) -> Result<Asset, AssetError> {
        match s.strip_prefix(BUILT_IN_PREFIX) {
            Some(name) => Embedded::find(table, name)
                .map(Asset::BuiltIn)
                .ok_or_else(|| AssetError::UnknownBuiltIn {
                    what,
                    name: name.to_string(),
                    known: table.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
                }),
            None => Ok(Asset::File(PathBuf::from(s))),
        }
    }

    /// How it is named in messages and results: the path, or `built-in
    /// <path in the repository>`.
    pub fn label(&self) -> PathBuf {
        match self {
            Asset::BuiltIn(e) => e.label(),
            Asset::File(p) => p.clone(),
        }
    }

    /// Whether it can be read: built in, or an existing file.
    pub fn is_available(&self) -> bool {
        match self {
            Asset::BuiltIn(_) => true,
            Asset::File(p) => p.is_file(),
        }
    }

    /// The bytes; a file larger than `limit` bytes is refused before it is
    /// read (`what` names the kind of file in that error).
    pub fn read(&self, limit: u64, what: &'static str) -> Result<Cow<'static, [u8]>, AssetError> {
        match self {
            Asset::BuiltIn(e) => Ok(Cow::Borrowed(e.bytes)),
            Asset::File(path) => read_bounded(path, limit, what).map(Cow::Owned),
        }
    }
}

/// Reads the file at `path`, refusing one larger than `limit` bytes before
/// reading it (`what` names the kind of file in that error).
pub fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, AssetError> {
    let io = |source| AssetError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > limit {
        return Err(AssetError::TooLarge {
            path: path.to_path_buf(),
            len,
            limit,
            what,
        });
    }
    std::fs::read(path).map_err(io)
}

impl fmt::Display for Asset {
    /// The form [`Asset::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Asset::BuiltIn(e) => write!(f, "{BUILT_IN_PREFIX}{}", e.name),
            Asset::File(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static ONE: Embedded = Embedded {
        name: "one",
        path: "things/one.bin",
        bytes: b"first",
    };
    static TWO: Embedded = Embedded {
        name: "two",
        path: "things/two.bin",
        bytes: b"second",
    };
    static TABLE: [&Embedded; 2] = [&ONE, &TWO];

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("edgemu-assets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_built_in_name_reads_its_embedded_bytes_and_prints_back() {
        let a = Asset::parse("built-in:two", &TABLE, "things").unwrap();
        assert_eq!(a, Asset::BuiltIn(&TWO));
        assert_eq!(a.read(0, "things").unwrap().as_ref(), b"second");
        assert_eq!(a.label(), Path::new("built-in things/two.bin"));
        assert!(a.is_available());
        assert_eq!(a.to_string(), "built-in:two");
        assert_eq!(Asset::parse(&a.to_string(), &TABLE, "things").unwrap(), a);
    }

    #[test]
    fn an_unknown_built_in_name_lists_the_known_ones() {
        let e = Asset::parse("built-in:three", &TABLE, "things")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("three") && e.contains("one, two") && e.contains("things"),
            "{e}"
        );
    }

    #[test]
    fn anything_else_is_a_file_read_within_its_limit() {
        let path = tmp("f.bin");
        std::fs::write(&path, b"12345").unwrap();
        let a = Asset::parse(path.to_str().unwrap(), &TABLE, "things").unwrap();
        assert_eq!(a, Asset::File(path.clone()));
        assert_eq!(a.label(), path);
        assert_eq!(a.to_string(), path.display().to_string());
        assert!(a.is_available());
        assert_eq!(a.read(5, "things").unwrap().as_ref(), b"12345");
        let e = a.read(4, "things").unwrap_err().to_string();
        assert!(e.contains("5 bytes") && e.contains("4-byte limit"), "{e}");
        let gone = Asset::File(tmp("absent.bin"));
        assert!(!gone.is_available());
        let e = gone.read(5, "things").unwrap_err().to_string();
        assert!(e.contains("absent.bin"), "{e}");
        std::fs::remove_file(&path).ok();
    }
}
