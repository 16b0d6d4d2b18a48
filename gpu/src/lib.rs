//! edgemu's GPU core: a Llama-family model with explicit per-sequence KV
//! caches, a continuous-batching engine with KV accounting, a cost-model
//! backend, KV export/import for handoffs, profiling, benchmarks and NVML
//! telemetry. No I/O in the engine, ledger or modeled backend.

pub mod backend;
pub mod baseline;
pub mod bench;
pub mod calibrate;
pub mod engine;
pub mod error;
pub mod generate;
pub mod handoff_quality;
pub mod kv_cache;
pub mod kv_transfer;
pub mod kv_utility;
pub mod ledger;
pub mod model;
pub mod profile;
pub mod telemetry;
pub mod tokenizer;

pub use error::{GpuError, Result};

pub use backend::{Backend, ModeledBackend, RealBackend};
pub use engine::{BatchEngine, BatchMode, EngineConfig, Request, StepOutput};
pub use kv_transfer::{KvBlock, MissingRows, PresenceMask};
pub use ledger::KvLedger;
pub use model::{KvDtype, LlamaConfig, WeightFormat, WeightLayout};
pub use profile::Profile;
pub use telemetry::Telemetry;
