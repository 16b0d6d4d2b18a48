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
//! ChatML `<|im_end|>\n<|im_start|>assistant\n`, [`chatml_cue`]); only the cue
//! runs, as decode rows ([`Llama::forward_as_decode_from`]: each cue token with
//! the arithmetic of one decode step, the rows of all handoffs in one pass), so
//! free-running decoding, teacher forcing and the reference share it bit for
//! bit. The reference is the greedy continuation decoded from the *full*
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
use std::time::Instant;

use edgemu_stats::cpu::CpuClock;

use candle_core::Device;
use rayon::prelude::*;
use serde::Serialize;

use edgemu_engine::batch::{BatchEngine, EngineConfig, Request};
use edgemu_tokenizer::Tokenizer;

use crate::backend::RealBackend;
use crate::error::{GpuError, Result};
use crate::kv_transfer::{assemble, BlockBytes, KvBlock, MissingRows};
use crate::model::config::{KvDtype, LlamaConfig};
use crate::model::kv::{KvBase, SeqKv};
use crate::model::llama::{argmax_rows, JoinRows, Llama, SeqInput};

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
}

/// Rebuilds a cache of `n_tokens` tokens from partial BF16 blocks (module docs).
pub fn rebuild(
    config: &LlamaConfig,
    device: &Device,
    n_tokens: usize,
    blocks: &[PartialBlock],
    mode: MissingRows,
) -> Result<SeqKv> {
    rebuild_on(config, device, n_tokens, blocks, mode, None)
}

/// [`rebuild`], with the rows that come out equal to `base`'s (the full cache
/// of the same context, [`SeqKv::kv_base`]) read from `base` by the CPU
/// attention kernels: the same values, so the same results, while a batch of
/// handoffs of one context reads the context's rows once (see [`crate::model::kv`]).
pub fn rebuild_on(
    config: &LlamaConfig,
    device: &Device,
    n_tokens: usize,
    blocks: &[PartialBlock],
    mode: MissingRows,
    base: Option<&KvBase>,
) -> Result<SeqKv> {
    rebuild_arrived(config, device, n_tokens, blocks, None, mode, base)
}

/// [`rebuild_on`], with `arrived[i]` instead of `blocks[i].present` when
/// given (one entry per block): what a transport outcome says arrived of a
/// context's blocks, without a copy of their bytes per outcome.
fn rebuild_arrived(
    config: &LlamaConfig,
    device: &Device,
    n_tokens: usize,
    blocks: &[PartialBlock],
    arrived_override: Option<&[Vec<Range<usize>>]>,
    mode: MissingRows,
    base: Option<&KvBase>,
) -> Result<SeqKv> {
    if let Some(a) = arrived_override {
        if a.len() != blocks.len() {
            return Err(GpuError::KvTransfer(format!(
                "{} arrival lists for {} blocks",
                a.len(),
                blocks.len()
            )));
        }
    }
    let (nh, hd) = (config.n_kv_heads, config.head_dim);
    let esz = KvDtype::Bf16.size();
    let mut arrived = Vec::with_capacity(blocks.len());
    for (bi, b) in blocks.iter().enumerate() {
        let tokens = format!("{}..{}", b.start, b.start.saturating_add(b.len));
        let expected = nh
            .checked_mul(b.len)
            .and_then(|x| x.checked_mul(hd * esz))
            .ok_or_else(|| {
                GpuError::KvTransfer(format!("partial block {bi}: {} tokens overflow", b.len))
            })?;
        if b.k.len() != expected || b.v.len() != expected {
            return Err(GpuError::KvTransfer(format!(
                "partial block {bi} (layer {}, tokens {tokens}): {} / {} bytes of K / V, expected {expected}",
                b.layer,
                b.k.len(),
                b.v.len()
            )));
        }
        // `expected` is the length of a buffer, so `2 * expected` cannot overflow.
        let present = arrived_override.map_or(&b.present, |a| &a[bi]);
        if let Some(r) = present
            .iter()
            .find(|r| r.start > r.end || r.end > 2 * expected)
        {
            return Err(GpuError::KvTransfer(format!(
                "partial block {bi}: present range {r:?} outside 0..{}",
                2 * expected
            )));
        }
        arrived.push(merged(present));
    }
    let views = blocks.iter().zip(&arrived).map(|(b, got)| BlockBytes {
        layer: b.layer,
        start: b.start,
        len: b.len,
        n_kv_heads: nh,
        head_dim: hd,
        dtype: KvDtype::Bf16,
        k: &b.k,
        v: &b.v,
        arrived: Some(got.as_slice()),
    });
    assemble(config, device, n_tokens, views, None, mode, base)
}

