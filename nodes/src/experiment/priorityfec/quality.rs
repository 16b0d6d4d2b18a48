//! Scoring the task quality of every context, in streams.
//!
//! A context's work — prefill, reference continuation, rebuilding and
//! decoding its distinct incomplete outcomes — is many short forward passes.
//! Run on all cores at once, each pass ends in a wait for the slowest core
//! (≈ 1.6× on two cores instead of 2×). Contexts are independent, so
//! `streams` of them run side by side instead, each on its own rayon pool of
//! `cores / streams` threads with its own evaluator; every row's arithmetic
//! is per row, so the figures are the same bits however the work is split.
//! Finished contexts are handed to the caller in context order (and so
//! appended to the run folder in that order); after a failure no new context
//! starts, and the contexts finished before it are still handed over.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, Context as _, Result};
use edgemu_gpu::handoff_quality::{EvalStats, HandoffCase, PartialBlock, QualityEvaluator};
use edgemu_gpu::model::llama::Llama;
use edgemu_gpu::MissingRows;
use edgemu_stats::cpu::{current_thread_id, CpuClock};
use indicatif::ProgressBar;

use super::{context_blocks, context_rows, csv_of, Transport};
use crate::experiment::pfec_run::{tokens_sha256, ContextDone};

/// What every context is scored with.
pub(super) struct QualityJob<'a> {
    /// Prefills the contexts (the sender's cache).
    pub prefill: &'a Llama,
    /// Each stream's evaluator decodes on its own clone.
    pub decode: &'a Llama,
    pub contexts: &'a [Vec<u32>],
    pub cue: &'a [u32],
    pub transports: &'a [Transport],
    /// The distinct incomplete outcomes, scored once per context.
    pub distinct: &'a [&'a Transport],
    pub mode: MissingRows,
    pub decode_len: usize,
    pub batch: usize,
    pub stepwise: bool,
}

/// One scored context.
pub(super) struct ScoredContext {
    /// Its `handoffs.csv` lines (no header).
    pub lines: String,
    pub done: ContextDone,
    /// The handoffs' phases (the reference is counted with the prefill).
    pub stats: EvalStats,
    /// Prefill and reference continuation, wall and CPU seconds.
    pub prefill_s: f64,
    pub prefill_cpu_s: f64,
}

