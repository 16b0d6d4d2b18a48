//! Many deadlines behind one timer.
//!
//! An actix actor polls every timer it holds each time it wakes, so an
//! actor that arms one `run_later` per open request (a timeout that lives
//! a minute, at tens of requests a second) spends each message on polling
//! thousands of sleeps. [`DeadlineQueue`] keeps an actor's deadlines in a
//! heap instead; the actor arms a single timer for [`DeadlineQueue::next_at`]
//! and, when it fires, takes what is due with [`DeadlineQueue::pop_due`].
//! A deadline that no longer matters (its request ended) is not removed:
//! it pops in its turn and the actor ignores it.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

struct Entry<T> {
    at_ns: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.seq) == (other.at_ns, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at_ns, self.seq).cmp(&(other.at_ns, other.seq))
    }
}

/// Items due at run times (ns), taken in time order; items due at the same
/// time come out in the order they were pushed.
pub struct DeadlineQueue<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    seq: u64,
}

impl<T> Default for DeadlineQueue<T> {
    fn default() -> Self {
        DeadlineQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<T> DeadlineQueue<T> {
    /// Adds `item`, due at `at_ns`. Returns whether it is now the earliest
    /// deadline (the actor's timer must then be moved forward).
    pub fn push(&mut self, at_ns: u64, item: T) -> bool {
        let earliest = self.next_at().is_none_or(|t| at_ns < t);
        self.heap.push(Reverse(Entry {
            at_ns,
            seq: self.seq,
            item,
        }));
        self.seq += 1;
        earliest
    }

    /// The earliest deadline.
    pub fn next_at(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(e)| e.at_ns)
    }

    /// The earliest item due at or before `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<T> {
        if self.next_at()? > now_ns {
            return None;
        }
        self.heap.pop().map(|Reverse(e)| e.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_time_order_and_only_when_due() {
        let mut q = DeadlineQueue::default();
        assert!(q.push(30, "c"));
        assert!(q.push(10, "a"));
        assert!(!q.push(20, "b"));
        assert!(!q.push(10, "a2"));
        assert_eq!(q.next_at(), Some(10));
        assert_eq!(q.pop_due(9), None);
        assert_eq!(q.pop_due(10), Some("a"));
        assert_eq!(q.pop_due(10), Some("a2"));
        assert_eq!(q.pop_due(10), None);
        assert_eq!(q.pop_due(100), Some("b"));
        assert_eq!(q.pop_due(100), Some("c"));
        assert_eq!(q.pop_due(u64::MAX), None);
        assert_eq!(q.next_at(), None, "nothing left");
    }

    proptest::proptest! {
        #[test]
        fn popping_everything_sorts_by_time_then_push_order(
            times in proptest::collection::vec(0u64..50, 0..200)
        ) {
            let mut q = DeadlineQueue::default();
            for (i, &t) in times.iter().enumerate() {
                let was_min = times[..i].iter().all(|&u| t < u);
                proptest::prop_assert_eq!(q.push(t, i), was_min);
            }
            let mut want: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
            want.sort();
            let got: Vec<(u64, usize)> =
                std::iter::from_fn(|| q.pop_due(u64::MAX)).map(|i| (times[i], i)).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
