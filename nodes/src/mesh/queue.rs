//! A peer's outbound envelope queue: bounded, filled one envelope at a
//! time by the router, emptied a frame's worth at a time by the session.
//!
//! A channel pays for every envelope on both ends (a permit taken and
//! returned, a slot written and read, the receiver woken); at a mesh
//! connection's rate that was a fifth of the sending thread's time. Here a
//! push is a short locked append, the session is woken only when the queue
//! goes from empty to not empty, and it takes everything queued at once
//! (the two lists swapped under the lock).
//!
//! The queue is bounded in envelopes and in encoded bytes. The byte bound
//! is small on purpose: what waits here is hidden queueing no link model
//! accounts for (at 1 Gb/s between machines, 256 KiB is 2 ms), and the
//! payloads of a short queue are still in the CPU's cache when the session
//! masks them and the kernel copies them (with 23 MB queued, the sending
//! thread spent about a fifth more per byte, measured by `bench mesh`).
//! The session holds what it took until it is written, a frame at a time,
//! so at most twice the bounds wait for a peer: the queue's and the
//! session's.

use edgemu_actors::router::PeerSendError;
use edgemu_codec::wire::BulkBytes;
use edgemu_protocol::Envelope;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// Bytes an envelope adds to a frame: its real payload, not the declared
/// size a link charges (a probe of 1400 declared bytes encodes to ~30).
pub(crate) fn encoded_estimate(e: &Envelope) -> usize {
    32 + e.payload.bulk_bytes()
}

struct Queued {
    items: VecDeque<Envelope>,
    /// [`encoded_estimate`] summed over `items`.
    bytes: usize,
}

pub(crate) struct OutboundQueue {
    queued: Mutex<Queued>,
    capacity: usize,
    byte_capacity: usize,
    /// Woken when a push finds the queue empty (a permit is kept when the
    /// session is not waiting, so a push between its check and its wait
    /// is not missed).
    filled: Notify,
}

impl OutboundQueue {
    /// A queue of at most `capacity` envelopes and `byte_capacity` bytes
    /// ([`encoded_estimate`]; one envelope larger than that is taken when
    /// the queue is empty).
    pub(crate) fn new(capacity: usize, byte_capacity: usize) -> Self {
        OutboundQueue {
            queued: Mutex::new(Queued {
                items: VecDeque::new(),
                bytes: 0,
            }),
            capacity: capacity.max(1),
            byte_capacity,
            filled: Notify::new(),
        }
    }

    /// The queue (a list without invariants between calls, so a lock
    /// poisoned by a panic elsewhere leaves it usable).
    fn queued(&self) -> MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `envelope`, or refuses it when the queue is full.
    pub(crate) fn try_push(&self, envelope: Envelope) -> Result<(), PeerSendError> {
        let cost = encoded_estimate(&envelope);
        let was_empty = {
            let mut q = self.queued();
            let empty = q.items.is_empty();
            if q.items.len() >= self.capacity
                || (!empty && q.bytes.saturating_add(cost) > self.byte_capacity)
            {
                return Err(PeerSendError::Full);
            }
            q.bytes += cost;
            q.items.push_back(envelope);
            empty
        };
        if was_empty {
            self.filled.notify_one();
        }
        Ok(())
    }

    /// Waits until the queue holds an envelope.
    pub(crate) async fn ready(&self) {
        loop {
            if !self.queued().items.is_empty() {
                return;
            }
            self.filled.notified().await;
        }
    }

    /// Moves everything queued to the back of `into` (a swap of the two
    /// lists when `into` is empty, as it is when the session asks).
    pub(crate) fn take_all(&self, into: &mut VecDeque<Envelope>) {
        let mut q = self.queued();
        q.bytes = 0;
        if into.is_empty() {
            std::mem::swap(&mut q.items, into);
        } else {
            into.append(&mut q.items);
        }
    }

    /// Drops everything queued (what was meant for an ended session).
    pub(crate) fn clear(&self) {
        let mut q = self.queued();
        q.items.clear();
        q.bytes = 0;
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queued().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_codec::ids::ActorId;
    use edgemu_protocol::Msg;
    use std::sync::Arc;
    use std::time::Duration;

    fn env(i: u32, bytes: usize) -> Envelope {
        Envelope {
            src: ActorId(i),
            dst: ActorId(0),
            via: None,
            sent_at_ns: 0,
            due_ns: None,
            payload: Msg::KvFrame(vec![0; bytes]),
        }
    }

    #[test]
    fn a_full_queue_refuses_and_is_taken_whole_in_order() {
        let q = OutboundQueue::new(3, usize::MAX);
        for i in 0..3 {
            q.try_push(env(i, 100)).expect("room");
        }
        assert!(matches!(q.try_push(env(9, 1)), Err(PeerSendError::Full)));
        let mut taken = VecDeque::new();
        q.take_all(&mut taken);
        assert_eq!(q.len(), 0);
        q.try_push(env(3, 1)).expect("room again");
        q.take_all(&mut taken);
        let ids: Vec<u32> = taken.iter().map(|e| e.src.0).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
    }

    #[test]
    fn the_byte_bound_refuses_what_does_not_fit_but_never_an_envelope_alone() {
        let q = OutboundQueue::new(100, 1000);
        // An envelope over the bound is taken into an empty queue.
        q.try_push(env(0, 5000)).expect("alone");
        assert!(matches!(q.try_push(env(1, 10)), Err(PeerSendError::Full)));
        let mut taken = VecDeque::new();
        q.take_all(&mut taken);
        // 432 estimated bytes each: two fit in 1000, a third does not.
        q.try_push(env(2, 400)).expect("room");
        q.try_push(env(3, 400)).expect("room");
        assert!(matches!(q.try_push(env(4, 400)), Err(PeerSendError::Full)));
        // Taking frees the bytes.
        q.take_all(&mut taken);
        q.try_push(env(5, 400)).expect("room again");
        let ids: Vec<u32> = taken.iter().map(|e| e.src.0).collect();
        assert_eq!(ids, vec![0, 2, 3]);
    }

    /// A push from another thread wakes a waiting session, also when it
    /// lands between the session's check and its wait.
    #[test]
    fn a_push_wakes_the_waiting_session() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let q = Arc::new(OutboundQueue::new(1024, usize::MAX));
            for round in 0..200u32 {
                let pusher = {
                    let q = q.clone();
                    std::thread::spawn(move || {
                        if round % 2 == 0 {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        q.try_push(env(round, 1)).expect("room");
                    })
                };
                tokio::time::timeout(Duration::from_secs(5), q.ready())
                    .await
                    .expect("woken");
                let mut taken = VecDeque::new();
                q.take_all(&mut taken);
                assert_eq!(taken.len(), 1);
                pusher.join().expect("pusher");
            }
        });
    }
}
