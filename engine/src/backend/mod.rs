//! Compute backends behind one trait.
//!
//! The [`crate::batch::BatchEngine`] decides *what* runs each iteration; a
//! [`Backend`] runs it and says how long it took: `edgemu_gpu::RealBackend`
//! runs the candle model and measures wall time, [`ModeledBackend`] returns
//! placeholder tokens and the time a [`crate::profile::Profile`] predicts. The
//! engine code is the same for both.

pub mod modeled;

pub use modeled::{ModeledBackend, ModeledCache};

/// A sequence's handle inside a backend (the engine uses the request id).
pub type SeqId = u64;

/// One sequence to prefill.
#[derive(Debug, Clone, Copy)]
pub struct PrefillItem<'a> {
    pub seq: SeqId,
    /// Prompt tokens, or `None` when only the length is known (modeled workloads;
    /// the real backend then uses synthetic tokens).
    pub tokens: Option<&'a [u32]>,
    /// Prompt length in tokens.
    pub len: usize,
}

/// One sequence to advance by one token.
#[derive(Debug, Clone, Copy)]
pub struct DecodeItem {
    pub seq: SeqId,
    /// The token produced in the previous iteration.
    pub token: u32,
}

/// What a backend call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendStep {
    /// One next token per item, in order.
    pub tokens: Vec<u32>,
    /// Measured or modeled duration, seconds.
    pub duration_s: f64,
}

/// A compute backend.
pub trait Backend {
    /// A sequence's KV cache as it can be moved between servers.
    type Cache;
    /// What a failed call reports (the engine boxes it into
    /// [`crate::EngineError::Backend`]).
    type Error: std::error::Error + Send + Sync + 'static;

    /// KV bytes per token used for accounting.
    fn kv_bytes_per_token(&self) -> u64;

    /// End-of-sequence token, if the backend produces real tokens.
    fn eos_token(&self) -> Option<u32>;

    /// Whether the tokens are real (kept for the caller) rather than
    /// placeholders the engine only needs to count.
    fn produces_tokens(&self) -> bool {
        true
    }

    /// Prefills new sequences together; returns each one's first output token.
    /// A sequence that was given a cache ([`Backend::adopt`]) only runs the prompt
    /// tokens after the cached ones.
    fn prefill(&mut self, items: &[PrefillItem<'_>]) -> Result<BackendStep, Self::Error>;

    /// Runs one decode iteration for all items; `occupancy_bytes` is the KV held
    /// by the whole batch (used by cost models).
    fn decode(
        &mut self,
        items: &[DecodeItem],
        occupancy_bytes: u64,
    ) -> Result<BackendStep, Self::Error>;

    /// Installs an existing cache for `seq` before its prefill; returns the number
    /// of cached tokens.
    fn adopt(&mut self, seq: SeqId, cache: Self::Cache) -> Result<usize, Self::Error>;

    /// Removes `seq`, returning its cache.
    fn take(&mut self, seq: SeqId) -> Option<Self::Cache>;

    /// Frees `seq`.
    fn release(&mut self, seq: SeqId) {
        let _ = self.take(seq);
    }
}
