//! The run's event log: every control, chaos and mesh event with its time.
//!
//! Actors only call [`EventLog::record`]; the host decides where lines go
//! (a JSON-lines file in `results/<run-id>/<host>/events.jsonl`).

use serde::Serialize;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Run time the event took effect, ns.
    pub t_ns: u64,
    pub host: String,
    /// Who caused it: `control`, `chaos#N`, `mesh`, `run`.
    pub source: String,
    /// What happened: `link.kill`, `peer.down`, …
    pub kind: String,
    pub detail: serde_json::Value,
}

/// Where events are written. Implemented by the host's results writer.
pub trait EventWriter: Send {
    fn write_event(&mut self, event: &Event);
    fn flush(&mut self) {}
}

/// Shared handle to the host's event writer.
#[derive(Clone)]
pub struct EventLog {
    inner: Arc<Mutex<Box<dyn EventWriter>>>,
}

impl EventLog {
    pub fn new(writer: Box<dyn EventWriter>) -> Self {
        EventLog {
            inner: Arc::new(Mutex::new(writer)),
        }
    }

    /// An event log that keeps nothing (tests, benches).
    pub fn discard() -> Self {
        struct Discard;
        impl EventWriter for Discard {
            fn write_event(&mut self, _: &Event) {}
        }
        EventLog::new(Box::new(Discard))
    }

    pub fn record(&self, event: Event) {
        tracing::info!(t_ns = event.t_ns, host = %event.host, source = %event.source, kind = %event.kind, detail = %event.detail, "event");
        if let Ok(mut w) = self.inner.lock() {
            w.write_event(&event);
        }
    }

    pub fn flush(&self) {
        if let Ok(mut w) = self.inner.lock() {
            w.flush();
        }
    }
}

/// The event log as one actor writes to it: its host's name filled in.
/// Actors that can be killed record their faults' effects here (an
/// automatic restart, a server marked unavailable, requests dropped).
#[derive(Clone)]
pub struct ActorLog {
    pub host: String,
    pub events: EventLog,
}

impl ActorLog {
    pub fn new(host: impl Into<String>, events: EventLog) -> Self {
        ActorLog {
            host: host.into(),
            events,
        }
    }

    /// Keeps nothing (tests).
    pub fn discard() -> Self {
        ActorLog::new("", EventLog::discard())
    }

    pub fn record(&self, t_ns: u64, source: &str, kind: &str, detail: serde_json::Value) {
        self.events.record(Event {
            t_ns,
            host: self.host.clone(),
            source: source.into(),
            kind: kind.into(),
            detail,
        });
    }
    /// `actor` came back by itself at the end of a `kill … for`.
    pub fn self_restart(&self, t_ns: u64, actor: &str, detail: &str) {
        self.record(
            t_ns,
            "actor.kill for",
            "actor.restart",
            serde_json::json!({ "actor": actor, "detail": detail }),
        );
    }
}