/// `ranges` sorted and merged: no two overlap or touch, none empty.
fn merged(ranges: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut sorted: Vec<Range<usize>> =
        ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    sorted.sort_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
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
    /// When given, what arrived of each of `blocks` (one list per block, as
    /// [`PartialBlock::present`]) in place of their own `present`: e.g. the
    /// complete blocks of a context shared by all of its handoffs.
    pub arrived: Option<&'a [Vec<Range<usize>>]>,
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

impl EvalStats {
    /// Adds `other`'s times and counts.
    pub fn add(&mut self, other: &EvalStats) {
        self.rebuild_cpu_s += other.rebuild_cpu_s;
        self.cue_cpu_s += other.cue_cpu_s;
        self.forced_cpu_s += other.forced_cpu_s;
        self.free_cpu_s += other.free_cpu_s;
        self.handoffs += other.handoffs;
        self.rebuild_s += other.rebuild_s;
        self.cue_s += other.cue_s;
        self.forced_s += other.forced_s;
        self.free_s += other.free_s;
        self.forced_rows += other.forced_rows;
        self.free_tokens += other.free_tokens;
        self.forward_calls += other.forward_calls;
        self.forward_rows += other.forward_rows;
        self.joined_layer_rows_skipped += other.joined_layer_rows_skipped;
    }
}

/// Wall and CPU time since it was started.
struct Stopwatch(Instant, f64, CpuClock);

impl Stopwatch {
    fn start(clock: &CpuClock) -> Self {
        Stopwatch(Instant::now(), clock.seconds(), clock.clone())
    }

    /// Adds the wall and CPU seconds since the start to `wall` and `cpu`.
    fn add(&self, wall: &mut f64, cpu: &mut f64) {
        *wall += self.0.elapsed().as_secs_f64();
        *cpu += self.2.seconds() - self.1;
    }
}

/// Where an evaluator's time went (wall seconds, and CPU seconds of the whole
/// process as `*_cpu_s`, summed over calls) and how much it computed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EvalStats {
    pub rebuild_cpu_s: f64,
    pub cue_cpu_s: f64,
    pub forced_cpu_s: f64,
    pub free_cpu_s: f64,
    /// Handoffs scored.
    pub handoffs: u64,
    /// Rebuilding caches from partial blocks (import to F32).
    pub rebuild_s: f64,
    /// Running the cue on the rebuilt caches (the stepwise path and
    /// [`QualityEvaluator::continuations`]; [`QualityEvaluator::evaluate`] runs
    /// the cue's rows in its teacher-forced pass and counts them there).
    pub cue_s: f64,
    /// Teacher-forced positions (and the cue's rows): one forward of every position
    /// ([`QualityEvaluator::evaluate`]), or one decode step per position
    /// ([`QualityEvaluator::evaluate_stepwise`]).
    pub forced_s: f64,
    /// Free-running decode steps (after the divergence point in
    /// [`QualityEvaluator::evaluate`]; all of them in the stepwise path).
    pub free_s: f64,
    /// Teacher-forced rows computed (with the cue's rows in the fast path).
    pub forced_rows: u64,
    /// Free-running tokens decoded one step at a time.
    pub free_tokens: u64,
    /// Forward calls and the rows they carried (mean batch = rows / calls).
    pub forward_calls: u64,
    pub forward_rows: u64,
    /// Layer passes of teacher-forced rows not computed: layers below a
    /// handoff's first damaged one, where its rows are the recorded
    /// reference's (type docs of [`QualityEvaluator`]).
    pub joined_layer_rows_skipped: u64,
}

