//! [`PacedSender`]: the handoff sender core driven by exact run times, for
//! a shell whose clock may run ahead of the slots it commits.
//!
//! The co-simulation harness steps the sender at two kinds of instants: its
//! own slot times ([`HandoffSender::poll_timeout`]) and the arrival times of
//! feedback (after delivering every feedback due by then). An actor cannot
//! wake at every 112 µs slot (tokio's paused clock wakes in whole
//! milliseconds) and a feedback reaches it some time after its arrival time
//! stamp. So the shell buffers feedback with its exact arrival time
//! (`Deliver::recv_ns`) and, when woken, replays the harness's order of
//! events up to a *horizon*: every instant `t ≤ horizon` at which the
//! harness would act, feedback due by `t` first, then the slots due at `t`,
//! each frame stamped with its exact send time (the link actor offers it
//! at that time, [`crate::link_actor::OfferAt`]).
//!
//! **Conservative lookahead.** The horizon is the clock minus a lookahead
//! `L`: a feedback stamped `d ≤ now − L` has then been delivered, provided
//! the frame that caused it left at least `L` before it arrived (forward
//! one-way delay ≥ `L`) and the clock's quantum is below `L`. In virtual
//! time `L` = 2 ms (a 1 ms timer quantum plus one for the hops of the same
//! instant); with it the sender makes exactly the harness's decisions. In
//! real time `L` = 0: feedback is used as soon as it is there, which is what
//! a real sender does.
//!
//! **Deferred decisions** (an external repair policy): the core parks at a
//! decision epoch ([`PacedSender::pending_decision`]) and sends nothing
//! until the shell answers ([`PacedSender::apply_decision`]) with the run
//! time the answer came. Replay then resumes at that time, not at the
//! epoch's: the slots that passed while the decision was out are lost, as
//! they would be for a sender waiting on a slow policy.

use std::collections::VecDeque;

use edgemu_handoff::HandoffSender;

/// A sender core with its handoff start `t0` (run ns) and buffered feedback.
#[derive(Debug)]
pub struct PacedSender {
    core: HandoffSender,
    t0: u64,
    /// Deadline D (core ns): nothing is committed after it.
    deadline: u64,
    /// (core ns of arrival, bytes), in arrival order.
    feedback: VecDeque<(u64, Vec<u8>)>,
    /// No slot is replayed before this core time (the last deferred
    /// decision's answer).
    not_before: u64,
}

impl PacedSender {
    pub fn new(core: HandoffSender, t0_ns: u64, deadline_ns: u64) -> Self {
        PacedSender {
            core,
            t0: t0_ns,
            deadline: deadline_ns,
            feedback: VecDeque::new(),
            not_before: 0,
        }
    }

    /// The decision epoch the core is parked at (deferred decisions only).
    pub fn pending_decision(
        &self,
    ) -> Option<(
        edgemu_policies::repair::RepairObservation,
        edgemu_policies::repair::ActionMask,
    )> {
        self.core.pending_decision()
    }

    /// Answers the pending epoch (`None`: the core's own scheduler
    /// decides). With `resume_ns`, the run time the answer came after a
    /// wait, replay resumes there; without, at the epoch (nothing waited).
    pub fn apply_decision(
        &mut self,
        resume_ns: Option<u64>,
        action: Option<edgemu_policies::repair::RepairAction>,
    ) {
        self.core.apply_decision(action);
        if let Some(at) = resume_ns {
            self.not_before = self.not_before.max(at.saturating_sub(self.t0));
        }
    }

    /// The core's next slot time, not before the last answer.
    fn slot_due(&self) -> Option<u64> {
        self.core.poll_timeout().map(|t| t.max(self.not_before))
    }

    pub fn core(&self) -> &HandoffSender {
        &self.core
    }

    pub fn start_ns(&self) -> u64 {
        self.t0
    }

    /// Buffers a feedback that arrived at run time `recv_ns`.
    pub fn feedback(&mut self, recv_ns: u64, bytes: Vec<u8>) {
        let t = recv_ns.saturating_sub(self.t0);
        // Links do not reorder; keep arrival order even if one did.
        let at = self.feedback.partition_point(|(u, _)| *u <= t);
        self.feedback.insert(at, (t, bytes));
    }

    /// The next run time at which [`pump`](Self::pump) has something to do.
    pub fn next_event_ns(&self) -> Option<u64> {
        let t = [self.slot_due(), self.feedback.front().map(|f| f.0)]
            .into_iter()
            .flatten()
            .min()?;
        (t <= self.deadline).then(|| self.t0 + t)
    }

