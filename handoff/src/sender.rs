//! [`HandoffSender`]: the sending side of a KV handoff as a core without I/O.
//!
//! **Clock and slots.** The sender paces one frame per slot of `slot_ns`
//! (one full 1400-byte frame at the link rate) and only sends at slot
//! boundaries: slot `s` starts at `s·slot_ns` after the handoff start (time
//! 0). Slots `0..T_max` are the packet-transmission opportunities before the
//! deadline; a slot not used (the sender idle, waiting for feedback) is lost,
//! so `T_rem = T_max − next slot`.
//!
//! **Decision epochs.** When a slot comes and no burst is in progress, the
//! sender builds the [`RepairObservation`] and the [`ActionMask`] and asks its
//! [`RepairScheduler`]. The answer starts a burst, sent one frame per slot:
//! `Source` sends `min(8, source left, slots left)` source frames in the
//! fixed source order; `RepairK` sends K repair frames, each built when its
//! slot comes (so it combines the freshest window). If the window empties
//! mid-burst the rest of the burst is dropped.
//!
//! **Hard masks** (paper §IV-C2): source only while source remains; a repair
//! burst of k only if `B_rem ≥ k`, `T_rem ≥ k`, the unacknowledged window is
//! not empty, and — under [`RepairGate::Deficit`], the paper's mask — the
//! estimated deficit `d > 0`. [`RepairGate::Window`] (proactive schemes:
//! fixed-rate FEC, FlEC-RT) drops that last condition. When no action is
//! feasible the sender idles until feedback arrives. A scheduler answering a
//! masked action gets the first allowed one and a counted violation.
//!
//! **Feedback** ([`Feedback`]) slides the encoder window to the reported
//! prefix (the ACK-sliding of paper §IV-A) and updates the estimates: loss
//! ε̂ = lost / (last seq + 1), mean loss run L̄ = lost / runs, the deficit `d` =
//! reported deficit minus repairs sent after the last frame the report had
//! seen. Reports older than the newest one are ignored.
//!
//! **Reward pieces** for the DDQN trainer: [`shaping_potential`] is F(x) of
//! paper §IV-C3 on an observation; J^KV is the receiver's recovered utility
//! (ground truth, [`crate::receiver::HandoffReceiver::recovered_utility`]) or
//! the sender's lower bound [`HandoffSender::acked_utility`] (blocks wholly
//! inside the acknowledged prefix).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use edgemu_codec::fec::{EncoderConfig, RlcEncoder, MAX_PAYLOAD};
use edgemu_policies::repair::{
    ActionMask, RepairAction, RepairObservation, RepairScheduler, N_FEATURES, SOURCE_BURST,
};

use crate::blocks::{check_utilities, source_sequence, BlockLayout, SourceOrder};
use crate::error::HandoffError;
use crate::feedback::Feedback;
use crate::timing::{since, CoreTimers};

/// When repair may be sent at all (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RepairGate {
    /// The paper's mask: only with an estimated deficit `d > 0`.
    Deficit,
    /// Whenever the unacknowledged window is not empty (proactive FEC).
    Window,
}

/// Sender parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SenderConfig {
    pub session: u32,
    /// K: most source packets one repair combines.
    pub k: u16,
    /// Pacing interval: one full frame at the link rate, ns.
    pub slot_ns: u64,
    /// T_max: slots before the deadline.
    pub slots_total: u32,
    /// B_rep: repair packets allowed.
    pub repair_budget: u32,
    /// Nominal round-trip time (for h_ack and the RTT in slots), ns.
    pub rtt_ns: u64,
    pub gate: RepairGate,
    /// Keep every decision (observation, mask, action) for a trainer.
    pub record_decisions: bool,
}

/// One decision epoch, as recorded for the DDQN trainer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub now_ns: u64,
    pub obs: RepairObservation,
    pub mask: ActionMask,
    pub action: RepairAction,
}

