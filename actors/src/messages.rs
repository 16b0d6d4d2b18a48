//! Messages between actors on one host.

use actix::prelude::*;
use edgemu_codec::ids::{Direction, HostId, LinkId};
use edgemu_config::LinkPatch;
use edgemu_protocol::Envelope;
use serde::Serialize;

/// Hand an envelope to the router of this host, which sends it to its link,
/// its local actor or the host that owns its destination.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Route(pub Envelope);

/// [`Route`] for several envelopes at once, routed in order: an actor on a
/// thread of its own that sends many in a burst (the LYREO scheduler's
/// placements of a slot) hands them to the router's thread in one message
/// instead of one per envelope.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RouteBatch(pub Vec<Envelope>);

/// An envelope that reached its destination actor. `recv_ns` is the run time
/// of arrival (in virtual time the link model's exact arrival, since the
/// paused clock is millisecond-quantized).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Deliver {
    pub envelope: Envelope,
    pub recv_ns: u64,
}

/// A control command for one link direction; answered with the run time at
/// which it took effect, or why it could not (too many overrides at once).
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<u64, crate::link_overrides::TooManyLayers>")]
pub enum LinkControl {
    Kill {
        heal_after_ns: Option<u64>,
    },
    Restore,
    Set {
        patch: LinkPatch,
        heal_after_ns: Option<u64>,
    },
    Flap {
        mtbf_ns: u64,
        mttr_ns: u64,
        seed: u64,
        until_ns: Option<u64>,
    },
}

/// Base one-way delay to the host this link direction delivers to; the link
/// releases packets this much before their model arrival time.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct SetLead {
    pub lead_ns: u64,
}

/// Ask a link actor for its counters.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "LinkStatus")]
pub struct GetLinkStats;

/// A snapshot of one link direction: the control protocol's type, so
/// `status` reports exactly what the link actor answers.
pub use edgemu_config::command::LinkStatus;

/// Ask a link actor for its counters and its delivered-packet delay
/// distribution as cumulative buckets, in one message (the dashboard's and
/// Prometheus `/metrics`' snapshot).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "(LinkStatus, DelayHistogram)")]
pub struct GetLinkSnapshot;

/// Upper bounds (ns) of the delay buckets a link reports: 100 µs to 10 s.
pub const DELAY_BUCKETS_NS: [u64; 16] = [
    100_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    u64::MAX,
];

/// Delivered-packet delays of one link direction: `cumulative[i]` packets
/// took at most [`DELAY_BUCKETS_NS`]`[i]` (the last bucket is +Inf), out of
/// `count`, with `sum_ns` their (histogram-resolution) total.
#[derive(Debug, Clone, Serialize, MessageResponse)]
pub struct DelayHistogram {
    pub link: LinkId,
    pub dir: Direction,
    pub count: u64,
    pub sum_ns: f64,
    pub cumulative: Vec<u64>,
}

impl DelayHistogram {
    /// Buckets from a link's delay histogram in one pass over its recorded
    /// values, so a scrape costs the link actor little whatever the run length.
    pub fn from_hdr(link: LinkId, dir: Direction, h: &hdrhistogram::Histogram<u64>) -> Self {
        let count = h.len();
        let mut per_bucket = [0u64; DELAY_BUCKETS_NS.len()];
        for v in h.iter_recorded() {
            let at = v.value_iterated_to();
            let i = DELAY_BUCKETS_NS
                .iter()
                .position(|&le| at <= le)
                .unwrap_or(DELAY_BUCKETS_NS.len() - 1);
            per_bucket[i] += v.count_at_value();
        }
        let cumulative = per_bucket
            .iter()
            .scan(0u64, |sum, n| {
                *sum += n;
                Some(*sum)
            })
            .collect();
        DelayHistogram {
            link,
            dir,
            count,
            sum_ns: h.mean() * count as f64,
            cumulative,
        }
    }
}

/// Change what the router does with traffic to a peer host.
#[derive(Message, Debug, Clone)]
#[rtype(result = "u64")]
pub enum PeerControl {
    Partition {
        peer: HostId,
        heal_after_ns: Option<u64>,
    },
    Heal {
        peer: HostId,
    },
}

/// A peer host went down or came back (from the mesh).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PeerStatus {
    pub peer: HostId,
    pub up: bool,
    /// Down because the run is over (the peer said goodbye, or this host
    /// is leaving), not a failure.
    pub left: bool,
}

/// Senders stop generating traffic (end of the run).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct StopSending;

