//! Random link flapping (`link.flap` in control and chaos): a link direction
//! alternates between up and down, each stay drawn from an exponential
//! distribution with mean MTBF (up) or MTTR (down), from its own seeded
//! stream, until an optional end time.
//!
//! [`LinkFlapper`] is the schedule alone, driven by `now` (ns): it starts up,
//! says when its next change is due ([`LinkFlapper::next_change_ns`]), and
//! applies it when polled at or after that time ([`LinkFlapper::poll`]). A
//! stay starts when the change before it is applied, at the `now` of that
//! poll. A change that would fall at or after the end time does not happen:
//! a link that is up stays up, and one that is down comes back up at the end
//! time. The owner (the link actor) applies each change to its link and sets
//! its timer to the next one.
//!
//! Stays are drawn as `−ln(u)·mean` with `u` uniform in (0, 1) from
//! `ChaCha8Rng` seeded by the flap's seed, at least 1 ns each, so the same
//! seed gives the same up/down pattern on every run.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a flap process is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlapParams {
    /// Mean time between failures: the mean stay up, ns.
    pub mtbf_ns: u64,
    /// Mean time to repair: the mean stay down, ns.
    pub mttr_ns: u64,
    /// Seed of the stays' random stream.
    pub seed: u64,
    /// No failure at or after this time (run time, ns); a link down then
    /// comes back up at it.
    pub until_ns: Option<u64>,
}

/// A change of a flapping link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlapChange {
    Down,
    Up,
}

/// The up/down schedule of one flapping link direction (module docs).
#[derive(Debug, Clone)]
pub struct LinkFlapper {
    params: FlapParams,
    rng: ChaCha8Rng,
    down: bool,
    /// The next change and when it is due; `None` once the flapping is over.
    next: Option<u64>,
}

impl LinkFlapper {
    /// A flap process starting at `now` with the link up.
    pub fn start(params: FlapParams, now: u64) -> Self {
        let mut f = LinkFlapper {
            params,
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            down: false,
            next: None,
        };
        f.draw(now);
        f
    }

    /// Whether the flapping holds the link down.
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// When the next change is due; `None` when no change is left.
    pub fn next_change_ns(&self) -> Option<u64> {
        self.next
    }

    /// Applies the change due at or before `now`, if any, and schedules the
    /// one after it from `now`.
    pub fn poll(&mut self, now: u64) -> Option<FlapChange> {
        let due = self.next.filter(|&t| t <= now)?;
        self.down = !self.down;
        let ended = self.params.until_ns.is_some_and(|until| due >= until);
        if ended {
            // The restore at the end time: nothing follows it.
            self.next = None;
        } else {
            self.draw(now);
        }
        Some(if self.down {
            FlapChange::Down
        } else {
            FlapChange::Up
        })
    }

    /// Draws the current stay, starting at `from`.
    fn draw(&mut self, from: u64) {
        let mean = if self.down {
            self.params.mttr_ns
        } else {
            self.params.mtbf_ns
        } as f64;
        let u: f64 = self.rng.random_range(f64::MIN_POSITIVE..1.0);
        let stay = ((-u.ln() * mean).min(u64::MAX as f64 / 2.0) as u64).max(1);
        let at = from.saturating_add(stay);
        self.next = match self.params.until_ns {
            // The last change: a link down comes back up at the end time.
            Some(until) if at >= until => self.down.then_some(until),
            _ => Some(at),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = crate::time::NS_PER_S;

    fn params(seed: u64, until_ns: Option<u64>) -> FlapParams {
        FlapParams {
            mtbf_ns: 2 * S,
            mttr_ns: S / 2,
            seed,
            until_ns,
        }
    }

    /// Polls at every change until none is left or `end`; the (time, down)
    /// pairs.
    fn run(f: &mut LinkFlapper, end: u64) -> Vec<(u64, bool)> {
        let mut out = Vec::new();
        while let Some(t) = f.next_change_ns().filter(|&t| t <= end) {
            let c = f.poll(t).expect("a change is due at its time");
            assert_eq!(c == FlapChange::Down, f.is_down());
            out.push((t, f.is_down()));
        }
        out
    }

    #[test]
    fn stays_alternate_with_their_means_and_repeat_by_seed() {
        let mut f = LinkFlapper::start(params(7, None), 0);
        assert!(!f.is_down());
        assert_eq!(f.poll(0), None, "nothing is due at the start");
        let changes = run(&mut f, 20_000 * S);
        let again = run(&mut LinkFlapper::start(params(7, None), 0), 20_000 * S);
        assert_eq!(changes, again);
        assert_ne!(
            changes,
            run(&mut LinkFlapper::start(params(8, None), 0), 20_000 * S)
        );
        // Down and up alternate, starting with a failure.
        for (i, &(_, down)) in changes.iter().enumerate() {
            assert_eq!(down, i % 2 == 0);
        }
        // Mean stays within 10 % of MTBF and MTTR (thousands of each).
        let (mut up, mut down, mut last) = (Vec::new(), Vec::new(), 0);
        for &(t, now_down) in &changes {
            let stays = if now_down { &mut up } else { &mut down };
            stays.push((t - last) as f64);
            last = t;
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(up.len() > 1000 && down.len() > 1000);
        assert!(
            (mean(&up) / (2 * S) as f64 - 1.0).abs() < 0.1,
            "{}",
            mean(&up)
        );
        assert!(
            (mean(&down) / (S / 2) as f64 - 1.0).abs() < 0.1,
            "{}",
            mean(&down)
        );
    }

    #[test]
    fn a_late_poll_starts_the_next_stay_at_the_poll() {
        let mut a = LinkFlapper::start(params(3, None), 0);
        let mut b = a.clone();
        let t = a.next_change_ns().unwrap();
        a.poll(t);
        b.poll(t + 5);
        assert_eq!(b.next_change_ns().unwrap(), a.next_change_ns().unwrap() + 5);
    }

    #[test]
    fn flapping_ends_up_at_the_end_time() {
        for seed in 0..50 {
            let until = 10 * S;
            let mut f = LinkFlapper::start(params(seed, Some(until)), S);
            let changes = run(&mut f, u64::MAX);
            assert_eq!(f.next_change_ns(), None, "seed {seed}");
            assert!(!f.is_down(), "seed {seed}: up after the end");
            assert!(changes.iter().all(|&(t, _)| t <= until));
            // Only a restore happens at the end time itself.
            if let Some(&(t, down)) = changes.last() {
                assert!(t < until || !down, "seed {seed}");
            }
        }
        // An end before the first failure: the link never goes down.
        let f = LinkFlapper::start(params(1, Some(1)), 0);
        assert_eq!(f.next_change_ns(), None);
    }

    #[test]
    fn zero_means_still_move_forward() {
        let mut f = LinkFlapper::start(
            FlapParams {
                mtbf_ns: 0,
                mttr_ns: 0,
                seed: 1,
                until_ns: None,
            },
            100,
        );
        assert_eq!(f.next_change_ns(), Some(101), "stays last at least 1 ns");
        assert_eq!(f.poll(101), Some(FlapChange::Down));
        assert_eq!(f.next_change_ns(), Some(102));
    }
}
