//! A [`HostSnapshot`] as Prometheus metric families (see the crate's
//! `metrics` module docs for the two kinds of families).
//!
//! Families (all prefixed `edgemu_`, all with a `host` label):
//! - per link direction (`link`, `dir` = `ab`|`ba`): `link_{offered,
//!   delivered,lost,queue_dropped,down_dropped}_packets_total`,
//!   `link_{offered,delivered}_bytes_total`, `link_up`,
//!   `link_configured_rate_bps` (fixed-rate links only), `link_queued_bytes`,
//!   and the histogram `link_delay_seconds` of delivered packets;
//! - mesh, per peer host (`peer`): `mesh_peer_up`, `mesh_malformed_frames_total`,
//!   `mesh_control_dropped_frames_total`, `mesh_write_timeouts_total`,
//!   `mesh_silences_total`; per host: `mesh_peers_up`,
//!   `mesh_envelopes_sent_total`, `mesh_envelopes_received_total`, and
//!   `router_dropped_envelopes_total` by `reason` (`queue_full` is the mesh's
//!   outbound queue drop).
//!
//! - LYREO, when the host runs servers or schedulers: per server (`server`,
//!   `gpu`) `server_kv_bytes`, `server_kv_peak_bytes`,
//!   `server_kv_capacity_bytes`, `server_batch_size`,
//!   `server_backlog_requests`, `server_memory_time`, `server_slots_total`,
//!   `server_high_kv_slots_total`, `server_requests_total` by `outcome`
//!   (served, rejected, failed), `server_up` (0 while killed),
//!   `server_requests_in_state` by `state` (arriving, queued, running); per
//!   scheduler and server `scheduler_queue_z`, `scheduler_server_available`,
//!   `scheduler_assigned_requests_total`; per scheduler
//!   `scheduler_decisions_total` and `scheduler_policy` (1, labels `policy`
//!   and `version`).
//! - agents, when the host runs any: per agent (`agent`) the context-KV
//!   cache's `agent_kv_cache_{hits,misses,evictions}_total` and
//!   `agent_kv_cache_{bytes,capacity_bytes,entries}`.
//! - external policies, per decider that has used one (`actor`, `problem`
//!   = `lyreo`|`repair`): `policy_external_decisions_total`,
//!   `policy_external_asked_total`, `policy_external_answered_total`,
//!   `policy_external_fallbacks_total` by `reason` (timeout, error,
//!   malformed, disconnected), `policy_external_late_replies_total`,
//!   `policy_external_connects_total`, `policy_external_connected`, and
//!   the histogram `policy_external_round_trip_seconds` of the replies that
//!   came in time (docs/external-policy.md).
//!
//! - the host's load (real time): `host_timer_lateness_{p50,p99,max}_seconds`
//!   of a 10 ms probe timer on the host's actor thread over the last 5 s,
//!   `host_cpu_cores` (over the last second) and `host_cpu_seconds`.
//!
//! Values are the cores' own monotonic counters copied at scrape time, so
//! they are exposed as constant metrics of a registry built per scrape.

use super::HostSnapshot;
use edgemu_actors::messages::{DelayHistogram, DELAY_BUCKETS_NS};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::borrow::Cow;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LinkLabels {
    pub link: String,
    pub dir: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Delay histograms of all link directions as one family, from the link
/// actors' cumulative buckets.
#[derive(Debug, Default)]
struct DelayFamily(Vec<(LinkLabels, DelayHistogram)>);

impl EncodeMetric for DelayFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, h) in &self.0 {
            // The encoder wants per-bucket counts; it sums them itself.
            let mut prev = 0;
            let buckets: Vec<(f64, u64)> = DELAY_BUCKETS_NS
                .iter()
                .zip(&h.cumulative)
                .map(|(&le, &cum)| {
                    let n = cum.saturating_sub(prev);
                    prev = prev.max(cum);
                    let le_s = if le == u64::MAX {
                        f64::MAX
                    } else {
                        le as f64 / 1e9
                    };
                    (le_s, n)
                })
                .collect();
            encoder
                .encode_family(labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum_ns / 1e9,
                    h.count,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn counter_family<L, T>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (L, T)>,
    value: impl Fn(&T) -> u64,
) where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, Counter>::default();
    for (l, t) in items {
        f.get_or_create(&l).inc_by(value(&t));
    }
    reg.register(name, help, f);
}

