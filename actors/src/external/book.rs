//! [`DecisionBook`]: a decider's bookkeeping of the decisions it asks an
//! external policy for — request ids, the one outstanding decision and its
//! deadline, matching a reply frame to it, and the counters and round-trip
//! histogram — as a core without I/O, driven by `now` (run ns).
//!
//! A decider has at most one decision outstanding: a scheduler decides one
//! slot at a time, a handoff sender parks until its epoch is decided. Every
//! decision ends exactly once, as one of:
//!
//! - **answered**: a reply with the pending id and a valid action arrived
//!   before the deadline;
//! - a **fallback** by [`FallbackReason`]: `timeout` (no reply by the
//!   deadline), `error` (the process answered an error), `malformed` (a
//!   reply that does not parse, lacks an action, or whose action is not
//!   valid here: wrong shape, out of range, masked), `disconnected` (no
//!   connection when the decision was due, or the connection dropped while
//!   it was pending).
//!
//! So `decisions = answered + Σ fallbacks`. A reply for an id that is no
//! longer pending (it arrived after its deadline) is counted `late` and
//! ignored. The round trip of every reply that arrives in time is recorded.

use edgemu_policies::external::{parse_reply, reply_action, ExternalError};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Why the fallback policy decided instead of the external one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FallbackReason {
    Timeout,
    Error,
    Malformed,
    Disconnected,
}

impl FallbackReason {
    pub const ALL: [FallbackReason; 4] = [
        FallbackReason::Timeout,
        FallbackReason::Error,
        FallbackReason::Malformed,
        FallbackReason::Disconnected,
    ];

    pub fn label(self) -> &'static str {
        match self {
            FallbackReason::Timeout => "timeout",
            FallbackReason::Error => "error",
            FallbackReason::Malformed => "malformed",
            FallbackReason::Disconnected => "disconnected",
        }
    }

    /// The reason an outside policy's answer was refused for.
    pub fn of(e: &ExternalError) -> FallbackReason {
        match e {
            ExternalError::PolicyError(_) => FallbackReason::Error,
            _ => FallbackReason::Malformed,
        }
    }
}

/// Upper bounds (seconds) of the round-trip histogram's buckets.
pub const RTT_BUCKETS_S: [f64; 12] = [
    0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
];

/// A decider's counters as the live view, `/metrics` and the results show
/// them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExternalStats {
    /// `lyreo` or `repair`.
    pub problem: String,
    /// The policy process last asked.
    pub url: String,
    pub connected: bool,
    /// Connections made (the first and each reconnect).
    pub connects: u64,
    /// Decisions taken while an external policy was active.
    pub decisions: u64,
    /// Requests sent to the policy process.
    pub asked: u64,
    /// Decisions the external policy made (valid action in time).
    pub answered: u64,
    pub timeout: u64,
    pub error: u64,
    pub malformed: u64,
    pub disconnected: u64,
    /// Replies that arrived after their decision's deadline (ignored).
    pub late: u64,
    /// Round trips of the replies that arrived in time.
    pub rtt_count: u64,
    pub rtt_p50_us: u64,
    pub rtt_p99_us: u64,
    pub rtt_max_us: u64,
    /// Cumulative counts per [`RTT_BUCKETS_S`] bound (the last: all).
    pub rtt_buckets: Vec<u64>,
    pub rtt_sum_us: u64,
}

impl ExternalStats {
    pub fn fallbacks(&self) -> u64 {
        self.timeout + self.error + self.malformed + self.disconnected
    }

    pub fn fallback(&self, r: FallbackReason) -> u64 {
        match r {
            FallbackReason::Timeout => self.timeout,
            FallbackReason::Error => self.error,
            FallbackReason::Malformed => self.malformed,
            FallbackReason::Disconnected => self.disconnected,
        }
    }
}

