//! The live dashboard each host serves on its control address, beside the
//! control websocket and `/metrics`:
//!
//! - `GET /` — one page (HTML, CSS, a small script and the vendored uPlot
//!   chart library, all embedded, no build step). It polls
//!   `/api/snapshot` every second and draws the topology (hosts, actors,
//!   links up or down), per link direction the achieved against the
//!   configured rate, delay and loss, and the event log. Its kill/restore
//!   buttons send the same JSON commands as `edgemu ctl` over the control
//!   websocket, with the token the user types into the page (kept in the
//!   page's memory only; never served by the host). Panels for servers,
//!   scheduler, handoffs and policy version say "not in this run" until
//!   those actors exist.
//! - `GET /api/snapshot?since=N` — the host's counters (the same snapshot
//!   `/metrics` encodes), the topology from `cluster.toml`, and the events
//!   numbered N or later, as JSON.
//! - `GET /metrics` — see [`crate::metrics`].
//!
//! Reading is open, like a Prometheus target: the page, the snapshot and
//! `/metrics` change nothing and are served only on the control address.
//! Every command needs the token. A link direction's counters live on the
//! host that carries it (its sending host), so the page reads the other
//! hosts' `/api/snapshot` from their control addresses in `cluster.toml`;
//! those answers allow only the origins of the run's own control addresses
//! (CORS). Commands for any host go to this one, which forwards them.

pub mod assets;
pub mod http;
pub mod recent_events;

use crate::host::commands::link_owner;
use crate::metrics::{HostMetrics, HostSnapshot};
use edgemu_codec::ids::Direction;
use edgemu_config::Cluster;
pub use recent_events::RecentEvents;
use std::sync::Arc;

/// What the HTTP side of a host's control address serves from.
#[derive(Clone)]
pub struct Web {
    pub cluster: Arc<Cluster>,
    pub metrics: HostMetrics,
    pub events: RecentEvents,
}

impl Web {
    pub fn new(cluster: Arc<Cluster>, metrics: HostMetrics, events: RecentEvents) -> Self {
        Web {
            cluster,
            metrics,
            events,
        }
    }

    /// The topology of the run: hosts (with their control address), actors
    /// and links with each direction's configured delay and owning host.
    pub fn topology(&self) -> serde_json::Value {
        let c = &self.cluster;
        let actor = |id: edgemu_codec::ids::ActorId| {
            c.actors
                .get(id.0 as usize)
                .map(|a| a.name.clone())
                .unwrap_or_default()
        };
        let host_name = |h: edgemu_codec::ids::HostId| {
            c.hosts
                .get(h.0 as usize)
                .map(|h| h.name.clone())
                .unwrap_or_default()
        };
        serde_json::json!({
            "hosts": c.hosts.iter().map(|h| serde_json::json!({
                "name": h.name,
                "control": h.control.map(|a| a.to_string()),
            })).collect::<Vec<_>>(),
            "actors": c.actors.iter().map(|a| serde_json::json!({
                "name": a.name,
                "host": host_name(a.host),
                "kind": a.kind.kind_name(),
            })).collect::<Vec<_>>(),
            "links": c.links.iter().map(|l| {
                let dir = |d: Direction, p: &edgemu_links::LinkParams| serde_json::json!({
                    "owner": link_owner(c, l.id, d).map(host_name),
                    "delay_ns": p.delay_ns,
                });
                serde_json::json!({
                    "name": l.name,
                    "a": actor(l.a),
                    "b": actor(l.b),
                    "ab": dir(Direction::AtoB, &l.ab),
                    "ba": dir(Direction::BtoA, &l.ba),
                })
            }).collect::<Vec<_>>(),
        })
    }

    /// The body of `/api/snapshot`.
    pub fn snapshot_json(&self, s: &HostSnapshot, since: u64) -> serde_json::Value {
        serde_json::json!({
            "run": self.cluster.run.name,
            "duration_ns": self.cluster.run.duration_ns,
            "host": s.host,
            "t_ns": s.t_ns,
            // `dir` as `ab`/`ba`, the spelling commands take (LinkStatus's serde).
            "links": s.links,
            "delay": s.delay.iter().map(|h| serde_json::json!({
                "link": h.link.0, "dir": h.dir.to_string(), "count": h.count, "sum_ns": h.sum_ns,
            })).collect::<Vec<_>>(),
            "router": s.router,
            "mesh": s.mesh,
            "events": self.events.since(since),
            "topology": self.topology(),
            // LYREO servers and schedulers on this host (null when none);
            // the page builds its handoffs panel from the agents' events.
            "servers": (!s.lyreo.servers.is_empty()).then_some(&s.lyreo.servers),
            "scheduler": (!s.lyreo.schedulers.is_empty()).then_some(&s.lyreo.schedulers),
            "policy": (!s.lyreo.schedulers.is_empty()).then(|| {
                s.lyreo.schedulers.iter().map(|(name, v)| {
                    (name.clone(), serde_json::json!({"policy": v.policy, "version": v.version}))
                }).collect::<serde_json::Map<_, _>>()
            }),
            // External-policy counters by decider (null when none was used;
            // docs/external-policy.md).
            "external": (!s.external.is_empty()).then_some(&s.external),
            // The host's load probe (null in virtual time and in a run's
            // first second).
            "load": s.load,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_names_links_hosts_and_owners() {
        let text = "[run]\nduration = \"1s\"\n[[hosts]]\nname = \"alpha\"\nlisten = \"127.0.0.1:7101\"\ncontrol = \"127.0.0.1:7102\"\n[[actors]]\nname = \"src\"\nhost = \"alpha\"\nkind = \"constant\"\nto = \"dst\"\nvia = \"wan\"\nrate = \"1Mbps\"\nsize = \"1000B\"\n[[actors]]\nname = \"dst\"\nhost = \"alpha\"\nkind = \"sink\"\n[[links]]\nname = \"wan\"\na = \"src\"\nb = \"dst\"\nrate = \"10Mbps\"\ndelay = \"5ms\"\n";
        let c = Cluster::from_str(text, std::path::Path::new("t.toml")).expect("cluster");
        let web = Web::new(
            Arc::new(c),
            HostMetrics::new("alpha"),
            RecentEvents::default(),
        );
        let v = web.snapshot_json(&HostSnapshot::default(), 0);
        let topo = &v["topology"];
        assert_eq!(topo["hosts"][0]["control"], "127.0.0.1:7102");
        assert_eq!(topo["actors"][0]["kind"], "constant");
        assert_eq!(topo["links"][0]["a"], "src");
        assert_eq!(topo["links"][0]["ab"]["owner"], "alpha");
        assert_eq!(topo["links"][0]["ab"]["delay_ns"], 5_000_000);
        assert!(v["servers"].is_null());
        assert_eq!(v["events"], serde_json::json!([]));
    }
}
