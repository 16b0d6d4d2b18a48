//! The co-simulation harness (quinn-proto's `Pair` pattern): sender core →
//! forward [`LinkModel`] → receiver core, feedback back on a reverse
//! [`LinkModel`], on an exact nanosecond event loop — no tokio, no wall clock.
//!
//! **Loop.** At each instant `now`: deliver every forward arrival due (each
//! followed by the receiver's feedback, if due, offered on the reverse link at
//! that arrival's time), then every reverse arrival (to the sender), then let
//! the sender send what its slot allows. `now` then jumps to the earliest of
//! the sender's timer and the two links' next arrival; the run ends at the
//! deadline D (arrivals at exactly D count). Ties are handled in that fixed
//! order, so a run is a pure function of its inputs and seed.
//!
//! The handoff itself (blocks, links, deadline, and the two cores) is a
//! [`HandoffScenario`] ([`crate::scenario`]).
//!
//! **Paired realizations.** The forward link's loss RNG is seeded by the
//! realization seed alone, and a Gilbert–Elliott chain steps once per offered
//! packet; so under one seed the i-th transmission is lost in every scheme
//! or in none, whatever that transmission carries (a source frame in one
//! scheme, a repair in another) — "the same channel draws" means the same loss
//! pattern over transmission indices. Every scheme transmits in consecutive
//! slots, so this is also the same pattern over time, except for slots an
//! idle sender skips (the chain does not advance on them). A loss trace
//! ([`edgemu_links::LossTrace`], for `--loss-trace`) is looked up at each
//! frame's send time and drawn from the same seeded stream, so paired runs see
//! the same trace states at the same times. The reverse link has its own seed
//! (`seed ^ REVERSE_SEED_XOR`).

use std::sync::Arc;
use std::time::Instant;

use edgemu_links::LinkModel;
use edgemu_policies::repair::RepairScheduler;

use crate::blocks::BlockLayout;
use crate::error::HandoffError;
use crate::receiver::{HandoffReceiver, HandoffReport, ReceivedKv};
use crate::scenario::HandoffScenario;
use crate::scheme::SchemeSpec;
use crate::sender::{Decision, HandoffSender, SenderStats};
use crate::timing::{since, CoreTimers};

/// Mixed into the seed of the reverse link.
pub const REVERSE_SEED_XOR: u64 = 0x9E37_79B9_7F4A_7C15;

/// What to keep from a run beyond its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunOptions {
    /// Keep the received KV (for the rebuild).
    pub keep_received: bool,
    /// Record every decision (for the DDQN trainer).
    pub record_decisions: bool,
}

/// One handoff's outcome.
#[derive(Debug, Clone)]
pub struct HandoffRun {
    pub scheme: String,
    pub seed: u64,
    pub report: HandoffReport,
    pub sender: SenderStats,
    pub received: Option<ReceivedKv>,
    /// Every decision epoch (with `record_decisions`).
    pub decisions: Vec<Decision>,
    /// J^KV (the receiver's recovered utility, ground truth) at each recorded
    /// decision, parallel to `decisions`; with the final
    /// `report.recovered_utility` the trainer has `J_{t+1} − J_t` for every
    /// epoch (paper §IV-C3; the shaping term comes from
    /// [`crate::sender::shaping_potential`] on the observations).
    pub decision_utility: Vec<f64>,
}

/// Runs one handoff of `scenario` under `spec` with `scheduler` (from
/// [`SchemeSpec::scheduler`]) and realization `seed`.
pub fn run_handoff(
    scenario: &HandoffScenario,
    spec: &SchemeSpec,
    scheduler: Box<dyn RepairScheduler>,
    seed: u64,
    opts: RunOptions,
) -> Result<HandoffRun, HandoffError> {
    run(scenario, spec, scheduler, seed, opts, false).map(|(run, _)| run)
}

/// [`run_handoff`] with the component timers of [`crate::timing`] on (for
/// `edgemu bench handoff`; wall-clock figures, meaningful in release builds).
pub fn run_handoff_timed(
    scenario: &HandoffScenario,
    spec: &SchemeSpec,
    scheduler: Box<dyn RepairScheduler>,
    seed: u64,
    opts: RunOptions,
) -> Result<(HandoffRun, CoreTimers), HandoffError> {
    run(scenario, spec, scheduler, seed, opts, true)
        .map(|(run, timers)| (run, timers.unwrap_or_default()))
}

fn run(
    scenario: &HandoffScenario,
    spec: &SchemeSpec,
    scheduler: Box<dyn RepairScheduler>,
    seed: u64,
    opts: RunOptions,
    timed: bool,
) -> Result<(HandoffRun, Option<CoreTimers>), HandoffError> {
    let mut pair = HandoffPair::new(scenario, spec, scheduler, seed, opts.record_decisions)?;
    if timed {
        pair.tx.enable_timers();
    }
    pair.timed = timed;
    while pair.drive() {
        // Not deferred: the sender's scheduler answers every epoch itself.
        pair.tx.apply_decision(None);
    }
    let timers = pair.tx.timers_mut().map(std::mem::take);
    Ok((pair.into_run(spec, seed, opts.keep_received), timers))
}