/// Ask a sink to flush what it recorded; answers its per-flow summary.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Vec<crate::probes::FlowSummary>")]
pub struct Flush;

/// A fault injected into one actor: `actor.kill NAME [for = D]` and
/// `actor.restart NAME` (control and `[[chaos]]`). One message type for
/// every actor kind that can fail (LYREO users, servers, schedulers,
/// agents); the host finds the actor's [`Recipient<ActorFault>`] in its
/// fault registry (`nodes/src/host/faults.rs`). Answered with what happened
/// ([`FaultReply`]): a fault cannot fail (a repeated one changes nothing).
///
/// What a kill means is the actor kind's to define (and document): it
/// stops doing its work and drops what it held, as a crashed process
/// would; messages that reach a dead actor are dropped (counted). Restart
/// brings it back empty, as a fresh process. [`Liveness`] keeps the
/// bookkeeping every kind needs.
#[derive(Message, Debug, Clone, PartialEq)]
#[rtype(result = "FaultReply")]
pub enum ActorFault {
    Kill {
        /// Run time (ns) at which the actor restarts by itself (`for = D`:
        /// the kill's time plus D); `None`: dead until `actor.restart`.
        until_ns: Option<u64>,
        /// Who asked (`"control"`, `"control (via alpha)"`, `"chaos#3"`),
        /// for the event log.
        by: String,
    },
    Restart {
        by: String,
    },
}

/// What a fault did to an actor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, MessageResponse)]
pub struct FaultReply {
    /// Run time (ns) at which it took effect.
    pub at_ns: u64,
    /// False when the actor already was in that state (a kill of a dead
    /// actor, a restart of a live one): nothing changed.
    pub changed: bool,
    /// Work the kill dropped: requests (a server's running batch and queue,
    /// a user's open requests, a scheduler's held requests), handoffs.
    pub dropped: u64,
    /// One line for the reply and the event log, like `"dropped 3
    /// requests (2 running, 1 queued)"`.
    pub detail: String,
}

impl FaultReply {
    /// The reply to a kill that took effect at `at_ns`: `detail` plus,
    /// with `until_ns`, when the actor restarts by itself.
    pub fn killed(at_ns: u64, dropped: u64, detail: String, until_ns: Option<u64>) -> Self {
        let detail = match until_ns {
            Some(u) => format!("{detail}; restarts at {:.3} s", u as f64 / 1e9),
            None => detail,
        };
        FaultReply {
            at_ns,
            changed: true,
            dropped,
            detail,
        }
    }

    /// The reply to a restart: `detail` when it brought the actor back
    /// (`changed`), else that there was nothing to restart.
    pub fn restarted(at_ns: u64, changed: bool, detail: &str) -> Self {
        if !changed {
            return FaultReply::unchanged(at_ns, "not dead; nothing to restart");
        }
        FaultReply {
            at_ns,
            changed,
            dropped: 0,
            detail: detail.into(),
        }
    }

    /// The reply to a fault that found the actor already in that state.
    pub fn unchanged(at_ns: u64, detail: &str) -> Self {
        FaultReply {
            at_ns,
            changed: false,
            dropped: 0,
            detail: detail.into(),
        }
    }
}

/// Whether an actor is alive, as a plain state machine every faultable
/// actor keeps: a kill or restart of an actor already in that state
/// changes nothing, and an automatic restart (`for = D`) scheduled by an
/// earlier kill never ends a later one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Liveness {
    dead: bool,
    /// Bumped by every kill; an automatic restart carries the epoch of the
    /// kill that scheduled it.
    epoch: u64,
}

impl Liveness {
    pub fn is_alive(&self) -> bool {
        !self.dead
    }

    /// Kills: `Some(epoch)` to hand to [`Liveness::auto_restart`] later, or
    /// `None` when already dead.
    pub fn kill(&mut self) -> Option<u64> {
        if self.dead {
            return None;
        }
        self.dead = true;
        self.epoch += 1;
        Some(self.epoch)
    }

    /// `actor.restart`: true when the actor was dead.
    pub fn restart(&mut self) -> bool {
        std::mem::replace(&mut self.dead, false)
    }

    /// The automatic restart of the kill of `epoch`: true when that kill is
    /// still the one in force (not restarted and killed again since).
    pub fn auto_restart(&mut self, epoch: u64) -> bool {
        if self.dead && self.epoch == epoch {
            self.dead = false;
            true
        } else {
            false
        }
    }
}

