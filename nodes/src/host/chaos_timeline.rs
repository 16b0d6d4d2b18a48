//! The chaos timeline of one host as a plain state machine: which
//! `[[chaos]]` entries fire when.
//!
//! Repeats are expanded lazily: every entry has at most one pending firing,
//! and firing a repeating entry schedules only its next occurrence
//! (`at + every`, while that is before the end of the run). The memory and
//! timers a timeline holds are therefore bounded by the number of entries,
//! whatever their period (the config also refuses periods below
//! [`edgemu_config::MIN_EVERY_NS`]). The supervisor keeps one timer, for
//! [`ChaosTimeline::next_due`].

use edgemu_config::ChaosSpec;
use std::collections::BTreeSet;

pub struct ChaosTimeline {
    specs: Vec<ChaosSpec>,
    /// (next firing time, position in `specs`), one per live entry.
    pending: BTreeSet<(u64, usize)>,
    end_ns: u64,
}

impl ChaosTimeline {
    /// A timeline over `specs` for a run that ends at `end_ns`.
    pub fn new(specs: Vec<ChaosSpec>, end_ns: u64) -> Self {
        let pending = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.at_ns, i))
            .collect();
        ChaosTimeline {
            specs,
            pending,
            end_ns,
        }
    }

    /// When the next entry fires (None once nothing is left).
    pub fn next_due(&self) -> Option<u64> {
        self.pending.first().map(|&(at, _)| at)
    }

    /// Pending firings: never more than the number of entries.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes every entry due at `now` (in time order, each at most once) and
    /// schedules the next occurrence of the repeating ones after `now`: a
    /// host woken late skips the occurrences it missed instead of firing a
    /// backlog.
    pub fn take_due(&mut self, now_ns: u64) -> Vec<ChaosSpec> {
        let mut out = Vec::new();
        let mut again = Vec::new();
        while let Some(&(at, i)) = self.pending.first() {
            if at > now_ns {
                break;
            }
            self.pending.pop_first();
            let spec = &self.specs[i];
            out.push(spec.clone());
            if let Some(every) = spec.every_ns.filter(|&e| e > 0) {
                let missed = (now_ns - at) / every;
                let next = at.saturating_add(every.saturating_mul(missed.saturating_add(1)));
                if next < self.end_ns {
                    again.push((next, i));
                }
            }
        }
        self.pending.extend(again);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_config::command::{Command, NoKeys, Resolved};

    fn spec(index: usize, at_ns: u64, every_ns: Option<u64>) -> ChaosSpec {
        ChaosSpec {
            index,
            at_ns,
            command: Command::RunStop(NoKeys {}),
            request: Resolved::RunStop,
            every_ns,
        }
    }

    #[test]
    fn a_tiny_period_holds_one_pending_firing() {
        // 1 ns over 10 s would be 10^10 timers if expanded eagerly.
        let mut t = ChaosTimeline::new(vec![spec(1, 0, Some(1))], 10_000_000_000);
        assert_eq!(t.pending(), 1);
        let fired = t.take_due(0);
        assert_eq!(fired.len(), 1);
        assert_eq!(t.pending(), 1);
        assert_eq!(t.next_due(), Some(1));
    }

    #[test]
    fn repeats_until_the_end_in_time_order() {
        let mut t = ChaosTimeline::new(
            vec![spec(1, 1_000, Some(3_000)), spec(2, 2_000, None)],
            8_000,
        );
        let mut order = Vec::new();
        while let Some(at) = t.next_due() {
            for s in t.take_due(at) {
                order.push((at, s.index));
            }
            assert!(t.pending() <= 2);
        }
        assert_eq!(order, vec![(1_000, 1), (2_000, 2), (4_000, 1), (7_000, 1)]);
    }

    #[test]
    fn a_late_wake_fires_each_entry_once() {
        let mut t = ChaosTimeline::new(vec![spec(1, 0, Some(100))], 1_000);
        // Woken late at 350: one firing, the next one after 350.
        assert_eq!(t.take_due(350).len(), 1);
        assert_eq!(t.next_due(), Some(400));
        assert_eq!(t.pending(), 1);
    }
}