/// Decodes from rebuilt caches in batches on the real (or tiny) model and
/// scores them against references (module docs).
///
/// **How [`QualityEvaluator::evaluate`] saves work without changing a figure.**
/// Free-running greedy decoding from a cache feeds back its own argmax; as long
/// as that argmax equals the reference token, its input is the reference token,
/// i.e. exactly the teacher-forced input. So the free-running continuation
/// equals the reference up to and including the first teacher-forced
/// disagreement `j` (where it takes the teacher-forced argmax), and only the
/// tokens after `j` need their own decode steps. All teacher-forced positions
/// of a handoff run as one forward ([`Llama::forward_rows_as_decode`], bit for
/// bit the decode steps), then the cache is cut back to `j` and decoding goes
/// on, batched over the handoffs still running. Each cache is rebuilt once.
/// [`QualityEvaluator::evaluate_stepwise`] is the direct computation (engine
/// continuation, then one forward per forced position) and the test oracle:
/// both give the same tokens and scores bit for bit on the CPU.
///
/// **Layers below the damage.** With a base ([`QualityEvaluator::set_base`])
/// on the CPU, the teacher-forced pass of the full cache is run once per
/// reference and its hidden states recorded; a handoff whose cache equals the
/// base in every layer below `ℓ` feeds the same tokens at the same positions,
/// so its rows there are the recorded ones bit for bit, and it joins the pass
/// at layer `ℓ` ([`Llama::forward_as_decode_joining`]).
pub struct QualityEvaluator {
    engine: BatchEngine<RealBackend>,
    next_id: u64,
    decode_len: usize,
    stats: EvalStats,
    /// Rows equal to this base are read from it ([`QualityEvaluator::set_base`]).
    base: Option<KvBase>,
    /// The full cache the base came from, until a teacher-forced pass is
    /// recorded on it.
    full: Option<SeqKv>,
    /// The full cache's recorded teacher-forced pass.
    recorded: Option<RecordedPass>,
    /// What the `*_cpu_s` figures count.
    cpu: CpuClock,
}

/// The teacher-forced pass of a base's full cache
/// ([`Llama::forward_as_decode_recording`]).
struct RecordedPass {
    tokens: Vec<u32>,
    hidden: Vec<Vec<f32>>,
    /// The full cache holding the pass's rows after the context.
    kv: SeqKv,
}

impl QualityEvaluator {
    /// `decode_len` tokens per handoff (32 in the paper), up to `max_batch`
    /// handoffs per engine iteration.
    pub fn new(model: Llama, decode_len: usize, max_batch: usize) -> Self {
        let engine = BatchEngine::new(
            // The cue runs as decode rows, as teacher forcing runs it.
            RealBackend::new(model, KvDtype::Bf16, None).prefill_as_decode(true),
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
            stats: EvalStats::default(),
            base: None,
            full: None,
            recorded: None,
            cpu: CpuClock::Process,
        }
    }

    /// Counts CPU time on `clock` (the process's by default).
    pub fn with_cpu_clock(mut self, clock: CpuClock) -> Self {
        self.cpu = clock;
        self
    }

    /// Rebuilds the caches of the cases that follow on the cache of `full`
    /// ([`rebuild_on`]): the handoff of their context with every block
    /// complete ([`PartialBlock::complete`]). Only rows bit for bit equal to
    /// the base's are read from it, so a base of another context costs time,
    /// never a result. `None` stops sharing.
    pub fn set_base(&mut self, full: Option<&HandoffCase<'_>>) -> Result<()> {
        self.base = None;
        self.full = None;
        self.recorded = None;
        if let Some(case) = full {
            let t0 = Stopwatch::start(&self.cpu);
            let kv = rebuild_arrived(
                self.model().config(),
                self.model().device(),
                case.n_tokens,
                case.blocks,
                case.arrived,
                case.mode,
                None,
            )?;
            self.base = kv.kv_base();
            if self.base.is_some() && matches!(self.model().device(), Device::Cpu) {
                self.full = Some(kv);
            }
            t0.add(&mut self.stats.rebuild_s, &mut self.stats.rebuild_cpu_s);
        }
        Ok(())
    }

    fn model(&self) -> &Llama {
        self.engine.backend().model()
    }

    /// Time and work so far.
    pub fn stats(&self) -> &EvalStats {
        &self.stats
    }

