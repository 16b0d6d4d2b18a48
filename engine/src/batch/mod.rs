//! The iteration-level batching engine (LYREO's DEED scheme, Orca-style).
//!
//! [`BatchEngine`] is a plain state machine driven by
//! [`BatchEngine::submit`]`(req, now_ns)` and [`BatchEngine::step`]`(now_ns)`;
//! it does no I/O and reads no clock (the real backend measures compute time,
//! the modeled one predicts it). Time is integer nanoseconds on the caller's
//! clock, like the rest of the workspace; backend durations (f64 seconds) are
//! rounded to the nearest nanosecond once, where they enter the engine. One
//! step is one iteration:
//!
//! 1. **Admission.** Waiting requests are considered in arrival order; the head
//!    is admitted if its KV reservation `(input + output length) × α` fits in
//!    what the running requests have not reserved, otherwise it and everything
//!    behind it wait (no overtaking). In [`BatchMode::Static`] admission happens
//!    only when the server is empty (the LYREO static-batching baseline).
//! 2. **Prefill.** All newly admitted requests are prefilled together in one
//!    backend call; each gets its first output token.
//! 3. **Decode.** Every request that was already running produces one token in
//!    one batched backend call (selective batching; per-sequence attention).
//! 4. **Accounting.** The ledger records the occupancy after this iteration's
//!    tokens and the iteration's duration `τ = prefill + decode`.
//! 5. **Exit.** Requests that reached their output length (or EOS, if asked)
//!    leave at the end of the iteration and free their KV. In static mode they
//!    stay, holding their KV, until the longest member of the batch is done.
//!
//! # Failures
//!
//! A backend error never loses a request or its KV reservation: when prefill
//! fails the newly admitted requests are released (KV and backend state) and
//! reported in the error; when decode fails after a successful prefill, the
//! freshly prefilled requests are kept running (their first token is in) and
//! the already-running ones keep their state, so the caller may step again or
//! [`BatchEngine::abort`] them. A backend that returns a different number of
//! tokens than it was asked for is an error, never a silent truncation.

mod generated;
pub mod request;

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

pub use request::{Finished, Prompt, Request, RequestId};

use crate::backend::{Backend, DecodeItem, PrefillItem};
use crate::error::{EngineError, Result};
use crate::ledger::{KvLedger, LedgerSnapshot, WindowStats};
use generated::GeneratedTokens;
use rustc_hash::FxHashSet;

/// Continuous (iteration-level) or static batching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BatchMode {
    #[default]
    Continuous,
    Static,
}

/// Engine settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// KV capacity `M_s` in bytes.
    pub kv_capacity_bytes: u64,
    /// Most sequences in one batch.
    pub max_batch: usize,
    pub mode: BatchMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kv_capacity_bytes: 4 * 1024 * 1024 * 1024,
            max_batch: 256,
            mode: BatchMode::Continuous,
        }
    }
}

struct Waiting<C> {
    req: Request,
    submitted_at: u64,
    cache: Option<C>,
}

struct Running {
    req: Request,
    generated: GeneratedTokens,
    submitted_at: u64,
    admitted_at: u64,
    first_token_at: u64,
    done_at: Option<u64>,
    hit_eos: bool,
}

impl Running {
    /// Tokens of KV the request holds: its prompt and what it generated.
    fn held_tokens(&self) -> u64 {
        (self.req.input_len() + self.generated.len()) as u64
    }

    /// After a token: marks the request done at `end` if it reached its
    /// output length or, when it stops there, `eos`; returns whether it did.
    fn finish_if_done(&mut self, end: u64, eos: Option<u32>) -> bool {
        let eos_hit = self.req.stop_at_eos && eos.is_some() && Some(self.generated.last()) == eos;
        let done = self.generated.len() >= self.req.output_len || eos_hit;
        if done {
            self.done_at = Some(end);
            self.hit_eos = eos_hit && self.generated.len() < self.req.output_len;
        }
        done
    }
}

/// Tokens of work an engine holds ([`BatchEngine::pending_work`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingWork {
    /// Prompt tokens of requests not yet admitted.
    pub prefill_tokens: u64,
    /// Output tokens not yet generated, waiting and running requests.
    pub decode_tokens: u64,
}

