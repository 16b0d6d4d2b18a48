//! The link model: what a network link does to each packet, as a pure state
//! machine driven by `now` (nanoseconds) and packets — no I/O, no clock, seeded
//! randomness — so the same code runs under real and virtual time.
//!
//! Stages, in this fixed order, for a packet offered at `now`:
//! 1. **up/down** — a killed link drops the packet (`down_dropped`).
//! 2. **drop-tail queue** — a packet that must wait for serialization is
//!    accepted only if the bytes already waiting plus its own fit the byte
//!    limit, or it is dropped (`queue_dropped`); a packet that finds the link
//!    idle goes straight on the wire (see [`queue`]).
//! 3. **rate** — serialization starts at `max(now, free_at)` and lasts
//!    `size·8 / rate` (a fixed rate, or a rate trace such as mahimahi's
//!    delivery-opportunity format; see [`trace`]).
//! 4. **loss** — decided at send time: none, Bernoulli, Gilbert–Elliott or a
//!    loss-state trace (see [`loss`]). A `datagram` link drops the packet
//!    (`lost`); a `reliable` link instead adds one retransmission delay
//!    (2·delay + size·8/rate) per loss.
//! 5. **delay** — one-way delay plus optional jitter; arrival times never go
//!    backwards (no reordering) unless `reorder = true`.
//!
//! delivery = max(now, free_at) + size·8/rate + delay (+ jitter).
//!
//! [`LinkModel`] composes the stages and holds accepted packets until they
//! are due; [`LinkCounters`] are its per-link counters. [`LinkFlapper`] is the
//! up/down schedule of a randomly flapping link ([`flap`]),
//! [`paper_channel`] the PriorityFEC paper's link, and [`time`] the time
//! units.

mod counters;
mod error;
pub mod flap;
pub mod loss;
mod model;
pub mod paper_channel;
mod params;
pub mod queue;
mod rate;
pub mod time;
pub mod trace;

pub use counters::LinkCounters;
pub use error::LinkError;
pub use flap::{FlapChange, FlapParams, LinkFlapper};
pub use loss::{Bernoulli, GeState, GilbertElliott, LossModel};
pub use model::{Arrival, DropReason, LinkModel, Offer, MAX_RETRANSMISSIONS};
pub use params::{Delivery, LinkParams, LossSpec, RateSpec};
pub use trace::{LossTrace, RateTrace, TraceState, MAHIMAHI_MTU};
