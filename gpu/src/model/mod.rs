//! The Llama-family model: hyper-parameters, GGUF loading, weight layouts, the
//! forward pass with explicit per-sequence KV caches, devices, and where the
//! model file is.

pub mod config;
pub mod cpu_q8;
pub mod device;
pub mod gguf;
pub mod kv;
pub mod llama;
pub mod locate;
pub mod weights;

use std::path::Path;

use candle_core::Device;

pub use config::{KvDtype, LlamaConfig};
pub use device::parse_device;
pub use gguf::{tiny_gguf, GgufFile};
pub use kv::SeqKv;
pub use llama::{Llama, Phase, SeqInput};
pub use locate::{model_path, resolve_model_path, GGUF_FILE_NAME};
pub use weights::{WeightFormat, WeightLayout};

use crate::error::Result;
use crate::tokenizer::{ChatTemplate, Tokenizer};

/// A model with its tokenizer and chat template.
pub struct LoadedModel {
    pub model: Llama,
    pub tokenizer: Tokenizer,
    pub chat: Option<ChatTemplate>,
}

fn finish<R: std::io::Read + std::io::Seek>(
    g: &mut GgufFile<R>,
    device: &Device,
    layout: WeightLayout,
) -> Result<LoadedModel> {
    let model = Llama::from_gguf(g, device, layout)?;
    let tokenizer = Tokenizer::from_gguf(g)?;
    let chat = g
        .string("tokenizer.chat_template")
        .ok()
        .and_then(|t| ChatTemplate::from_jinja(t).ok());
    tracing::info!(
        file = g.label(),
        layout = %layout.label(),
        layers = model.config().n_layers,
        "loaded model"
    );
    Ok(LoadedModel {
        model,
        tokenizer,
        chat,
    })
}

/// Loads a GGUF file (`layout = None` → [`WeightLayout::for_device`]).
pub fn load(path: &Path, device: &Device, layout: Option<WeightLayout>) -> Result<LoadedModel> {
    let mut g = GgufFile::open(path)?;
    finish(
        &mut g,
        device,
        layout.unwrap_or_else(|| WeightLayout::for_device(device)),
    )
}

/// The tiny random-initialised test model ([`tiny_gguf`]) through the same loader.
pub fn load_tiny(seed: u64, device: &Device, layout: Option<WeightLayout>) -> Result<LoadedModel> {
    let mut g = GgufFile::from_bytes(tiny_gguf(seed), "tiny-random-llama")?;
    finish(
        &mut g,
        device,
        layout.unwrap_or_else(|| WeightLayout::for_device(device)),
    )
}
