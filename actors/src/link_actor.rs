//! The link actor: a thin shell around [`edgemu_links::LinkModel`] for one
//! direction of one link, living on the sending host.
//!
//! It offers each envelope to the model at `now`, and asks its [`Timer`] to
//! wake it when the earliest packet is due. At each wake-up it releases
//! *everything* due, so its rate never depends on how often it is woken.
//! A packet whose destination is on another host is released `lead_ns`
//! early — the measured base one-way delay between the two hosts — so that
//! it arrives at its model time (the lead never exceeds the link's own delay,
//! so no packet leaves before it has been serialized).

use crate::clock::{Clock, Timer, Wake};
use crate::events::{Event, EventLog};
use crate::link_overrides::{LayerId, LinkOverrides};
use crate::messages::{
    DelayHistogram, GetLinkSnapshot, GetLinkStats, LinkControl, LinkStatus, Route, SetLead,
};
use actix::prelude::*;
use edgemu_codec::ids::{Direction, LinkId};
use edgemu_links::{FlapChange, FlapParams, LinkFlapper, LinkModel, LinkParams, Offer, RateSpec};
use edgemu_protocol::Envelope;
use std::time::Duration;

pub struct LinkActor {
    link: LinkId,
    name: String,
    dir: Direction,
    host_name: String,
    model: LinkModel<Envelope>,
    clock: Clock,
    timer: Timer,
    router: Recipient<Route>,
    events: EventLog,
    lead_ns: u64,
    /// Generation of the wake-up we are waiting for, and its time.
    wake_generation: u64,
    wake_at: Option<u64>,
    /// Control and chaos overrides over the configured parameters; the
    /// model is kept in step with it by [`LinkActor::sync`].
    overrides: LinkOverrides,
    /// Latest offer time, so a back-dated [`OfferAt`] never goes behind it.
    last_offer_ns: u64,
    /// The running flap process and its epoch in `overrides` (a restore or a
    /// new flap ends it).
    flap: Option<(u64, LinkFlapper)>,
}

/// Offer an envelope at run time `at_ns` rather than at `now`: a sender
/// that paces by exact slot times (the KV handoff sender shell, which
/// commits slots a little behind the clock) gets the arrival times the
/// model gives for those slots. The time is clamped to `[last offer, now]`
/// so offers stay in order and none is in the future.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct OfferAt {
    pub envelope: Envelope,
    pub at_ns: u64,
}

impl LinkActor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        link: LinkId,
        name: String,
        dir: Direction,
        host_name: String,
        params: LinkParams,
        seed: u64,
        clock: Clock,
        timer: Timer,
        router: Recipient<Route>,
        events: EventLog,
    ) -> Self {
        LinkActor {
            link,
            name,
            dir,
            host_name,
            overrides: LinkOverrides::new(params.clone()),
            model: LinkModel::new(params, seed),
            clock,
            timer,
            router,
            events,
            lead_ns: 0,
            wake_generation: 0,
            wake_at: None,
            last_offer_ns: 0,
            flap: None,
        }
    }

    fn offer(&mut self, at_ns: u64, env: Envelope, ctx: &mut Context<Self>) {
        let at = at_ns.max(self.last_offer_ns);
        self.last_offer_ns = at;
        let size = env.payload.wire_size();
        if let Offer::Accepted { .. } = self.model.offer(at, size, env) {
            self.schedule(ctx);
        }
    }

    fn effective_lead(&self) -> u64 {
        self.lead_ns.min(self.model.params().delay_ns)
    }

    fn schedule(&mut self, ctx: &mut Context<Self>) {
        let Some(due) = self.model.next_due() else {
            return;
        };
        let release = due.saturating_sub(self.effective_lead());
        if let Some(at) = self.wake_at {
            if at <= release {
                return;
            }
        }
        self.wake_generation += 1;
        self.wake_at = Some(release);
        self.timer
            .wake_at(&self.clock, release, self.wake_generation, ctx);
    }

    fn release_due(&mut self) {
        let horizon = self.clock.now_ns().saturating_add(self.effective_lead());
        while let Some(arrival) = self.model.poll(horizon) {
            let mut env = arrival.packet;
            env.via = None;
            env.due_ns = Some(arrival.due_ns);
            self.router.do_send(Route(env));
        }
    }

    fn log(&self, source: &str, kind: &str, t_ns: u64, detail: serde_json::Value) {
        self.events.record(Event {
            t_ns,
            host: self.host_name.clone(),
            source: source.into(),
            kind: kind.into(),
            detail,
        });
    }

    fn ident(&self) -> serde_json::Value {
        serde_json::json!({ "link": self.name, "dir": self.dir.to_string() })
    }

    /// Brings the model in line with the overrides: down or up, and the
    /// effective parameters. Returns the packets a kill dropped in flight.
    fn sync(&mut self, now: u64) -> Option<usize> {
        let mut dropped = None;
        let down = self.overrides.is_down();
        if down && self.model.is_up() {
            dropped = Some(self.model.kill(now));
            // Pending wake-ups find nothing due; drop them.
            self.wake_at = None;
            self.wake_generation += 1;
        } else if !down && !self.model.is_up() {
            self.model.restore(now);
        }
        let params = self.overrides.params();
        if &params != self.model.params() {
            self.model.set_params(now, params);
        }
        dropped
    }

    /// A timed override's `for` is over: remove its layer only.
    fn heal_later(
        &mut self,
        ctx: &mut Context<Self>,
        after_ns: u64,
        id: LayerId,
        kind: &'static str,
    ) {
        ctx.run_later(Duration::from_nanos(after_ns), move |act, ctx| {
            let t = act.clock.now_ns();
            act.overrides.expire(id);
            act.sync(t);
            act.log("heal", kind, t, act.ident());
            act.schedule(ctx);
        });
    }

    /// Applies the flap change due now, if the flap process `epoch` still
    /// runs, and sets the timer to the next one.
    fn flap_due(&mut self, ctx: &mut Context<Self>, epoch: u64) {
        let Some((e, flapper)) = &mut self.flap else {
            return;
        };
        if *e != epoch || self.overrides.flap_epoch() != epoch {
            return;
        }
        let now = self.clock.now_ns();
        let Some(change) = flapper.poll(now) else {
            return;
        };
        match change {
            FlapChange::Up => {
                self.overrides.set_flap_down(false);
                self.sync(now);
                self.log("flap", "link.restore", now, self.ident());
            }
            FlapChange::Down => {
                self.overrides.set_flap_down(true);
                let n = self.sync(now).unwrap_or(0);
                let mut d = self.ident();
                d["dropped_in_flight"] = n.into();
                self.log("flap", "link.kill", now, d);
            }
        }
        self.schedule(ctx);
        self.schedule_flap(ctx, epoch);
    }

    /// Wakes the actor at the running flap process's next change.
    fn schedule_flap(&mut self, ctx: &mut Context<Self>, epoch: u64) {
        let Some(at) = self.flap.as_ref().and_then(|(_, f)| f.next_change_ns()) else {
            return;
        };
        ctx.run_later(self.clock.until(at), move |act, ctx| {
            act.flap_due(ctx, epoch)
        });
    }
}