/// An actor that `actor.kill` can kill and `actor.restart` (or the kill's
/// own `for = D`) brings back. [`restart`] answers `actor.restart` and
/// [`restart_later`] schedules the automatic restart: the one place that
/// checks a kill's epoch (a manual restart and a new kill in between make
/// it stale). An actor says only what coming back means for it.
pub trait SelfRestart: Actor<Context = Context<Self>> {
    fn liveness(&mut self) -> &mut Liveness;
    /// Run time now, ns.
    fn now_ns(&self) -> u64;
    /// What the actor is after a restart, for the reply and the event log
    /// (`"restarted, empty"`).
    fn restarted_detail(&self) -> &'static str;
    /// Brings the actor back (its liveness already says alive): clears
    /// what its kill left and shows it up again.
    fn come_back(&mut self, _ctx: &mut Context<Self>) {}
    /// The log and the name under which an automatic restart is recorded;
    /// `None` for an actor that records its restarts its own way
    /// (overriding [`Self::log_restart`]).
    fn restart_log(&self) -> Option<(&crate::events::ActorLog, &str)> {
        None
    }
    /// Records a restart that took effect at `at_ns` in the event log:
    /// `by` the command's source, `None` when the kill's `for` ran out.
    /// By default only the automatic one is recorded here (a command is
    /// recorded by the control plane).
    fn log_restart(&mut self, at_ns: u64, by: Option<&str>) {
        if by.is_none() {
            if let Some((log, name)) = self.restart_log() {
                log.self_restart(at_ns, name, self.restarted_detail());
            }
        }
    }
}

/// `actor.restart` of `act`, asked by `by`: nothing when it is alive.
pub fn restart<A: SelfRestart>(act: &mut A, by: &str, ctx: &mut Context<A>) -> FaultReply {
    if !act.liveness().restart() {
        return FaultReply::unchanged(act.now_ns(), "not dead; nothing to restart");
    }
    act.come_back(ctx);
    let at = act.now_ns();
    act.log_restart(at, Some(by));
    FaultReply::restarted(at, true, act.restarted_detail())
}

/// Schedules the automatic restart that ends the kill of `epoch` after
/// `after`; nothing for a kill without `for` (`None`).
pub fn restart_later<A: SelfRestart>(
    ctx: &mut Context<A>,
    after: Option<std::time::Duration>,
    epoch: u64,
) {
    if let Some(after) = after {
        ctx.run_later(after, move |act, ctx| {
            if act.liveness().auto_restart(epoch) {
                act.come_back(ctx);
                let at = act.now_ns();
                act.log_restart(at, None);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_ignores_repeats_and_stale_auto_restarts() {
        let mut l = Liveness::default();
        assert!(l.is_alive());
        assert!(!l.restart(), "restarting a live actor changes nothing");
        let first = l.kill().expect("alive");
        assert_eq!(l.kill(), None, "already dead");
        assert!(l.restart());
        let second = l.kill().expect("alive again");
        // The first kill's automatic restart must not end the second one.
        assert!(!l.auto_restart(first));
        assert!(!l.is_alive());
        assert!(l.auto_restart(second));
        assert!(l.is_alive());
        assert!(!l.auto_restart(second), "once");
    }

    #[test]
    fn delay_buckets_are_cumulative_and_end_with_everything() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        for _ in 0..10 {
            h.record(300_000).expect("record"); // 0.3 ms
        }
        for _ in 0..5 {
            h.record(15_000_000).expect("record"); // 15 ms
        }
        h.record(60_000_000_000).expect("record"); // 60 s: only +Inf
        let d = DelayHistogram::from_hdr(LinkId(1), Direction::BtoA, &h);
        assert_eq!(d.count, 16);
        assert_eq!(d.cumulative.len(), DELAY_BUCKETS_NS.len());
        let at = |le: u64| {
            d.cumulative[DELAY_BUCKETS_NS
                .iter()
                .position(|&b| b == le)
                .expect("bound")]
        };
        assert_eq!(at(100_000), 0);
        assert_eq!(at(500_000), 10);
        assert_eq!(at(10_000_000), 10);
        assert_eq!(at(20_000_000), 15);
        assert_eq!(at(10_000_000_000), 15);
        assert_eq!(at(u64::MAX), 16);
        assert!(d.cumulative.windows(2).all(|w| w[0] <= w[1]));
        let mean_ms = d.sum_ns / d.count as f64 / 1e6;
        let want = (10.0 * 0.3 + 5.0 * 15.0 + 60_000.0) / 16.0;
        assert!((mean_ms - want).abs() < want * 2e-3, "{mean_ms} vs {want}");
    }
}
