//! Which servers a scheduler may assign to: a server that has not reported
//! for a timeout is taken as down (killed, crashed, cut off), and is up again
//! as soon as a report arrives.
//!
//! A live server reports every slot, at the slot's end; the scheduler
//! decides `collect` into the next slot. With the default timeout of
//! [`DEFAULT_TIMEOUT_SLOTS`] = 2 slots a server killed at time K (its last
//! report at or before K) is marked unavailable at the first decision after
//! `last report + 2Δ`, i.e. within three slots of the kill, and is
//! available again at the first decision after its first report following a
//! restart.
//!
//! A server that has **never reported** counts as seen when the scheduler
//! started ([`Availability::reset`], as a restarted scheduler does): a real
//! server loads its model and measures its speed first, seconds in which
//! work sent to it would only wait in its mailbox, so after the timeout it
//! is unavailable until its first report. [`Availability::new`] alone
//! (the slotted harness, whose servers report every slot) keeps a server
//! that never reported available.

/// Slots without a report before a server is marked unavailable.
pub const DEFAULT_TIMEOUT_SLOTS: u64 = 2;

/// A change of one server's availability (for the event log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvailabilityChange {
    pub server: usize,
    pub available: bool,
    /// When its last report arrived, ns.
    pub last_report_ns: u64,
}

/// Per-server availability from report times.
#[derive(Debug, Clone, PartialEq)]
pub struct Availability {
    /// `None`: not reported yet (starting up).
    last_report_ns: Vec<Option<u64>>,
    available: Vec<bool>,
    timeout_ns: u64,
}

impl Availability {
    /// `servers` servers, all available and starting up (none has reported).
    pub fn new(servers: usize, timeout_ns: u64) -> Self {
        Availability {
            last_report_ns: vec![None; servers],
            available: vec![true; servers],
            timeout_ns,
        }
    }

    /// Server `s` reported at `now_ns` (an unknown index is ignored).
    pub fn report(&mut self, s: usize, now_ns: u64) {
        if let Some(t) = self.last_report_ns.get_mut(s) {
            *t = Some(t.map_or(now_ns, |t| t.max(now_ns)));
        }
    }

    /// Re-evaluates every server at `now_ns` (call once per decision);
    /// returns the servers whose availability changed.
    pub fn update(&mut self, now_ns: u64) -> Vec<AvailabilityChange> {
        let mut changes = Vec::new();
        for (s, (&last, up)) in self
            .last_report_ns
            .iter()
            .zip(self.available.iter_mut())
            .enumerate()
        {
            let Some(last) = last else {
                continue;
            };
            let now_up = now_ns.saturating_sub(last) <= self.timeout_ns;
            if now_up != *up {
                *up = now_up;
                changes.push(AvailabilityChange {
                    server: s,
                    available: now_up,
                    last_report_ns: last,
                });
            }
        }
        changes
    }

    /// One flag per server, as of the last [`Availability::update`].
    pub fn mask(&self) -> &[bool] {
        &self.available
    }

    pub fn is_available(&self, s: usize) -> bool {
        self.available.get(s).copied().unwrap_or(false)
    }

    /// A restarted scheduler: all available, each as if it had reported
    /// at `now_ns` (a server still dead is marked unavailable after the
    /// timeout).
    pub fn reset(&mut self, now_ns: u64) {
        self.last_report_ns
            .iter_mut()
            .for_each(|t| *t = Some(now_ns));
        self.available.iter_mut().for_each(|a| *a = true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_silent_server_goes_down_after_the_timeout_and_comes_back_on_a_report() {
        // Two servers, 1 s slots, decisions 0.2 s into each slot.
        let mut a = Availability::new(2, 2 * S);
        let decide = |t: u64| t * S + S / 5;
        // Not reported yet (a model loading): available however long it takes.
        assert!(a.update(decide(9)).is_empty());
        for t in 0..3 {
            assert!(a.update(decide(t)).is_empty(), "slot {t}");
            a.report(0, (t + 1) * S);
            a.report(1, (t + 1) * S);
        }
        // Server 1 reported last at 3 s (killed at 3.5 s, say); server 0 goes on.
        for t in 3..=6 {
            let ch = a.update(decide(t));
            if t < 5 {
                assert!(ch.is_empty(), "slot {t}: 3 s + 2 s not yet passed");
            } else if t == 5 {
                assert_eq!(
                    ch,
                    vec![AvailabilityChange {
                        server: 1,
                        available: false,
                        last_report_ns: 3 * S
                    }]
                );
            } else {
                assert!(ch.is_empty(), "reported once");
            }
            a.report(0, (t + 1) * S);
        }
        assert_eq!(a.mask(), &[true, false]);
        assert!(!a.is_available(1) && !a.is_available(7));
        // Restarted: its first report makes it available at the next decision.
        a.report(1, 7 * S);
        let ch = a.update(decide(7));
        assert_eq!(ch.len(), 1);
        assert!(ch[0].available && ch[0].server == 1);
        // An old report never moves the last-seen time back.
        a.report(1, 2 * S);
        assert!(a.update(decide(8)).is_empty());
        a.reset(10 * S);
        assert_eq!(a.mask(), &[true, true]);
        assert!(a.update(decide(11)).is_empty());
        // After a reset the timeout runs from the reset, reported or not.
        a.report(0, 12 * S);
        let ch = a.update(decide(12));
        assert_eq!(ch.len(), 1);
        assert!(!ch[0].available && ch[0].server == 1 && ch[0].last_report_ns == 10 * S);
    }
}
