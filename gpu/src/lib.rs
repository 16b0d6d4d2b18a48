//! edgemu's model: a Llama-family model in candle with explicit
//! per-sequence KV caches (CPU kernels, CUDA when built with `cuda`), GGUF
//! loading, the real backend of `edgemu_engine`'s batching engine, KV
//! export/import for handoffs, the KV-utility profiler and the shipped
//! profiles (compiled in), handoff quality
//! scoring, measuring a server profile, benchmarks and NVML telemetry.
//!
//! The batching engine, KV ledger, modeled backend and profiles are in
//! `edgemu-engine`; the tokenizer, chat template, GGUF metadata and where the
//! model file is are in `edgemu-tokenizer` (both without candle).

pub mod backend;
pub mod baseline;
pub mod bench;
pub mod calibrate;
pub mod error;
pub mod generate;
pub mod handoff_quality;
pub mod kv_cache;
pub mod kv_transfer;
pub mod kv_utility;
pub mod model;
pub mod profile;
pub mod shipped_profiles;
pub mod telemetry;

pub use error::{GpuError, Result};

pub use backend::RealBackend;
pub use kv_transfer::{KvBlock, MissingRows, PresenceMask};
pub use model::{KvDtype, LlamaConfig, WeightFormat, WeightLayout};
pub use telemetry::Telemetry;
