//! The last events of a host's run, for the dashboard's event log.
//!
//! [`RecentEvents::tee`] wraps the host's event writer: every event still
//! goes to `events.jsonl`, and a copy lands in a bounded ring that the
//! dashboard reads. Each event gets a sequence number so that a page asks
//! only for what it has not seen.

use edgemu_actors::events::{Event, EventWriter};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Events kept for the dashboard.
pub const KEPT: usize = 200;

#[derive(Debug, Clone, Serialize)]
pub struct NumberedEvent {
    pub seq: u64,
    #[serde(flatten)]
    pub event: Event,
}

#[derive(Default)]
struct Ring {
    next_seq: u64,
    events: VecDeque<NumberedEvent>,
}

/// Shared ring of the last [`KEPT`] events.
#[derive(Clone, Default)]
pub struct RecentEvents(Arc<Mutex<Ring>>);

impl RecentEvents {
    /// An event writer that writes to `inner` and keeps a copy here.
    pub fn tee(&self, inner: Box<dyn EventWriter>) -> Box<dyn EventWriter> {
        Box::new(Tee {
            ring: self.clone(),
            inner,
        })
    }

    pub fn push(&self, event: &Event) {
        if let Ok(mut r) = self.0.lock() {
            let seq = r.next_seq;
            r.next_seq += 1;
            if r.events.len() == KEPT {
                r.events.pop_front();
            }
            r.events.push_back(NumberedEvent {
                seq,
                event: event.clone(),
            });
        }
    }

    /// Events numbered `since` or later (oldest first).
    pub fn since(&self, since: u64) -> Vec<NumberedEvent> {
        self.0
            .lock()
            .map(|r| {
                r.events
                    .iter()
                    .filter(|e| e.seq >= since)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

struct Tee {
    ring: RecentEvents,
    inner: Box<dyn EventWriter>,
}

impl EventWriter for Tee {
    fn write_event(&mut self, event: &Event) {
        self.ring.push(event);
        self.inner.write_event(event);
    }
    fn flush(&mut self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_actors::events::EventLog;

    fn event(i: u64) -> Event {
        Event {
            t_ns: i,
            host: "a".into(),
            source: "control".into(),
            kind: "link.kill".into(),
            detail: serde_json::json!({ "i": i }),
        }
    }

    #[test]
    fn the_ring_keeps_the_last_events_numbered() {
        let recent = RecentEvents::default();
        let log = EventLog::new(recent.tee(Box::new(Discard)));
        for i in 0..(KEPT as u64 + 10) {
            log.record(event(i));
        }
        let all = recent.since(0);
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].seq, 10);
        assert_eq!(all.last().map(|e| e.seq), Some(KEPT as u64 + 9));
        let tail = recent.since(KEPT as u64 + 8);
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].event.t_ns, KEPT as u64 + 8);
        let json = serde_json::to_value(&tail[0]).expect("json");
        assert_eq!(json["kind"], "link.kill");
        assert_eq!(json["seq"], KEPT as u64 + 8);
    }

    struct Discard;
    impl EventWriter for Discard {
        fn write_event(&mut self, _: &Event) {}
    }
}