/// Counters of one handoff's sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SenderStats {
    pub source_sent: u32,
    pub repair_sent: u32,
    pub decisions: u32,
    pub mask_violations: u32,
    pub feedback_received: u32,
    pub feedback_stale: u32,
    pub feedback_rejected: u32,
    /// Slots that passed unused (idle sender).
    pub slots_idle: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Burst {
    None,
    Source(u32),
    Repair(u32),
}

/// Weights of the potential F(x) (paper §IV-C3). The paper does not publish
/// its λ; these defaults weigh prefix progress first, then deficit, then the
/// window backlog.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PotentialWeights {
    pub progress: f64,
    pub deficit: f64,
    pub window: f64,
}

impl Default for PotentialWeights {
    fn default() -> Self {
        PotentialWeights {
            progress: 1.0,
            deficit: 0.5,
            window: 0.25,
        }
    }
}

/// F(x) = λp·k_dec/N − λd·d/max(1, d + B_rem) − λw·ln(1+W)/ln(1+N).
pub fn shaping_potential(obs: &RepairObservation, w: &PotentialWeights) -> f64 {
    let n = f64::from(obs.n_source.max(1));
    let d = f64::from(obs.deficit);
    let progress = f64::from(obs.decoded_prefix) / n;
    let deficit = d / (d + f64::from(obs.budget_left)).max(1.0);
    let window = (1.0 + f64::from(obs.window)).ln() / (1.0 + n).ln();
    w.progress * progress - w.deficit * deficit - w.window * window
}

/// The sending core (see the module docs).
pub struct HandoffSender {
    cfg: SenderConfig,
    layout: BlockLayout,
    utilities: Arc<[f64]>,
    max_utility: f64,
    total_utility: f64,
    /// Block ids in send order.
    sequence: Vec<u32>,
    /// Block-major KV bytes.
    payload: Arc<[u8]>,
    encoder: RlcEncoder,
    scheduler: Box<dyn RepairScheduler>,
    n_source: u32,
    next_slot: u64,
    burst: Burst,
    idle: bool,
    /// Frames sent (seq of the next frame).
    frames_sent: u32,
    /// Seqs of repairs not yet covered by a report.
    unreported_repairs: VecDeque<u32>,
    source_since_repair: u32,
    latest: Option<Feedback>,
    last_progress_ns: u64,
    decisions: Vec<Decision>,
    /// Decisions are answered from outside ([`HandoffSender::defer_decisions`]).
    deferred: bool,
    /// The decision epoch waiting for an answer: its time, observation, mask.
    pending: Option<(u64, RepairObservation, ActionMask)>,
    /// Component timers (bench handoff); `None` costs nothing.
    timers: Option<Box<CoreTimers>>,
    stats: SenderStats,
}

