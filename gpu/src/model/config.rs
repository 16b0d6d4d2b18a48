//! Llama-family hyper-parameters.
//!
//! [`LlamaConfig`] is read from GGUF metadata (`llama.*` keys, see
//! [`crate::model::gguf`]) or built by hand for tests ([`LlamaConfig::tiny`]).
//! It also answers how many bytes of KV cache one token takes: two tensors (K and
//! V) per layer, each `n_kv_heads × head_dim` elements of the KV dtype.

use serde::{Deserialize, Serialize};

/// Element type of a KV cache, for accounting and for export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// 2 bytes per element (the wire format of the PriorityFEC handoff).
    #[default]
    Bf16,
    /// 2 bytes per element.
    F16,
    /// 4 bytes per element (what the CPU backend keeps in memory).
    F32,
}

impl KvDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            KvDtype::Bf16 | KvDtype::F16 => 2,
            KvDtype::F32 => 4,
        }
    }
}

/// Architecture hyper-parameters of a Llama-family decoder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f32,
    pub rms_norm_eps: f64,
    /// Longest context the rotary tables cover.
    pub max_seq_len: usize,
}

impl LlamaConfig {
    /// A 2-layer model small enough for unit tests (vocab of the tiny tokenizer
    /// built by [`crate::model::gguf::tiny_gguf`]).
    pub fn tiny(vocab_size: usize) -> Self {
        LlamaConfig {
            vocab_size,
            hidden_size: 64,
            intermediate_size: 128,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            max_seq_len: 2048,
        }
    }

    /// Query heads per KV head (grouped-query attention).
    pub fn n_rep(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Elements of K (or V) per token per layer.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// KV-cache bytes one token occupies over all layers, K and V.
    pub fn kv_bytes_per_token(&self, dtype: KvDtype) -> u64 {
        (2 * self.n_layers * self.kv_width() * dtype.size()) as u64
    }

    /// Checks internal consistency.
    pub fn validate(&self) -> Result<(), String> {
        if self.n_heads == 0
            || self.n_kv_heads == 0
            || !self.n_heads.is_multiple_of(self.n_kv_heads)
        {
            return Err(format!(
                "head count {} is not a multiple of kv head count {}",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.n_heads * self.head_dim != self.hidden_size {
            return Err(format!(
                "heads {} × head dim {} != hidden size {}",
                self.n_heads, self.head_dim, self.hidden_size
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!("head dim {} is odd", self.head_dim));
        }
        if self.n_layers == 0 || self.vocab_size == 0 {
            return Err("zero layers or empty vocabulary".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bytes_smollm2() {
        let c = LlamaConfig {
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            n_layers: 30,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            rope_theta: 100_000.0,
            rms_norm_eps: 1e-5,
            max_seq_len: 8192,
        };
        // 2 (K,V) × 30 layers × 3 heads × 64 dims × 2 bytes
        assert_eq!(c.kv_bytes_per_token(KvDtype::Bf16), 23_040);
        assert_eq!(c.kv_bytes_per_token(KvDtype::F32), 46_080);
        assert!(c.validate().is_ok());
        assert_eq!(c.n_rep(), 3);
    }
}