/// Seconds (a backend's measured or modeled duration) to whole nanoseconds;
/// negative or non-finite durations count as zero.
pub fn secs_to_ns(s: f64) -> u64 {
    if s.is_finite() && s > 0.0 {
        (s * 1e9).round() as u64
    } else {
        0
    }
}

/// Nanoseconds to seconds (for statistics and display).
pub fn ns_to_secs(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

/// What one iteration did.
#[derive(Debug, Clone)]
pub struct StepOutput<C> {
    pub iteration: u64,
    /// Start of the iteration, ns.
    pub started_at: u64,
    /// Total iteration time `prefill_ns + decode_ns`.
    pub duration_ns: u64,
    pub prefill_ns: u64,
    pub decode_ns: u64,
    /// Requests prefilled in this iteration.
    pub admitted: Vec<RequestId>,
    /// Tokens produced, one per active request.
    pub tokens: Vec<(RequestId, u32)>,
    /// Requests that left at the end of the iteration.
    pub finished: Vec<Finished<C>>,
    /// Sequences in the decode batch.
    pub decode_batch: usize,
    /// Ledger after the iteration.
    pub ledger: LedgerSnapshot,
}

impl<C> StepOutput<C> {
    /// Iteration time in seconds.
    pub fn duration_s(&self) -> f64 {
        ns_to_secs(self.duration_ns)
    }

    /// Prefill part of the iteration in seconds.
    pub fn prefill_s(&self) -> f64 {
        ns_to_secs(self.prefill_ns)
    }

    /// Decode part of the iteration in seconds.
    pub fn decode_s(&self) -> f64 {
        ns_to_secs(self.decode_ns)
    }

    /// End of the iteration, ns.
    pub fn ended_at(&self) -> u64 {
        self.started_at + self.duration_ns
    }

    /// Whether the step did nothing (no request to run).
    pub fn is_idle(&self) -> bool {
        self.admitted.is_empty() && self.tokens.is_empty() && self.finished.is_empty()
    }
}

/// The batching engine over a backend.
pub struct BatchEngine<B: Backend> {
    backend: B,
    config: EngineConfig,
    ledger: KvLedger,
    waiting: VecDeque<Waiting<B::Cache>>,
    running: Vec<Running>,
    iteration: u64,
    /// Buffers a step reuses (the decode batch's indices and items), so an
    /// iteration allocates only what it hands out.
    scratch_idx: Vec<usize>,
    scratch_items: Vec<DecodeItem>,
    /// Ids of the requests held, waiting or running (the duplicate check).
    ids: FxHashSet<RequestId>,
}

impl<B: Backend> BatchEngine<B> {
    pub fn new(backend: B, config: EngineConfig) -> Self {
        let ledger = KvLedger::new(backend.kv_bytes_per_token(), config.kv_capacity_bytes);
        BatchEngine {
            backend,
            config,
            ledger,
            waiting: VecDeque::new(),
            running: Vec::new(),
            iteration: 0,
            scratch_idx: Vec::new(),
            scratch_items: Vec::new(),
            ids: FxHashSet::default(),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    pub fn ledger(&self) -> &KvLedger {
        &self.ledger
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Requests waiting for admission.
    pub fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// Requests admitted and not yet left.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// No request waiting or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Reserved KV bytes of the requests still waiting for admission.
    pub fn waiting_kv_bytes(&self) -> u64 {
        self.waiting
            .iter()
            .map(|w| self.ledger.bytes_for(w.req.kv_tokens()))
            .sum()
    }

    /// Work still held, in tokens: prompts of the waiting requests still to
    /// prefill, and output tokens still to decode (waiting and running).
    /// The scheduler's backlog in seconds is this work at the server's speed
    /// (`ServerSlotCore::backlog_s`).
    pub fn pending_work(&self) -> PendingWork {
        let mut w = PendingWork::default();
        for q in &self.waiting {
            w.prefill_tokens += q.req.input_len() as u64;
            w.decode_tokens += q.req.output_len as u64;
        }
        for r in &self.running {
            let left = r.req.output_len.saturating_sub(r.generated.len()) as u64;
            w.decode_tokens += left;
        }
        w
    }

    /// Whether a request of `kv_tokens` could ever be admitted here.
    pub fn could_ever_fit(&self, kv_tokens: u64) -> bool {
        self.ledger.could_ever_fit(kv_tokens)
    }

    /// Slot statistics since the last call over a slot of `slot_ns` (see
    /// [`KvLedger::take_window`]).
    pub fn take_window(&mut self, slot_ns: u64) -> WindowStats {
        self.ledger.take_window(ns_to_secs(slot_ns))
    }

    /// Removes a request wherever it is (waiting or running), freeing its KV
    /// reservation and backend state; returns whether it was known.
    pub fn abort(&mut self, id: RequestId) -> bool {
        if let Some(i) = self.waiting.iter().position(|w| w.req.id == id) {
            self.waiting.remove(i);
            self.ids.remove(&id);
            return true;
        }
        if let Some(i) = self.running.iter().position(|r| r.req.id == id) {
            let r = self.running.remove(i);
            self.forget(id, r.held_tokens());
            self.backend.release(id);
            return true;
        }
        false
    }

    fn check(&self, req: &Request) -> Result<()> {
        if req.output_len == 0 {
            return Err(EngineError::State(format!(
                "request {}: output length 0",
                req.id
            )));
        }
        if req.prompt.is_empty() {
            return Err(EngineError::State(format!(
                "request {}: empty prompt",
                req.id
            )));
        }
        if !self.ledger.could_ever_fit(req.kv_tokens()) {
            return Err(EngineError::State(format!(
                "request {}: needs {} B of KV, more than the capacity {} B",
                req.id,
                self.ledger.bytes_for(req.kv_tokens()),
                self.ledger.capacity_bytes()
            )));
        }
        if self.ids.contains(&req.id) {
            return Err(EngineError::State(format!(
                "request {}: id already in use",
                req.id
            )));
        }
        Ok(())
    }

    /// Queues a request that arrived at `now` (ns; admitted at a later step
    /// when its KV fits). `now` is recorded as its submission time.
    pub fn submit(&mut self, req: Request, now: u64) -> Result<()> {
        self.check(&req)?;
        self.ids.insert(req.id);
        self.waiting.push_back(Waiting {
            req,
            submitted_at: now,
            cache: None,
        });
        Ok(())
    }

    /// Queues a request, arrived at `now` (ns), whose prompt's first tokens
    /// are already in `cache` (a handed-off context): only the rest of the
    /// prompt is prefilled.
    pub fn submit_with_cache(&mut self, req: Request, cache: B::Cache, now: u64) -> Result<()> {
        self.check(&req)?;
        self.ids.insert(req.id);
        self.waiting.push_back(Waiting {
            req,
            submitted_at: now,
            cache: Some(cache),
        });
        Ok(())
    }

    /// A request leaves the engine: its KV is freed and its id may be used
    /// again.
    fn forget(&mut self, id: RequestId, held_tokens: u64) {
        self.ledger.release(id, held_tokens);
        self.ids.remove(&id);
    }

    fn admit(&mut self) -> Vec<Waiting<B::Cache>> {
        let mut out = Vec::new();
        if self.config.mode == BatchMode::Static && !self.running.is_empty() {
            return out;
        }
        while let Some(w) = self.waiting.front() {
            if self.running.len() + out.len() >= self.config.max_batch
                || !self.ledger.fits(w.req.kv_tokens())
            {
                break;
            }
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            // `fits` was checked just above.
            if self.ledger.reserve(w.req.id, w.req.kv_tokens()).is_err() {
                self.waiting.push_front(w);
                break;
            }
            out.push(w);
        }
        out
    }

    /// Runs one iteration starting at `now` (ns on the caller's clock).
    pub fn step(&mut self, now: u64) -> Result<StepOutput<B::Cache>> {
        let admitted = self.admit();
        // Decode batch: running requests that still generate.
        let mut decode_idx = std::mem::take(&mut self.scratch_idx);
        decode_idx.clear();
        match self.config.mode {
            // Done requests leave at the end of their iteration: every
            // running one still generates.
            BatchMode::Continuous => decode_idx.extend(0..self.running.len()),
            BatchMode::Static => decode_idx
                .extend((0..self.running.len()).filter(|&i| self.running[i].done_at.is_none())),
        }
        debug_assert!(decode_idx
            .iter()
            .all(|&i| self.running[i].done_at.is_none()));
        let out = self.step_with(now, admitted, &decode_idx);
        self.scratch_idx = decode_idx;
        out
    }

    /// [`BatchEngine::step`] with the admitted requests and the decode
    /// batch's indices into `running`.
    fn step_with(
        &mut self,
        now: u64,
        admitted: Vec<Waiting<B::Cache>>,
        decode_idx: &[usize],
    ) -> Result<StepOutput<B::Cache>> {
        let mut out = StepOutput {
            iteration: self.iteration,
            started_at: now,
            duration_ns: 0,
            prefill_ns: 0,
            decode_ns: 0,
            admitted: admitted.iter().map(|w| w.req.id).collect(),
            tokens: Vec::with_capacity(admitted.len() + decode_idx.len()),
            finished: Vec::new(),
            decode_batch: decode_idx.len(),
            ledger: self.ledger.snapshot(),
        };
        if admitted.is_empty() && decode_idx.is_empty() {
            return Ok(out);
        }
        self.iteration += 1;
        let eos = self.backend.eos_token();
        // Requests that reached their end in this iteration.
        let mut finishing = 0usize;

        // Prefill the newly admitted together.
        let mut new_running = Vec::with_capacity(admitted.len());
        if !admitted.is_empty() {
            let mut adopted: Vec<(Request, u64)> = Vec::with_capacity(admitted.len());
            let mut admitted = admitted.into_iter();
            while let Some(w) = admitted.next() {
                let Waiting {
                    req,
                    submitted_at,
                    cache,
                } = w;
                if let Some(c) = cache {
                    if let Err(e) = self.backend.adopt(req.id, c) {
                        // Nothing of this iteration ran: free every admitted
                        // request's reservation and adopted state.
                        self.forget(req.id, 0);
                        for (r, _) in &adopted {
                            self.forget(r.id, 0);
                            self.backend.release(r.id);
                        }
                        for w in admitted {
                            self.forget(w.req.id, 0);
                        }
                        return Err(EngineError::backend(e));
                    }
                }
                adopted.push((req, submitted_at));
            }
            let items: Vec<PrefillItem<'_>> = adopted
                .iter()
                .map(|(r, _)| PrefillItem {
                    seq: r.id,
                    tokens: r.prompt.tokens(),
                    len: r.input_len(),
                })
                .collect();
            let step = self
                .backend
                .prefill(&items)
                .map_err(EngineError::backend)
                .and_then(|s| {
                    if s.tokens.len() == items.len() {
                        Ok(s)
                    } else {
                        Err(EngineError::State(format!(
                            "backend prefill returned {} tokens for {} sequences",
                            s.tokens.len(),
                            items.len()
                        )))
                    }
                });
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    let ids: Vec<RequestId> = adopted.iter().map(|(r, _)| r.id).collect();
                    for &id in &ids {
                        self.forget(id, 0);
                        self.backend.release(id);
                    }
                    return Err(EngineError::State(format!(
                        "prefill of requests {ids:?} failed, their KV was released: {e}"
                    )));
                }
            };
            out.prefill_ns = secs_to_ns(step.duration_s);
            let t_first = now + out.prefill_ns;
            let keep_tokens = self.backend.produces_tokens();
            for ((req, submitted_at), tok) in adopted.into_iter().zip(step.tokens) {
                out.tokens.push((req.id, tok));
                new_running.push(Running {
                    generated: GeneratedTokens::first(tok, req.output_len, keep_tokens),
                    submitted_at,
                    admitted_at: now,
                    first_token_at: t_first,
                    done_at: None,
                    hit_eos: false,
                    req,
                });
            }
        }

        // One decode iteration for the requests already running.
        if !decode_idx.is_empty() {
            let mut items = std::mem::take(&mut self.scratch_items);
            items.clear();
            items.extend(decode_idx.iter().map(|&i| {
                let r = &self.running[i];
                DecodeItem {
                    seq: r.req.id,
                    token: r.generated.last(),
                }
            }));
            let occ = self.ledger.occupancy_bytes();
            let step = self
                .backend
                .decode(&items, occ)
                .map_err(EngineError::backend)
                .and_then(|s| {
                    if s.tokens.len() == items.len() {
                        Ok(s)
                    } else {
                        Err(EngineError::State(format!(
                            "backend decode returned {} tokens for {} sequences",
                            s.tokens.len(),
                            items.len()
                        )))
                    }
                });
            let n_items = items.len();
            self.scratch_items = items;
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    // The prefill succeeded: keep those requests (first token
                    // in, KV reserved) instead of dropping them with their
                    // reservations; the running ones are untouched.
                    self.ledger
                        .hold(new_running.iter().map(Running::held_tokens).sum());
                    let ids: Vec<RequestId> = new_running.iter().map(|r| r.req.id).collect();
                    self.running.extend(new_running);
                    return Err(EngineError::State(format!(
                        "decode of {} sequences failed (requests {ids:?} were prefilled and \
                         stay admitted): {e}",
                        n_items
                    )));
                }
            };
            out.decode_ns = secs_to_ns(step.duration_s);
            let end = now + out.prefill_ns + out.decode_ns;
            for (&i, tok) in decode_idx.iter().zip(step.tokens) {
                let r = &mut self.running[i];
                r.generated.push(tok);
                out.tokens.push((r.req.id, tok));
                finishing += usize::from(r.finish_if_done(end, eos));
            }
        }
        out.duration_ns = out.prefill_ns + out.decode_ns;
        let end = now + out.duration_ns;
        for r in &mut new_running {
            finishing += usize::from(r.finish_if_done(end, eos));
        }
        // Accounting: the tokens this iteration added are held (each
        // prefilled prompt with its first token, one per decoded request).
        let prefilled: u64 = new_running.iter().map(Running::held_tokens).sum();
        self.ledger.hold(prefilled + decode_idx.len() as u64);
        let generating = decode_idx.len() + new_running.len();
        self.running.extend(new_running);
        self.ledger.record_iteration(ns_to_secs(out.duration_ns));

        // Exit. Requests done before this iteration (static mode only) did
        // not generate in it: all are done when every generating one
        // finished.
        let leave_all = finishing == generating;
        let any_leaves = match self.config.mode {
            BatchMode::Continuous => finishing > 0,
            BatchMode::Static => leave_all,
        };
        if !any_leaves {
            // Most iterations: nobody leaves, nothing to move.
            out.ledger = self.ledger.snapshot();
            return Ok(out);
        }
        // In place: a full batch loses about one request an iteration, and
        // moving every running request to a new list each time was most of
        // a modeled iteration's cost.
        let mode = self.config.mode;
        let leaving: Vec<Running> = self
            .running
            .extract_if(.., |r| match mode {
                BatchMode::Continuous => r.done_at.is_some(),
                BatchMode::Static => leave_all,
            })
            .collect();
        for r in leaving {
            self.forget(r.req.id, r.held_tokens());
            let cache = if r.req.keep_cache {
                self.backend.take(r.req.id)
            } else {
                self.backend.release(r.req.id);
                None
            };
            out.finished.push(Finished {
                id: r.req.id,
                input_len: r.req.input_len(),
                tokens: r.generated.into_tokens(),
                submitted_at: r.submitted_at,
                admitted_at: r.admitted_at,
                first_token_at: r.first_token_at,
                finished_at: end,
                hit_eos: r.hit_eos,
                cache,
            });
        }
        out.ledger = self.ledger.snapshot();
        Ok(out)
    }

    /// Steps until idle from `now` (ns), advancing time by each iteration's
    /// duration; returns all outputs (for tests and benchmarks).
    pub fn run_to_idle(&mut self, mut now: u64) -> Result<Vec<StepOutput<B::Cache>>> {
        let mut outs = Vec::new();
        while !self.is_idle() {
            let o = self.step(now)?;
            now += o.duration_ns;
            let idle = o.is_idle();
            outs.push(o);
            if idle {
                return Err(EngineError::State(
                    "engine made no progress with requests pending".into(),
                ));
            }
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests;
