//! The real backend: the candle Llama on CPU or CUDA, wall-clock timed.
//!
//! Each sequence owns a [`SeqKv`]. A prefill call runs all new prompts in one
//! forward pass (prefill weight layout), a decode call runs one token of every
//! running sequence in one forward pass (decode layout); selective batching is in
//! [`crate::model::llama`]. Durations are measured with `Instant` around the
//! forward pass including the argmax readback, which synchronises the device.

use std::collections::HashMap;
use std::time::Instant;

use edgemu_engine::backend::{Backend, BackendStep, DecodeItem, PrefillItem, SeqId};

use crate::error::{GpuError, Result};
use crate::model::{KvDtype, Llama, Phase, SeqInput, SeqKv};

/// Runs the candle model.
pub struct RealBackend {
    model: Llama,
    seqs: HashMap<SeqId, SeqKv>,
    kv_dtype: KvDtype,
    eos: Option<u32>,
    /// Prompts run as decode rows ([`RealBackend::prefill_as_decode`]).
    prefill_as_decode: bool,
}

impl RealBackend {
    /// Wraps a loaded model; `kv_dtype` sets the accounting size per element.
    pub fn new(model: Llama, kv_dtype: KvDtype, eos: Option<u32>) -> Self {
        RealBackend {
            model,
            seqs: HashMap::new(),
            kv_dtype,
            eos,
            prefill_as_decode: false,
        }
    }

    /// Runs every prompt's new tokens as decode rows
    /// ([`Llama::forward_as_decode_from`]) instead of a prefill: the same
    /// arithmetic as feeding them one decode step at a time, as teacher
    /// forcing computes them — what scoring a continuation against teacher
    /// forcing needs. Cheap for the few tokens of a cue on a long cache, slow
    /// for long prompts.
    pub fn prefill_as_decode(mut self, on: bool) -> Self {
        self.prefill_as_decode = on;
        self
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
            .map(|i| (lo + seq.wrapping_mul(7919).wrapping_add(i * 31) % (v - lo).max(1)) as u32)
            .collect()
    }
    /// Returns caches taken out of the table for a step that did not run.
    fn put_back(&mut self, caches: Vec<(SeqId, SeqKv)>) {
        self.seqs.extend(caches);
    }

    /// One forward step over `kvs` (the caches of `ids`, taken out of the
    /// table), timed; every cache goes back into the table whatever the outcome.
    fn run_and_keep(
        &mut self,
        ids: &[SeqId],
        mut kvs: Vec<SeqKv>,
        inputs: &[&[u32]],
        phase: Phase,
    ) -> Result<BackendStep> {
        let t0 = Instant::now();
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .zip(inputs)
            .map(|(kv, t)| SeqInput { tokens: t, kv })
            .collect();
        let res = if phase == Phase::Prefill && self.prefill_as_decode {
            let from: Vec<usize> = inputs.iter().map(|t| t.len().saturating_sub(1)).collect();
            self.model.greedy_as_decode(&mut batch, &from)
        } else {
            self.model.greedy(&mut batch, phase)
        };
        let duration_s = t0.elapsed().as_secs_f64();
        drop(batch);
        self.put_back(ids.iter().copied().zip(kvs).collect());
        Ok(BackendStep {
            tokens: res?,
            duration_s,
        })
    }
}

impl Backend for RealBackend {
    type Cache = SeqKv;
    type Error = GpuError;

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
        let ids: Vec<SeqId> = items.iter().map(|it| it.seq).collect();
        // Which caches came from the table: on an error those go back untouched.
        let mut kvs: Vec<SeqKv> = Vec::with_capacity(items.len());
        let mut existed: Vec<bool> = Vec::with_capacity(items.len());
        let mut failure = None;
        for (it, p) in items.iter().zip(&prompts) {
            match self.seqs.remove(&it.seq) {
                Some(kv) => {
                    let held = kv.len();
                    kvs.push(kv);
                    existed.push(true);
                    if held >= p.len() {
                        failure = Some(GpuError::Engine(format!(
                            "sequence {}: cache holds {held} tokens, prompt has {} — nothing left to prefill",
                            it.seq,
                            p.len()
                        )));
                        break;
                    }
                }
                None => match self.model.new_kv(p.len() + 64) {
                    Ok(kv) => {
                        kvs.push(kv);
                        existed.push(false);
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                },
            }
        }
        if let Some(e) = failure {
            let back = ids
                .iter()
                .copied()
                .zip(kvs)
                .zip(existed)
                .filter_map(|(c, old)| old.then_some(c))
                .collect();
            self.put_back(back);
            return Err(e);
        }
        let inputs: Vec<&[u32]> = kvs
            .iter()
            .zip(&prompts)
            .map(|(kv, p)| &p[kv.len()..])
            .collect();
        self.run_and_keep(&ids, kvs, &inputs, Phase::Prefill)
    }

    fn decode(&mut self, items: &[DecodeItem], _occupancy_bytes: u64) -> Result<BackendStep> {
        if items.is_empty() {
            return Ok(BackendStep {
                tokens: vec![],
                duration_s: 0.0,
            });
        }
        let ids: Vec<SeqId> = items.iter().map(|it| it.seq).collect();
        let mut kvs = Vec::with_capacity(items.len());
        for it in items {
            match self.seqs.remove(&it.seq) {
                Some(kv) => kvs.push(kv),
                None => {
                    self.put_back(ids.iter().copied().zip(kvs).collect());
                    return Err(GpuError::Engine(format!(
                        "decode of unknown sequence {}",
                        it.seq
                    )));
                }
            }
        }
        let inputs: Vec<&[u32]> = items
            .iter()
            .map(|i| std::slice::from_ref(&i.token))
            .collect();
        self.run_and_keep(&ids, kvs, &inputs, Phase::Decode)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{load_tiny, WeightLayout};
    use candle_core::Device;

    fn backend() -> RealBackend {
        let lm = load_tiny(
            7,
            &Device::Cpu,
            Some(WeightLayout::for_device(&Device::Cpu)),
        )
        .unwrap();
        RealBackend::new(lm.model, KvDtype::F32, None)
    }

    #[test]
    fn a_refused_step_keeps_every_cache() {
        let mut be = backend();
        let p1: Vec<u32> = (3..13).collect();
        let p2: Vec<u32> = (20..25).collect();
        be.prefill(&[PrefillItem {
            seq: 1,
            tokens: Some(&p1),
            len: p1.len(),
        }])
        .unwrap();
        be.prefill(&[PrefillItem {
            seq: 2,
            tokens: Some(&p2),
            len: p2.len(),
        }])
        .unwrap();
        let (l1, l2) = (be.cache(1).unwrap().len(), be.cache(2).unwrap().len());
        // Sequence 2's cache already covers its prompt: the whole step is refused.
        let e = be.prefill(&[
            PrefillItem {
                seq: 1,
                tokens: Some(&[p1.clone(), vec![40, 41]].concat()),
                len: 12,
            },
            PrefillItem {
                seq: 2,
                tokens: Some(&p2),
                len: p2.len(),
            },
        ]);
        assert!(e.is_err());
        assert_eq!(be.cache(1).map(SeqKv::len), Some(l1));
        assert_eq!(be.cache(2).map(SeqKv::len), Some(l2));
        // A decode naming an unknown sequence keeps the known ones too.
        let e = be.decode(
            &[
                DecodeItem { seq: 1, token: 5 },
                DecodeItem { seq: 9, token: 5 },
            ],
            0,
        );
        assert!(e.is_err());
        assert_eq!(be.cache(1).map(SeqKv::len), Some(l1));
    }
}
