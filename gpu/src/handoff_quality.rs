//! Rebuilding a handed-off KV cache from what arrived, and the task quality of
//! decoding from it.
//!
//! **Input.** The transport's receiver reports, per transport block (one layer ×
//! `len` tokens, BF16), a [`PartialBlock`]: the payload bytes with zeros where
//! nothing arrived and the byte ranges that did arrive, over the block's `k‖v`
//! byte space (`k` first, then `v`; each `[kv_head][token][head_dim]` little-endian
//! BF16, as [`crate::kv_transfer::export`] lays it out).
//!
//! **Rebuild** ([`rebuild`]), two modes ([`MissingRows`]):
//! * `ZeroFill`: a BF16 element is kept only if both of its bytes arrived; any
//!   other element is 0. Every row stays in attention.
//! * `Mask`: a (head, token) row is usable only if all of its K and all of its V
//!   bytes arrived; any other row is masked out of attention (−∞ bias, see
//!   [`crate::kv_transfer`]) while every other token keeps its position.
//!
//! Tokens no block covers count as missing in both modes.
//!
//! **Task quality** ([`QualityEvaluator`]). Agent B's prompt is the handed-off
//! context (whose KV is the rebuilt cache) followed by a short cue (e.g. the
//! ChatML `<|im_end|>\n<|im_start|>assistant\n`, [`chatml_cue`]); only the cue is
//! prefilled. The reference is the greedy continuation decoded from the *full*
//! handed-off cache (every block complete, i.e. the BF16 cache as sent). Two
//! measures, against that reference of `decode_len` tokens (32 by default):
//! * token-level F1 ([`token_f1`]): the free-running greedy continuation from the
//!   rebuilt cache against the reference, as bags of token ids (SQuAD-style
//!   multiset overlap), decoded for many handoffs at once through the
//!   [`BatchEngine`] (`submit_with_cache`);
//! * teacher-forced top-1 agreement: feeding the reference tokens, the fraction of
//!   positions where the rebuilt cache's argmax equals the reference's next token
//!   (one batched forward per position for all handoffs).
//!
//! With the full cache both are exactly 1.

use std::collections::HashMap;
use std::ops::Range;

use candle_core::{DType, Device, D};

use crate::backend::RealBackend;
use crate::engine::{BatchEngine, EngineConfig, Request};
use crate::error::{CandleContext, GpuError, Result};
use crate::kv_transfer::{import, KvBlock, MissingRows, PresenceMask};
use crate::model::config::{KvDtype, LlamaConfig};
use crate::model::kv::SeqKv;
use crate::model::llama::{Llama, Phase, SeqInput};
use crate::tokenizer::Tokenizer;

/// What arrived of one BF16 transport block (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialBlock {
    pub layer: usize,
    /// First token.
    pub start: usize,
    /// Number of tokens.
    pub len: usize,
    /// K bytes, zeros where missing.
    pub k: Vec<u8>,
    /// V bytes, zeros where missing.
    pub v: Vec<u8>,
    /// Byte ranges that arrived, over the `k‖v` byte space (`0..k.len()` is K,
    /// `k.len()..k.len()+v.len()` is V); any order, may overlap.
    pub present: Vec<Range<usize>>,
}

impl PartialBlock {
    /// A block that arrived whole.
    pub fn complete(block: &KvBlock) -> Self {
        PartialBlock {
            layer: block.layer,
            start: block.start,
            len: block.len,
            k: block.k.clone(),
            v: block.v.clone(),
            present: std::iter::once(0..block.k.len() + block.v.len()).collect(),
        }
    }

    /// A block of which nothing arrived (all zeros, no range present).
    pub fn lost(block: &KvBlock) -> Self {
        PartialBlock {
            layer: block.layer,
            start: block.start,
            len: block.len,
            k: vec![0; block.k.len()],
            v: vec![0; block.v.len()],
            present: vec![],
        }
    }

    /// Per byte of `k‖v`: whether it arrived.
    fn arrived(&self) -> Vec<bool> {
        let total = self.k.len() + self.v.len();
        let mut got = vec![false; total];
        for r in &self.present {
            let (s, e) = (r.start.min(total), r.end.min(total));
            if s < e {
                got[s..e].iter_mut().for_each(|b| *b = true);
            }
        }
        got
    }
}

