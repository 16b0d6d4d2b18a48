//! The LYREO actors (issue 8, live): thin shells around `edgemu-serving`'s
//! cores that run the paper's slotted system across hosts in real time, or
//! in one process under virtual time.
//!
//! Per slot `t` (length Δ from the scheduler):
//! 1. at `t·Δ` every [`user::UserActor`] moves (serving's mobility model),
//!    draws its request's lengths (the workload) and sends the scheduler a
//!    `Request` with its position and power;
//! 2. at `t·Δ + collect` the [`scheduler::SchedulerActor`] first closes slot
//!    `t−1` in its Lyapunov queues with the servers' reports, then assigns
//!    every request it holds with its policy (`SchedulerCore`), computes each
//!    request's Shannon rate in the cell it shares (serving's radio model)
//!    and tells the user (`Assign`) and the server (`Expect`);
//! 3. the user holds the upload for its transmission time `l_in·β/R`, then
//!    hands a declared-size packet to the link joining it to the server (if
//!    the file has one, so the link's delay, loss and chaos apply);
//! 4. the [`server::ServerActor`] waits for all of a slot's uploads, hands
//!    them to its `ServerSlotCore` (prefilled together, DEED or static
//!    decode), runs it in step with the clock, answers each request when its
//!    last token is out, and at `(t+1)·Δ` reports its slot to the scheduler;
//! 5. the user records the request's latency parts in `requests.csv`.
//!
//! Latency parts as recorded: `sched` = issue → assignment received (the
//! scheduler's collection window and the network); `upload` = assignment
//! received → upload arrived at the server; `wait`, `prefill`, `decode` as
//! in `serving::RequestRecord`; `e2e` = issue → last token. In the paper the
//! upload starts at the slot start (the scheduler is instantaneous); here
//! the decision takes `collect` plus the network, which is in `sched`.
//!
//! Faults (`actor.kill` / `actor.restart`): each of the three actors
//! handles `crate::messages::ActorFault` (what a kill means for each is in
//! its module doc and in docs/control.md); the scheduler marks a server
//! that stopped reporting unavailable and routes around it.

pub mod external_server;
pub mod gateway;
pub mod live;
pub mod messages;
pub mod openai_client;
pub mod records;
pub mod scheduler;
pub mod server;
pub mod user;

use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_config::{ActorKind, Cluster, ServerSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A server's position: the file's `position`, or a uniform draw in the
/// default 200 m × 200 m area from the run seed and the actor's id (the
/// same on every host).
pub fn server_position(run_seed: u64, id: ActorId, spec: &ServerSpec) -> (f64, f64) {
    if let Some([x, y]) = spec.position_m {
        return (x, y);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(run_seed ^ (0x5e7e_0000_0000 | u64::from(id.0)));
    (rng.random::<f64>() * 200.0, rng.random::<f64>() * 200.0)
}

/// The link joining `a` and `b`, if the file has one.
pub fn link_between(cluster: &Cluster, a: ActorId, b: ActorId) -> Option<LinkId> {
    cluster.links.iter().find(|l| l.joins(a, b)).map(|l| l.id)
}

/// The scheduler that lists server `server` (the config guarantees one).
pub fn scheduler_of(cluster: &Cluster, server: ActorId) -> Option<ActorId> {
    cluster.actors.iter().find_map(|a| match &a.kind {
        ActorKind::Scheduler(s) if s.servers.contains(&server) => Some(a.id),
        _ => None,
    })
}
