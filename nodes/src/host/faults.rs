//! The fault targets of one host: actor → [`Recipient<ActorFault>`], the
//! actors that `actor.kill` / `actor.restart` can reach.
//!
//! Spawn code registers every actor kind that can fail (LYREO users,
//! servers and schedulers, agents) as it starts it; the control plane
//! routes an actor command to the actor's host (like every command) and
//! sends the typed [`ActorFault`] through this registry. An actor that is
//! not registered (link probes: constant and bursty senders, pingers,
//! sinks) cannot be killed; the command says so.

use edgemu_actors::messages::ActorFault;
use edgemu_codec::ids::ActorId;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// This host's faultable actors, by id. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct FaultRegistry(Arc<RwLock<BTreeMap<ActorId, actix::Recipient<ActorFault>>>>);

impl std::fmt::Debug for FaultRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let actors: Vec<u32> = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .map(|a| a.0)
            .collect();
        f.debug_struct("FaultRegistry")
            .field("actors", &actors)
            .finish()
    }
}

impl FaultRegistry {
    /// Registers (or replaces) the fault recipient of `actor`.
    pub fn register(&self, actor: ActorId, recipient: actix::Recipient<ActorFault>) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(actor, recipient);
    }

    pub fn get(&self, actor: ActorId) -> Option<actix::Recipient<ActorFault>> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&actor)
            .cloned()
    }
}