/// Rebuilds a cache of `n_tokens` tokens from partial BF16 blocks (module docs).
pub fn rebuild(
    config: &LlamaConfig,
    device: &Device,
    n_tokens: usize,
    blocks: &[PartialBlock],
    mode: MissingRows,
) -> Result<SeqKv> {
    let (nh, hd) = (config.n_kv_heads, config.head_dim);
    let esz = KvDtype::Bf16.size();
    let mut presence = PresenceMask::all(config.n_layers, nh, n_tokens);
    let mut full = Vec::with_capacity(blocks.len());
    for (bi, b) in blocks.iter().enumerate() {
        let expected = nh * b.len * hd * esz;
        if b.k.len() != expected || b.v.len() != expected {
            return Err(GpuError::KvTransfer(format!(
                "partial block {bi} (layer {}, tokens {}..{}): {} / {} bytes of K / V, expected {expected}",
                b.layer,
                b.start,
                b.start + b.len,
                b.k.len(),
                b.v.len()
            )));
        }
        if let Some(r) = b
            .present
            .iter()
            .find(|r| r.start > r.end || r.end > 2 * expected)
        {
            return Err(GpuError::KvTransfer(format!(
                "partial block {bi}: present range {r:?} outside 0..{}",
                2 * expected
            )));
        }
        let got = b.arrived();
        let mut k = b.k.clone();
        let mut v = b.v.clone();
        match mode {
            MissingRows::ZeroFill => {
                for (half, bytes) in [(0, &mut k), (expected, &mut v)] {
                    for (e, el) in bytes.chunks_exact_mut(esz).enumerate() {
                        let at = half + e * esz;
                        if !got[at..at + esz].iter().all(|&g| g) {
                            el.iter_mut().for_each(|x| *x = 0);
                        }
                    }
                }
            }
            MissingRows::Mask => {
                let row = hd * esz;
                for h in 0..nh {
                    for t in 0..b.len {
                        let off = (h * b.len + t) * row;
                        let whole = got[off..off + row].iter().all(|&g| g)
                            && got[expected + off..expected + off + row].iter().all(|&g| g);
                        if !whole {
                            // Out-of-range rows are rejected by `import` below.
                            presence.set(b.layer, h, b.start + t, false);
                        }
                    }
                }
            }
        }
        full.push(KvBlock {
            layer: b.layer,
            start: b.start,
            len: b.len,
            n_kv_heads: nh,
            head_dim: hd,
            dtype: KvDtype::Bf16,
            k,
            v,
        });
    }
    import(config, device, n_tokens, &full, Some(&presence), mode)
}

/// Token-level F1 of `candidate` against `reference`, as bags of token ids
/// (SQuAD-style multiset overlap). Both empty: 1; one empty: 0.
pub fn token_f1(reference: &[u32], candidate: &[u32]) -> f64 {
    if reference.is_empty() && candidate.is_empty() {
        return 1.0;
    }
    if reference.is_empty() || candidate.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for &t in reference {
        *counts.entry(t).or_default() += 1;
    }
    let mut common = 0usize;
    for t in candidate {
        if let Some(c) = counts.get_mut(t) {
            if *c > 0 {
                *c -= 1;
                common += 1;
            }
        }
    }
    if common == 0 {
        return 0.0;
    }
    let p = common as f64 / candidate.len() as f64;
    let r = common as f64 / reference.len() as f64;
    2.0 * p * r / (p + r)
}

/// The ChatML cue that ends the context's turn and opens an assistant turn.
pub fn chatml_cue(tokenizer: &Tokenizer) -> Vec<u32> {
    tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
}

/// One handoff to score.
#[derive(Debug, Clone)]
pub struct HandoffCase<'a> {
    /// Tokens the handed-off cache covers.
    pub n_tokens: usize,
    /// What arrived.
    pub blocks: &'a [PartialBlock],
    pub mode: MissingRows,
    /// Agent B's prompt: the `n_tokens` context tokens, then the cue (≥ 1 token).
    pub prompt: &'a [u32],
}

/// Task quality of one handoff.
#[derive(Debug, Clone, PartialEq)]
pub struct Quality {
    /// Free-running greedy continuation from the rebuilt cache.
    pub tokens: Vec<u32>,
    pub f1: f64,
    pub top1: f64,
}

/// Decodes from rebuilt caches in batches through a [`BatchEngine`] on the real
/// (or tiny) model and scores them against references (module docs).
pub struct QualityEvaluator {
    engine: BatchEngine<RealBackend>,
    next_id: u64,
    decode_len: usize,
}

impl QualityEvaluator {
    /// `decode_len` tokens per handoff (32 in the paper), up to `max_batch`
    /// handoffs per engine iteration.
    pub fn new(model: Llama, decode_len: usize, max_batch: usize) -> Self {
        let engine = BatchEngine::new(
            RealBackend::new(model, KvDtype::Bf16, None),
            EngineConfig {
                kv_capacity_bytes: u64::MAX / 4,
                max_batch: max_batch.max(1),
                ..EngineConfig::default()
            },
        );
        QualityEvaluator {
            engine,
            next_id: 0,
            decode_len,
        }
    }

