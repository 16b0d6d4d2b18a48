//! The modeled backend: no computation, durations from a [`Profile`].
//!
//! Prefill of a batch takes `overhead + Σ new prompt tokens / prefill rate`
//! (the LYREO `D_pre = Σ l_in / v_pre`); a decode iteration takes
//! `profile.step_time(batch, occupancy)`. Tokens are placeholders (0), so
//! requests run to their known output length. Plain struct, no I/O.

use rustc_hash::FxHashMap as HashMap;

use crate::backend::{Backend, BackendStep, DecodeItem, PrefillItem, SeqId};
use crate::error::{EngineError, Result};
use crate::profile::Profile;

/// A modeled sequence's cache: just its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeledCache {
    pub tokens: usize,
}

/// Cost-model backend.
#[derive(Debug, Clone)]
pub struct ModeledBackend {
    profile: Profile,
    seqs: HashMap<SeqId, usize>,
}

impl ModeledBackend {
    pub fn new(profile: Profile) -> Self {
        ModeledBackend {
            profile,
            seqs: HashMap::default(),
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }
}

impl Backend for ModeledBackend {
    type Cache = ModeledCache;
    type Error = EngineError;

    fn kv_bytes_per_token(&self) -> u64 {
        self.profile.kv_bytes_per_token
    }

    fn eos_token(&self) -> Option<u32> {
        None
    }

    fn produces_tokens(&self) -> bool {
        false
    }

    fn prefill(&mut self, items: &[PrefillItem<'_>]) -> Result<BackendStep> {
        let mut new_tokens = 0;
        for it in items {
            let cached = self.seqs.get(&it.seq).copied().unwrap_or(0);
            if cached >= it.len {
                return Err(EngineError::State(format!(
                    "sequence {}: cache holds {cached} tokens, prompt has {}",
                    it.seq, it.len
                )));
            }
            new_tokens += it.len - cached;
            self.seqs.insert(it.seq, it.len);
        }
        Ok(BackendStep {
            tokens: vec![0; items.len()],
            duration_s: self.profile.prefill_time(new_tokens),
        })
    }

    fn decode(&mut self, items: &[DecodeItem], occupancy_bytes: u64) -> Result<BackendStep> {
        for it in items {
            match self.seqs.get_mut(&it.seq) {
                Some(n) => *n += 1,
                None => {
                    return Err(EngineError::State(format!(
                        "decode of unknown sequence {}",
                        it.seq
                    )))
                }
            }
        }
        Ok(BackendStep {
            tokens: vec![0; items.len()],
            duration_s: self.profile.step_time(items.len(), occupancy_bytes),
        })
    }

    fn adopt(&mut self, seq: SeqId, cache: ModeledCache) -> Result<usize> {
        self.seqs.insert(seq, cache.tokens);
        Ok(cache.tokens)
    }

    fn take(&mut self, seq: SeqId) -> Option<ModeledCache> {
        self.seqs.remove(&seq).map(|tokens| ModeledCache { tokens })
    }
}
