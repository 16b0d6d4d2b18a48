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
//! **Deadline and slots** (paper §V-A): `T_ser = N · t_slot`, the
//! serialization time of the N source frames with one full 1400-byte frame
//! per slot (`t_slot = 1400·8 / C`, 112 µs at 100 Mb/s), and
//! `D = T_ow + ρ·T_ser` with `T_ow` the forward one-way delay. The sender's
//! slot budget is `T_max = ⌊(D − T_ow)/t_slot⌋ = ⌊ρN⌋`: exactly the frames
//! whose arrival (slot end + T_ow) is at or before D. So ρ = 1 leaves room for
//! every source frame and no repair, ρ = 0.8 for 80 % of them.
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

use edgemu_codec::fec::FRAME_SIZE;
use edgemu_links::{LinkModel, LinkParams, LossSpec, RateSpec};
use edgemu_policies::repair::RepairScheduler;

use crate::blocks::{check_utilities, BlockLayout};
use crate::error::HandoffError;
use crate::receiver::{HandoffReceiver, HandoffReport, ReceivedKv, ReceiverConfig};
use crate::scheme::SchemeSpec;
use crate::sender::{Decision, HandoffSender, RepairGate, SenderConfig, SenderStats};
use crate::timing::{since, CoreTimers};

/// Mixed into the seed of the reverse link.
pub const REVERSE_SEED_XOR: u64 = 0x9E37_79B9_7F4A_7C15;

/// The paper's GE channel (εG, εB, pGB, pBG).
pub const PAPER_GE: (f64, f64, f64, f64) = (0.001, 0.50, 0.02, 0.10);

/// Everything a handoff run needs except the scheme and the seed.
#[derive(Debug, Clone)]
pub struct HandoffScenario {
    pub layout: BlockLayout,
    pub utilities: Arc<[f64]>,
    /// Block-major KV bytes (`layout.total_bytes()`).
    pub payload: Arc<[u8]>,
    /// Sender → receiver.
    pub forward: LinkParams,
    /// Receiver → sender (feedback).
    pub reverse: LinkParams,
    /// Nominal forward rate C (pacing and T_ser), bits/s.
    pub rate_bps: u64,
    /// Normalized deadline ρ = (D − T_ow)/T_ser.
    pub rho: f64,
    /// Coding window limit K.
    pub k: u16,
    /// Repair budget B_rep as a fraction of N.
    pub budget_fraction: f64,
    /// Receiver feedback every this many frames (and on deficit change).
    pub feedback_every: u32,
    pub session: u32,
}

/// Defaults of the harness: K = 256, above the bandwidth-delay product of the
/// paper's link (≈ 180 frames per RTT), so one repair combines every packet
/// the receiver can still be missing when it reports a deficit — with a
/// smaller K, repairs sent on a reported deficit combine only the oldest K
/// packets and are redundant for losses further on until the ACK slides the
/// window (we measured K = 64 spending the whole budget on such repairs);
/// B_rep = 25 % of N (three times
/// the mean loss: never binding for the rule-based schemes on the paper's
/// channel, so it is a limit, not a tuning knob), feedback every 4 frames.
pub const DEFAULT_K: u16 = 256;
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.25;
pub const DEFAULT_FEEDBACK_EVERY: u32 = 4;

impl HandoffScenario {
    /// A symmetric link of `rate_bps` and `rtt_ns` (half each way), `loss` on
    /// the forward direction, a lossless reverse direction (the paper's
    /// reverse feedback channel is reliable), at deadline ρ.
    pub fn symmetric(
        layout: BlockLayout,
        utilities: Arc<[f64]>,
        payload: Arc<[u8]>,
        rate_bps: u64,
        rtt_ns: u64,
        loss: LossSpec,
        rho: f64,
    ) -> Self {
        let dir = |loss| LinkParams {
            rate: RateSpec::Fixed { bps: rate_bps },
            delay_ns: rtt_ns / 2,
            loss,
            ..LinkParams::default()
        };
        HandoffScenario {
            layout,
            utilities,
            payload,
            forward: dir(loss),
            reverse: dir(LossSpec::None),
            rate_bps,
            rho,
            k: DEFAULT_K,
            budget_fraction: DEFAULT_BUDGET_FRACTION,
            feedback_every: DEFAULT_FEEDBACK_EVERY,
            session: 1,
        }
    }

    /// The paper's main setting: 100 Mb/s, 20 ms RTT, GE (0.001, 0.5, 0.02, 0.1).
    pub fn paper(layout: BlockLayout, utilities: Arc<[f64]>, payload: Arc<[u8]>, rho: f64) -> Self {
        let (eps_g, eps_b, p_gb, p_bg) = PAPER_GE;
        Self::symmetric(
            layout,
            utilities,
            payload,
            100_000_000,
            20_000_000,
            LossSpec::GilbertElliott {
                eps_g,
                eps_b,
                p_gb,
                p_bg,
            },
            rho,
        )
    }

    /// One slot: a full frame at the nominal rate, ns (rounded up).
    pub fn slot_ns(&self) -> u64 {
        (FRAME_SIZE as u64 * 8 * 1_000_000_000).div_ceil(self.rate_bps.max(1))
    }

    /// T_ser = N · t_slot.
    pub fn serialization_ns(&self) -> u64 {
        u64::from(self.layout.n_source_packets()) * self.slot_ns()
    }

