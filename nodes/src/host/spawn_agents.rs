//! Creates the agents (`kind = "agent"`) of one host: each gets the model of
//! its bound server in a compute actor (its own thread in real time; inline
//! in virtual time), a moka context-KV cache of its `kv_cache` bytes, a
//! repair policy slot registered for `policy.get/swap/rollback`, a fault
//! recipient for `actor.kill/restart`, and the link actors of its outgoing
//! directions. Receiving agents append to the host's `handoffs.csv`.

use actix::prelude::*;
use anyhow::{anyhow, Result};
use edgemu_actors::clock::Clock;
use edgemu_actors::handoff::agent::{AgentActor, AgentSetup, SendPlan};
use edgemu_actors::handoff::engine::{AgentEngine, ComputeActor};
use edgemu_actors::handoff::records::{HANDOFFS, HANDOFFS_HEADER};
use edgemu_actors::handoff::stream::KernelStreams;
use edgemu_actors::link_actor::LinkActor;
use edgemu_actors::messages::{Deliver, Route};
use edgemu_codec::ids::{Direction, LinkId};
use edgemu_config::agent::KERNEL_TCP_SCHEME;
use edgemu_config::external::{DEFAULT_REPAIR_DEADLINE_NS, EXTERNAL_POLICY};
use edgemu_config::{ActorKind, ActorSpec, AgentSpec, Cluster};
use edgemu_gpu::kv_cache::ContextKvCache;
use edgemu_policies::slot::{ExternalOptions, PolicySlot, RepairPolicies};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The repair policy a scheme starts with (its slot can be swapped).
pub fn default_repair_policy(scheme: &str) -> &'static str {
    match scheme {
        "udp" | "priority-only" => "no-repair",
        "uniform-fec" | "priority-fixed-fec" => "fixed-rate",
        "flec-rt" => "flec-rt",
        "deficit-heuristic" => "deficit-heuristic",
        _ => "priorityfec-ddqn",
    }
}

