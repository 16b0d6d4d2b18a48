//! The fault targets of one host: actor → [`Recipient<ActorFault>`], the
//! actors that `actor.kill` / `actor.restart` can reach.
//!
//! Spawn code registers every actor kind that can fail (LYREO users,
//! servers and schedulers, agents) as it starts it; the control plane
//! routes an actor command to the actor's host (like every command) and
//! sends the typed [`ActorFault`] through this registry. An actor that is
//! not registered (link probes: constant and bursty senders, pingers,
//! sinks) cannot be killed; the command says so.

use super::registry::ActorRegistry;
use edgemu_actors::messages::ActorFault;

/// This host's faultable actors, by id. Cheap to clone (shared).
pub type FaultRegistry = ActorRegistry<actix::Recipient<ActorFault>>;