    /// Whether the handoff's sending is over (deadline passed or all slots
    /// used, no feedback left to apply, no decision pending).
    pub fn is_done(&self) -> bool {
        self.next_event_ns().is_none() && self.core.pending_decision().is_none()
    }

    /// Replays every event at or before run time `horizon_ns` (module docs);
    /// the frames to send go to `out` as (run send time, bytes).
    pub fn pump(&mut self, horizon_ns: u64, out: &mut Vec<(u64, Vec<u8>)>) {
        let Some(h) = horizon_ns.checked_sub(self.t0) else {
            return;
        };
        let h = h.min(self.deadline);
        loop {
            let t = [self.slot_due(), self.feedback.front().map(|f| f.0)]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = t.filter(|&t| t <= h) else {
                break;
            };
            let before = (out.len(), self.feedback.len(), self.core.poll_timeout());
            while self.feedback.front().is_some_and(|f| f.0 <= t) {
                if let Some((at, fb)) = self.feedback.pop_front() {
                    // A rejected report is counted by the core.
                    let _ = self.core.handle_feedback(at, &fb);
                }
            }
            while let Some(frame) = self.core.poll_transmit(t) {
                out.push((self.t0 + t, frame));
            }
            if before == (out.len(), self.feedback.len(), self.core.poll_timeout()) {
                // The core did not move: nothing more is due by `h`.
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_handoff::HandoffScenario;
    use edgemu_handoff::{placeholder_utilities, synthetic_payload, BlockLayout, Deadline};
    use edgemu_links::{LinkParams, RateSpec};
    use edgemu_policies::repair::DeficitHeuristic;

    const T0: u64 = 1_000_000_000;

    fn sender(deferred: bool) -> (PacedSender, u64) {
        let layout = BlockLayout::for_model(2, 2, 16, 2, 256).unwrap();
        let link = LinkParams {
            rate: RateSpec::Fixed { bps: 100_000_000 },
            delay_ns: 5_000_000,
            ..LinkParams::default()
        };
        let s = HandoffScenario::over_link(
            layout,
            placeholder_utilities(&layout).into(),
            synthetic_payload(&layout, 1),
            link.clone(),
            link,
            Deadline::Rho(2.0),
        )
        .unwrap();
        let spec = edgemu_handoff::scheme("priorityfec").unwrap();
        let mut core = s
            .sender(spec, true, Box::new(DeficitHeuristic), false)
            .unwrap();
        if deferred {
            core.defer_decisions();
        }
        (PacedSender::new(core, T0, s.deadline_ns()), s.slot_ns())
    }

    /// Pumps to `horizon`, answering each parked epoch with the sender's own
    /// scheduler, resuming at `resume(epoch wake)`.
    fn run(deferred: bool, resume: impl Fn(u64) -> Option<u64>) -> (Vec<(u64, Vec<u8>)>, u32) {
        let (mut p, _) = sender(deferred);
        let mut out = Vec::new();
        let mut now = T0;
        let mut parked = 0;
        for _ in 0..100_000 {
            p.pump(now, &mut out);
            if p.pending_decision().is_some() {
                parked += 1;
                assert!(p.next_event_ns().is_none(), "nothing due while parked");
                assert!(!p.is_done(), "a parked sender is not done");
                p.apply_decision(resume(now), None);
                continue;
            }
            match p.next_event_ns() {
                Some(t) => now = t.max(now),
                None => break,
            }
        }
        assert!(p.is_done());
        (out, parked)
    }

    #[test]
    fn deferred_decisions_answered_at_once_send_what_the_sender_alone_sends() {
        let (plain, none) = run(false, |_| None);
        assert_eq!(none, 0);
        let (deferred, parked) = run(true, |_| None);
        assert!(parked > 0, "epochs were deferred");
        assert!(!plain.is_empty());
        assert_eq!(plain, deferred, "same frames at the same times");
    }

    #[test]
    fn an_answer_that_took_time_loses_the_slots_that_passed() {
        let (_, slot_ns) = sender(false);
        let (plain, _) = run(false, |_| None);
        // Each answer takes three slots.
        let (slow, parked) = run(true, |at| Some(at + 3 * slot_ns));
        assert!(parked > 0);
        // Frames leave later than without the wait, in time order.
        let last = |v: &[(u64, Vec<u8>)]| v.last().map(|f| f.0).unwrap_or(0);
        assert!(
            last(&slow) >= last(&plain) + 3 * slot_ns,
            "{} vs {}",
            last(&slow),
            last(&plain)
        );
        assert!(slow.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
