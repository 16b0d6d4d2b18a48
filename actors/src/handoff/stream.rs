//! The kernel's TCP as a handoff transport (scheme `tcp-kernel`): what an
//! agent asks of its host to send its KV over, or receive it from, a TCP
//! connection between the namespaces of two attach points, whose IP
//! packets cross the emulated link between them.
//!
//! The host (`edgemu-nodes`, which owns the attach points) implements
//! [`KernelStreams`] with threads that enter the namespaces; a call returns
//! at once with a shared [`StreamProgress`] that the thread fills. The
//! agent never blocks: at the deadline it stops the stream and takes the
//! bytes read so far, a prefix of the KV in block order
//! (`edgemu_handoff::ReceivedKv::from_prefix`).

use edgemu_codec::ids::ActorId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One stream's state, shared by the thread that moves its bytes and the
/// actor that started it.
#[derive(Debug, Default)]
pub struct StreamProgress {
    stop: AtomicBool,
    finished: AtomicBool,
    /// Receiver: the bytes read, in order (kept only when asked for).
    bytes: Mutex<Vec<u8>>,
    /// Receiver: (when, in-order bytes read by then) after each read.
    log: Mutex<Vec<(Instant, u64)>>,
    /// Sender: the kernel's counters at the end (`TCP_INFO`).
    pub segments_out: AtomicU64,
    pub retransmissions: AtomicU64,
    error: Mutex<Option<String>>,
}

impl StreamProgress {
    pub fn new() -> Arc<Self> {
        Arc::new(StreamProgress::default())
    }

    /// A stream that could not start, with the reason.
    pub fn failed(reason: impl Into<String>) -> Arc<Self> {
        let p = StreamProgress::default();
        p.fail(reason);
        p.finished.store(true, Ordering::Relaxed);
        Arc::new(p)
    }

    /// Asks the thread to end the stream (it checks at least every 50 ms).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The thread is done with the stream (its counters are stored).
    pub fn finish(&self) {
        // Release: whoever sees the stream finished sees its counters.
        self.finished.store(true, Ordering::Release);
    }

    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Records `data`, just read, at `at` (the bytes only when `keep`).
    pub fn append(&self, data: &[u8], at: Instant, keep: bool) {
        let total = if keep {
            let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
            b.extend_from_slice(data);
            b.len() as u64
        } else {
            self.log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .last()
                .map_or(0, |l| l.1)
                + data.len() as u64
        };
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((at, total));
    }

    /// The bytes read so far (taken: a second call returns what came since).
    pub fn take_bytes(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The read log so far.
    pub fn log(&self) -> Vec<(Instant, u64)> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn fail(&self, reason: impl Into<String>) {
        let mut e = self.error.lock().unwrap_or_else(|e| e.into_inner());
        e.get_or_insert_with(|| reason.into());
    }

    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The host's side of `tcp-kernel` handoffs.
pub trait KernelStreams: Send + Sync {
    /// Sends `payload` to port `port` of the attach point of the receiving
    /// agent `to`, from this agent's attach point, until every byte is
    /// read or `horizon` has passed (then the connection is reset).
    fn send(
        &self,
        to: ActorId,
        port: u16,
        payload: Arc<[u8]>,
        horizon: Duration,
    ) -> Arc<StreamProgress>;

    /// Accepts agent `from`'s connection on `port` of this agent's attach
    /// point for it and reads up to `bytes`, keeping them, until stopped or
    /// `give_up` has passed.
    fn receive(
        &self,
        from: ActorId,
        port: u16,
        bytes: usize,
        give_up: Duration,
    ) -> Arc<StreamProgress>;
}

/// The port a handoff's stream uses on the receiving attach point: from the
/// sender's id and the handoff number, in 20000..60000.
pub fn stream_port(from: ActorId, handoff: u32) -> u16 {
    let x = u64::from(from.0)
        .wrapping_mul(7919)
        .wrapping_add(u64::from(handoff));
    (20_000 + x % 40_000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_keeps_bytes_and_log_in_order() {
        let p = StreamProgress::new();
        let t = Instant::now();
        p.append(b"abc", t, true);
        p.append(b"de", t, true);
        assert_eq!(p.log().last().map(|l| l.1), Some(5));
        assert_eq!(p.take_bytes(), b"abcde");
        let q = StreamProgress::new();
        q.append(b"abc", t, false);
        q.append(b"de", t, false);
        assert_eq!(q.log().iter().map(|l| l.1).collect::<Vec<_>>(), [3, 5]);
        assert!(q.take_bytes().is_empty());
        let f = StreamProgress::failed("no attach point");
        assert!(f.is_finished());
        assert_eq!(f.error().as_deref(), Some("no attach point"));
    }

    #[test]
    fn ports_are_in_range_and_differ_by_handoff() {
        let a = stream_port(ActorId(3), 0);
        let b = stream_port(ActorId(3), 1);
        assert!((20_000..60_000).contains(&a) && a != b);
    }
}
