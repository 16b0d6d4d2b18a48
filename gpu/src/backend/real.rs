//! The real backend: the candle Llama on CPU or CUDA, wall-clock timed.
//!
//! Each sequence owns a [`SeqKv`]. A prefill call runs all new prompts in one
//! forward pass (prefill weight layout), a decode call runs one token of every
//! running sequence in one forward pass (decode layout); selective batching is in
//! [`crate::model::llama`]. Durations are measured with `Instant` around the
//! forward pass including the argmax readback, which synchronises the device.

use std::collections::HashMap;
use std::time::Instant;

use crate::backend::{Backend, BackendStep, DecodeItem, PrefillItem, SeqId};
use crate::error::{GpuError, Result};
use crate::model::{KvDtype, Llama, Phase, SeqInput, SeqKv};

/// Runs the candle model.
pub struct RealBackend {
    model: Llama,
    seqs: HashMap<SeqId, SeqKv>,
    kv_dtype: KvDtype,
    eos: Option<u32>,
}

impl RealBackend {
    /// Wraps a loaded model; `kv_dtype` sets the accounting size per element.
    pub fn new(model: Llama, kv_dtype: KvDtype, eos: Option<u32>) -> Self {
        RealBackend {
            model,
            seqs: HashMap::new(),
            kv_dtype,
            eos,
        }
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// A live sequence's cache.
    pub fn cache(&self, seq: SeqId) -> Option<&SeqKv> {
        self.seqs.get(&seq)
    }

    /// Number of live sequences.
    pub fn live(&self) -> usize {
        self.seqs.len()
    }

    /// Installs a cache of `len` synthetic tokens (content irrelevant) — used by
    /// the profiler, whose timings depend only on lengths.
    pub fn insert_synthetic(&mut self, seq: SeqId, len: usize) -> Result<()> {
        let mut kv = self.model.new_kv(len + 64)?;
        kv.reserve(len)?;
        kv.advance(len);
        self.seqs.insert(seq, kv);
        Ok(())
    }

    fn synthetic_prompt(&self, seq: SeqId, len: usize) -> Vec<u32> {
        let v = self.model.config().vocab_size as u64;
        let lo = v.min(100);
        (0..len as u64)
            .map(|i| (lo + (seq.wrapping_mul(7919) + i * 31) % (v - lo).max(1)) as u32)
            .collect()
    }
}

impl Backend for RealBackend {
    type Cache = SeqKv;

    fn kv_bytes_per_token(&self) -> u64 {
        self.model.config().kv_bytes_per_token(self.kv_dtype)
    }

    fn eos_token(&self) -> Option<u32> {
        self.eos
    }

    fn prefill(&mut self, items: &[PrefillItem<'_>]) -> Result<BackendStep> {
        if items.is_empty() {
            return Ok(BackendStep {
                tokens: vec![],
                duration_s: 0.0,
            });
        }
        let prompts: Vec<Vec<u32>> = items
            .iter()
            .map(|it| match it.tokens {
                Some(t) => t.to_vec(),
                None => self.synthetic_prompt(it.seq, it.len),
            })
            .collect();
        let mut kvs = Vec::with_capacity(items.len());
        for (it, p) in items.iter().zip(&prompts) {
            let kv = match self.seqs.remove(&it.seq) {
                Some(kv) => kv,
                None => self.model.new_kv(p.len() + 64)?,
            };
            if kv.len() >= p.len() {
                return Err(GpuError::Engine(format!(
                    "sequence {}: cache holds {} tokens, prompt has {} — nothing left to prefill",
                    it.seq,
                    kv.len(),
                    p.len()
                )));
            }
            kvs.push(kv);
        }
        let t0 = Instant::now();
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .zip(&prompts)
            .map(|(kv, p)| {
                let start = kv.len();
                SeqInput {
                    tokens: &p[start..],
                    kv,
                }
            })
            .collect();
        let res = self.model.greedy(&mut batch, Phase::Prefill);
        let duration_s = t0.elapsed().as_secs_f64();
        drop(batch);
        for (it, kv) in items.iter().zip(kvs) {
            self.seqs.insert(it.seq, kv);
        }
        Ok(BackendStep {
            tokens: res?,
            duration_s,
        })
    }

    fn decode(&mut self, items: &[DecodeItem], _occupancy_bytes: u64) -> Result<BackendStep> {
        if items.is_empty() {
            return Ok(BackendStep {
                tokens: vec![],
                duration_s: 0.0,
            });
        }
        let mut kvs = Vec::with_capacity(items.len());
        for it in items {
            let kv = self
                .seqs
                .remove(&it.seq)
                .ok_or_else(|| GpuError::Engine(format!("decode of unknown sequence {}", it.seq)));
            match kv {
                Ok(kv) => kvs.push(kv),
                Err(e) => {
                    for (it, kv) in items.iter().zip(kvs) {
                        self.seqs.insert(it.seq, kv);
                    }
                    return Err(e);
                }
            }
        }
        let toks: Vec<u32> = items.iter().map(|i| i.token).collect();
        let t0 = Instant::now();
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .zip(&toks)
            .map(|(kv, t)| SeqInput {
                tokens: std::slice::from_ref(t),
                kv,
            })
            .collect();
        let res = self.model.greedy(&mut batch, Phase::Decode);
        let duration_s = t0.elapsed().as_secs_f64();
        drop(batch);
        for (it, kv) in items.iter().zip(kvs) {
            self.seqs.insert(it.seq, kv);
        }
        Ok(BackendStep {
            tokens: res?,
            duration_s,
        })
    }

    fn adopt(&mut self, seq: SeqId, cache: SeqKv) -> Result<usize> {
        if cache.n_layers() != self.model.config().n_layers {
            return Err(GpuError::KvTransfer(format!(
                "cache has {} layers, model has {}",
                cache.n_layers(),
                self.model.config().n_layers
            )));
        }
        let n = cache.len();
        self.seqs.insert(seq, cache);
        Ok(n)
    }

    fn take(&mut self, seq: SeqId) -> Option<SeqKv> {
        self.seqs.remove(&seq)
    }
}
