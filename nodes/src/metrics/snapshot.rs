//! One snapshot of a host's counters, taken the way `status` takes them:
//! one message to each link actor (counters and delay buckets together)
//! and the router, answered between packets (a handful of integer copies),
//! and the mesh's atomics read without a lock. Nothing here waits on the
//! data path or holds a lock it takes.
//!
//! `/metrics` and `/api/snapshot` need no token, so a snapshot is reused
//! for [`SNAPSHOT_REUSE`]: however many requests arrive, the link actors
//! answer at most one snapshot's messages per period. A command or chaos
//! entry applied on the host clears it, so its effect shows in the next
//! answer.

use crate::host::supervisor::Supervisor;
use actix::prelude::*;
use edgemu_actors::link_actor::LinkActor;
use edgemu_actors::messages::{DelayHistogram, GetLinkSnapshot, LinkStatus};
use edgemu_actors::router::{GetRouterCounters, Router, RouterCounters};
use serde::Serialize;

/// Where the counters live (from [`Supervisor::snapshot_sources`]).
pub struct Sources {
    pub host: String,
    pub t_ns: u64,
    pub links: Vec<Addr<LinkActor>>,
    pub router: Addr<Router>,
    /// The mesh's per-peer counters as `status` shows them (None in virtual time).
    pub mesh: Option<serde_json::Value>,
    /// The LYREO actors' live state on this host.
    pub lyreo: edgemu_actors::lyreo::live::LyreoLive,
    /// The agents' context-KV caches, by agent name.
    pub kv_caches: Vec<(String, std::sync::Arc<edgemu_gpu::kv_cache::ContextKvCache>)>,
    /// The deciders' external-policy counters.
    pub external: edgemu_actors::external::ExternalLive,
    /// The host's load probe (real time only).
    pub load: Option<edgemu_config::command::HostLoad>,
}

/// The mesh counters of one peer host.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PeerMesh {
    pub peer: String,
    pub up: bool,
    pub malformed_frames: u64,
    pub control_dropped: u64,
    pub write_timeouts: u64,
    pub silences: u64,
}

impl PeerMesh {
    /// From the `status` JSON of the mesh (`{"beta": {"up": true, …}}`);
    /// fields it lacks read as zero.
    pub fn from_status(mesh: &serde_json::Value) -> Vec<PeerMesh> {
        let Some(peers) = mesh.as_object() else {
            return Vec::new();
        };
        let n = |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
        peers
            .iter()
            .map(|(name, v)| PeerMesh {
                peer: name.clone(),
                up: v.get("up").and_then(|u| u.as_bool()).unwrap_or(false),
                malformed_frames: n(v, "malformed_frames"),
                control_dropped: n(v, "control_dropped"),
                write_timeouts: n(v, "write_timeouts"),
                silences: n(v, "silences"),
            })
            .collect()
    }
}

/// Everything `/metrics` and the dashboard show about one host at one time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostSnapshot {
    pub host: String,
    pub t_ns: u64,
    pub links: Vec<LinkStatus>,
    pub delay: Vec<DelayHistogram>,
    pub router: RouterCounters,
    pub mesh: Vec<PeerMesh>,
    /// LYREO servers and schedulers on this host (empty maps when none).
    pub lyreo: edgemu_actors::lyreo::live::LiveState,
    /// The agents' context-KV cache counters, by agent (empty without agents).
    pub kv_caches: std::collections::BTreeMap<String, edgemu_gpu::kv_cache::KvCacheStats>,
    /// External-policy counters, by decider (empty without external policies).
    pub external: std::collections::BTreeMap<String, edgemu_actors::external::book::ExternalStats>,
    /// How loaded the host is (real time only).
    pub load: Option<edgemu_config::command::HostLoad>,
}

impl Sources {
    pub async fn collect(self) -> HostSnapshot {
        let mut links = Vec::with_capacity(self.links.len());
        let mut delay = Vec::with_capacity(self.links.len());
        for a in &self.links {
            if let Ok((s, h)) = a.send(GetLinkSnapshot).await {
                links.push(s);
                delay.push(h);
            }
        }
        let router = self
            .router
            .send(GetRouterCounters)
            .await
            .unwrap_or_default();
        let lyreo = self.lyreo.snapshot();
        HostSnapshot {
            lyreo,
            load: self.load,
            external: self.external.snapshot(),
            kv_caches: self
                .kv_caches
                .iter()
                .map(|(name, c)| (name.clone(), c.stats()))
                .collect(),
            host: self.host,
            t_ns: self.t_ns,
            links,
            delay,
            router,
            mesh: self
                .mesh
                .as_ref()
                .map(PeerMesh::from_status)
                .unwrap_or_default(),
        }
    }
}

/// Ask a host's supervisor for a [`HostSnapshot`].
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "HostSnapshot")]
pub struct TakeSnapshot;

/// How long a snapshot is reused.
pub const SNAPSHOT_REUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// The last snapshot and when it was taken (wall clock: it bounds the cost
/// of requests, which arrive in real time).
#[derive(Default)]
pub struct SnapshotCache(Option<(std::time::Instant, HostSnapshot)>);

impl SnapshotCache {
    fn fresh(&self) -> Option<HostSnapshot> {
        self.0
            .as_ref()
            .filter(|(at, _)| at.elapsed() < SNAPSHOT_REUSE)
            .map(|(_, s)| s.clone())
    }

    fn store(&mut self, s: &HostSnapshot) {
        self.0 = Some((std::time::Instant::now(), s.clone()));
    }

    /// Something changed on the host: the next request takes a new one.
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

impl Handler<TakeSnapshot> for Supervisor {
    type Result = ResponseActFuture<Self, HostSnapshot>;
    fn handle(&mut self, _: TakeSnapshot, _: &mut Context<Self>) -> Self::Result {
        if let Some(s) = self.snapshots.fresh() {
            return Box::pin(actix::fut::ready(s));
        }
        Box::pin(
            self.snapshot_sources()
                .collect()
                .into_actor(self)
                .map(|s, act, _| {
                    act.snapshots.store(&s);
                    s
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_reused_until_cleared() {
        let mut c = SnapshotCache::default();
        assert!(c.fresh().is_none());
        let s = HostSnapshot {
            host: "edge".into(),
            t_ns: 7,
            ..Default::default()
        };
        c.store(&s);
        assert_eq!(c.fresh().map(|s| s.t_ns), Some(7));
        c.clear();
        assert!(c.fresh().is_none());
    }

    #[test]
    fn mesh_counters_are_read_from_the_status_shape() {
        let v = serde_json::json!({
            "beta": {"up": true, "malformed_frames": 3, "control_dropped": 1, "write_timeouts": 0, "silences": 2},
            "gamma": {"up": false},
        });
        let mut peers = PeerMesh::from_status(&v);
        peers.sort_by(|a, b| a.peer.cmp(&b.peer));
        assert_eq!(peers.len(), 2);
        assert_eq!(peers[0].malformed_frames, 3);
        assert_eq!(peers[0].silences, 2);
        assert!(peers[0].up);
        assert!(!peers[1].up);
        assert_eq!(peers[1].malformed_frames, 0);
        assert!(PeerMesh::from_status(&serde_json::Value::Null).is_empty());
    }
}