/// One handoff on the event loop of the module docs, driven in steps: the
/// sender, the two links and the receiver, at the instant `now`.
/// [`HandoffPair::drive`] runs until the sender waits for a decision (a
/// sender with [`HandoffSender::defer_decisions`]) or the deadline.
pub struct HandoffPair {
    pub tx: HandoffSender,
    pub rx: HandoffReceiver,
    fwd: LinkModel<Vec<u8>>,
    rev: LinkModel<Vec<u8>>,
    now: u64,
    deadline: u64,
    /// Mid-instant: arrivals at `now` are in, the sender is being polled.
    sending: bool,
    record: bool,
    timed: bool,
    done: bool,
    decision_utility: Vec<f64>,
}

impl HandoffPair {
    /// The pair for `scenario` under `spec` and realization `seed`;
    /// `record` keeps every decision and the receiver's J^KV at it.
    pub fn new(
        scenario: &HandoffScenario,
        spec: &SchemeSpec,
        scheduler: Box<dyn RepairScheduler>,
        seed: u64,
        record: bool,
    ) -> Result<Self, HandoffError> {
        Ok(HandoffPair {
            tx: scenario.sender(spec, spec.repairs(), scheduler, record)?,
            rx: scenario.receiver()?,
            fwd: LinkModel::new(scenario.forward.clone(), seed),
            rev: LinkModel::new(scenario.reverse.clone(), seed ^ REVERSE_SEED_XOR),
            now: 0,
            deadline: scenario.deadline_ns(),
            sending: false,
            record,
            timed: false,
            done: false,
            decision_utility: Vec::new(),
        })
    }

    /// The instant the loop is at, ns from the handoff's start.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Whether the deadline has passed (the handoff is over).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Runs the loop until the sender waits for a decision (`true`; answer
    /// it with [`HandoffSender::apply_decision`] and drive again) or the
    /// handoff ends at the deadline (`false`).
    pub fn drive(&mut self) -> bool {
        let timed = self.timed;
        while !self.done {
            if !self.sending {
                while let Some(a) = self.fwd.poll(self.now) {
                    let t0 = timed.then(Instant::now);
                    // A rejected frame is counted by the receiver; the run goes on.
                    let _ = self.rx.handle_packet(a.due_ns, &a.packet);
                    let t1 = timed.then(Instant::now);
                    let fb = self.rx.poll_transmit(a.due_ns);
                    if let (Some(t0), Some(t1), Some(t)) = (t0, t1, self.tx.timers_mut()) {
                        t.dec_ns += u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
                        t.state_ns += since(t1);
                    }
                    if let Some(fb) = fb {
                        self.rev.offer(a.due_ns, fb.len() as u32, fb);
                    }
                }
                while let Some(a) = self.rev.poll(self.now) {
                    let t0 = timed.then(Instant::now);
                    let _ = self.tx.handle_feedback(a.due_ns, &a.packet);
                    if let (Some(t0), Some(t)) = (t0, self.tx.timers_mut()) {
                        t.state_ns += since(t0);
                    }
                }
                self.sending = true;
            }
            loop {
                let frame = self.tx.poll_transmit(self.now);
                if self.record && self.tx.decisions().len() > self.decision_utility.len() {
                    let j = self.rx.recovered_utility();
                    self.decision_utility.resize(self.tx.decisions().len(), j);
                }
                let Some(frame) = frame else { break };
                self.fwd.offer(self.now, frame.len() as u32, frame);
            }
            if self.tx.pending_decision().is_some() {
                return true;
            }
            self.sending = false;
            let next = [
                self.tx.poll_timeout(),
                self.fwd.next_due(),
                self.rev.next_due(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= self.deadline => self.now = t.max(self.now),
                _ => self.done = true,
            }
        }
        false
    }

    /// The outcome (after the deadline: [`HandoffPair::drive`] returned
    /// `false`).
    pub fn into_run(self, spec: &SchemeSpec, seed: u64, keep_received: bool) -> HandoffRun {
        HandoffRun {
            scheme: spec.name.to_string(),
            seed,
            report: self.rx.report(),
            sender: *self.tx.stats(),
            decisions: if self.record {
                self.tx.decisions().to_vec()
            } else {
                Vec::new()
            },
            decision_utility: self.decision_utility,
            received: keep_received.then(|| self.rx.into_received()),
        }
    }
}

/// Deterministic stand-in KV bytes for transport-only runs (a hash of the
/// byte index and `seed`), block-major for `layout`.
pub fn synthetic_payload(layout: &BlockLayout, seed: u64) -> Arc<[u8]> {
    (0..layout.total_bytes() as u64)
        .map(|i| {
            let x = (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            (x >> 56) as u8
        })
        .collect()
}

/// Layouts whose shared payload is kept (the training ranges draw 7).
const SHARED_PAYLOADS: usize = 8;

/// [`synthetic_payload`] of `layout` with seed 0, built once per layout and
/// shared. A handoff's outcome does not depend on the bytes it carries (a
/// repair decodes or not by the rank of its coefficients, and utility counts
/// whole blocks), so drawn training and environment episodes share one
/// payload per layout instead of hashing tens of MB for every episode.
pub fn shared_payload(layout: &BlockLayout) -> Arc<[u8]> {
    use std::sync::Mutex;
    static CACHE: Mutex<Vec<(BlockLayout, Arc<[u8]>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = cache.iter().find(|(l, _)| l == layout) {
        return Arc::clone(p);
    }
    let p = synthetic_payload(layout, 0);
    if cache.len() == SHARED_PAYLOADS {
        cache.remove(0);
    }
    cache.push((*layout, Arc::clone(&p)));
    p
}