impl Actor for LinkActor {
    type Context = Context<Self>;
}

impl Handler<Route> for LinkActor {
    type Result = ();
    fn handle(&mut self, msg: Route, ctx: &mut Context<Self>) {
        let now = self.clock.now_ns();
        self.offer(now, msg.0, ctx);
    }
}

impl Handler<OfferAt> for LinkActor {
    type Result = ();
    fn handle(&mut self, msg: OfferAt, ctx: &mut Context<Self>) {
        let now = self.clock.now_ns();
        self.offer(msg.at_ns.min(now), msg.envelope, ctx);
    }
}

impl Handler<Wake> for LinkActor {
    type Result = ();
    fn handle(&mut self, msg: Wake, ctx: &mut Context<Self>) {
        if msg.generation != self.wake_generation {
            return;
        }
        self.wake_at = None;
        self.release_due();
        self.schedule(ctx);
    }
}

impl Handler<SetLead> for LinkActor {
    type Result = ();
    fn handle(&mut self, msg: SetLead, _: &mut Context<Self>) {
        self.lead_ns = msg.lead_ns;
    }
}

impl Handler<LinkControl> for LinkActor {
    type Result = Result<u64, crate::link_overrides::TooManyLayers>;
    fn handle(&mut self, msg: LinkControl, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_ns();
        match msg {
            LinkControl::Kill { heal_after_ns } => {
                let id = self.overrides.kill(heal_after_ns.is_some())?;
                if let Some(after) = heal_after_ns {
                    self.heal_later(ctx, after, id, "link.restore");
                }
            }
            LinkControl::Restore => self.overrides.restore(),
            LinkControl::Set {
                patch,
                heal_after_ns,
            } => {
                let id = self.overrides.set(patch, heal_after_ns.is_some())?;
                if let Some(after) = heal_after_ns {
                    self.heal_later(ctx, after, id, "link.set");
                }
            }
            LinkControl::Flap {
                mtbf_ns,
                mttr_ns,
                seed,
                until_ns,
            } => {
                let epoch = self.overrides.start_flap();
                let params = FlapParams {
                    mtbf_ns,
                    mttr_ns,
                    seed,
                    until_ns,
                };
                self.flap = Some((epoch, LinkFlapper::start(params, now)));
                self.schedule_flap(ctx, epoch);
            }
        }
        self.sync(now);
        self.schedule(ctx);
        Ok(now)
    }
}

impl Handler<GetLinkStats> for LinkActor {
    type Result = MessageResult<GetLinkStats>;
    fn handle(&mut self, _: GetLinkStats, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.status())
    }
}

impl Handler<GetLinkSnapshot> for LinkActor {
    type Result = MessageResult<GetLinkSnapshot>;
    fn handle(&mut self, _: GetLinkSnapshot, _: &mut Context<Self>) -> Self::Result {
        let h = DelayHistogram::from_hdr(self.link, self.dir, &self.model.counters().delay_ns);
        MessageResult((self.status(), h))
    }
}

impl LinkActor {
    fn status(&self) -> LinkStatus {
        let now = self.clock.now_ns();
        let c = self.model.counters();
        let p = self.model.params();
        LinkStatus {
            link: self.link,
            name: self.name.clone(),
            dir: self.dir,
            t_ns: now,
            up: self.model.is_up(),
            rate_bps: match p.rate {
                RateSpec::Fixed { bps } => Some(bps),
                _ => None,
            },
            delay_ns: p.delay_ns,
            offered: c.offered,
            delivered: c.delivered,
            lost: c.lost,
            queue_dropped: c.queue_dropped,
            down_dropped: c.down_dropped,
            retransmissions: c.retransmissions,
            bytes_offered: c.bytes_offered,
            bytes_delivered: c.bytes_delivered,
            queued_bytes: self.model.queued_bytes(now),
            delay_p50_ns: c.delay_ns.value_at_quantile(0.5),
            delay_p99_ns: c.delay_ns.value_at_quantile(0.99),
            delay_max_ns: c.delay_ns.max(),
            expected_loss: p.loss.stationary_loss(),
        }
    }
}