/// What a reply frame meant for the pending decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The action for decision `id` (validate it, then
    /// [`DecisionBook::accept`] or [`DecisionBook::refuse`]).
    Action { id: u64, action: serde_json::Value },
    /// Decision `id` falls back (already counted).
    Fallback {
        id: u64,
        reason: FallbackReason,
        detail: String,
    },
    /// Nothing pending matches (a late reply; counted).
    Stale,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    asked_ns: u64,
    /// The reply was read; the decision awaits `accept`/`refuse`.
    replied: bool,
}

/// See the module doc.
#[derive(Debug)]
pub struct DecisionBook {
    next_id: u64,
    pending: Option<Pending>,
    stats: ExternalStats,
    /// Round trips, µs.
    rtt: Histogram<u64>,
}

impl DecisionBook {
    pub fn new(problem: &str) -> Self {
        DecisionBook {
            next_id: 1,
            pending: None,
            stats: ExternalStats {
                problem: problem.to_string(),
                rtt_buckets: vec![0; RTT_BUCKETS_S.len() + 1],
                ..ExternalStats::default()
            },
            // 1 µs to 1 h, 3 significant digits: cannot fail.
            rtt: Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).expect("a histogram of 3 digits")),
        }
    }

    pub fn stats(&self) -> &ExternalStats {
        &self.stats
    }

    /// The stats with the round-trip quantiles filled in.
    pub fn snapshot(&self) -> ExternalStats {
        let mut s = self.stats.clone();
        if !self.rtt.is_empty() {
            s.rtt_p50_us = self.rtt.value_at_quantile(0.5);
            s.rtt_p99_us = self.rtt.value_at_quantile(0.99);
            s.rtt_max_us = self.rtt.max();
        }
        s
    }

    pub fn pending_id(&self) -> Option<u64> {
        self.pending.map(|p| p.id)
    }

    pub fn set_target(&mut self, url: &str) {
        url.clone_into(&mut self.stats.url);
    }

    pub fn set_connected(&mut self, up: bool) {
        if up && !self.stats.connected {
            self.stats.connects += 1;
        }
        self.stats.connected = up;
    }

    /// A decision is due and the request goes out now: its id. A decision
    /// still pending (the shell missed its deadline) times out first.
    pub fn ask(&mut self, now_ns: u64) -> u64 {
        if let Some(p) = self.pending {
            self.expire(p.id);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stats.decisions += 1;
        self.stats.asked += 1;
        self.pending = Some(Pending {
            id,
            asked_ns: now_ns,
            replied: false,
        });
        id
    }

    /// A decision is due but cannot be asked (no connection): it falls
    /// back now.
    pub fn unasked(&mut self, reason: FallbackReason) {
        self.stats.decisions += 1;
        self.count(reason);
    }

    fn count(&mut self, reason: FallbackReason) {
        match reason {
            FallbackReason::Timeout => self.stats.timeout += 1,
            FallbackReason::Error => self.stats.error += 1,
            FallbackReason::Malformed => self.stats.malformed += 1,
            FallbackReason::Disconnected => self.stats.disconnected += 1,
        }
    }

    fn record_rtt(&mut self, asked_ns: u64, now_ns: u64) {
        let us = now_ns.saturating_sub(asked_ns) / 1_000;
        let _ = self.rtt.record(us.max(1));
        self.stats.rtt_count += 1;
        self.stats.rtt_sum_us += us;
        let s = us as f64 / 1e6;
        for (i, &b) in RTT_BUCKETS_S.iter().enumerate() {
            if s <= b {
                self.stats.rtt_buckets[i] += 1;
            }
        }
        if let Some(all) = self.stats.rtt_buckets.last_mut() {
            *all += 1;
        }
    }

    /// A text frame from the policy process at `now_ns`.
    pub fn on_frame(&mut self, now_ns: u64, text: &str) -> Reply {
        let Some(p) = self.pending.filter(|p| !p.replied) else {
            self.stats.late += 1;
            return Reply::Stale;
        };
        let reply = match parse_reply(text) {
            Ok(r) => r,
            Err(e) => {
                // No id to match: garbage while a decision is pending is
                // taken as that decision's answer, so it falls back now
                // rather than at its deadline.
                self.record_rtt(p.asked_ns, now_ns);
                return self.fall_back(FallbackReason::Malformed, e.to_string());
            }
        };
        if reply.id != p.id {
            self.stats.late += 1;
            return Reply::Stale;
        }
        self.record_rtt(p.asked_ns, now_ns);
        match reply_action(&reply) {
            Ok(a) => {
                self.pending = Some(Pending { replied: true, ..p });
                Reply::Action {
                    id: p.id,
                    action: a.clone(),
                }
            }
            Err(e) => self.fall_back(FallbackReason::of(&e), e.to_string()),
        }
    }

    fn fall_back(&mut self, reason: FallbackReason, detail: String) -> Reply {
        let id = self.pending.take().map(|p| p.id).unwrap_or(0);
        self.count(reason);
        Reply::Fallback { id, reason, detail }
    }

    /// The action of the pending decision was valid and applied.
    pub fn accept(&mut self, id: u64) {
        if self.pending_id() == Some(id) {
            self.pending = None;
            self.stats.answered += 1;
        }
    }

    /// The action of the pending decision was not valid here (counted
    /// `malformed`); the fallback decides.
    pub fn refuse(&mut self, id: u64) {
        if self.pending_id() == Some(id) {
            self.pending = None;
            self.count(FallbackReason::Malformed);
        }
    }

    /// The request of decision `id` could not be handed to the connection
    /// (its queue is full): it falls back now, counted `disconnected`.
    pub fn unsent(&mut self, id: u64) {
        if self.pending_id() == Some(id) {
            self.pending = None;
            self.stats.asked = self.stats.asked.saturating_sub(1);
            self.count(FallbackReason::Disconnected);
        }
    }

    /// Decision `id`'s deadline passed: whether it was still pending (then
    /// it falls back, counted `timeout`).
    pub fn expire(&mut self, id: u64) -> bool {
        if self.pending_id() != Some(id) {
            return false;
        }
        self.pending = None;
        self.count(FallbackReason::Timeout);
        true
    }

    /// The connection dropped: the pending decision, if any, falls back
    /// (counted `disconnected`).
    pub fn disconnected(&mut self) -> Option<u64> {
        self.set_connected(false);
        let p = self.pending.take()?;
        self.count(FallbackReason::Disconnected);
        Some(p.id)
    }

    /// The decider stopped waiting (killed, swapped away): the pending
    /// decision is dropped without a count; a later reply is `late`.
    pub fn abandon(&mut self) {
        if self.pending.take().is_some() {
            self.stats.decisions = self.stats.decisions.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn check_sum(b: &DecisionBook) {
        let s = b.stats();
        let pending = u64::from(b.pending_id().is_some());
        assert_eq!(s.decisions, s.answered + s.fallbacks() + pending, "{s:?}");
    }

    #[test]
    fn a_reply_matches_its_request_by_id_and_times_its_round_trip() {
        let mut b = DecisionBook::new("lyreo");
        let id = b.ask(10 * MS);
        assert_eq!(b.pending_id(), Some(id));
        // Another id: a stale reply, ignored.
        assert_eq!(
            b.on_frame(11 * MS, &format!(r#"{{"id":{},"action":[0]}}"#, id + 7)),
            Reply::Stale
        );
        let r = b.on_frame(13 * MS, &format!(r#"{{"id":{id},"action":[1,0]}}"#));
        assert_eq!(
            r,
            Reply::Action {
                id,
                action: serde_json::json!([1, 0])
            }
        );
        // A second frame for the same decision is late.
        assert_eq!(
            b.on_frame(13 * MS, &format!(r#"{{"id":{id},"action":[1,0]}}"#)),
            Reply::Stale
        );
        b.accept(id);
        assert_eq!(b.pending_id(), None);
        let s = b.snapshot();
        assert_eq!((s.asked, s.answered, s.late, s.rtt_count), (1, 1, 2, 1));
        assert!((2_990..=3_010).contains(&s.rtt_p50_us), "{}", s.rtt_p50_us);
        // 3 ms: in the 5 ms bucket and above, not in the 2 ms one.
        assert_eq!(s.rtt_buckets[4], 0);
        assert_eq!(s.rtt_buckets[5], 1);
        assert_eq!(*s.rtt_buckets.last().unwrap(), 1);
        check_sum(&b);
    }

    #[test]
    fn every_decision_ends_once_whatever_the_process_does() {
        let mut b = DecisionBook::new("repair");
        // Timeout, then the reply arrives: late.
        let a = b.ask(0);
        assert!(b.expire(a));
        assert!(!b.expire(a), "expires once");
        assert_eq!(
            b.on_frame(MS, &format!(r#"{{"id":{a},"action":0}}"#)),
            Reply::Stale
        );
        // An error reply.
        let e = b.ask(2 * MS);
        assert!(matches!(
            b.on_frame(2 * MS, &format!(r#"{{"id":{e},"error":"boom"}}"#)),
            Reply::Fallback { reason: FallbackReason::Error, id, .. } if id == e
        ));
        assert!(!b.expire(e), "already decided");
        // Garbage while pending: malformed at once.
        let g = b.ask(3 * MS);
        assert!(matches!(
            b.on_frame(3 * MS, "\u{0}not json"),
            Reply::Fallback { reason: FallbackReason::Malformed, id, .. } if id == g
        ));
        // No action.
        let n = b.ask(4 * MS);
        assert!(matches!(
            b.on_frame(4 * MS, &format!(r#"{{"id":{n}}}"#)),
            Reply::Fallback {
                reason: FallbackReason::Malformed,
                ..
            }
        ));
        // A parsed action the shell refuses (masked, out of range).
        let m = b.ask(5 * MS);
        assert!(matches!(
            b.on_frame(5 * MS, &format!(r#"{{"id":{m},"action":9}}"#)),
            Reply::Action { .. }
        ));
        b.refuse(m);
        // Disconnected while pending; then unasked while down.
        let d = b.ask(6 * MS);
        assert_eq!(b.disconnected(), Some(d));
        assert_eq!(b.disconnected(), None);
        b.unasked(FallbackReason::Disconnected);
        // A decision asked while another is pending: the old one times out.
        let x = b.ask(7 * MS);
        let y = b.ask(8 * MS);
        assert_ne!(x, y);
        assert!(!b.expire(x));
        assert!(b.expire(y));
        // Not handed to the connection: not asked, a disconnected fallback.
        let u = b.ask(8 * MS);
        b.unsent(u);
        assert_eq!(b.pending_id(), None);
        // Abandoned (killed): neither answered nor a fallback.
        let _z = b.ask(9 * MS);
        b.abandon();
        let s = b.snapshot();
        assert_eq!(s.answered, 0);
        assert_eq!(
            (s.timeout, s.error, s.malformed, s.disconnected),
            (3, 1, 3, 3)
        );
        assert_eq!(s.late, 1);
        assert_eq!(s.asked, 9);
        assert_eq!(s.decisions, 10, "8 asked and decided + 2 unasked");
        check_sum(&b);
        // Garbage with nothing pending is late, not a decision.
        assert_eq!(b.on_frame(10 * MS, "garbage"), Reply::Stale);
        check_sum(&b);
    }

    #[test]
    fn connects_count_transitions() {
        let mut b = DecisionBook::new("lyreo");
        b.set_connected(true);
        b.set_connected(true);
        b.disconnected();
        b.set_connected(true);
        assert_eq!(b.stats().connects, 2);
        assert!(b.stats().connected);
    }
}
