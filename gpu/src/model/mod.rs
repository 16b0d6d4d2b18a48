//! The Llama-family model: hyper-parameters, GGUF loading, weight layouts, the
//! forward pass with explicit per-sequence KV caches and devices. Where the
//! model file is and its tokenizer are `edgemu_tokenizer`'s.

mod attend_rows;
mod column_chunks;
pub mod config;
pub mod cpu_i8;
pub mod cpu_q8;
#[cfg(feature = "cuda")]
mod cuda_decode_attend;
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
mod expf_avx2;
#[cfg(feature = "cuda")]
pub use cuda_decode_attend::{batched_attention_active, batched_attention_enabled};
pub mod device;
pub mod gguf;
pub mod kv;
pub mod llama;
pub mod random;
pub mod weights;

use std::path::{Path, PathBuf};

use candle_core::Device;

pub use config::{KvDtype, LlamaConfig};
pub use device::parse_device;
pub use gguf::{tiny_gguf, GgufFile};
pub use kv::SeqKv;
pub use llama::{Llama, Phase, SeqInput};
pub use random::{random_gguf, RandomArch, RandomWeights};
pub use weights::{WeightFormat, WeightLayout};

use edgemu_tokenizer::{resolve_model_path, ChatTemplate, Tokenizer};

use crate::error::Result;

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
    let tokenizer = Tokenizer::from_gguf(g.metadata())?;
    let chat = g
        .metadata()
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

/// Seeded random weights of a built-in architecture ([`random`]) through the
/// same loader.
pub fn load_random(
    weights: RandomWeights,
    device: &Device,
    layout: Option<WeightLayout>,
) -> Result<LoadedModel> {
    let bytes = random::try_random_gguf(weights.arch, weights.seed)?;
    let mut g = GgufFile::from_bytes(bytes, &weights.label())?;
    finish(
        &mut g,
        device,
        layout.unwrap_or_else(|| WeightLayout::for_device(device)),
    )
}

/// Where a model comes from: a GGUF file (`None` → the default lookup) or
/// seeded random weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    File(Option<PathBuf>),
    Random(RandomWeights),
}

impl ModelSource {
    /// `random` wins over `file` when both are given.
    pub fn new(file: Option<PathBuf>, random: Option<RandomWeights>) -> Self {
        match random {
            Some(r) => ModelSource::Random(r),
            None => ModelSource::File(file),
        }
    }

    /// Loads the model (`layout = None` → [`WeightLayout::for_device`]).
    pub fn load(&self, device: &Device, layout: Option<WeightLayout>) -> Result<LoadedModel> {
        match self {
            ModelSource::File(f) => load(&resolve_model_path(f.as_deref())?, device, layout),
            ModelSource::Random(r) => load_random(*r, device, layout),
        }
    }

    /// The file's path or the random model's name, for reports.
    pub fn label(&self) -> String {
        match self {
            ModelSource::File(f) => match resolve_model_path(f.as_deref()) {
                Ok(p) => p.display().to_string(),
                Err(_) => "(model file missing)".into(),
            },
            ModelSource::Random(r) => r.label(),
        }
    }
}
