//! External policies in live runs (issue 30): a scheduler or an agent whose
//! policy slot holds `external` asks a policy process over a websocket at
//! each decision (observation out, action back: Park-style inverted
//! control), with a deadline per decision and the slot's fallback policy
//! deciding whenever the answer is not there in time or not valid
//! (docs/external-policy.md).
//!
//! - [`book::DecisionBook`]: ids, the pending decision, reply matching and
//!   the counters (a core without I/O);
//! - [`client::PolicyClient`]: the websocket connection with reconnects;
//! - [`ExternalDecider`]: what a decider actor holds while its slot is
//!   external — the connection to the active version's URL and the book —
//!   and the live view it publishes ([`ExternalLive`]).
//!
//! The wire form is `edgemu_policies::external` (JSON `DecisionRequest` /
//! `DecisionReply`). An actix timer per decision bounds every wait; the
//! policy process can hang, disconnect or answer garbage and the decider
//! still decides each time, with the fallback.

pub mod book;
pub mod client;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use edgemu_policies::external::{DecisionRequest, WireObs};
use edgemu_policies::slot::ExternalTarget;

use book::{DecisionBook, ExternalStats, FallbackReason};
use client::{ClientEvent, PolicyClient, PolicyEvent};

/// The external-policy counters of one host's deciders, by actor name
/// (the dashboard, `/metrics`, `external_policies.csv`). Cheap to clone.
#[derive(Clone, Default, Debug)]
pub struct ExternalLive(Arc<Mutex<BTreeMap<String, ExternalStats>>>);

impl ExternalLive {
    pub fn publish(&self, actor: &str, stats: ExternalStats) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(actor.to_string(), stats);
    }

    pub fn snapshot(&self) -> BTreeMap<String, ExternalStats> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a connection event means for the decider.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Nothing,
    /// The pending decision `id` falls back for `reason` (counted).
    Fallback {
        id: u64,
        reason: FallbackReason,
        detail: String,
    },
    /// The action for the pending decision `id`: validate it, then
    /// [`ExternalDecider::accept`] or [`ExternalDecider::refuse`].
    Action {
        id: u64,
        action: serde_json::Value,
    },
    /// The connection came up or went down (for the event log).
    Link {
        up: bool,
        detail: String,
    },
}

/// A decider's external policy (module doc).
pub struct ExternalDecider {
    target: Arc<ExternalTarget>,
    client: Option<PolicyClient>,
    next_client: u64,
    book: DecisionBook,
}

impl ExternalDecider {
    /// A decider for `problem` (`"lyreo"`, `"repair"`) with no connection yet.
    pub fn new(problem: &str, target: Arc<ExternalTarget>) -> Self {
        let mut book = DecisionBook::new(problem);
        book.set_target(&target.url);
        ExternalDecider {
            target,
            client: None,
            next_client: 0,
            book,
        }
    }

    pub fn target(&self) -> &Arc<ExternalTarget> {
        &self.target
    }

    /// Points at a new version's target: a different URL gets a new
    /// connection (the old one closes and its events are ignored).
    pub fn retarget(&mut self, target: Arc<ExternalTarget>) {
        if target.url != self.target.url {
            self.client = None;
            self.book.abandon();
            self.book.set_connected(false);
            self.book.set_target(&target.url);
        }
        self.target = target;
    }

    /// Connects if not connected (real time only: call it from the actor).
    pub fn ensure_connected(&mut self, to: Recipient<PolicyEvent>) {
        if self.client.is_none() {
            self.next_client += 1;
            self.client = Some(PolicyClient::connect(
                self.next_client,
                &self.target.url,
                to,
            ));
        }
    }

    /// Closes the connection (the slot is no longer external).
    pub fn disconnect(&mut self) {
        self.client = None;
        self.book.abandon();
        self.book.set_connected(false);
    }

    /// Asks for a decision on `obs` now: the id to wait for until
    /// `now + deadline` (arm a timer), or the fallback reason (counted) when
    /// it cannot be asked.
    pub fn ask(&mut self, now_ns: u64, obs: WireObs) -> Result<u64, FallbackReason> {
        let Some(client) = self.client.as_ref().filter(|_| self.book.stats().connected) else {
            self.book.unasked(FallbackReason::Disconnected);
            return Err(FallbackReason::Disconnected);
        };
        let id = self.book.ask(now_ns);
        let text = match serde_json::to_string(&DecisionRequest::new(id, obs)) {
            Ok(t) => t,
            Err(_) => {
                // Not expected for these plain types (serde_json writes a
                // non-finite float as null); if it happens, the fallback
                // decides and the request counts as malformed.
                self.book.refuse(id);
                return Err(FallbackReason::Malformed);
            }
        };
        if !client.send(text) {
            // The connection is not taking requests (a process that stopped
            // reading): this one falls back; the link stays as it is.
            self.book.unsent(id);
            return Err(FallbackReason::Disconnected);
        }
        Ok(id)
    }

    pub fn deadline_ns(&self) -> u64 {
        self.target.deadline_ns
    }

    pub fn pending_id(&self) -> Option<u64> {
        self.book.pending_id()
    }

    /// Decision `id`'s deadline: whether it falls back now (timeout).
    pub fn expire(&mut self, id: u64) -> bool {
        self.book.expire(id)
    }

    pub fn accept(&mut self, id: u64) {
        self.book.accept(id);
    }

    pub fn refuse(&mut self, id: u64) {
        self.book.refuse(id);
    }

    /// Drops the pending decision without counting it (the decider was killed).
    pub fn abandon(&mut self) {
        self.book.abandon();
    }

    /// What a connection event means (events of a replaced client: nothing).
    pub fn on_event(&mut self, now_ns: u64, ev: PolicyEvent) -> Outcome {
        if self.client.as_ref().map(PolicyClient::id) != Some(ev.client) {
            return Outcome::Nothing;
        }
        match ev.event {
            ClientEvent::Up => {
                self.book.set_connected(true);
                Outcome::Link {
                    up: true,
                    detail: self.target.url.clone(),
                }
            }
            ClientEvent::Down(why) => {
                let was_up = self.book.stats().connected;
                match self.book.disconnected() {
                    Some(id) => Outcome::Fallback {
                        id,
                        reason: FallbackReason::Disconnected,
                        detail: why,
                    },
                    None if was_up => Outcome::Link {
                        up: false,
                        detail: why,
                    },
                    None => Outcome::Nothing,
                }
            }
            ClientEvent::Frame(text) => match self.book.on_frame(now_ns, &text) {
                book::Reply::Action { id, action } => Outcome::Action { id, action },
                book::Reply::Fallback { id, reason, detail } => {
                    Outcome::Fallback { id, reason, detail }
                }
                book::Reply::Stale => Outcome::Nothing,
            },
        }
    }

    /// The counters with the round-trip quantiles.
    pub fn stats(&self) -> ExternalStats {
        self.book.snapshot()
    }

    /// The counters without the quantiles (cheap).
    pub fn counters(&self) -> &ExternalStats {
        self.book.stats()
    }
}
