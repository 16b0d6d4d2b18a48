//! The rule-based repair schedulers the paper compares against, and the
//! deficit heuristic that seeds the DDQN replay memory.
//!
//! Every rule returns an action its mask allows (falling back to the first
//! allowed one), so the sender never has to override it.
//!
//! Which repairs a rule can send also depends on the *repair gate* of its
//! scheme (in `edgemu-handoff`'s scheme registry): the paper's hard mask
//! allows repair only when the estimated deficit is positive (DDQN, deficit
//! heuristic); proactive schemes (fixed-rate FEC, FlEC-RT) may repair whenever
//! the unacknowledged window is not empty, since the losses they protect
//! against have not been reported yet.

use super::{ActionMask, RepairAction, RepairObservation, RepairScheduler};

/// The repair burst that covers `need` packets: 16 from 16 on, 4 from 4 on,
/// else 1 — the largest allowed one not above that.
fn burst_for(need: f64, mask: ActionMask) -> Option<RepairAction> {
    let k = if need >= 16.0 {
        16
    } else if need >= 4.0 {
        4
    } else {
        1
    };
    mask.largest_repair_up_to(k)
}

fn fallback(mask: ActionMask) -> RepairAction {
    mask.first_allowed().unwrap_or(RepairAction::Source)
}

/// No repair at all: always the next source burst (UDP, Priority-only). Its
/// schemes run with a zero repair budget, so repair is masked anyway.
#[derive(Debug, Clone, Default)]
pub struct NoRepair;

impl RepairScheduler for NoRepair {
    fn name(&self) -> &str {
        "no-repair"
    }

    fn decide(&mut self, _obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        if mask.allows(RepairAction::Source) {
            RepairAction::Source
        } else {
            fallback(mask)
        }
    }
}

/// A fixed repair rate: one repair packet after every `sources_per_repair`
/// source packets, whatever the feedback says (Uniform FEC, Priority+Fixed
/// FEC). Once the source is exhausted it keeps sending single repairs over the
/// remaining window while budget, slots and unacknowledged packets remain (the
/// tail flush of streaming FEC; nothing else could use those slots).
///
/// The default rate, one repair per 8 sources (11.1 % of the stream), is the
/// smallest `1/n` above the paper channel's 8.42 % mean loss: a fixed code
/// sized to the average loss, as a non-adaptive sender would configure it.
/// Bursts that exceed it are exactly what adaptive repair is for.
#[derive(Debug, Clone)]
pub struct FixedRate {
    pub sources_per_repair: u32,
}

impl Default for FixedRate {
    fn default() -> Self {
        FixedRate {
            sources_per_repair: 8,
        }
    }
}

impl RepairScheduler for FixedRate {
    fn name(&self) -> &str {
        "fixed-rate"
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        let due = obs.source_since_repair >= self.sources_per_repair.max(1);
        if (due || !mask.allows(RepairAction::Source)) && mask.allows(RepairAction::Repair1) {
            return RepairAction::Repair1;
        }
        if mask.allows(RepairAction::Source) {
            return RepairAction::Source;
        }
        fallback(mask)
    }
}

/// FlEC-RT: FIFO streaming FEC whose repairs are triggered by feedback, the
/// loss and burst estimates and the remaining deadline, without any knowledge
/// of KV utility. Our adaptation of FlEC (Michel et al., "FlEC: Enhancing QUIC
/// with application-tailored reliability mechanisms") to a deadline:
///
/// * **reactive**: a reported deficit `d > 0` is repaired at once, the burst
///   sized to `d·(1 + β)` (β the burst tendency, so bursty channels get extra
///   margin for repairs lost in the same burst);
/// * **proactive near the deadline**: once at most one RTT of slots remains,
///   feedback on what is sent can no longer come back in time, so the
///   expected losses among unreported frames are protected as well:
///   `need = d_reported + ε̂·unreported − repairs_unreported`, sized the same
///   way;
/// * **after the source**: spare slots go to repair of what is unresolved.
///
/// FlEC's own bulk mode also adds redundancy at a rate tracking ε̂; here a
/// repair is sent only when `need ≥ 1/2`, which keeps its overhead at the
/// estimated loss rather than a configured rate.
#[derive(Debug, Clone, Default)]
pub struct FlecRt;

