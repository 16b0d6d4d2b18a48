//! edgemu's serving engine without a model: the iteration-level batching
//! engine, the KV ledger, the `Backend` trait with the cost-model backend,
//! and the server profiles that model reads. Plain structs driven by `now`
//! (integer ns), no I/O but loading and saving a profile file; no candle
//! (the candle model and its real backend are in `edgemu-gpu`).
//!
//! - [`batch`]: [`BatchEngine`], continuous or static batching over any
//!   [`Backend`], with [`Request`]s of known output length.
//! - [`ledger`]: [`KvLedger`], per-request KV reservations, occupancy, peak,
//!   memory-time and the per-slot window (LYREO's `η`, high-KV flag).
//! - [`backend`]: the [`Backend`] trait and [`ModeledBackend`], whose
//!   durations come from a [`Profile`].
//! - [`profile`]: [`Profile`], prefill rate and decode time against KV
//!   occupancy, from a file or the LYREO GPU classes.
//! - [`kv_profile`]: the KV-utility profile file (PriorityFEC's per-layer,
//!   per-position utilities, measured by `edgemu_gpu::kv_utility`) and
//!   [`shipped_kv_profiles`], the measured ones compiled in.

pub mod backend;
pub mod batch;
pub mod error;
pub mod kv_profile;
pub mod ledger;
pub mod profile;
pub mod shipped_kv_profiles;

pub use backend::{Backend, BackendStep, DecodeItem, ModeledBackend, ModeledCache, PrefillItem};
pub use batch::{BatchEngine, BatchMode, EngineConfig, Request, StepOutput};
pub use error::{EngineError, Result};
pub use ledger::KvLedger;
pub use profile::Profile;
