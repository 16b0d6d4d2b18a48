//! The context KV cache of an edge server: reusable prefilled contexts, kept
//! as the BF16 transport blocks a handoff sends (issue 11).
//!
//! A [`moka`] sync cache weighed by bytes (the K and V bytes of every block),
//! capacity from `cluster.toml` (`kv_cache = "256MiB"`). A lookup that finds
//! the context is a hit; otherwise the caller prefills it with the real model
//! ([`export_context_blocks`]) and inserts it. Hits, misses and evictions
//! (entries moka removed for size, including an entry heavier than the whole
//! capacity, which it refuses at once) are counted.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::kv_transfer::{export, KvBlock};
use crate::model::config::KvDtype;
use crate::model::llama::Llama;

/// Tokens per transport block (one layer × 16 consecutive tokens).
pub const BLOCK_TOKENS: usize = 16;

/// One prefilled context: its tokens and its KV as BF16 blocks, layer-major
/// (`layer · n_tokens/16 + token_block`, the transport's block ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextKv {
    pub tokens: Vec<u32>,
    pub blocks: Vec<KvBlock>,
}

impl ContextKv {
    /// K and V bytes of all blocks (the cache weight).
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.payload_bytes() as u64).sum()
    }

    /// Every block's `k‖v`, block after block (the transport's payload).
    pub fn payload(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes() as usize);
        for b in &self.blocks {
            out.extend_from_slice(&b.k);
            out.extend_from_slice(&b.v);
        }
        out
    }
}

/// The cache key of a context: a hash of its tokens.
pub fn context_key(tokens: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tokens.hash(&mut h);
    h.finish()
}

/// Counters of a [`ContextKvCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct KvCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub entries: u64,
    pub bytes: u64,
    pub capacity_bytes: u64,
}

/// Reusable context KV weighed by bytes (module docs).
pub struct ContextKvCache {
    cache: moka::sync::Cache<u64, Arc<ContextKv>>,
    capacity: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: Arc<AtomicU64>,
}

impl std::fmt::Debug for ContextKvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextKvCache")
            .field("stats", &self.stats())
            .finish()
    }
}

impl ContextKvCache {
    pub fn new(capacity_bytes: u64) -> Self {
        let evictions = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&evictions);
        let cache = moka::sync::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_: &u64, v: &Arc<ContextKv>| u32::try_from(v.bytes()).unwrap_or(u32::MAX))
            .eviction_listener(move |_, _, cause| {
                if cause.was_evicted() {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        ContextKvCache {
            cache,
            capacity: capacity_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions,
        }
    }

    /// The context with these tokens, counted as a hit or a miss.
    pub fn get(&self, tokens: &[u32]) -> Option<Arc<ContextKv>> {
        let found = self
            .cache
            .get(&context_key(tokens))
            .filter(|c| c.tokens == tokens);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps a prefilled context (evicting others if it must).
    pub fn insert(&self, kv: Arc<ContextKv>) {
        self.cache.insert(context_key(&kv.tokens), kv);
        self.cache.run_pending_tasks();
    }

    /// The context from the cache, or prefilled with `model` and kept.
    /// Returns it and whether it was a hit.
    pub fn get_or_prefill(&self, model: &Llama, tokens: &[u32]) -> Result<(Arc<ContextKv>, bool)> {
        if let Some(kv) = self.get(tokens) {
            return Ok((kv, true));
        }
        let kv = Arc::new(ContextKv {
            tokens: tokens.to_vec(),
            blocks: export_context_blocks(model, tokens)?,
        });
        self.insert(Arc::clone(&kv));
        Ok((kv, false))
    }

    /// The budget the cache was made with, bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    pub fn stats(&self) -> KvCacheStats {
        self.cache.run_pending_tasks();
        KvCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            entries: self.cache.entry_count(),
            bytes: self.cache.weighted_size(),
            capacity_bytes: self.capacity,
        }
    }
}

/// Prefills `tokens` with `model` and exports its KV as BF16 transport
/// blocks in block-id order (layer-major, 16 tokens each). `tokens.len()`
/// must be a multiple of 16.
pub fn export_context_blocks(model: &Llama, tokens: &[u32]) -> Result<Vec<KvBlock>> {
    if tokens.is_empty() || !tokens.len().is_multiple_of(BLOCK_TOKENS) {
        return Err(crate::GpuError::KvTransfer(format!(
            "a context of {} tokens is not a positive multiple of {BLOCK_TOKENS}",
            tokens.len()
        )));
    }
    let kv = model.prefilled(tokens, tokens.len())?;
    let n_layers = model.config().n_layers;
    let mut blocks = Vec::with_capacity(n_layers * tokens.len() / BLOCK_TOKENS);
    for l in 0..n_layers {
        for s in (0..tokens.len()).step_by(BLOCK_TOKENS) {
            blocks.extend(export(&kv, l..l + 1, s..s + BLOCK_TOKENS, KvDtype::Bf16)?);
        }
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(tokens: Vec<u32>, bytes: usize) -> Arc<ContextKv> {
        Arc::new(ContextKv {
            tokens,
            blocks: vec![KvBlock {
                layer: 0,
                start: 0,
                len: 16,
                n_kv_heads: 1,
                head_dim: bytes / 64,
                dtype: KvDtype::Bf16,
                k: vec![1; bytes / 2],
                v: vec![2; bytes / 2],
            }],
        })
    }

    #[test]
    fn counts_hits_misses_and_size_evictions() {
        let c = ContextKvCache::new(10_000);
        assert!(c.get(&[1, 2]).is_none());
        c.insert(ctx(vec![1, 2], 6_400));
        assert!(c.get(&[1, 2]).is_some());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.evictions), (1, 1, 0));
        assert_eq!(s.bytes, 6_400);
        // A second context does not fit beside the first: one goes.
        c.insert(ctx(vec![3], 6_400));
        let s = c.stats();
        assert_eq!(s.evictions, 1, "{s:?}");
        assert!(s.bytes <= 10_000);
        // Heavier than the whole cache: refused, counted as evicted.
        c.insert(ctx(vec![4], 12_800));
        assert_eq!(c.stats().evictions, 2);
        assert!(c.get(&[4]).is_none());
    }

    #[test]
    fn payload_is_k_then_v_block_after_block() {
        let kv = ctx(vec![1], 128);
        let p = kv.payload();
        assert_eq!(p.len(), 128);
        assert!(p[..64].iter().all(|&b| b == 1) && p[64..].iter().all(|&b| b == 2));
    }
}