    fn model(&self) -> &Llama {
        self.engine.backend().model()
    }

    fn check(&self, case: &HandoffCase<'_>) -> Result<()> {
        if case.prompt.len() <= case.n_tokens {
            return Err(GpuError::Engine(format!(
                "handoff prompt of {} tokens has no cue after the {} cached ones",
                case.prompt.len(),
                case.n_tokens
            )));
        }
        Ok(())
    }

    /// Greedy continuations (`decode_len` tokens) from each case's rebuilt cache,
    /// all decoded together through the engine.
    pub fn continuations(&mut self, cases: &[HandoffCase<'_>]) -> Result<Vec<Vec<u32>>> {
        let mut ids = Vec::with_capacity(cases.len());
        for case in cases {
            self.check(case)?;
            let cfg = self.model().config().clone();
            let kv = rebuild(
                &cfg,
                self.model().device(),
                case.n_tokens,
                case.blocks,
                case.mode,
            )?;
            let id = self.next_id;
            self.next_id += 1;
            self.engine.submit_with_cache(
                Request::with_tokens(id, case.prompt.to_vec(), self.decode_len),
                kv,
                0,
            )?;
            ids.push(id);
        }
        let mut out: HashMap<u64, Vec<u32>> = HashMap::new();
        for step in self.engine.run_to_idle(0)? {
            for f in step.finished {
                out.insert(f.id, f.tokens);
            }
        }
        ids.iter()
            .map(|id| {
                out.remove(id)
                    .ok_or_else(|| GpuError::Engine(format!("handoff request {id} did not finish")))
            })
            .collect()
    }

    /// Teacher-forced top-1 agreement of each case's rebuilt cache with its
    /// reference continuation (one batched forward per position).
    pub fn teacher_forced_top1(
        &self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<f64>> {
        if cases.len() != references.len() {
            return Err(GpuError::Engine(format!(
                "{} handoffs but {} references",
                cases.len(),
                references.len()
            )));
        }
        if cases.is_empty() {
            return Ok(vec![]);
        }
        let model = self.model();
        let cfg = model.config().clone();
        let mut kvs = Vec::with_capacity(cases.len());
        for case in cases {
            self.check(case)?;
            kvs.push(rebuild(
                &cfg,
                model.device(),
                case.n_tokens,
                case.blocks,
                case.mode,
            )?);
        }
        let steps = references.iter().map(Vec::len).max().unwrap_or(0);
        let mut hits = vec![0usize; cases.len()];
        for step in 0..steps {
            // Cases whose reference is shorter drop out.
            let mut active = Vec::with_capacity(cases.len());
            let mut batch: Vec<SeqInput<'_>> = Vec::with_capacity(cases.len());
            for (i, kv) in kvs.iter_mut().enumerate() {
                if step >= references[i].len() {
                    continue;
                }
                let tokens: &[u32] = if step == 0 {
                    &cases[i].prompt[cases[i].n_tokens..]
                } else {
                    std::slice::from_ref(&references[i][step - 1])
                };
                active.push(i);
                batch.push(SeqInput { tokens, kv });
            }
            let phase = if step == 0 {
                Phase::Prefill
            } else {
                Phase::Decode
            };
            let logits = model.forward(&mut batch, phase)?;
            let argmax = logits
                .argmax(D::Minus1)
                .and_then(|t| t.to_dtype(DType::U32))
                .and_then(|t| t.to_vec1::<u32>())
                .ctx("top-1 argmax")?;
            for (&i, &a) in active.iter().zip(&argmax) {
                if a == references[i][step] {
                    hits[i] += 1;
                }
            }
        }
        Ok(hits
            .iter()
            .zip(references)
            .map(|(&h, r)| {
                if r.is_empty() {
                    1.0
                } else {
                    h as f64 / r.len() as f64
                }
            })
            .collect())
    }

    /// F1 and top-1 of each case against its reference continuation (decoded
    /// from the same prompt with every block complete, e.g. by
    /// [`QualityEvaluator::continuations`] on [`PartialBlock::complete`] blocks).
    pub fn evaluate(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<Quality>> {
        let tokens = self.continuations(cases)?;
        let top1 = self.teacher_forced_top1(cases, references)?;
        Ok(tokens
            .into_iter()
            .zip(top1)
            .zip(references)
            .map(|((tokens, top1), r)| Quality {
                f1: token_f1(r, &tokens),
                tokens,
                top1,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
