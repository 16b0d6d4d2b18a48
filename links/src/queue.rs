//! Drop-tail byte queue accounting.
//!
//! The queue holds packets that have been accepted but whose serialization
//! has not *started* yet; the packet being serialized has left it. A packet
//! that can go on the wire at once (the link is idle) never waits and is
//! accepted whatever the limit; one that must wait is accepted only if the
//! waiting bytes plus its own size fit the limit (`None` = unbounded). So a
//! limit of 0 means "no buffer": only packets offered to an idle link pass.
//! Serialization start times are non-decreasing, so the packets that have
//! started are always a prefix.

use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub(crate) struct DropTailQueue {
    /// (serialization start ns, size) of waiting packets, in start order.
    waiting: VecDeque<(u64, u32)>,
    bytes: u64,
}

impl DropTailQueue {
    /// Bytes whose serialization has not started by `now_ns`.
    pub(crate) fn waiting_bytes(&self, now_ns: u64) -> u64 {
        let started: u64 = self
            .waiting
            .iter()
            .take_while(|&&(start, _)| start <= now_ns)
            .map(|&(_, size)| u64::from(size))
            .sum();
        self.bytes.saturating_sub(started)
    }

    /// Forgets packets whose serialization has started by `now_ns`.
    pub(crate) fn release(&mut self, now_ns: u64) {
        while let Some(&(start, size)) = self.waiting.front() {
            if start > now_ns {
                break;
            }
            self.waiting.pop_front();
            self.bytes = self.bytes.saturating_sub(u64::from(size));
        }
    }

    /// Whether a packet of `size` bytes that must wait fits (call after
    /// `release`).
    pub(crate) fn admits(&self, limit: Option<u64>, size: u32) -> bool {
        limit.is_none_or(|limit| self.bytes.saturating_add(u64::from(size)) <= limit)
    }

    pub(crate) fn push(&mut self, start_ns: u64, size: u32) {
        self.waiting.push_back((start_ns, size));
        self.bytes = self.bytes.saturating_add(u64::from(size));
    }

    pub(crate) fn clear(&mut self) {
        self.waiting.clear();
        self.bytes = 0;
    }
}
