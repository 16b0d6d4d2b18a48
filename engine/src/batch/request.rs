//! Requests and what the engine reports about them.

use serde::{Deserialize, Serialize};

/// Request id (unique per engine).
pub type RequestId = u64;

/// A prompt: real tokens, or only a length (modeled workloads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Prompt {
    Tokens(Vec<u32>),
    Length(usize),
}

impl Prompt {
    pub fn len(&self) -> usize {
        match self {
            Prompt::Tokens(t) => t.len(),
            Prompt::Length(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn tokens(&self) -> Option<&[u32]> {
        match self {
            Prompt::Tokens(t) => Some(t),
            Prompt::Length(_) => None,
        }
    }
}

/// An inference request with a known output length (as in LYREO).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub id: RequestId,
    pub prompt: Prompt,
    /// Tokens to generate (the KV reservation counts them).
    pub output_len: usize,
    /// Stop early at the backend's end-of-sequence token.
    #[serde(default)]
    pub stop_at_eos: bool,
    /// Hand the request's KV cache back when it finishes (for a handoff).
    #[serde(default)]
    pub keep_cache: bool,
}

impl Request {
    /// A request of `input_len` synthetic prompt tokens.
    pub fn with_lengths(id: RequestId, input_len: usize, output_len: usize) -> Self {
        Request {
            id,
            prompt: Prompt::Length(input_len),
            output_len,
            stop_at_eos: false,
            keep_cache: false,
        }
    }

    /// A request with real prompt tokens.
    pub fn with_tokens(id: RequestId, tokens: Vec<u32>, output_len: usize) -> Self {
        Request {
            id,
            prompt: Prompt::Tokens(tokens),
            output_len,
            stop_at_eos: false,
            keep_cache: false,
        }
    }

    /// Prompt length.
    pub fn input_len(&self) -> usize {
        self.prompt.len()
    }

    /// KV tokens reserved at admission: input + output length.
    pub fn kv_tokens(&self) -> u64 {
        (self.input_len() + self.output_len) as u64
    }
}

/// A request that left the engine.
#[derive(Debug, Clone)]
pub struct Finished<C> {
    pub id: RequestId,
    /// Generated tokens (placeholders with the modeled backend).
    pub tokens: Vec<u32>,
    pub input_len: usize,
    /// When it was submitted (the `now` given to `submit`), ns.
    pub submitted_at: u64,
    /// When its prefill started, ns.
    pub admitted_at: u64,
    /// When its first token was available (end of its prefill), ns.
    pub first_token_at: u64,
    /// When it left (end of its last iteration; static batching: end of
    /// batch), ns.
    pub finished_at: u64,
    /// Whether it stopped at end-of-sequence before its output length.
    pub hit_eos: bool,
    /// Its cache, when the request asked to keep it.
    pub cache: Option<C>,
}
