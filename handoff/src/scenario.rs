//! Handoff scenario assembly: everything that fixes one handoff except the
//! scheme and the channel's seed — the transport blocks (layout, per-block
//! utilities, KV payload), the two link directions, the deadline, the coding
//! window K, the repair budget and the feedback rate — and the sender and
//! receiver cores built from it. The co-simulation harness
//! ([`crate::harness`]), the experiments, the trainer and the live agent
//! actors all assemble their handoffs here, so each runs the same
//! configuration for the same inputs.
//!
//! **Deadline and slots** (paper §V-A): `T_ser = N · t_slot`, the
//! serialization time of the N source frames with one full 1400-byte frame
//! per slot (`t_slot = 1400·8 / C`, 112 µs at 100 Mb/s), and
//! `D = T_ow + ρ·T_ser` with `T_ow` the forward one-way delay. The sender's
//! slot budget is `T_max = ⌊(D − T_ow)/t_slot⌋ = ⌊ρN⌋`: exactly the frames
//! whose arrival (slot end + T_ow) is at or before D. So ρ = 1 leaves room for
//! every source frame and no repair, ρ = 0.8 for 80 % of them.
//!
//! A handoff task over an emulated link ([`HandoffScenario::over_link`])
//! gives its deadline either as ρ or as a time-to-first-token budget D after
//! the start ([`Deadline`]), which is ρ = (D − T_ow)/T_ser.

use std::sync::Arc;

use edgemu_codec::fec::FRAME_SIZE;
use edgemu_links::time::NS_PER_S;
use edgemu_links::{paper_channel, LinkParams, LossSpec, RateSpec};
use edgemu_policies::repair::RepairScheduler;

use crate::blocks::{check_utilities, BlockLayout};
use crate::error::HandoffError;
use crate::receiver::{HandoffReceiver, ReceiverConfig};
use crate::scheme::SchemeSpec;
use crate::sender::{HandoffSender, RepairGate, SenderConfig};

/// When a handoff must be decodable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    /// The normalized deadline ρ = (D − T_ow)/T_ser itself.
    Rho(f64),
    /// D, in ns after the handoff starts.
    Ttft(u64),
}

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
    /// The handoff's id on the wire (every frame and feedback carries it,
    /// so a receiver tells one handoff's packets from another's).
    pub session: u32,
}