    /// D = T_ow + ρ·T_ser.
    pub fn deadline_ns(&self) -> u64 {
        self.forward.delay_ns + (self.rho.max(0.0) * self.serialization_ns() as f64) as u64
    }

    /// T_max = ⌊(D − T_ow)/t_slot⌋.
    pub fn slots_total(&self) -> u32 {
        let t = (self.deadline_ns() - self.forward.delay_ns) / self.slot_ns();
        u32::try_from(t).unwrap_or(u32::MAX)
    }

    fn check(&self) -> Result<(), HandoffError> {
        check_utilities(&self.layout, &self.utilities)?;
        if !(self.rho.is_finite() && self.rho > 0.0 && self.rho <= 100.0) {
            return Err(HandoffError::Config(format!(
                "rho {} outside (0, 100]",
                self.rho
            )));
        }
        if self.rate_bps == 0 {
            return Err(HandoffError::Config("rate must be positive".into()));
        }
        if !(self.budget_fraction.is_finite() && self.budget_fraction >= 0.0) {
            return Err(HandoffError::Config(format!(
                "budget fraction {}",
                self.budget_fraction
            )));
        }
        Ok(())
    }
}

impl HandoffScenario {
    /// The sender core of this scenario under `spec` (what [`run_handoff`]
    /// drives; the agent actors build theirs here too, so both run the same
    /// configuration). `repairs` false gives a zero repair budget (the
    /// schemes without repair, or a slot whose policy is `no-repair`).
    pub fn sender(
        &self,
        spec: &SchemeSpec,
        repairs: bool,
        scheduler: Box<dyn RepairScheduler>,
        record_decisions: bool,
    ) -> Result<HandoffSender, HandoffError> {
        self.check()?;
        let n = self.layout.n_source_packets();
        let budget = if repairs {
            (self.budget_fraction * f64::from(n)).floor() as u32
        } else {
            0
        };
        let slot_ns = self.slot_ns();
        HandoffSender::new(
            SenderConfig {
                session: self.session,
                k: self.k,
                slot_ns,
                slots_total: self.slots_total(),
                repair_budget: budget,
                rtt_ns: self.forward.delay_ns + self.reverse.delay_ns + slot_ns,
                gate: if repairs {
                    spec.gate
                } else {
                    RepairGate::Deficit
                },
                record_decisions,
            },
            self.layout,
            Arc::clone(&self.utilities),
            spec.order,
            Arc::clone(&self.payload),
            scheduler,
        )
    }

    /// The receiver core's parameters for this scenario.
    pub fn receiver_config(&self) -> ReceiverConfig {
        ReceiverConfig {
            session: self.session,
            deadline_ns: self.deadline_ns(),
            feedback_every: self.feedback_every,
            max_repair_count: self.k,
        }
    }

    /// The receiver core of this scenario.
    pub fn receiver(&self) -> Result<HandoffReceiver, HandoffError> {
        self.check()?;
        HandoffReceiver::new(
            self.receiver_config(),
            self.layout,
            Arc::clone(&self.utilities),
        )
    }
}

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
    let mut tx = scenario.sender(spec, spec.repairs(), scheduler, opts.record_decisions)?;
    let mut rx = scenario.receiver()?;
    let deadline = scenario.deadline_ns();
    let mut fwd: LinkModel<Vec<u8>> = LinkModel::new(scenario.forward.clone(), seed);
    let mut rev: LinkModel<Vec<u8>> =
        LinkModel::new(scenario.reverse.clone(), seed ^ REVERSE_SEED_XOR);

    if timed {
        tx.enable_timers();
    }
    let mut decision_utility = Vec::new();
    let mut now = 0u64;
    loop {
        while let Some(a) = fwd.poll(now) {
            let t0 = timed.then(Instant::now);
            // A rejected frame is counted by the receiver; the run goes on.
            let _ = rx.handle_packet(a.due_ns, &a.packet);
            let t1 = timed.then(Instant::now);
            let fb = rx.poll_transmit(a.due_ns);
            if let (Some(t0), Some(t1), Some(t)) = (t0, t1, tx.timers_mut()) {
                t.dec_ns += u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
                t.state_ns += since(t1);
            }
            if let Some(fb) = fb {
                rev.offer(a.due_ns, fb.len() as u32, fb);
            }
        }
        while let Some(a) = rev.poll(now) {
            let t0 = timed.then(Instant::now);
            let _ = tx.handle_feedback(a.due_ns, &a.packet);
            if let (Some(t0), Some(t)) = (t0, tx.timers_mut()) {
                t.state_ns += since(t0);
            }
        }
        loop {
            let frame = tx.poll_transmit(now);
            if opts.record_decisions && tx.decisions().len() > decision_utility.len() {
                let j = rx.recovered_utility();
                decision_utility.resize(tx.decisions().len(), j);
            }
            let Some(frame) = frame else { break };
            fwd.offer(now, frame.len() as u32, frame);
        }
        let next = [tx.poll_timeout(), fwd.next_due(), rev.next_due()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if t <= deadline => now = t.max(now),
            _ => break,
        }
    }
    let timers = tx.timers_mut().map(std::mem::take);
    let run = HandoffRun {
        scheme: spec.name.to_string(),
        seed,
        report: rx.report(),
        sender: *tx.stats(),
        decisions: if opts.record_decisions {
            tx.decisions().to_vec()
        } else {
            Vec::new()
        },
        decision_utility,
        received: opts.keep_received.then(|| rx.into_received()),
    };
    Ok((run, timers))
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
