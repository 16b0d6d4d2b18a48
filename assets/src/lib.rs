//! Where edgemu's files are, for a binary run from anywhere: the files the
//! project ships, compiled in, and the files it fetches or measures per
//! machine, in one cache directory.
//!
//! - [`embedded`]: [`Embedded`], a shipped file compiled into the binary
//!   (the trained policy weights, the KV-utility profiles), and [`Asset`],
//!   where a file comes from — built in or a path — read as bytes through
//!   the same validation either way, and written `built-in:<name>` on the
//!   command line.
//! - [`cache`]: the cache directory (`$EDGEMU_CACHE_DIR`, else
//!   `$XDG_CACHE_HOME/edgemu`, else `~/.cache/edgemu`) and the folders of the
//!   fetched model and data in it.
//!
//! The dashboard's page and scripts are compiled in by the binary itself
//! (`edgemu_nodes::dashboard`).

pub mod cache;
pub mod embedded;
pub mod error;

pub use cache::cache_dir;
pub use embedded::{Asset, Embedded, BUILT_IN_PREFIX};
pub use error::AssetError;
