//! Agents and the live KV handoff (issue 11): thin actor shells around the
//! handoff cores of `edgemu-handoff`.
//!
//! An [`agent::AgentActor`] is bound to a real edge server (its
//! [`engine::AgentEngine`]: the server's model, a moka cache of context KV
//! and a decode engine, run by [`engine::ComputeActor`] off the data path).
//! An agent with a handoff task (`hand_to`, `via` in `cluster.toml`):
//!
//! 1. at each handoff time takes the next context, finds its KV in the
//!    cache or prefills it (the real KV, exported as BF16 transport blocks);
//! 2. tells the next agent (`Offer`, over the mesh) the layout, utilities,
//!    deadline and start time, then runs the [`edgemu_handoff::HandoffSender`]
//!    with the repair scheduler of its policy slot
//!    (`PolicySlot<RepairPolicies>`, so `policy.swap` reaches it) through
//!    [`paced::PacedSender`]: each 1400-byte frame goes to the link actor of
//!    the emulated link as real bytes, offered at its exact slot time;
//! 3. feeds the feedback that comes back over the reverse direction to the
//!    core with its exact arrival time.
//!
//! The receiving agent feeds frames to a [`edgemu_handoff::HandoffReceiver`]
//! (sending its feedback back over the reverse direction at the frame's
//! arrival time), and at D rebuilds the cache (zero-fill or mask) and
//! decodes with its own server's engine; it writes one row of
//! `handoffs.csv` ([`records`]). In virtual time the cores see the same ns
//! times as in the co-simulation harness, so the recovered utility equals
//! the harness's for the same channel draws (see [`paced`]).

pub mod agent;
pub mod engine;
pub mod error;
pub mod messages;
pub mod paced;
pub mod records;
pub mod stream;