/// The streams that score `contexts` contexts: as asked, else two where the
/// machine has two or more cores (module docs), else one; never more than
/// the contexts, never none.
fn streams_for(asked: Option<usize>, contexts: usize) -> usize {
    asked
        .unwrap_or_else(|| cores().clamp(1, 2))
        .clamp(1, contexts.max(1))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Scores contexts `todo` in the streams asked for (`None`: the default of
/// [`streams_for`]; module docs), handing each to `sink` in `todo`'s order;
/// `pb` advances by one per context and per outcome scored. Returns the
/// number of streams that ran.
pub(super) fn score_contexts(
    job: &QualityJob<'_>,
    todo: &[usize],
    streams: Option<usize>,
    pb: &ProgressBar,
    mut sink: impl FnMut(ScoredContext) -> Result<()>,
) -> Result<usize> {
    let streams = streams_for(streams, todo.len());
    let threads = (cores() / streams).max(1);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<ScoredContext>)>();
    let mut first_error: Option<anyhow::Error> = None;
    std::thread::scope(|sc| {
        for s in 0..streams {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            sc.spawn(move || {
                let ids = Arc::new(Mutex::new(Vec::new()));
                let clock = CpuClock::Threads(ids.clone());
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(move |i| format!("quality-{s}-{i}"))
                    .start_handler(move |_| {
                        if let (Some(id), Ok(mut v)) = (current_thread_id(), ids.lock()) {
                            v.push(id);
                        }
                    })
                    .build();
                let pool = match pool {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = tx.send((0, Err(anyhow!("quality stream {s}: {e}"))));
                        return;
                    }
                };
                pool.install(|| {
                    let mut evaluator =
                        QualityEvaluator::new(job.decode.clone(), job.decode_len, job.batch)
                            .with_cpu_clock(clock.clone());
                    while !stop.load(Ordering::Relaxed) {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&ci) = todo.get(k) else { break };
                        let r = score_context(job, ci, &mut evaluator, &clock, pb);
                        let failed = r.is_err();
                        if tx.send((k, r)).is_err() || failed {
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                });
            });
        }
        drop(tx);
        // Hand contexts over in order as they finish.
        let mut waiting: BTreeMap<usize, ScoredContext> = BTreeMap::new();
        let mut handed = 0;
        for (k, r) in rx {
            match r {
                Ok(c) => {
                    waiting.insert(k, c);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error.get_or_insert(e);
                }
            }
            while let Some(c) = waiting.remove(&handed) {
                handed += 1;
                if let Err(e) = sink(c) {
                    stop.store(true, Ordering::Relaxed);
                    first_error.get_or_insert(e);
                }
            }
        }
        // After a failure: what finished beyond the gap is kept too.
        for (_, c) in std::mem::take(&mut waiting) {
            if first_error.is_some() {
                if let Err(e) = sink(c) {
                    first_error.get_or_insert(e);
                }
            }
        }
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(streams),
    }
}

/// Prefills context `ci`, decodes its reference and scores every distinct
/// incomplete outcome on it.
fn score_context(
    job: &QualityJob<'_>,
    ci: usize,
    evaluator: &mut QualityEvaluator,
    clock: &CpuClock,
    pb: &ProgressBar,
) -> Result<ScoredContext> {
    let ctx = &job.contexts[ci];
    let (t_ci, cpu_ci) = (Instant::now(), clock.seconds());
    let prompt: Vec<u32> = ctx.iter().chain(job.cue).copied().collect();
    let blocks = context_blocks(job.prefill, ctx)
        .with_context(|| format!("prefilling evaluation context {ci}"))?;
    let full: Vec<PartialBlock> = blocks.iter().map(PartialBlock::complete).collect();
    let full_case = HandoffCase {
        arrived: None,
        n_tokens: ctx.len(),
        blocks: &full,
        mode: job.mode,
        prompt: &prompt,
    };
    let reference = evaluator
        .continuations(std::slice::from_ref(&full_case))
        .with_context(|| format!("reference continuation of context {ci}"))?
        .pop()
        .context("no reference continuation")?;
    // The handoffs' caches read their intact rows from the full one.
    evaluator
        .set_base(Some(&full_case))
        .with_context(|| format!("full cache of context {ci}"))?;
    let prefill_s = t_ci.elapsed().as_secs_f64();
    let prefill_cpu_s = clock.seconds() - cpu_ci;
    // The reference is counted with its context, not with the handoffs.
    evaluator.take_stats();
    pb.inc(1);
    // outcome key -> (f1, top1)
    let mut scores: HashMap<u64, (f64, f64)> = HashMap::new();
    for chunk in job.distinct.chunks(job.batch.max(1)) {
        // Each outcome names what arrived of the context's blocks.
        let cases: Vec<HandoffCase<'_>> = chunk
            .iter()
            .map(|t| HandoffCase {
                arrived: Some(&t.present),
                n_tokens: ctx.len(),
                blocks: &full,
                mode: job.mode,
                prompt: &prompt,
            })
            .collect();
        let refs = vec![reference.clone(); cases.len()];
        let q = if job.stepwise {
            evaluator.evaluate_stepwise(&cases, &refs)
        } else {
            evaluator.evaluate(&cases, &refs)
        }
        .with_context(|| format!("scoring handoffs of context {ci}"))?;
        for (t, q) in chunk.iter().zip(q) {
            scores.insert(t.key, (q.f1, q.top1));
        }
        pb.inc(chunk.len() as u64);
    }
    let stats = evaluator.take_stats();
    let rows = context_rows(ci, job.transports, &scores)?;
    let text = csv_of(&rows)?;
    let lines: String = text.lines().skip(1).flat_map(|l| [l, "\n"]).collect();
    Ok(ScoredContext {
        lines,
        done: ContextDone {
            context: ci,
            tokens_sha256: tokens_sha256(ctx),
            rows: rows.len(),
            scored: job.distinct.len(),
            wall_s: t_ci.elapsed().as_secs_f64(),
            cpu_s: clock.seconds() - cpu_ci,
        },
        stats,
        prefill_s,
        prefill_cpu_s,
    })
}