    /// Time and work since the last call (or the start); starts counting anew.
    pub fn take_stats(&mut self) -> EvalStats {
        std::mem::take(&mut self.stats)
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

    fn check_refs(cases: &[HandoffCase<'_>], references: &[Vec<u32>]) -> Result<()> {
        if cases.len() != references.len() {
            return Err(GpuError::Engine(format!(
                "{} handoffs but {} references",
                cases.len(),
                references.len()
            )));
        }
        Ok(())
    }

    fn rebuild_all(&mut self, cases: &[HandoffCase<'_>]) -> Result<Vec<SeqKv>> {
        let t0 = Stopwatch::start(&self.cpu);
        let cfg = self.model().config().clone();
        for case in cases {
            self.check(case)?;
        }
        // Each cache is rebuilt on its own (same result in any order); one
        // task per case keeps both cores busy.
        let device = self.model().device();
        let base = self.base.as_ref();
        let kvs = cases
            .par_iter()
            .map(|case| {
                rebuild_arrived(
                    &cfg,
                    device,
                    case.n_tokens,
                    case.blocks,
                    case.arrived,
                    case.mode,
                    base,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        t0.add(&mut self.stats.rebuild_s, &mut self.stats.rebuild_cpu_s);
        Ok(kvs)
    }

    /// Runs `batch` as decode rows (one decode step per sequence when each
    /// has one token) and returns the argmax of the rows from `from[s]` on in
    /// each sequence `s` ([`Llama::forward_as_decode_from`]; `None`: its last
    /// row), counting the call and its rows.
    fn forward(&mut self, batch: &mut [SeqInput<'_>], from: Option<&[usize]>) -> Result<Vec<u32>> {
        self.forward_joining(batch, from, None)
    }

    /// [`QualityEvaluator::forward`], sequence `s` joining the recorded pass
    /// at layer `join[s]` ([`Llama::forward_as_decode_joining`]).
    fn forward_joining(
        &mut self,
        batch: &mut [SeqInput<'_>],
        from: Option<&[usize]>,
        join: Option<&[usize]>,
    ) -> Result<Vec<u32>> {
        self.stats.forward_calls += 1;
        self.stats.forward_rows += batch.iter().map(|s| s.tokens.len() as u64).sum::<u64>();
        let last: Vec<usize>;
        let from = match from {
            Some(f) => f,
            None => {
                last = batch
                    .iter()
                    .map(|s| s.tokens.len().saturating_sub(1))
                    .collect();
                &last
            }
        };
        let logits = match (join, self.recorded.as_ref()) {
            (None, _) => self.model().forward_as_decode_from(batch, from)?,
            (Some(join), Some(rec)) => {
                self.stats.joined_layer_rows_skipped += batch
                    .iter()
                    .zip(join)
                    .map(|(s, &j)| (j * s.tokens.len()) as u64)
                    .sum::<u64>();
                let rows = JoinRows {
                    tokens: &rec.tokens,
                    hidden: &rec.hidden,
                    kv: &rec.kv,
                    at: rec.kv.len().saturating_sub(rec.tokens.len()),
                };
                self.model()
                    .forward_as_decode_joining(batch, from, join, &rows)?
            }
            (Some(_), None) => {
                return Err(GpuError::Engine("no recorded pass to join".into()));
            }
        };
        argmax_rows(&logits, "argmax")
    }

    /// Greedy continuations (`decode_len` tokens) from each case's rebuilt cache,
    /// all decoded together through the engine.
    pub fn continuations(&mut self, cases: &[HandoffCase<'_>]) -> Result<Vec<Vec<u32>>> {
        let kvs = self.rebuild_all(cases)?;
        let mut ids = Vec::with_capacity(cases.len());
        for (case, kv) in cases.iter().zip(kvs) {
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
        let t0 = Stopwatch::start(&self.cpu);
        let steps = self.engine.run_to_idle(0)?;
        // The engine times its prefill and decode parts; the CPU time of the
        // whole run is split between them in proportion.
        let (mut wall, mut cpu) = (0.0, 0.0);
        t0.add(&mut wall, &mut cpu);
        let prefill: f64 = steps.iter().map(|s| s.prefill_s()).sum();
        let share = if wall > 0.0 { prefill / wall } else { 0.0 };
        self.stats.cue_cpu_s += cpu * share;
        self.stats.free_cpu_s += cpu * (1.0 - share);
        for step in steps {
            self.stats.cue_s += step.prefill_s();
            self.stats.free_s += step.decode_s();
            if step.decode_batch > 0 {
                self.stats.forward_calls += 1;
                self.stats.forward_rows += step.decode_batch as u64;
                self.stats.free_tokens += step.decode_batch as u64;
            }
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
    /// reference continuation (one batched forward of every position).
    pub fn teacher_forced_top1(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<f64>> {
        Self::check_refs(cases, references)?;
        if cases.is_empty() {
            return Ok(vec![]);
        }
        let mut kvs = self.rebuild_all(cases)?;
        let forced = self.forced_argmax(cases, references, &mut kvs)?;
        Ok(forced
            .iter()
            .zip(references)
            .map(|(a, r)| top1_of(a, r))
            .collect())
    }

    /// The argmax at every teacher-forced position of each case, from one
    /// forward of the cue and the reference tokens `0..len-1` as decode rows
    /// ([`Llama::forward_as_decode_from`]): position 0 is the cue's last row,
    /// positions `1..len` the reference's rows. Leaves each cache holding the
    /// cue and the forced tokens.
    fn forced_argmax(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
        kvs: &mut [SeqKv],
    ) -> Result<Vec<Vec<u32>>> {
        let t0 = Stopwatch::start(&self.cpu);
        let inputs: Vec<Vec<u32>> = cases
            .iter()
            .zip(references)
            .map(|(c, r)| {
                let forced = &r[..r.len().saturating_sub(1)];
                c.prompt[c.n_tokens..]
                    .iter()
                    .chain(forced)
                    .copied()
                    .collect()
            })
            .collect();
        let from: Vec<usize> = cases
            .iter()
            .map(|c| c.prompt.len() - c.n_tokens - 1)
            .collect();
        self.stats.forced_rows += inputs.iter().map(|t| t.len() as u64).sum::<u64>();
        // In order of the layer each case joins the recorded pass at (all
        // at 0 without one); results in the cases' order.
        let join = self.joins(cases, &inputs, &from, kvs)?;
        let mut order: Vec<usize> = (0..kvs.len()).collect();
        if let Some(j) = &join {
            order.sort_by_key(|&i| j[i]);
        }
        let mut slots: Vec<Option<&mut SeqKv>> = kvs.iter_mut().map(Some).collect();
        let mut batch: Vec<SeqInput<'_>> = Vec::with_capacity(order.len());
        for &i in &order {
            let kv = slots[i]
                .take()
                .ok_or_else(|| GpuError::Engine("a case twice in one pass".into()))?;
            batch.push(SeqInput {
                tokens: &inputs[i],
                kv,
            });
        }
        let sorted_from: Vec<usize> = order.iter().map(|&i| from[i]).collect();
        let sorted_join: Option<Vec<usize>> = join.map(|j| order.iter().map(|&i| j[i]).collect());
        let argmax =
            self.forward_joining(&mut batch, Some(&sorted_from), sorted_join.as_deref())?;
        let mut out = vec![Vec::new(); order.len()];
        let mut at = 0;
        for &i in &order {
            let n = inputs[i].len() - from[i];
            out[i] = argmax[at..at + n].to_vec();
            at += n;
        }
        t0.add(&mut self.stats.forced_s, &mut self.stats.forced_cpu_s);
        Ok(out)
    }

    /// The layer each case's teacher-forced rows join the recorded pass at
    /// (type docs), recording it first if needed; `None` where they cannot
    /// (no base, another device, cases of other tokens).
    fn joins(
        &mut self,
        cases: &[HandoffCase<'_>],
        inputs: &[Vec<u32>],
        from: &[usize],
        kvs: &[SeqKv],
    ) -> Result<Option<Vec<usize>>> {
        let Some(base) = self.base.as_ref() else {
            return Ok(None);
        };
        let (Some(tokens), Some(from0)) = (inputs.first(), from.first()) else {
            return Ok(None);
        };
        let n = base.tokens();
        if inputs.iter().any(|t| t != tokens) || cases.iter().any(|c| c.n_tokens != n) {
            return Ok(None);
        }
        if self.recorded.as_ref().is_none_or(|r| &r.tokens != tokens) {
            // The full cache, or an earlier recording's cut back to the context.
            let kv = match self.recorded.take() {
                Some(r) => Some(r.kv),
                None => self.full.take(),
            };
            let Some(mut kv) = kv else {
                return Ok(None);
            };
            kv.truncate(n);
            if kv.len() != n {
                return Ok(None);
            }
            let mut batch = [SeqInput {
                tokens,
                kv: &mut kv,
            }];
            self.stats.forward_calls += 1;
            self.stats.forward_rows += tokens.len() as u64;
            let (_, hidden) = self
                .model()
                .forward_as_decode_recording(&mut batch, &[*from0])?;
            self.recorded = Some(RecordedPass {
                tokens: tokens.clone(),
                hidden,
                kv,
            });
        }
        Ok(Some(
            kvs.iter()
                .map(|kv| kv.first_layer_off_base().unwrap_or(0))
                .collect(),
        ))
    }

    /// F1 and top-1 of each case against its reference continuation (decoded
    /// from the same prompt with every block complete, e.g. by
    /// [`QualityEvaluator::continuations`] on [`PartialBlock::complete`] blocks).
    /// Teacher forcing first, free-running only past the first disagreement
    /// (type docs); the same results as [`QualityEvaluator::evaluate_stepwise`].
    pub fn evaluate(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<Quality>> {
        Self::check_refs(cases, references)?;
        if self.decode_len == 0 {
            return Err(GpuError::Engine(
                "handoff quality with 0 decoded tokens".into(),
            ));
        }
        if cases.is_empty() {
            return Ok(vec![]);
        }
        self.stats.handoffs += cases.len() as u64;
        let mut kvs = self.rebuild_all(cases)?;
        let forced = self.forced_argmax(cases, references, &mut kvs)?;
        let t0 = Stopwatch::start(&self.cpu);
        let d = self.decode_len;
        // Free-running tokens known from teacher forcing, and the cache cut back
        // to just before the last of them (its next input).
        let mut tokens: Vec<Vec<u32>> = Vec::with_capacity(cases.len());
        for (i, (a, r)) in forced.iter().zip(references).enumerate() {
            let known = r.len().min(d);
            let p = match (0..known).find(|&j| a[j] != r[j]) {
                Some(j) => j + 1,
                None => known.max(1),
            };
            let mut f: Vec<u32> = r[..p - 1].to_vec();
            f.push(a[p - 1]);
            kvs[i].truncate(cases[i].prompt.len() + p - 1);
            tokens.push(f);
        }
        loop {
            let mut active = Vec::new();
            let mut inputs = Vec::new();
            for (i, f) in tokens.iter().enumerate() {
                if f.len() < d {
                    active.push(i);
                    inputs.push(f[f.len() - 1]);
                }
            }
            if active.is_empty() {
                break;
            }
            let mut batch: Vec<SeqInput<'_>> = Vec::with_capacity(active.len());
            let mut next = 0;
            for (i, kv) in kvs.iter_mut().enumerate() {
                if active.get(next) == Some(&i) {
                    batch.push(SeqInput {
                        tokens: std::slice::from_ref(&inputs[next]),
                        kv,
                    });
                    next += 1;
                }
            }
            let out = self.forward(&mut batch, None)?;
            self.stats.free_tokens += out.len() as u64;
            for (&i, t) in active.iter().zip(out) {
                tokens[i].push(t);
            }
        }
        t0.add(&mut self.stats.free_s, &mut self.stats.free_cpu_s);
        Ok(tokens
            .into_iter()
            .zip(&forced)
            .zip(references)
            .map(|((tokens, a), r)| Quality {
                f1: token_f1(r, &tokens),
                top1: top1_of(a, r),
                tokens,
            })
            .collect())
    }

    /// The direct computation of [`QualityEvaluator::evaluate`]: each case's
    /// free-running continuation through the engine, then teacher forcing one
    /// decode step per position for all cases. Slower; kept as the oracle the
    /// fast path is tested against.
    pub fn evaluate_stepwise(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<Quality>> {
        Self::check_refs(cases, references)?;
        self.stats.handoffs += cases.len() as u64;
        let tokens = self.continuations(cases)?;
        let top1 = self.teacher_forced_top1_stepwise(cases, references)?;
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

    /// Teacher-forced top-1, one batched decode step per position.
    fn teacher_forced_top1_stepwise(
        &mut self,
        cases: &[HandoffCase<'_>],
        references: &[Vec<u32>],
    ) -> Result<Vec<f64>> {
        if cases.is_empty() {
            return Ok(vec![]);
        }
        let mut kvs = self.rebuild_all(cases)?;
        let steps = references.iter().map(Vec::len).max().unwrap_or(0);
        let mut hits = vec![0usize; cases.len()];
        for step in 0..steps {
            let t0 = Stopwatch::start(&self.cpu);
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
            // Step 0 runs the cue as decode rows, as the engine runs it here.
            let argmax = self.forward(&mut batch, None)?;
            for (&i, &a) in active.iter().zip(&argmax) {
                if a == references[i][step] {
                    hits[i] += 1;
                }
            }
            if step == 0 {
                t0.add(&mut self.stats.cue_s, &mut self.stats.cue_cpu_s);
            } else {
                t0.add(&mut self.stats.forced_s, &mut self.stats.forced_cpu_s);
                self.stats.forced_rows += active.len() as u64;
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
}

/// Fraction of positions where the forced argmax equals the reference (1 for
/// an empty reference).
fn top1_of(argmax: &[u32], reference: &[u32]) -> f64 {
    if reference.is_empty() {
        return 1.0;
    }
    let hits = argmax.iter().zip(reference).filter(|(a, r)| a == r).count();
    hits as f64 / reference.len() as f64
}

#[cfg(test)]
mod tests;
