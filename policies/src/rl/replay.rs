//! A fixed-capacity replay memory (oldest overwritten first).

use rand::Rng;

#[derive(Debug, Clone)]
pub struct ReplayBuffer<T> {
    items: Vec<T>,
    capacity: usize,
    next: usize,
}

impl<T> ReplayBuffer<T> {
    /// # Panics
    /// On a zero capacity (a programming error).
    pub fn new(capacity: usize) -> ReplayBuffer<T> {
        assert!(capacity > 0, "replay capacity must be positive");
        ReplayBuffer {
            items: Vec::with_capacity(capacity.min(1 << 20)),
            capacity,
            next: 0,
        }
    }

    pub fn push(&mut self, item: T) {
        if self.items.len() < self.capacity {
            self.items.push(item);
        } else {
            self.items[self.next] = item;
        }
        self.next = (self.next + 1) % self.capacity;
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i)
    }

    /// Fills `out` with `n` indices drawn uniformly with replacement.
    pub fn sample_indices(&self, n: usize, rng: &mut impl Rng, out: &mut Vec<usize>) {
        out.clear();
        if self.items.is_empty() {
            return;
        }
        out.extend((0..n).map(|_| rng.random_range(0..self.items.len())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrites_oldest() {
        let mut r = ReplayBuffer::new(3);
        for i in 0..5 {
            r.push(i);
        }
        let mut v: Vec<i32> = (0..3).map(|i| *r.get(i).unwrap()).collect();
        v.sort();
        assert_eq!(v, vec![2, 3, 4]);
    }
}