/// Spawns agent `a` (whose kind is `Agent(spec)`); returns its recipients
/// (`Flush` at the end of the run closes its external policy's connection).
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    cluster: &Cluster,
    a: &ActorSpec,
    spec: &AgentSpec,
    virtual_time: bool,
    clock: Clock,
    route: &Recipient<Route>,
    links: &BTreeMap<(LinkId, Direction), Addr<LinkActor>>,
    tables: &mut super::spawn_lyreo::Tables,
    shared: &super::spawn_lyreo::HostShared,
) -> Result<(
    Recipient<Deliver>,
    Recipient<edgemu_actors::messages::Flush>,
)> {
    let host_name = cluster.host(a.host).name.clone();
    let server = cluster.actor(spec.server);
    let model = match &server.kind {
        ActorKind::Server(s) => match (s.backend.real_model(), spec.model) {
            (_, Some(m)) | (Some(m), None) => m,
            (None, None) => {
                return Err(anyhow!(
                    "agent {:?}: server {:?} has no real backend and the agent names no `model`",
                    a.name,
                    server.name
                ))
            }
        },
        _ => {
            return Err(anyhow!(
                "agent {:?}: {:?} is not a server",
                a.name,
                server.name
            ))
        }
    };
    let mut links_out = BTreeMap::new();
    for l in &cluster.links {
        let Some(dir) = l.direction_from(a.id) else {
            continue;
        };
        let other = if l.a == a.id { l.b } else { l.a };
        if let Some(addr) = links.get(&(l.id, dir)) {
            links_out.insert(other, (l.id, addr.clone()));
        }
    }
    let plan = match &spec.handoff {
        None => None,
        Some(task) => {
            let l = cluster
                .links
                .get(task.via.0 as usize)
                .ok_or_else(|| anyhow!("agent {:?}: no link {}", a.name, task.via.0))?;
            let kernel_tcp = task.scheme == KERNEL_TCP_SCHEME;
            // A tcp-kernel link joins two attach points, `a` on this host.
            let dir = match l.direction_from(a.id) {
                Some(d) => d,
                None if kernel_tcp => Direction::AtoB,
                None => {
                    return Err(anyhow!(
                        "agent {:?}: link {:?} does not join it",
                        a.name,
                        l.name
                    ))
                }
            };
            let back = match dir {
                Direction::AtoB => Direction::BtoA,
                Direction::BtoA => Direction::AtoB,
            };
            // The kernel's TCP carries the blocks in FIFO order, no repair.
            let scheme = edgemu_handoff::scheme(if kernel_tcp { "udp" } else { &task.scheme })
                .map_err(|e| anyhow!("agent {:?}: {e}", a.name))?;
            Some(SendPlan {
                task: task.clone(),
                to_name: cluster.actor(task.to).name.clone(),
                spec: scheme,
                forward: l.params(dir).clone(),
                reverse: l.params(back).clone(),
            })
        }
    };
    let policy = spec
        .policy
        .clone()
        .or_else(|| {
            plan.as_ref()
                .map(|p| default_repair_policy(p.spec.name).to_string())
        })
        .unwrap_or_else(|| "deficit-heuristic".to_string());
    let scheme_default = plan
        .as_ref()
        .map(|p| default_repair_policy(p.spec.name))
        .unwrap_or("deficit-heuristic");
    let slot = match (
        &spec.external,
        policy.trim().eq_ignore_ascii_case(EXTERNAL_POLICY),
    ) {
        (Some(ext), true) => PolicySlot::new_external(
            RepairPolicies,
            &ExternalOptions {
                url: ext.url.clone(),
                deadline_ns: ext.deadline_or(DEFAULT_REPAIR_DEADLINE_NS),
                fallback: Some(
                    ext.fallback
                        .clone()
                        .unwrap_or_else(|| scheme_default.to_string()),
                ),
            },
            None,
            Path::new("cluster.toml"),
            clock.now_ns(),
            "config",
        ),
        _ => PolicySlot::new(
            RepairPolicies,
            &policy,
            None,
            Path::new("cluster.toml"),
            clock.now_ns(),
            "config",
        ),
    }
    .map_err(|e| anyhow!("agent {:?}: repair policy {policy:?}: {e}", a.name))?;
    let slot = Arc::new(slot);
    shared.policies.register(a.id, slot.clone());

    let cache = Arc::new(ContextKvCache::new(spec.kv_cache_bytes));
    shared.kv_caches.register(a.id, cache.clone());
    let compute = if virtual_time {
        // Inline: in virtual time compute must not race the clock.
        ComputeActor::new(AgentEngine::load(model, cache.clone())).start()
    } else {
        if model == edgemu_config::RealModel::SmolLm2 {
            edgemu_tokenizer::resolve_model_path(None)
                .map_err(|e| anyhow!("agent {:?} (server {:?}): {e}", a.name, server.name))?;
        }
        let (name, cache) = (a.name.clone(), cache.clone());
        let arbiter = actix::Arbiter::new();
        ComputeActor::start_in_arbiter(&arbiter.handle(), move |_| {
            let engine = AgentEngine::load(model, cache);
            if let Err(e) = &engine {
                tracing::error!(agent = %name, error = %e, "agent model not loaded");
            }
            ComputeActor::new(engine)
        })
    };
    let table = tables.get(HANDOFFS, HANDOFFS_HEADER)?;
    let setup = AgentSetup {
        id: a.id,
        name: a.name.clone(),
        host_name,
        virtual_time,
        plan,
        slot,
        links_out,
        names: cluster.actors.iter().map(|a| a.name.clone()).collect(),
        cache,
        external: shared.external.clone(),
        streams: crate::attach::kernel_tcp::AgentStreams::for_agent(cluster, a.id)
            .map(|s| Arc::new(s) as Arc<dyn KernelStreams>),
    };
    let addr = AgentActor::new(
        setup,
        clock,
        route.clone(),
        compute,
        table,
        shared.events.clone(),
    )
    .start();
    shared.faults.register(a.id, addr.clone().recipient());
    Ok((addr.clone().recipient(), addr.recipient()))
}
