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
//! The session holds what it took until it is written, a frame at a time,
//! so at most twice the capacity is waiting for a peer: the queue's and
//! the session's.

use edgemu_actors::router::PeerSendError;
use edgemu_protocol::Envelope;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

pub(crate) struct OutboundQueue {
    items: Mutex<VecDeque<Envelope>>,
    capacity: usize,
    /// Woken when a push finds the queue empty (a permit is kept when the
    /// session is not waiting, so a push between its check and its wait
    /// is not missed).
    filled: Notify,
}

impl OutboundQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        OutboundQueue {
            items: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            filled: Notify::new(),
        }
    }

    /// The queue (a list without invariants between calls, so a lock
    /// poisoned by a panic elsewhere leaves it usable).
    fn items(&self) -> MutexGuard<'_, VecDeque<Envelope>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `envelope`, or refuses it when the queue holds `capacity`.
    pub(crate) fn try_push(&self, envelope: Envelope) -> Result<(), PeerSendError> {
        let was_empty = {
            let mut items = self.items();
            if items.len() >= self.capacity {
                return Err(PeerSendError::Full);
            }
            items.push_back(envelope);
            items.len() == 1
        };
        if was_empty {
            self.filled.notify_one();
        }
        Ok(())
    }

    /// Waits until the queue holds an envelope.
    pub(crate) async fn ready(&self) {
        loop {
            if !self.items().is_empty() {
                return;
            }
            self.filled.notified().await;
        }
    }

    /// Moves everything queued to the back of `into` (a swap of the two
    /// lists when `into` is empty, as it is when the session asks).
    pub(crate) fn take_all(&self, into: &mut VecDeque<Envelope>) {
        let mut items = self.items();
        if into.is_empty() {
            std::mem::swap(&mut *items, into);
        } else {
            into.append(&mut items);
        }
    }

    /// Drops everything queued (what was meant for an ended session).
    pub(crate) fn clear(&self) {
        self.items().clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items().len()
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
        let q = OutboundQueue::new(3);
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

    /// A push from another thread wakes a waiting session, also when it
    /// lands between the session's check and its wait.
    #[test]
    fn a_push_wakes_the_waiting_session() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let q = Arc::new(OutboundQueue::new(1024));
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