/// Defaults of a scenario: K = 256, above the bandwidth-delay product of the
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
    /// The blocks over `forward` and `reverse` at nominal rate `rate_bps`,
    /// ρ = 1, handoff id (`session`) 0, and the defaults for K, the repair budget and
    /// feedback.
    fn assemble(
        (layout, utilities, payload): (BlockLayout, Arc<[f64]>, Arc<[u8]>),
        forward: LinkParams,
        reverse: LinkParams,
        rate_bps: u64,
    ) -> Self {
        HandoffScenario {
            layout,
            utilities,
            payload,
            forward,
            reverse,
            rate_bps,
            rho: 1.0,
            k: DEFAULT_K,
            budget_fraction: DEFAULT_BUDGET_FRACTION,
            feedback_every: DEFAULT_FEEDBACK_EVERY,
            session: 0,
        }
    }

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
        let blocks = (layout, utilities, payload);
        HandoffScenario {
            rho,
            session: 1,
            ..Self::assemble(blocks, dir(loss), dir(LossSpec::None), rate_bps)
        }
    }

    /// The paper's main setting ([`paper_channel`]): 100 Mb/s, 20 ms RTT,
    /// GE (0.001, 0.5, 0.02, 0.1).
    pub fn paper(layout: BlockLayout, utilities: Arc<[f64]>, payload: Arc<[u8]>, rho: f64) -> Self {
        Self::symmetric(
            layout,
            utilities,
            payload,
            paper_channel::RATE_BPS,
            paper_channel::RTT_NS,
            paper_channel::ge_loss(),
            rho,
        )
    }

    /// A handoff over one emulated link, as the live agents run it
    /// (`cluster.toml`'s handoff tasks): the given directions, the nominal
    /// rate C of the forward direction's fixed rate, ρ from `deadline`, and
    /// the defaults for K, the repair budget and feedback. A forward
    /// direction without a positive fixed rate has no T_ser to pace by and is
    /// refused.
    pub fn over_link(
        layout: BlockLayout,
        utilities: Arc<[f64]>,
        payload: Arc<[u8]>,
        forward: LinkParams,
        reverse: LinkParams,
        deadline: Deadline,
    ) -> Result<Self, HandoffError> {
        let rate_bps = match forward.rate {
            RateSpec::Fixed { bps } if bps > 0 => bps,
            _ => {
                return Err(HandoffError::Config(
                    "the forward link has no fixed rate to pace by".into(),
                ))
            }
        };
        let mut s = Self::assemble((layout, utilities, payload), forward, reverse, rate_bps);
        s.rho = match deadline {
            Deadline::Rho(rho) => rho,
            Deadline::Ttft(d) => {
                d.saturating_sub(s.forward.delay_ns) as f64 / s.serialization_ns().max(1) as f64
            }
        };
        Ok(s)
    }

    /// One slot: a full frame at the nominal rate, ns (rounded up).
    pub fn slot_ns(&self) -> u64 {
        (FRAME_SIZE as u64 * 8 * NS_PER_S).div_ceil(self.rate_bps.max(1))
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
    /// The sender core of this scenario under `spec` (what
    /// [`crate::harness::run_handoff`] drives; the agent actors build theirs
    /// here too, so both run the same configuration). `repairs` false gives a zero repair budget (the
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::placeholder_utilities;
    use crate::harness::synthetic_payload;
    use crate::scheme::scheme;

    /// 2 layers × 64 tokens of SmolLM2-sized blocks: 8 blocks, 72 source
    /// packets.
    fn blocks() -> (BlockLayout, Arc<[f64]>, Arc<[u8]>) {
        let l = BlockLayout::new(2, 64, 16, 12_288).unwrap();
        (
            l,
            placeholder_utilities(&l).into(),
            synthetic_payload(&l, 3),
        )
    }

    #[test]
    fn the_paper_setting_gives_the_papers_slots_and_deadline() {
        let (l, u, p) = blocks();
        let s = HandoffScenario::paper(l, u, p, 0.8);
        assert_eq!(s.slot_ns(), 112_000, "1400 B at 100 Mb/s");
        assert_eq!(s.serialization_ns(), 72 * 112_000);
        assert_eq!(s.forward.delay_ns, 10_000_000);
        assert_eq!(s.forward.loss, paper_channel::ge_loss());
        assert_eq!(s.reverse.loss, LossSpec::None);
        // D = T_ow + ρ·T_ser; the sender may use ⌊ρN⌋ slots.
        assert_eq!(s.deadline_ns(), 10_000_000 + 6_451_200);
        assert_eq!(s.slots_total(), 57);
        let c = s.receiver_config();
        assert_eq!(
            (c.deadline_ns, c.max_repair_count),
            (s.deadline_ns(), DEFAULT_K)
        );
    }

    fn link(rate: RateSpec) -> LinkParams {
        LinkParams {
            rate,
            delay_ns: 5_000_000,
            ..LinkParams::default()
        }
    }

    #[test]
    fn a_link_handoff_takes_its_rate_and_its_deadline_from_the_task() {
        let (l, u, p) = blocks();
        let fixed = link(RateSpec::Fixed { bps: 50_000_000 });
        let over = |forward: LinkParams, deadline| {
            HandoffScenario::over_link(
                l,
                Arc::clone(&u),
                Arc::clone(&p),
                forward,
                fixed.clone(),
                deadline,
            )
        };
        let s = over(fixed.clone(), Deadline::Rho(0.9)).unwrap();
        assert_eq!((s.rate_bps, s.rho, s.k), (50_000_000, 0.9, DEFAULT_K));
        assert_eq!(s.slot_ns(), 224_000);
        // A TTFT budget of T_ow + half of T_ser is ρ = 0.5.
        let t_ser = 72 * 224_000;
        let s = over(fixed.clone(), Deadline::Ttft(5_000_000 + t_ser / 2)).unwrap();
        assert_eq!(s.rho, 0.5);
        assert_eq!(s.deadline_ns(), 5_000_000 + t_ser / 2);
        // A budget shorter than the one-way delay leaves ρ = 0: no sender.
        let s = over(fixed.clone(), Deadline::Ttft(1_000_000)).unwrap();
        assert_eq!(s.rho, 0.0);
        let spec = scheme("priority-fixed-fec").unwrap();
        assert!(matches!(
            s.sender(spec, true, spec.scheduler(None).unwrap(), false),
            Err(HandoffError::Config(_))
        ));
        for rate in [RateSpec::Unlimited, RateSpec::Fixed { bps: 0 }] {
            let e = over(link(rate), Deadline::Rho(1.0));
            assert!(matches!(e, Err(HandoffError::Config(_))), "{e:?}");
        }
    }

    #[test]
    fn cores_are_built_only_from_a_consistent_scenario() {
        let (l, u, p) = blocks();
        let spec = scheme("priorityfec").unwrap();
        let build = |s: &HandoffScenario| {
            let sched = Box::new(edgemu_policies::repair::DeficitHeuristic);
            s.sender(spec, true, sched, false).map(|_| ())
        };
        let s = HandoffScenario::paper(l, Arc::clone(&u), Arc::clone(&p), 1.0);
        assert!(build(&s).is_ok() && s.receiver().is_ok());
        let mut bad = s.clone();
        bad.utilities = vec![1.0; 3].into();
        assert!(build(&bad).is_err() && bad.receiver().is_err());
        let mut bad = s.clone();
        bad.budget_fraction = f64::NAN;
        assert!(build(&bad).is_err());
        let mut bad = s;
        bad.rho = f64::INFINITY;
        assert!(build(&bad).is_err());
    }
}