impl RepairScheduler for FlecRt {
    fn name(&self) -> &str {
        "flec-rt"
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        let eps = obs.loss_estimate.clamp(0.0, 1.0);
        let beta = if obs.mean_loss_run > 1.0 {
            1.0 - 1.0 / obs.mean_loss_run
        } else {
            0.0
        };
        let d = f64::from(obs.deficit);
        let near_deadline = obs.slots_left <= obs.rtt_slots;
        let source_done = !mask.allows(RepairAction::Source);
        let need = if near_deadline || source_done {
            f64::from(obs.deficit_reported) + eps * f64::from(obs.unreported)
                - f64::from(obs.repairs_unreported)
        } else {
            d
        };
        if need >= 0.5 || source_done {
            if let Some(a) = burst_for(need * (1.0 + beta), mask) {
                return a;
            }
        }
        if mask.allows(RepairAction::Source) {
            return RepairAction::Source;
        }
        fallback(mask)
    }
}

/// The deficit heuristic: repair whenever the estimated deficit is positive,
/// with the burst that covers it (16 for d ≥ 16, 4 for d ≥ 4, else 1),
/// otherwise send source. Its trajectories seed the DDQN replay memory.
#[derive(Debug, Clone, Default)]
pub struct DeficitHeuristic;

impl RepairScheduler for DeficitHeuristic {
    fn name(&self) -> &str {
        "deficit-heuristic"
    }

    fn decide(&mut self, obs: &RepairObservation, mask: ActionMask) -> RepairAction {
        if obs.deficit > 0 {
            if let Some(a) = burst_for(f64::from(obs.deficit), mask) {
                return a;
            }
        }
        if mask.allows(RepairAction::Source) {
            return RepairAction::Source;
        }
        fallback(mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: ActionMask = ActionMask([true; 4]);
    const SOURCE_ONLY: ActionMask = ActionMask([true, false, false, false]);
    const REPAIR_ONLY: ActionMask = ActionMask([false, true, true, false]);

    fn obs() -> RepairObservation {
        RepairObservation {
            n_source: 1000,
            source_left: 500,
            slots_left: 800,
            slots_total: 1000,
            budget_left: 100,
            budget_total: 100,
            rtt_slots: 180,
            k: 64,
            ..Default::default()
        }
    }

    #[test]
    fn every_rule_stays_inside_its_mask() {
        let mut rules: Vec<Box<dyn RepairScheduler>> = vec![
            Box::new(NoRepair),
            Box::new(FixedRate::default()),
            Box::new(FlecRt),
            Box::new(DeficitHeuristic),
        ];
        for deficit in [0, 1, 5, 40] {
            for since in [0, 8, 20] {
                let o = RepairObservation {
                    deficit,
                    source_since_repair: since,
                    unreported: 150,
                    loss_estimate: 0.08,
                    mean_loss_run: 3.0,
                    ..obs()
                };
                for mask in [ALL, SOURCE_ONLY, REPAIR_ONLY] {
                    for r in &mut rules {
                        let a = r.decide(&o, mask);
                        assert!(mask.allows(a), "{} chose {a:?} under {mask:?}", r.name());
                    }
                }
            }
        }
    }

    #[test]
    fn deficit_heuristic_sizes_bursts() {
        let mut h = DeficitHeuristic;
        let at = |d| RepairObservation {
            deficit: d,
            ..obs()
        };
        assert_eq!(h.decide(&at(0), ALL), RepairAction::Source);
        assert_eq!(h.decide(&at(1), ALL), RepairAction::Repair1);
        assert_eq!(h.decide(&at(7), ALL), RepairAction::Repair4);
        assert_eq!(h.decide(&at(30), ALL), RepairAction::Repair16);
        // 16 masked (budget): the largest allowed below.
        assert_eq!(h.decide(&at(30), REPAIR_ONLY), RepairAction::Repair4);
    }

    #[test]
    fn fixed_rate_repairs_every_eighth() {
        let mut f = FixedRate::default();
        let at = |s| RepairObservation {
            source_since_repair: s,
            ..obs()
        };
        assert_eq!(f.decide(&at(7), ALL), RepairAction::Source);
        assert_eq!(f.decide(&at(8), ALL), RepairAction::Repair1);
        assert_eq!(f.decide(&at(0), REPAIR_ONLY), RepairAction::Repair1);
    }

    #[test]
    fn flec_is_reactive_then_proactive_near_the_deadline() {
        let mut f = FlecRt;
        let far = RepairObservation {
            unreported: 180,
            loss_estimate: 0.08,
            ..obs()
        };
        assert_eq!(f.decide(&far, ALL), RepairAction::Source);
        let reported = RepairObservation { deficit: 5, ..far };
        assert_eq!(f.decide(&reported, ALL), RepairAction::Repair4);
        let near = RepairObservation {
            slots_left: 150,
            source_left: 10,
            repairs_unreported: 2,
            ..far
        };
        // 0.08 · 180 − 2 = 12.4 expected unprotected losses in flight.
        assert_eq!(f.decide(&near, ALL), RepairAction::Repair4);
    }
}
