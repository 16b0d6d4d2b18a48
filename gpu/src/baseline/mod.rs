//! Baselines that `edgemu bench decode` measures in the same run, on the same
//! weights and token ids as our engine:
//!
//! * [`candle_llama`] — candle-transformers' `quantized_llama` (candle's own
//!   GGUF Llama, single-position static batches) on the same GGUF bytes;
//! * [`llama_cpp`] — llama.cpp through `llama-cpp-python`, in a `python3`
//!   subprocess (`scripts/llama_cpp_baseline.py`), when it is installed.
//!
//! Each reports prefill of the 200-token prompt, single-stream decode, and a
//! *batched* decode of 16 sequences, which is what our batch-16 continuous
//! batching is compared against.

pub mod candle_llama;
pub mod llama_cpp;

use serde::Serialize;

/// Figures of one baseline (tok/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineFigures {
    pub prefill_200_tok_s: f64,
    pub decode_b1_tok_s: f64,
    /// Aggregate decode tok/s of 16 sequences decoded together.
    pub decode_b16_tok_s: Option<f64>,
    /// How the batch of 16 was run.
    pub batch16: String,
    /// Version or configuration notes.
    pub notes: String,
}

/// A baseline's outcome: measured, or why not.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Baseline {
    Measured(BaselineFigures),
    Unavailable { reason: String },
}

impl Baseline {
    /// The figures, when measured.
    pub fn figures(&self) -> Option<&BaselineFigures> {
        match self {
            Baseline::Measured(f) => Some(f),
            Baseline::Unavailable { .. } => None,
        }
    }
}

/// What every baseline is given.
#[derive(Debug, Clone)]
pub struct BaselineWorkload {
    /// The prompt whose prefill is timed (200 tokens).
    pub prefill_prompt: Vec<u32>,
    /// Prompts for decode (all of one length, as a static batch needs); the
    /// first is the single stream.
    pub decode_prompts: Vec<Vec<u32>>,
    /// Timed decode steps.
    pub steps: usize,
}
