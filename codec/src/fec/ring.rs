//! The encoder's symbol store: the protected areas of the active window in one
//! ring of fixed 1376-byte slots.
//!
//! The window is a contiguous id range `[start, next_id)`, so slot `i` of the
//! ring holds window position `i` counted from `start`. One allocation serves
//! many packets: no allocation per packet, and a large ring can be backed by
//! huge pages. The ring doubles when full, copying the live slots in window
//! order; the encoder never holds more than `max_window` symbols, so the ring
//! has fewer than `2 · max_window` slots (and at least 16).

use super::packet::SYMBOL_SIZE;

#[derive(Debug, Default)]
pub(crate) struct SymbolRing {
    data: Vec<u8>,
    lens: Vec<u16>,
    head: usize,
    len: usize,
}

impl SymbolRing {
    fn cap(&self) -> usize {
        self.lens.len()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn phys(&self, i: usize) -> usize {
        (self.head + i) % self.cap()
    }

    fn grow(&mut self) {
        self.grow_to((self.cap() * 2).max(16));
    }

    /// Makes room for at least `n` symbols without further allocation. The
    /// buffer is written once here (`resize`, not `calloc`), so its pages are
    /// mapped now rather than on first use.
    pub fn reserve(&mut self, n: usize) {
        if n > self.cap() {
            self.grow_to(n.next_power_of_two().max(16));
        }
    }

    // `resize` on purpose, see `reserve`.
    #[allow(clippy::slow_vector_initialization)]
    fn grow_to(&mut self, new_cap: usize) {
        let mut data = Vec::with_capacity(new_cap * SYMBOL_SIZE);
        data.resize(new_cap * SYMBOL_SIZE, 0u8);
        let mut lens = vec![0u16; new_cap];
        for i in 0..self.len {
            let p = self.phys(i);
            let n = usize::from(self.lens[p]);
            data[i * SYMBOL_SIZE..i * SYMBOL_SIZE + n]
                .copy_from_slice(&self.data[p * SYMBOL_SIZE..p * SYMBOL_SIZE + n]);
            lens[i] = self.lens[p];
        }
        self.data = data;
        self.lens = lens;
        self.head = 0;
    }

    /// Appends a slot; `fill` writes into its `SYMBOL_SIZE` bytes and returns
    /// the length used.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> &[u8] {
        if self.len == self.cap() {
            self.grow();
        }
        let p = self.phys(self.len);
        let slot = &mut self.data[p * SYMBOL_SIZE..(p + 1) * SYMBOL_SIZE];
        let n = fill(slot).min(SYMBOL_SIZE);
        self.lens[p] = n as u16;
        self.len += 1;
        &self.data[p * SYMBOL_SIZE..p * SYMBOL_SIZE + n]
    }

    /// The `i`-th symbol from the window start.
    pub fn get(&self, i: usize) -> &[u8] {
        if i >= self.len {
            return &[];
        }
        let p = self.phys(i);
        &self.data[p * SYMBOL_SIZE..p * SYMBOL_SIZE + usize::from(self.lens[p])]
    }

    /// Drops the `n` oldest symbols.
    pub fn pop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        if self.cap() > 0 {
            self.head = (self.head + n) % self.cap();
        }
        self.len -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_window_order_across_growth_and_wrap() {
        let mut r = SymbolRing::default();
        let mut model: std::collections::VecDeque<Vec<u8>> = Default::default();
        let mut next = 0u32;
        for round in 0..200usize {
            for _ in 0..(round % 7) {
                let v: Vec<u8> = next.to_be_bytes().repeat(1 + (next as usize % 50));
                next += 1;
                r.push_with(|s| {
                    s[..v.len()].copy_from_slice(&v);
                    v.len()
                });
                model.push_back(v);
            }
            let pop = round % 5;
            r.pop_front(pop);
            for _ in 0..pop.min(model.len()) {
                model.pop_front();
            }
            assert_eq!(r.len(), model.len());
            for (i, m) in model.iter().enumerate() {
                assert_eq!(r.get(i), &m[..]);
            }
        }
        assert!(r.get(r.len()).is_empty());
    }
}
