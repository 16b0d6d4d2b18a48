//! A host's per-actor registry: actor id → a handle the control plane uses
//! to reach that actor (its fault recipient, its policy slot). Spawn code
//! registers as it starts actors; commands routed to this host look the
//! target up here. Cheap to clone (shared), safe to read from any thread.

use edgemu_codec::ids::ActorId;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Handles of type `T` by actor id.
pub struct ActorRegistry<T>(Arc<RwLock<BTreeMap<ActorId, T>>>);

impl<T> Clone for ActorRegistry<T> {
    fn clone(&self) -> Self {
        ActorRegistry(self.0.clone())
    }
}

impl<T> Default for ActorRegistry<T> {
    fn default() -> Self {
        ActorRegistry(Arc::default())
    }
}

impl<T> std::fmt::Debug for ActorRegistry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let actors: Vec<u32> = self.read().keys().map(|a| a.0).collect();
        f.debug_struct("ActorRegistry")
            .field("actors", &actors)
            .finish()
    }
}

impl<T: Clone> ActorRegistry<T> {
    /// Registers (or replaces) the handle of `actor`.
    pub fn register(&self, actor: ActorId, handle: T) {
        self.write().insert(actor, handle);
    }

    pub fn get(&self, actor: ActorId) -> Option<T> {
        self.read().get(&actor).cloned()
    }

    /// Every registered handle, by actor id.
    pub fn entries(&self) -> Vec<(ActorId, T)> {
        self.read().iter().map(|(a, h)| (*a, h.clone())).collect()
    }

    /// Adds every handle of `other` (handles registered before the host's
    /// actors existed, e.g. by a test).
    pub fn extend_from(&self, other: &ActorRegistry<T>) {
        if Arc::ptr_eq(&self.0, &other.0) {
            return;
        }
        let theirs: Vec<(ActorId, T)> = other.read().iter().map(|(a, h)| (*a, h.clone())).collect();
        self.write().extend(theirs);
    }
}

impl<T> ActorRegistry<T> {
    // A panic while holding the lock cannot leave the map half-written (one
    // insert), so a poisoned lock is used as is.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<ActorId, T>> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<ActorId, T>> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_and_extend_adds_the_others_handles() {
        let a: ActorRegistry<&str> = ActorRegistry::default();
        let shared = a.clone();
        shared.register(ActorId(1), "one");
        assert_eq!(a.get(ActorId(1)), Some("one"));
        let b = ActorRegistry::default();
        b.register(ActorId(2), "two");
        b.register(ActorId(1), "uno");
        a.extend_from(&b);
        a.extend_from(&a.clone());
        assert_eq!(a.get(ActorId(1)), Some("uno"));
        assert_eq!(a.get(ActorId(2)), Some("two"));
        assert_eq!(a.get(ActorId(3)), None);
        assert_eq!(format!("{a:?}"), "ActorRegistry { actors: [1, 2] }");
    }
}
