//! The Llama-family model: hyper-parameters, GGUF loading, weight layouts, the
//! forward pass with explicit per-sequence KV caches, and where the model file is.

pub mod config;
pub mod gguf;
pub mod kv;
pub mod llama;
pub mod locate;
pub mod weights;

pub use config::{KvDtype, LlamaConfig};
pub use kv::SeqKv;
pub use llama::{Llama, Phase};
pub use locate::{model_path, GGUF_FILE_NAME};
pub use weights::{WeightFormat, WeightLayout};