fn gauge_family<L, T>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (L, T)>,
    value: impl Fn(&T) -> Option<i64>,
) where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, Gauge>::default();
    for (l, t) in items {
        if let Some(v) = value(&t) {
            f.get_or_create(&l).set(v);
        }
    }
    reg.register(name, help, f);
}

fn labels(link: &str, dir: impl std::fmt::Display) -> LinkLabels {
    LinkLabels {
        link: link.to_string(),
        dir: dir.to_string(),
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The snapshot's families in a registry of their own (prefix `edgemu`,
/// label `host`).
pub fn registry(s: &HostSnapshot) -> Registry {
    let host = std::iter::once((Cow::Borrowed("host"), Cow::Owned(s.host.clone())));
    let mut reg = Registry::with_prefix_and_labels("edgemu", host);
    let links: Vec<(LinkLabels, &edgemu_actors::messages::LinkStatus)> = s
        .links
        .iter()
        .map(|l| (labels(&l.name, l.dir), l))
        .collect();
    type Field = fn(&&edgemu_actors::messages::LinkStatus) -> u64;
    let counters: [(&str, &str, Field); 7] = [
        (
            "link_offered_packets",
            "Packets offered to the link direction",
            |l| l.offered,
        ),
        (
            "link_delivered_packets",
            "Packets the link direction delivered",
            |l| l.delivered,
        ),
        ("link_lost_packets", "Packets the loss model dropped", |l| {
            l.lost
        }),
        (
            "link_queue_dropped_packets",
            "Packets dropped at the full drop-tail queue",
            |l| l.queue_dropped,
        ),
        (
            "link_down_dropped_packets",
            "Packets dropped because the link was down (including in flight)",
            |l| l.down_dropped,
        ),
        (
            "link_offered_bytes",
            "Bytes offered to the link direction",
            |l| l.bytes_offered,
        ),
        (
            "link_delivered_bytes",
            "Bytes the link direction delivered",
            |l| l.bytes_delivered,
        ),
    ];
    for (name, help, field) in counters {
        counter_family(&mut reg, name, help, links.iter().cloned(), field);
    }
    gauge_family(
        &mut reg,
        "link_up",
        "1 while the link direction is up, 0 while killed",
        links.iter().cloned(),
        |l| Some(i64::from(l.up)),
    );
    gauge_family(
        &mut reg,
        "link_configured_rate_bps",
        "Configured rate of the link direction now, bits/s (fixed-rate links)",
        links.iter().cloned(),
        |l| l.rate_bps.map(clamp_i64),
    );
    gauge_family(
        &mut reg,
        "link_queued_bytes",
        "Bytes waiting in the link direction's queue",
        links.iter().cloned(),
        |l| Some(clamp_i64(l.queued_bytes)),
    );
    let names: std::collections::HashMap<_, _> = s
        .links
        .iter()
        .map(|l| ((l.link, l.dir), l.name.as_str()))
        .collect();
    let delay = DelayFamily(
        s.delay
            .iter()
            .filter_map(|h| {
                let name = names.get(&(h.link, h.dir))?;
                Some((labels(name, h.dir), h.clone()))
            })
            .collect(),
    );
    reg.register(
        "link_delay_seconds",
        "One-way delay of delivered packets (enqueue to delivery), seconds",
        delay,
    );

    let peers: Vec<(PeerLabels, &super::snapshot::PeerMesh)> = s
        .mesh
        .iter()
        .map(|p| {
            (
                PeerLabels {
                    peer: p.peer.clone(),
                },
                p,
            )
        })
        .collect();
    gauge_family(
        &mut reg,
        "mesh_peer_up",
        "1 while the mesh session to the peer host is up",
        peers.iter().cloned(),
        |p| Some(i64::from(p.up)),
    );
    let up = Gauge::<i64>::default();
    up.set(s.mesh.iter().filter(|p| p.up).count() as i64);
    reg.register("mesh_peers_up", "Peer hosts whose mesh session is up", up);
    type PeerField = fn(&&super::snapshot::PeerMesh) -> u64;
    let peer_counters: [(&str, &str, PeerField); 4] = [
        (
            "mesh_malformed_frames",
            "Mesh frames from the peer that could not be decoded (dropped)",
            |p| p.malformed_frames,
        ),
        (
            "mesh_control_dropped_frames",
            "Control frames to the peer dropped at its full control queue",
            |p| p.control_dropped,
        ),
        (
            "mesh_write_timeouts",
            "Mesh sessions to the peer ended by a write timeout",
            |p| p.write_timeouts,
        ),
        (
            "mesh_silences",
            "Mesh sessions to the peer ended because it was silent",
            |p| p.silences,
        ),
    ];
    for (name, help, field) in peer_counters {
        counter_family(&mut reg, name, help, peers.iter().cloned(), field);
    }
    let r = &s.router;
    let one = |v: u64| {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        c
    };
    reg.register(
        "mesh_envelopes_sent",
        "Envelopes the router handed to the mesh for peer hosts",
        one(r.sent_remote),
    );
    reg.register(
        "mesh_envelopes_received",
        "Envelopes the router received from peer hosts",
        one(r.received_remote),
    );
    counter_family(
        &mut reg,
        "router_dropped_envelopes",
        "Envelopes the router dropped, by reason (queue_full: the mesh's outbound queue)",
        [
            ("queue_full", r.dropped_queue_full),
            ("peer_down", r.dropped_peer_down),
            ("partition", r.dropped_partition),
            ("unknown_destination", r.dropped_unknown),
            ("bad_route", r.dropped_bad_route),
            ("inbound_full", r.dropped_inbound_full),
        ]
        .map(|(reason, v)| (ReasonLabels { reason }, v)),
        |v| *v,
    );
    if let Some(l) = &s.load {
        host_load_families(&mut reg, l);
    }
    lyreo_families(&mut reg, &s.lyreo);
    kv_cache_families(&mut reg, &s.kv_caches);
    external_families(&mut reg, &s.external);
    reg
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeciderLabels {
    actor: String,
    problem: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    actor: String,
    problem: String,
    reason: &'static str,
}

/// The round trips of one decider's external policy.
#[derive(Debug)]
struct RttFamily(Vec<(DeciderLabels, edgemu_actors::external::book::ExternalStats)>);

impl EncodeMetric for RttFamily {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        use edgemu_actors::external::book::RTT_BUCKETS_S;
        for (labels, st) in &self.0 {
            let mut prev = 0;
            let mut buckets: Vec<(f64, u64)> = RTT_BUCKETS_S
                .iter()
                .zip(&st.rtt_buckets)
                .map(|(&le, &cum)| {
                    let n = cum.saturating_sub(prev);
                    prev = prev.max(cum);
                    (le, n)
                })
                .collect();
            buckets.push((f64::MAX, st.rtt_count.saturating_sub(prev)));
            encoder
                .encode_family(labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    st.rtt_sum_us as f64 / 1e6,
                    st.rtt_count,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The deciders' external-policy counters (only when one was used).
fn external_families(
    reg: &mut Registry,
    ext: &std::collections::BTreeMap<String, edgemu_actors::external::book::ExternalStats>,
) {
    use edgemu_actors::external::book::{ExternalStats, FallbackReason};
    if ext.is_empty() {
        return;
    }
    let items = || {
        ext.iter().map(|(actor, s)| {
            (
                DeciderLabels {
                    actor: actor.clone(),
                    problem: s.problem.clone(),
                },
                s.clone(),
            )
        })
    };
    type C = fn(&ExternalStats) -> u64;
    let counters: [(&str, &str, C); 5] = [
        (
            "policy_external_decisions",
            "Decisions taken while an external policy was active (answered + fallbacks)",
            |s| s.decisions,
        ),
        (
            "policy_external_asked",
            "Decision requests sent to the policy process",
            |s| s.asked,
        ),
        (
            "policy_external_answered",
            "Decisions the external policy made (a valid action within the deadline)",
            |s| s.answered,
        ),
        (
            "policy_external_late_replies",
            "Replies that came after their decision's deadline (ignored)",
            |s| s.late,
        ),
        (
            "policy_external_connects",
            "Connections made to the policy process (the first and each reconnect)",
            |s| s.connects,
        ),
    ];
    for (name, help, field) in counters {
        counter_family(reg, name, help, items(), field);
    }
    counter_family(
        reg,
        "policy_external_fallbacks",
        "Decisions the fallback policy made instead, by reason (timeout, error, malformed, disconnected)",
        ext.iter().flat_map(|(actor, s)| {
            FallbackReason::ALL.map(|r| {
                (
                    FallbackLabels {
                        actor: actor.clone(),
                        problem: s.problem.clone(),
                        reason: r.label(),
                    },
                    s.fallback(r),
                )
            })
        }),
        |v| *v,
    );
    gauge_family(
        reg,
        "policy_external_connected",
        "1 while the decider is connected to its policy process",
        items(),
        |s| Some(i64::from(s.connected)),
    );
    reg.register(
        "policy_external_round_trip_seconds",
        "Round trip of external policy decisions that were answered in time, seconds",
        RttFamily(items().collect()),
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

/// The agents' context-KV caches (only when the host runs agents).
fn kv_cache_families(
    reg: &mut Registry,
    caches: &std::collections::BTreeMap<String, edgemu_gpu::kv_cache::KvCacheStats>,
) {
    if caches.is_empty() {
        return;
    }
    let items = || {
        caches.iter().map(|(agent, s)| {
            (
                AgentLabels {
                    agent: agent.clone(),
                },
                *s,
            )
        })
    };
    type C = fn(&edgemu_gpu::kv_cache::KvCacheStats) -> u64;
    let counters: [(&str, &str, C); 3] = [
        (
            "agent_kv_cache_hits",
            "Handoffs whose context KV the sender found in its cache",
            |s| s.hits,
        ),
        (
            "agent_kv_cache_misses",
            "Handoffs whose context KV the sender had to prefill",
            |s| s.misses,
        ),
        (
            "agent_kv_cache_evictions",
            "Context KV entries evicted by the cache's byte capacity",
            |s| s.evictions,
        ),
    ];
    for (name, help, field) in counters {
        counter_family(reg, name, help, items(), field);
    }
    type G = fn(&edgemu_gpu::kv_cache::KvCacheStats) -> Option<i64>;
    let gauges: [(&str, &str, G); 3] = [
        (
            "agent_kv_cache_bytes",
            "Bytes of context KV held in the cache",
            |s| Some(clamp_i64(s.bytes)),
        ),
        (
            "agent_kv_cache_capacity_bytes",
            "The cache's byte capacity (kv_cache in cluster.toml)",
            |s| Some(clamp_i64(s.capacity_bytes)),
        ),
        (
            "agent_kv_cache_entries",
            "Contexts held in the cache",
            |s| Some(clamp_i64(s.entries)),
        ),
    ];
    for (name, help, field) in gauges {
        gauge_family(reg, name, help, items(), field);
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    server: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    server: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SchedServerLabels {
    scheduler: String,
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SchedLabels {
    scheduler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    scheduler: String,
    policy: String,
    version: String,
}

/// The host's load probe: timer lateness over its window and CPU.
fn host_load_families(reg: &mut Registry, l: &edgemu_config::command::HostLoad) {
    let f64_gauge = |v: f64| {
        let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        g
    };
    reg.register(
        "host_timer_lateness_p99_seconds",
        "p99 lateness of the host's 10 ms probe timer over the last 5 s (its actors' timers fall as late)",
        f64_gauge(l.timer_late_p99_ms / 1e3),
    );
    reg.register(
        "host_timer_lateness_p50_seconds",
        "Median lateness of the host's probe timer over the last 5 s",
        f64_gauge(l.timer_late_p50_ms / 1e3),
    );
    reg.register(
        "host_timer_lateness_max_seconds",
        "Largest lateness of the host's probe timer over the last 5 s",
        f64_gauge(l.timer_late_max_ms / 1e3),
    );
    reg.register(
        "host_cpu_cores",
        "CPU cores the host process used over the last second (user + system)",
        f64_gauge(l.cpu_cores),
    );
    reg.register(
        "host_cpu_seconds",
        "CPU seconds the host process used since it started",
        f64_gauge(l.cpu_s),
    );
}

fn gauge_f64_family<L>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    items: impl IntoIterator<Item = (L, f64)>,
) where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let f = Family::<L, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for (l, v) in items {
        f.get_or_create(&l).set(v);
    }
    reg.register(name, help, f);
}

/// The LYREO servers' and schedulers' families (only when the host runs
/// any): server KV bytes, batch size, requests by state, η_s; the
/// scheduler's Z_s, assignments per server and its active policy version.
fn lyreo_families(reg: &mut Registry, l: &edgemu_actors::lyreo::live::LiveState) {
    if !l.servers.is_empty() {
        let servers: Vec<(ServerLabels, &edgemu_actors::lyreo::live::ServerLive)> = l
            .servers
            .iter()
            .map(|(name, v)| {
                (
                    ServerLabels {
                        server: name.clone(),
                        gpu: v.gpu.clone(),
                    },
                    v,
                )
            })
            .collect();
        type G = fn(&&edgemu_actors::lyreo::live::ServerLive) -> Option<i64>;
        let gauges: [(&str, &str, G); 5] = [
            (
                "server_kv_bytes",
                "KV bytes resident on the server at the end of its last slot",
                |v| Some(clamp_i64(v.occupancy_bytes)),
            ),
            (
                "server_kv_peak_bytes",
                "Peak KV bytes of the server's last slot",
                |v| Some(clamp_i64(v.peak_bytes)),
            ),
            (
                "server_kv_capacity_bytes",
                "The server's KV capacity M_s",
                |v| Some(clamp_i64(v.capacity_bytes)),
            ),
            (
                "server_batch_size",
                "Requests in the server's running batch at the end of its last slot",
                |v| Some(v.running as i64),
            ),
            (
                "server_backlog_requests",
                "Requests not finished on the server (arriving, queued or running)",
                |v| Some(v.backlog as i64),
            ),
        ];
        for (name, help, field) in gauges {
            gauge_family(reg, name, help, servers.iter().cloned(), field);
        }
        gauge_f64_family(
            reg,
            "server_memory_time",
            "The server's KV memory-time eta_s of its last slot",
            servers.iter().map(|(k, v)| (k.clone(), v.eta)),
        );
        gauge_family(
            reg,
            "server_requests_in_state",
            "Requests on the server not finished, by state: arriving (upload not in), queued (waiting for KV or a batch slot), running",
            l.servers.iter().flat_map(|(name, v)| {
                let arriving = v.backlog.saturating_sub(v.running + v.queued);
                [("arriving", arriving), ("queued", v.queued), ("running", v.running)].map(
                    |(state, n)| {
                        (
                            StateLabels {
                                server: name.clone(),
                                state,
                            },
                            n,
                        )
                    },
                )
            }),
            |n| Some(*n as i64),
        );
        gauge_family(
            reg,
            "server_up",
            "1 while the server runs, 0 while it is killed (actor.kill)",
            servers.iter().cloned(),
            |v| Some(i64::from(!v.down)),
        );
        counter_family(
            reg,
            "server_slots",
            "Slots the server has closed",
            servers.iter().cloned(),
            |v| v.slots,
        );
        counter_family(
            reg,
            "server_high_kv_slots",
            "Slots whose peak KV exceeded 90 % of M_s",
            servers.iter().cloned(),
            |v| v.high_kv_slots,
        );
        counter_family(
            reg,
            "server_requests",
            "Requests the server answered, by outcome",
            l.servers.iter().flat_map(|(name, v)| {
                [
                    ("served", v.served),
                    ("rejected", v.rejected),
                    ("failed", v.failed),
                ]
                .map(|(outcome, n)| {
                    (
                        OutcomeLabels {
                            server: name.clone(),
                            outcome,
                        },
                        n,
                    )
                })
            }),
            |n| *n,
        );
    }
    if !l.schedulers.is_empty() {
        let per_server = || {
            l.schedulers.iter().flat_map(|(sched, v)| {
                v.servers.iter().map(move |(server, x)| {
                    (
                        SchedServerLabels {
                            scheduler: sched.clone(),
                            server: server.clone(),
                        },
                        x,
                    )
                })
            })
        };
        gauge_f64_family(
            reg,
            "scheduler_queue_z",
            "The scheduler's Lyapunov virtual queue Z_s of each server",
            per_server().map(|(k, x)| (k, x.z)),
        );
        gauge_family(
            reg,
            "scheduler_server_available",
            "1 while the scheduler assigns to the server, 0 once it is marked unavailable (no report for 2 slots)",
            per_server(),
            |x| Some(i64::from(!x.unavailable)),
        );
        counter_family(
            reg,
            "scheduler_assigned_requests",
            "Requests the scheduler assigned to each server",
            per_server(),
            |x| x.assigned,
        );
        counter_family(
            reg,
            "scheduler_decisions",
            "Requests the scheduler has assigned",
            l.schedulers.iter().map(|(sched, v)| {
                (
                    SchedLabels {
                        scheduler: sched.clone(),
                    },
                    v.decisions,
                )
            }),
            |n| *n,
        );
        gauge_family(
            reg,
            "scheduler_policy",
            "1 for the scheduler's active policy and version (hash, as policy.get reports it)",
            l.schedulers.iter().map(|(sched, v)| {
                (
                    PolicyLabels {
                        scheduler: sched.clone(),
                        policy: v.policy.clone(),
                        version: v.version.clone(),
                    },
                    (),
                )
            }),
            |_| Some(1),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::PeerMesh;
    use super::*;
    use edgemu_actors::messages::LinkStatus;
    use edgemu_actors::router::RouterCounters;
    use edgemu_codec::ids::{Direction, LinkId};

    fn stats(dir: Direction, up: bool) -> LinkStatus {
        LinkStatus {
            link: LinkId(0),
            name: "wan".into(),
            dir,
            t_ns: 1_000_000_000,
            up,
            rate_bps: Some(10_000_000),
            delay_ns: 5_000_000,
            offered: 100,
            delivered: 90,
            lost: 6,
            queue_dropped: 3,
            down_dropped: 1,
            retransmissions: 0,
            bytes_offered: 100_000,
            bytes_delivered: 90_000,
            queued_bytes: 2_000,
            delay_p50_ns: 5_100_000,
            delay_p99_ns: 6_000_000,
            delay_max_ns: 7_000_000,
            expected_loss: Some(0.05),
        }
    }

    fn snapshot() -> HostSnapshot {
        // 90 delivered: 60 within 5 ms, 85 within 10 ms, all within 20 ms.
        let cumulative = DELAY_BUCKETS_NS
            .iter()
            .map(|&le| match le {
                0..=2_000_000 => 0,
                5_000_000 => 60,
                10_000_000 => 85,
                _ => 90,
            })
            .collect();
        HostSnapshot {
            host: "alpha".into(),
            t_ns: 1_000_000_000,
            links: vec![stats(Direction::AtoB, true), stats(Direction::BtoA, false)],
            delay: vec![DelayHistogram {
                link: LinkId(0),
                dir: Direction::AtoB,
                count: 90,
                sum_ns: 90.0 * 5.5e6,
                cumulative,
            }],
            router: RouterCounters {
                sent_remote: 77,
                dropped_queue_full: 4,
                ..Default::default()
            },
            mesh: vec![PeerMesh {
                peer: "beta".into(),
                up: true,
                malformed_frames: 2,
                ..Default::default()
            }],
            lyreo: Default::default(),
            external: Default::default(),
            load: None,
            kv_caches: [(
                "agent-a".to_string(),
                edgemu_gpu::kv_cache::KvCacheStats {
                    hits: 3,
                    misses: 1,
                    evictions: 2,
                    entries: 1,
                    bytes: 5_900_000,
                    capacity_bytes: 268_435_456,
                },
            )]
            .into(),
        }
    }

    fn encode(s: &HostSnapshot) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry(s)).expect("encode");
        out
    }

    #[test]
    fn link_counters_are_exposed_per_direction() {
        let text = encode(&snapshot());
        for line in [
            "# TYPE edgemu_link_offered_packets counter",
            r#"edgemu_link_offered_packets_total{host="alpha",link="wan",dir="ab"} 100"#,
            r#"edgemu_link_delivered_packets_total{host="alpha",link="wan",dir="ba"} 90"#,
            r#"edgemu_link_lost_packets_total{host="alpha",link="wan",dir="ab"} 6"#,
            r#"edgemu_link_queue_dropped_packets_total{host="alpha",link="wan",dir="ab"} 3"#,
            r#"edgemu_link_down_dropped_packets_total{host="alpha",link="wan",dir="ab"} 1"#,
            r#"edgemu_link_delivered_bytes_total{host="alpha",link="wan",dir="ab"} 90000"#,
            r#"edgemu_link_up{host="alpha",link="wan",dir="ab"} 1"#,
            r#"edgemu_link_up{host="alpha",link="wan",dir="ba"} 0"#,
            r#"edgemu_link_configured_rate_bps{host="alpha",link="wan",dir="ab"} 10000000"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn the_delay_histogram_is_cumulative_in_seconds() {
        let text = encode(&snapshot());
        for line in [
            "# TYPE edgemu_link_delay_seconds histogram",
            r#"edgemu_link_delay_seconds_count{host="alpha",link="wan",dir="ab"} 90"#,
            r#"edgemu_link_delay_seconds_bucket{host="alpha",le="0.002",link="wan",dir="ab"} 0"#,
            r#"edgemu_link_delay_seconds_bucket{host="alpha",le="0.005",link="wan",dir="ab"} 60"#,
            r#"edgemu_link_delay_seconds_bucket{host="alpha",le="0.01",link="wan",dir="ab"} 85"#,
            r#"edgemu_link_delay_seconds_bucket{host="alpha",le="0.02",link="wan",dir="ab"} 90"#,
            r#"edgemu_link_delay_seconds_bucket{host="alpha",le="+Inf",link="wan",dir="ab"} 90"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        let sum = text
            .lines()
            .find(|l| l.starts_with("edgemu_link_delay_seconds_sum"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .expect("sum line");
        assert!((sum - 0.495).abs() < 1e-9, "{sum}");
        // The direction without a histogram has no series.
        assert!(!text.contains(r#"delay_seconds_count{host="alpha",link="wan",dir="ba"}"#));
    }

    #[test]
    fn mesh_and_router_counters_are_exposed() {
        let text = encode(&snapshot());
        for line in [
            r#"edgemu_mesh_peer_up{host="alpha",peer="beta"} 1"#,
            r#"edgemu_mesh_peers_up{host="alpha"} 1"#,
            r#"edgemu_mesh_malformed_frames_total{host="alpha",peer="beta"} 2"#,
            r#"edgemu_mesh_envelopes_sent_total{host="alpha"} 77"#,
            r#"edgemu_router_dropped_envelopes_total{host="alpha",reason="queue_full"} 4"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn agent_kv_cache_counters_are_exposed_per_agent() {
        let text = encode(&snapshot());
        for line in [
            r#"edgemu_agent_kv_cache_hits_total{host="alpha",agent="agent-a"} 3"#,
            r#"edgemu_agent_kv_cache_misses_total{host="alpha",agent="agent-a"} 1"#,
            r#"edgemu_agent_kv_cache_evictions_total{host="alpha",agent="agent-a"} 2"#,
            r#"edgemu_agent_kv_cache_bytes{host="alpha",agent="agent-a"} 5900000"#,
            r#"edgemu_agent_kv_cache_capacity_bytes{host="alpha",agent="agent-a"} 268435456"#,
            r#"edgemu_agent_kv_cache_entries{host="alpha",agent="agent-a"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        let none = HostSnapshot {
            kv_caches: Default::default(),
            ..snapshot()
        };
        assert!(!encode(&none).contains("agent_kv_cache"));
    }

    #[test]
    fn the_hosts_load_is_exposed_when_measured() {
        assert!(!encode(&snapshot()).contains("host_timer_lateness"));
        let s = HostSnapshot {
            load: Some(edgemu_config::command::HostLoad {
                timer_late_p50_ms: 0.25,
                timer_late_p99_ms: 4.0,
                timer_late_max_ms: 12.0,
                ticks: 500,
                late_ticks: 1,
                window_s: 5.0,
                cpu_cores: 1.5,
                cpu_s: 30.0,
            }),
            ..snapshot()
        };
        let text = encode(&s);
        for line in [
            r#"edgemu_host_timer_lateness_p99_seconds{host="alpha"} 0.004"#,
            r#"edgemu_host_timer_lateness_p50_seconds{host="alpha"} 0.00025"#,
            r#"edgemu_host_timer_lateness_max_seconds{host="alpha"} 0.012"#,
            r#"edgemu_host_cpu_cores{host="alpha"} 1.5"#,
            r#"edgemu_host_cpu_seconds{host="alpha"} 30.0"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn external_policy_counters_and_round_trips_are_exposed_per_decider() {
        use edgemu_actors::external::book::DecisionBook;
        let mut b = DecisionBook::new("lyreo");
        b.set_connected(true);
        for i in 0..3u64 {
            let id = b.ask(i * 1_000_000_000);
            // Round trips of 1, 2 and 3 ms.
            let _ = b.on_frame(
                i * 1_000_000_000 + (i + 1) * 1_000_000,
                &format!(r#"{{"id":{id},"action":[0]}}"#),
            );
            b.accept(id);
        }
        let id = b.ask(9_000_000_000);
        b.expire(id);
        b.unasked(edgemu_actors::external::book::FallbackReason::Disconnected);
        let s = HostSnapshot {
            external: [("sched".to_string(), b.snapshot())].into(),
            ..snapshot()
        };
        let text = encode(&s);
        for line in [
            r#"edgemu_policy_external_decisions_total{host="alpha",actor="sched",problem="lyreo"} 5"#,
            r#"edgemu_policy_external_asked_total{host="alpha",actor="sched",problem="lyreo"} 4"#,
            r#"edgemu_policy_external_answered_total{host="alpha",actor="sched",problem="lyreo"} 3"#,
            r#"edgemu_policy_external_fallbacks_total{host="alpha",actor="sched",problem="lyreo",reason="timeout"} 1"#,
            r#"edgemu_policy_external_fallbacks_total{host="alpha",actor="sched",problem="lyreo",reason="disconnected"} 1"#,
            r#"edgemu_policy_external_fallbacks_total{host="alpha",actor="sched",problem="lyreo",reason="malformed"} 0"#,
            r#"edgemu_policy_external_connected{host="alpha",actor="sched",problem="lyreo"} 1"#,
            r#"edgemu_policy_external_round_trip_seconds_count{host="alpha",actor="sched",problem="lyreo"} 3"#,
            r#"edgemu_policy_external_round_trip_seconds_bucket{host="alpha",le="0.001",actor="sched",problem="lyreo"} 1"#,
            r#"edgemu_policy_external_round_trip_seconds_bucket{host="alpha",le="0.002",actor="sched",problem="lyreo"} 2"#,
            r#"edgemu_policy_external_round_trip_seconds_bucket{host="alpha",le="0.005",actor="sched",problem="lyreo"} 3"#,
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!encode(&snapshot()).contains("policy_external"));
    }

    #[test]
    fn every_sample_line_is_well_formed() {
        let text = encode(&snapshot());
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name_labels, value) = line.rsplit_once(' ').expect("name and value");
            assert!(value.parse::<f64>().is_ok(), "bad value in {line:?}");
            assert!(name_labels.starts_with("edgemu_"), "{line:?}");
            assert_eq!(
                name_labels.matches('{').count(),
                name_labels.matches('}').count(),
                "{line:?}"
            );
        }
    }
}