impl std::fmt::Debug for HandoffSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffSender")
            .field("cfg", &self.cfg)
            .field("scheduler", &self.scheduler.name())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl HandoffSender {
    /// A sender for `payload` (block-major, `layout.total_bytes()` bytes) in
    /// `order`, scheduled by `scheduler`.
    pub fn new(
        cfg: SenderConfig,
        layout: BlockLayout,
        utilities: Arc<[f64]>,
        order: SourceOrder,
        payload: Arc<[u8]>,
        mut scheduler: Box<dyn RepairScheduler>,
    ) -> Result<Self, HandoffError> {
        check_utilities(&layout, &utilities)?;
        if payload.len() != layout.total_bytes() {
            return Err(HandoffError::PayloadSize {
                expected: layout.total_bytes(),
                got: payload.len(),
            });
        }
        if cfg.slot_ns == 0 || cfg.k == 0 {
            return Err(HandoffError::Config(
                "slot_ns and K must be positive".into(),
            ));
        }
        let n_source = layout.n_source_packets();
        let encoder = RlcEncoder::new(EncoderConfig {
            k: cfg.k,
            session: cfg.session,
            max_window: n_source.max(1),
            ..Default::default()
        })?;
        scheduler.reset();
        let max_utility = utilities.iter().copied().fold(0.0, f64::max);
        let total_utility = utilities.iter().sum();
        Ok(HandoffSender {
            sequence: source_sequence(order, &utilities),
            cfg,
            layout,
            utilities,
            max_utility,
            total_utility,
            payload,
            encoder,
            scheduler,
            n_source,
            next_slot: 0,
            burst: Burst::None,
            idle: false,
            frames_sent: 0,
            unreported_repairs: VecDeque::new(),
            source_since_repair: 0,
            latest: None,
            last_progress_ns: 0,
            decisions: Vec::new(),
            deferred: false,
            pending: None,
            timers: None,
            stats: SenderStats::default(),
        })
    }

    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    pub fn scheduler_name(&self) -> &str {
        self.scheduler.name()
    }

    /// The recorded decisions (empty unless `record_decisions`).
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Starts timing decisions and encoding (see [`crate::timing`]).
    pub fn enable_timers(&mut self) {
        self.timers = Some(Box::default());
    }

    /// The timers, if enabled (the harness adds feedback times to them).
    pub fn timers_mut(&mut self) -> Option<&mut CoreTimers> {
        self.timers.as_deref_mut()
    }

    /// Block ids in send order.
    pub fn sequence(&self) -> &[u32] {
        &self.sequence
    }

    fn slots_left(&self) -> u32 {
        u64::from(self.cfg.slots_total).saturating_sub(self.next_slot) as u32
    }

    fn source_left(&self) -> u32 {
        self.n_source - self.encoder.next_id()
    }

    /// Whether the sender has nothing more to do (all slots used).
    pub fn is_done(&self) -> bool {
        self.slots_left() == 0
    }

    /// When [`poll_transmit`](Self::poll_transmit) may next return a frame;
    /// From now on a decision epoch parks the sender until
    /// [`HandoffSender::apply_decision`] answers it, instead of asking the
    /// sender's scheduler (which then only decides when the answer is
    /// `None`: the fallback). For a policy outside the process, asked
    /// asynchronously, and for stepping one decision at a time.
    pub fn defer_decisions(&mut self) {
        self.deferred = true;
    }

    /// The decision epoch waiting for an answer: its observation and mask.
    pub fn pending_decision(&self) -> Option<(RepairObservation, ActionMask)> {
        self.pending.map(|(_, obs, mask)| (obs, mask))
    }

    /// Answers the pending decision epoch with `action` (`None`: the
    /// sender's own scheduler decides). A masked action is replaced by the
    /// first allowed one and counted, as a scheduler's would be. Without a
    /// pending epoch, nothing happens. Slots that passed while the decision
    /// was pending are lost (see [`HandoffSender::poll_transmit`]).
    pub fn apply_decision(&mut self, action: Option<RepairAction>) {
        let Some((at, obs, mask)) = self.pending.take() else {
            return;
        };
        let action = action.unwrap_or_else(|| self.scheduler.decide(&obs, mask));
        self.commit(at, obs, mask, action);
    }

    /// `None` while idle (waiting for feedback), waiting for a decision, or
    /// done.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.idle || self.pending.is_some() || self.is_done() {
            None
        } else {
            Some(self.next_slot.saturating_mul(self.cfg.slot_ns))
        }
    }

    /// The frame to send at `now`, if a slot is due and something is
    /// feasible. Call again until `None`.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.idle || self.pending.is_some() || self.is_done() {
            return None;
        }
        let slot_start = self.next_slot.saturating_mul(self.cfg.slot_ns);
        if now < slot_start {
            return None;
        }
        // Slots that passed while nobody polled are lost.
        let current = now / self.cfg.slot_ns;
        if current > self.next_slot {
            self.stats.slots_idle += (current - self.next_slot) as u32;
            self.next_slot = current;
            if self.is_done() {
                return None;
            }
        }
        for _ in 0..2 {
            if self.burst == Burst::None {
                self.decide(now);
                if self.idle || self.pending.is_some() {
                    return None;
                }
            }
            if let Some(frame) = self.emit() {
                self.next_slot += 1;
                return Some(frame);
            }
            self.burst = Burst::None;
        }
        // Nothing could be built for this slot (cannot happen with the masks
        // above, but never spin on one instant): give the slot up.
        self.next_slot += 1;
        self.stats.slots_idle += 1;
        None
    }

    fn emit(&mut self) -> Option<Vec<u8>> {
        let Some(t0) = self.timers.is_some().then(Instant::now) else {
            return self.emit_frame();
        };
        let frame = self.emit_frame();
        if let Some(t) = self.timers.as_deref_mut() {
            t.enc_ns += since(t0);
        }
        frame
    }

    fn emit_frame(&mut self) -> Option<Vec<u8>> {
        match self.burst {
            Burst::None => None,
            Burst::Source(n) => {
                let frame = self.next_source()?;
                self.burst = if n > 1 {
                    Burst::Source(n - 1)
                } else {
                    Burst::None
                };
                Some(frame)
            }
            Burst::Repair(n) => {
                if self.stats.repair_sent >= self.cfg.repair_budget {
                    return None;
                }
                let frame = self.encoder.repair(usize::from(self.cfg.k))?;
                self.burst = if n > 1 {
                    Burst::Repair(n - 1)
                } else {
                    Burst::None
                };
                self.unreported_repairs.push_back(frame.seq);
                self.stats.repair_sent += 1;
                self.source_since_repair = 0;
                self.frames_sent += 1;
                Some(frame.bytes)
            }
        }
    }

    fn next_source(&mut self) -> Option<Vec<u8>> {
        let id = self.encoder.next_id();
        if id >= self.n_source {
            return None;
        }
        let frags = u32::from(self.layout.fragments_per_block());
        let block = self.sequence[(id / frags) as usize];
        let fragment = (id % frags) as u16;
        let range = self.layout.fragment_range(fragment);
        let start = self.layout.block_range(block).start;
        let bytes = &self.payload[start + range.start..start + range.end];
        let frame = self.encoder.send_source(block, fragment, bytes).ok()?;
        self.stats.source_sent += 1;
        self.source_since_repair += 1;
        self.frames_sent += 1;
        Some(frame.bytes)
    }

    /// The estimated deficit `d`.
    fn deficit(&self) -> u32 {
        let reported = self.latest.map_or(0, |f| f.deficit);
        reported.saturating_sub(self.unreported_repairs.len() as u32)
    }

    /// The hard masks at this epoch.
    pub fn mask(&self) -> ActionMask {
        let t_rem = self.slots_left();
        let b_rem = self
            .cfg
            .repair_budget
            .saturating_sub(self.stats.repair_sent);
        let gate_open = self.encoder.window_len() > 0
            && match self.cfg.gate {
                RepairGate::Deficit => self.deficit() > 0,
                RepairGate::Window => true,
            };
        let mut m = [false; 4];
        m[0] = self.source_left() > 0 && t_rem > 0;
        for a in [
            RepairAction::Repair1,
            RepairAction::Repair4,
            RepairAction::Repair16,
        ] {
            let k = a.repair_packets();
            m[a.index()] = gate_open && b_rem >= k && t_rem >= k;
        }
        ActionMask(m)
    }

    /// The observation at `now` (see [`RepairObservation`] for the features).
    pub fn observation(&self, now: u64) -> RepairObservation {
        let fb = self.latest.unwrap_or_default();
        let n = self.n_source;
        let t_max = self.cfg.slots_total;
        let t_rem = self.slots_left();
        let src_rem = self.source_left();
        let b_total = self.cfg.repair_budget;
        let b_rem = b_total.saturating_sub(self.stats.repair_sent);
        let window = self.encoder.window_len();
        let d = self.deficit();
        let k = u32::from(self.cfg.k);
        let seen = fb.last_seq.map_or(0, |s| u64::from(s) + 1);
        let lost = fb.lost();
        let eps = if seen > 0 {
            f64::from(lost) / seen as f64
        } else {
            0.0
        };
        let mean_run = if fb.loss_runs > 0 {
            f64::from(lost) / f64::from(fb.loss_runs)
        } else {
            0.0
        };
        let unreported = (u64::from(self.frames_sent).saturating_sub(seen)) as u32;
        let rtt_slots = self.cfg.rtt_ns.div_ceil(self.cfg.slot_ns) as u32;

        // The current block: the one the next source packet belongs to (the
        // last one once all source is sent).
        let frags = u32::from(self.layout.fragments_per_block());
        let next = self.encoder.next_id().min(n.saturating_sub(1));
        let pos = (next / frags) as usize;
        let progress = if src_rem == 0 {
            1.0
        } else {
            f64::from(next % frags) / f64::from(frags)
        };
        let umax = self.max_utility.max(f64::MIN_POSITIVE);
        let u_cur = self
            .sequence
            .get(pos)
            .map_or(0.0, |&b| self.utilities[b as usize] / umax);
        let upcoming: Vec<f64> = self
            .sequence
            .iter()
            .skip(pos + 1)
            .take(8)
            .map(|&b| self.utilities[b as usize] / umax)
            .collect();
        let u_next = if upcoming.is_empty() {
            0.0
        } else {
            upcoming.iter().sum::<f64>() / upcoming.len() as f64
        };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let h_ack = ratio(
            now.saturating_sub(self.last_progress_ns) as f64,
            4.0 * self.cfg.rtt_ns as f64,
        );
        let raw = [
            ratio(f64::from(b_rem), f64::from(b_total)),
            ratio(f64::from(t_rem), f64::from(t_max)),
            f64::from(src_rem) / f64::from(t_rem.max(1)),
            0.5 + 0.5
                * ratio(f64::from(t_rem) - f64::from(src_rem), f64::from(t_max)).clamp(-1.0, 1.0),
            eps,
            if mean_run > 1.0 {
                1.0 - 1.0 / mean_run
            } else {
                0.0
            },
            f64::from(d) / f64::from(window.max(1)),
            f64::from(d) / f64::from(d.saturating_add(b_rem).max(1)),
            (1.0 + f64::from(window)).ln() / (1.0 + f64::from(n)).ln().max(f64::MIN_POSITIVE),
            f64::from(fb.unknowns) / f64::from(k),
            h_ack,
            progress,
            u_cur,
            u_next,
            if window == 0 {
                0.0
            } else {
                (1.0 - eps) * f64::from(k.min(window)) / f64::from(window)
            },
        ];
        let mut features = [0f32; N_FEATURES];
        for (f, r) in features.iter_mut().zip(raw) {
            *f = r.clamp(0.0, 1.0) as f32;
        }
        RepairObservation {
            features,
            n_source: n,
            source_left: src_rem,
            slots_left: t_rem,
            slots_total: t_max,
            budget_left: b_rem,
            budget_total: b_total,
            source_sent: self.stats.source_sent,
            repair_sent: self.stats.repair_sent,
            source_since_repair: self.source_since_repair,
            deficit: d,
            deficit_reported: fb.deficit,
            window,
            unreported,
            repairs_unreported: self.unreported_repairs.len() as u32,
            k,
            decoded_prefix: fb.cumulative,
            loss_estimate: eps,
            mean_loss_run: mean_run,
            rtt_slots,
        }
    }

    fn decide(&mut self, now: u64) {
        let t0 = self.timers.is_some().then(Instant::now);
        let mask = self.mask();
        if !mask.any() {
            self.idle = true;
            if let (Some(t0), Some(t)) = (t0, self.timers.as_deref_mut()) {
                t.state_ns += since(t0);
            }
            return;
        }
        let obs = self.observation(now);
        if self.deferred {
            self.pending = Some((now, obs, mask));
            return;
        }
        let t1 = t0.map(|_| Instant::now());
        let action = self.scheduler.decide(&obs, mask);
        if let (Some(t0), Some(t1), Some(t)) = (t0, t1, self.timers.as_deref_mut()) {
            let rl = since(t1);
            let state = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
            t.state_ns += state;
            t.rl_ns += rl;
            t.decision_ns.push(state + rl);
        }
        self.commit(now, obs, mask, action);
    }

    /// Starts the burst of `action`, decided at `now` on `obs` and `mask`.
    fn commit(&mut self, now: u64, obs: RepairObservation, mask: ActionMask, action: RepairAction) {
        let mut action = action;
        if !mask.allows(action) {
            self.stats.mask_violations += 1;
            action = mask.first_allowed().unwrap_or(RepairAction::Source);
        }
        self.stats.decisions += 1;
        if self.cfg.record_decisions {
            self.decisions.push(Decision {
                now_ns: now,
                obs,
                mask,
                action,
            });
        }
        self.burst = match action {
            RepairAction::Source => {
                Burst::Source(SOURCE_BURST.min(self.source_left()).min(self.slots_left()))
            }
            a => Burst::Repair(a.repair_packets()),
        };
    }

    /// Applies one feedback packet from the reverse link. Errors (malformed,
    /// other session, acknowledging what was never sent) leave the state
    /// unchanged.
    pub fn handle_feedback(&mut self, now: u64, bytes: &[u8]) -> Result<(), HandoffError> {
        let fb = Feedback::decode(bytes).inspect_err(|_| self.stats.feedback_rejected += 1)?;
        if fb.session != self.cfg.session {
            self.stats.feedback_rejected += 1;
            return Err(HandoffError::FeedbackInconsistent(
                "feedback of another session",
            ));
        }
        if fb.last_seq.is_some_and(|s| s >= self.frames_sent)
            || fb.highest_seen.is_some_and(|h| h >= self.encoder.next_id())
        {
            self.stats.feedback_rejected += 1;
            return Err(HandoffError::FeedbackInconsistent(
                "feedback reports frames never sent",
            ));
        }
        if self.latest.is_some_and(|l| l.report >= fb.report) {
            self.stats.feedback_stale += 1;
            return Ok(());
        }
        let freed = self.encoder.on_cumulative_ack(fb.cumulative)?;
        if freed > 0 {
            self.last_progress_ns = now;
        }
        if let Some(s) = fb.last_seq {
            while self.unreported_repairs.front().is_some_and(|&r| r <= s) {
                self.unreported_repairs.pop_front();
            }
        }
        self.latest = Some(fb);
        self.stats.feedback_received += 1;
        if self.idle {
            self.idle = false;
            self.next_slot = self.next_slot.max(now.div_ceil(self.cfg.slot_ns));
        }
        Ok(())
    }

    /// Utility of the blocks wholly inside the acknowledged prefix over the
    /// total: what the sender knows is recovered (a lower bound of J^KV).
    pub fn acked_utility(&self) -> f64 {
        let prefix = self.latest.map_or(0, |f| f.cumulative);
        let whole = (prefix / u32::from(self.layout.fragments_per_block())) as usize;
        let got: f64 = self.sequence[..whole.min(self.sequence.len())]
            .iter()
            .map(|&b| self.utilities[b as usize])
            .sum();
        got / self.total_utility
    }

    /// Payload bytes per source frame (the layout's fragment size bound).
    pub const MAX_FRAGMENT: usize = MAX_PAYLOAD;
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_policies::repair::{DeficitHeuristic, FixedRate};

    fn sender(gate: RepairGate, budget: u32, slots: u32) -> HandoffSender {
        // 2 blocks of 3 fragments: 6 source packets.
        let layout = BlockLayout::new(1, 32, 16, 3000).unwrap();
        let scheduler: Box<dyn RepairScheduler> = match gate {
            RepairGate::Deficit => Box::new(DeficitHeuristic),
            RepairGate::Window => Box::new(FixedRate {
                sources_per_repair: 2,
            }),
        };
        HandoffSender::new(
            SenderConfig {
                session: 0,
                k: 4,
                slot_ns: 100,
                slots_total: slots,
                repair_budget: budget,
                rtt_ns: 1000,
                gate,
                record_decisions: true,
            },
            layout,
            vec![1.0, 2.0].into(),
            SourceOrder::Priority,
            vec![0u8; layout.total_bytes()].into(),
            scheduler,
        )
        .unwrap()
    }

    fn feedback(
        report: u32,
        cumulative: u32,
        highest: u32,
        unknowns: u32,
        last_seq: u32,
    ) -> Vec<u8> {
        Feedback {
            session: 0,
            report,
            cumulative,
            highest_seen: Some(highest),
            equations: 0,
            unknowns,
            deficit: unknowns,
            last_seq: Some(last_seq),
            received: last_seq + 1 - unknowns,
            loss_runs: u32::from(unknowns > 0),
            innovative: 0,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn masks_follow_source_budget_slots_and_deficit() {
        let mut s = sender(RepairGate::Deficit, 5, 100);
        // Nothing sent: source only (no window, no deficit).
        assert_eq!(s.mask(), ActionMask([true, false, false, false]));
        // Priority order: block 1 (utility 2) first.
        assert_eq!(s.sequence(), &[1, 0]);
        for t in 0..6 {
            assert!(s.poll_transmit(t * 100).is_some());
        }
        assert_eq!(s.stats().source_sent, 6);
        // Source exhausted, no deficit: nothing feasible, the sender idles.
        assert_eq!(s.mask(), ActionMask([false; 4]));
        assert_eq!(s.poll_transmit(600), None);
        assert_eq!(s.poll_timeout(), None);
        // A reported deficit of 2 opens repair of 1 and 4 (budget 5 < 16)
        // and wakes the sender at the next slot boundary.
        s.handle_feedback(650, &feedback(1, 0, 5, 2, 5)).unwrap();
        assert_eq!(s.mask(), ActionMask([false, true, true, false]));
        assert_eq!(s.poll_timeout(), Some(700));
        assert!(s.poll_transmit(700).is_some());
        // The heuristic sized the burst to d = 2 → 1 repair; the estimate
        // now nets it out.
        assert_eq!(s.stats().repair_sent, 1);
        let obs = s.observation(800);
        assert_eq!(
            (obs.deficit_reported, obs.deficit, obs.repairs_unreported),
            (2, 1, 1)
        );
        // A stale report changes nothing; a report from the future is refused.
        s.handle_feedback(800, &feedback(1, 0, 5, 0, 5)).unwrap();
        assert_eq!(s.stats().feedback_stale, 1);
        assert!(s.handle_feedback(800, &feedback(2, 0, 5, 0, 9)).is_err());
        assert!(s.decisions().iter().all(|d| d.mask.allows(d.action)));
    }

    #[test]
    fn slot_limit_and_window_gate() {
        let mut s = sender(RepairGate::Window, 3, 10);
        let mut kinds = Vec::new();
        let mut t = 0;
        while let Some(next) = s.poll_timeout() {
            t = t.max(next);
            if let Some(f) = s.poll_transmit(t) {
                kinds.push(f[2]);
            }
        }
        // One source burst of all 6 (a burst is up to 8 whatever the rate),
        // then the tail flush: repairs over the unacknowledged window until
        // the budget of 3 is spent; the last slot passes unused.
        assert_eq!(kinds, vec![0, 0, 0, 0, 0, 0, 1, 1, 1]);
        assert_eq!(s.stats().repair_sent, 3);
        assert!(s.poll_timeout().is_none());
    }

    #[test]
    fn potential_rewards_progress_and_penalizes_deficit() {
        let base = RepairObservation {
            n_source: 100,
            budget_left: 10,
            window: 10,
            decoded_prefix: 50,
            ..Default::default()
        };
        let w = PotentialWeights::default();
        let f0 = shaping_potential(&base, &w);
        let more = RepairObservation {
            decoded_prefix: 60,
            ..base
        };
        let deficit = RepairObservation { deficit: 5, ..base };
        assert!(shaping_potential(&more, &w) > f0);
        assert!(shaping_potential(&deficit, &w) < f0);
    }
}
