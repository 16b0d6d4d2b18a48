//! Creates the LYREO actors (`user`, `server`, `scheduler`) of one host from
//! the resolved cluster: resolves their specs into serving's cores (GPU
//! class profiles, the model for a real backend, the policy, the workload)
//! and opens the host's `requests.csv`, `server_slots.csv`, `decisions.csv`.
//! Anything a file or the machine can get wrong (an unknown policy, missing
//! weights, an absent model or data file) is an error naming the actor.

use super::spawn::derive_seed;
use actix::prelude::*;
use anyhow::{anyhow, Context as _, Result};
use edgemu_actors::clock::Clock;
use edgemu_actors::lyreo::external_server::{ExternalServerActor, ExternalServerSetup};
use edgemu_actors::lyreo::gateway::{GatewayActor, GatewaySetup};
use edgemu_actors::lyreo::live::LyreoLive;
use edgemu_actors::lyreo::openai_client::Endpoint;
use edgemu_actors::lyreo::records::CsvTable;
use edgemu_actors::lyreo::scheduler::{SchedulerActor, SchedulerPolicy, SchedulerSetup};
use edgemu_actors::lyreo::server::{ServerActor, ServerSetup};
use edgemu_actors::lyreo::user::{UserActor, UserSetup};
use edgemu_actors::lyreo::{link_between, scheduler_of, server_position};
use edgemu_actors::messages::{ActorFault, Deliver, Flush, Route, RouteBatch, StopSending};
use edgemu_actors::router::Router;
use edgemu_codec::ids::ActorId;
use edgemu_config::external::{DEFAULT_SLOT_DEADLINE_NS, EXTERNAL_POLICY};
use edgemu_config::{
    ActorKind, ActorSpec, Cluster, RealModel, SchedulerSpec, ServerBackend, ServerSpec, UserSpec,
    WorkloadKind,
};
use edgemu_engine::batch::BatchMode;
use edgemu_engine::Profile;
use edgemu_gpu::{KvDtype, RealBackend};
use edgemu_policies::lyreo::{PolicySpec, ServerBatching};
use edgemu_policies::slot::{ExternalOptions, LyreoPolicies, PolicySlot};
use edgemu_serving::mobility::Position;
use edgemu_serving::mobility::{Area, Mobility};
use edgemu_serving::scheduler::{SchedulerSettings, ServerSite};
use edgemu_serving::workload::Workload;
use edgemu_serving::{SchedulerCore, ServerSlotCore};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// What the host keeps of a LYREO actor.
pub struct Spawned {
    pub deliver: Recipient<Deliver>,
    pub stop: Option<Recipient<StopSending>>,
    pub flush: Option<Recipient<Flush>>,
    /// A gateway's actor, for its HTTP server.
    pub gateway: Option<Addr<GatewayActor>>,
}

/// The host's result tables (LYREO's and the agents' `handoffs.csv`), each
/// opened once, on first use, and shared by the actors that write it; the
/// supervisor flushes them ([`Tables::all`]).
pub struct Tables {
    dir: Option<std::path::PathBuf>,
    open: BTreeMap<&'static str, CsvTable>,
}

impl Tables {
    pub fn new(dir: Option<&Path>) -> Tables {
        Tables {
            dir: dir.map(Path::to_path_buf),
            open: BTreeMap::new(),
        }
    }

    /// The table `name` (created with `header`), or one that keeps nothing
    /// without a results folder.
    pub fn get(&mut self, name: &'static str, header: &str) -> Result<CsvTable> {
        if let Some(t) = self.open.get(name) {
            return Ok(t.clone());
        }
        let t = match &self.dir {
            Some(d) => CsvTable::open(d, name, header)
                .with_context(|| format!("creating {}", d.join(name).display()))?,
            None => CsvTable::discard(),
        };
        self.open.insert(name, t.clone());
        Ok(t)
    }

    /// Every table opened so far.
    pub fn all(&self) -> Vec<CsvTable> {
        self.open.values().cloned().collect()
    }
}

fn scheduler_spec(cluster: &Cluster, id: ActorId) -> Result<&SchedulerSpec> {
    match &cluster.actor(id).kind {
        ActorKind::Scheduler(s) => Ok(s),
        other => Err(anyhow!(
            "actor {:?} is a {}, not a scheduler",
            cluster.actor(id).name,
            other.kind_name()
        )),
    }
}

fn server_spec(cluster: &Cluster, id: ActorId) -> Result<&ServerSpec> {
    match &cluster.actor(id).kind {
        ActorKind::Server(s) => Ok(s),
        other => Err(anyhow!(
            "actor {:?} is a {}, not a server",
            cluster.actor(id).name,
            other.kind_name()
        )),
    }
}

/// The policy a scheduler's core runs at the start: its `policy`, or with
/// `policy = "external"` the external table's fallback (which the servers'
/// batching follows).
fn policy(cluster: &Cluster, scheduler: ActorId) -> Result<PolicySpec> {
    let spec = scheduler_spec(cluster, scheduler)?;
    let name = first_policy(spec);
    PolicySpec::parse(name).map_err(|e| {
        let key = if name == spec.policy {
            "policy"
        } else {
            "external.fallback"
        };
        anyhow!(
            "scheduler {:?}: {key} {name:?}: {e}",
            cluster.actor(scheduler).name,
        )
    })
}

/// A scheduler's `policy`, or its external fallback (default least-loaded).
fn first_policy(spec: &SchedulerSpec) -> &str {
    if spec.policy.trim().eq_ignore_ascii_case(EXTERNAL_POLICY) {
        spec.external
            .as_ref()
            .and_then(|e| e.fallback.as_deref())
            .unwrap_or(DEFAULT_SLOT_FALLBACK)
    } else {
        &spec.policy
    }
}

/// The fallback of an external scheduling policy when `external.fallback`
/// is not given.
pub const DEFAULT_SLOT_FALLBACK: &str = "least-loaded";

/// The built-in profile of a server's GPU class.
fn class_profile(a: &ActorSpec, s: &ServerSpec) -> Result<Profile> {
    Profile::builtin(s.gpu.name())
        .map_err(|e| anyhow!("server {:?}: GPU class {}: {e}", a.name, s.gpu.name()))
}

/// What LYREO actors share with their host: the policy registry the
/// control plane swaps through, and the live state the dashboard and
/// `/metrics` read.
pub struct HostShared {
    pub policies: super::policies::PolicyRegistry,
    pub live: LyreoLive,
    /// Where each actor registers its `ActorFault` recipient.
    pub faults: super::faults::FaultRegistry,
    /// The host's event log (fault effects: requests dropped, servers
    /// marked down or up).
    pub events: edgemu_actors::events::EventLog,
    /// The agents' context-KV caches (their counters in `/metrics`).
    pub kv_caches: super::KvCaches,
    /// The deciders' external-policy counters (`/metrics`, results).
    pub external: edgemu_actors::external::ExternalLive,
}

/// Spawns one LYREO actor; `None` for other kinds.
pub fn spawn(
    cluster: &Cluster,
    a: &ActorSpec,
    virtual_time: bool,
    clock: Clock,
    router: &Addr<Router>,
    tables: &mut Tables,
    host: &HostShared,
) -> Result<Option<Spawned>> {
    let route: Recipient<Route> = router.clone().recipient();
    let (policies, live) = (&host.policies, &host.live);
    let log = edgemu_actors::events::ActorLog::new(
        cluster.host(a.host).name.clone(),
        host.events.clone(),
    );
    let names: Vec<String> = cluster.actors.iter().map(|a| a.name.clone()).collect();
    let seed = derive_seed(cluster.run.seed, (1 << 40) | u64::from(a.id.0));
    Ok(Some(match &a.kind {
        ActorKind::User(u) => {
            let table = tables.get(CsvTable::REQUESTS, CsvTable::REQUESTS_HEADER)?;
            let setup = user_setup(cluster, a, u, seed, names, log)?;
            let addr = UserActor::new(setup, clock, route.clone(), table).start();
            host.faults.register(a.id, addr.clone().recipient());
            Spawned {
                deliver: addr.clone().recipient(),
                stop: Some(addr.clone().recipient()),
                flush: Some(addr.recipient()),
                gateway: None,
            }
        }
        ActorKind::Gateway(g) => {
            let table = tables.get(CsvTable::REQUESTS, CsvTable::REQUESTS_HEADER)?;
            let sched = scheduler_spec(cluster, g.scheduler)?;
            let setup = GatewaySetup {
                id: a.id,
                name: a.name.clone(),
                model: g.served_model_name.clone(),
                scheduler: g.scheduler,
                slot_ns: sched.slot_ns,
                position_m: (g.position_m[0], g.position_m[1]),
                power_w: edgemu_serving::radio::dbm_to_w(g.power_dbm),
                uplinks: sched
                    .servers
                    .iter()
                    .map(|&s| (s, link_between(cluster, a.id, s)))
                    .collect(),
                timeout_ns: g.timeout_ns,
                names,
                live: live.clone(),
                log,
            };
            let addr = GatewayActor::new(setup, clock, route.clone(), table).start();
            host.faults.register(a.id, addr.clone().recipient());
            Spawned {
                deliver: addr.clone().recipient(),
                stop: None,
                flush: Some(addr.clone().recipient()),
                gateway: Some(addr),
            }
        }
        ActorKind::Server(s) => {
            let table = tables.get(CsvTable::SERVER_SLOTS, CsvTable::SERVER_SLOTS_HEADER)?;
            let scheduler = scheduler_of(cluster, a.id)
                .ok_or_else(|| anyhow!("server {:?} is in no scheduler's `servers`", a.name))?;
            let sched = scheduler_spec(cluster, scheduler)?;
            let index = sched
                .servers
                .iter()
                .position(|&x| x == a.id)
                .unwrap_or_default();
            let mode = match policy(cluster, scheduler)?.batching {
                ServerBatching::Continuous => BatchMode::Continuous,
                ServerBatching::Static => BatchMode::Static,
            };
            let profile = class_profile(a, s)?;
            let setup = ServerSetup {
                id: a.id,
                name: a.name.clone(),
                scheduler,
                slot_ns: sched.slot_ns,
                gpu: s.gpu.name().to_string(),
                backend: match &s.backend {
                    ServerBackend::Modeled => "modeled".into(),
                    ServerBackend::Real(RealModel::SmolLm2) => "real".into(),
                    ServerBackend::Real(RealModel::Tiny) => "real-tiny".into(),
                    ServerBackend::OpenAi(_) => "openai".into(),
                },
                wall_clock_compute: !virtual_time && s.backend != ServerBackend::Modeled,
                live: live.clone(),
                log,
                downlinks: cluster
                    .actors
                    .iter()
                    .filter(
                        |g| matches!(&g.kind, ActorKind::Gateway(gs) if gs.scheduler == scheduler),
                    )
                    .filter_map(|g| link_between(cluster, a.id, g.id).map(|l| (g.id, l)))
                    .collect(),
            };
            let (addr, fault): (Recipient<Deliver>, Recipient<ActorFault>) = match &s.backend {
                ServerBackend::OpenAi(o) => {
                    let api_key = match &o.api_key_env {
                        None => None,
                        Some(var) => Some(std::env::var(var).map_err(|_| {
                            anyhow!("server {:?}: `api_key_env` names {var}, which is not set in this node's environment", a.name)
                        })?),
                    };
                    let endpoint = Endpoint {
                        authority: o.authority.clone(),
                        base_path: o.base_path.clone(),
                        model: o.model.clone(),
                        api_key,
                    };
                    let ext = ExternalServerSetup {
                        id: a.id,
                        name: a.name.clone(),
                        scheduler,
                        slot_ns: sched.slot_ns,
                        gpu: s.gpu.name().to_string(),
                        capability: ServerSlotCore::new(index, profile, s.bandwidth_hz, mode)
                            .capability(),
                        endpoint,
                        timeout: std::time::Duration::from_nanos(o.timeout_ns),
                        live: setup.live.clone(),
                        log: setup.log.clone(),
                        downlinks: setup.downlinks.clone(),
                    };
                    // Its HTTP exchanges run on a thread of its own.
                    let (route, arbiter) = (route.clone(), actix::Arbiter::new());
                    let addr =
                        ExternalServerActor::start_in_arbiter(&arbiter.handle(), move |_| {
                            ExternalServerActor::new(ext, clock, route, table)
                        });
                    (addr.clone().recipient(), addr.recipient())
                }
                ServerBackend::Modeled => {
                    let core = ServerSlotCore::new(index, profile, s.bandwidth_hz, mode);
                    let addr = ServerActor::new(setup, core, clock, route.clone(), table).start();
                    (addr.clone().recipient(), addr.recipient())
                }
                &ServerBackend::Real(model) if virtual_time => {
                    // Inline: in virtual time compute must not race the clock.
                    let mut backend = real_backend(&a.name, model, seed)?;
                    let profile = calibrated(&a.name, &mut backend, &profile);
                    let mut core =
                        ServerSlotCore::with_backend(index, backend, profile, s.bandwidth_hz, mode);
                    core.track_speed();
                    let addr = ServerActor::new(setup, core, clock, route.clone(), table).start();
                    (addr.clone().recipient(), addr.recipient())
                }
                &ServerBackend::Real(model) => {
                    // Real time: the model's forward passes run on the
                    // server's own thread, so they never stall the host's
                    // router, links and other servers; the model loads there
                    // too, while messages queue in the actor's mailbox (so
                    // the host starts at once). An absent model file is an
                    // error now; a load that fails later leaves a server
                    // that rejects every request, logged.
                    if model == RealModel::SmolLm2 {
                        edgemu_tokenizer::resolve_model_path(None).map_err(|e| {
                            anyhow!("server {:?} (backend = \"real\"): {e}", a.name)
                        })?;
                    }
                    let (name, route, bw) = (a.name.clone(), route.clone(), s.bandwidth_hz);
                    let arbiter = actix::Arbiter::new();
                    let addr = ServerActor::start_in_arbiter(&arbiter.handle(), move |_| {
                        match real_backend(&name, model, seed) {
                            Ok(mut backend) => {
                                tracing::info!(server = %name, run_time_s = clock.now_ns() as f64 / 1e9, "real backend loaded");
                                let profile = calibrated(&name, &mut backend, &profile);
                                let mut core =
                                    ServerSlotCore::with_backend(index, backend, profile, bw, mode);
                                core.track_speed();
                                ServerActor::new(setup, core, clock, route, table)
                            }
                            Err(e) => {
                                ServerActor::unavailable(setup, &e.to_string(), clock, route, table)
                            }
                        }
                    });
                    (addr.clone().recipient(), addr.recipient())
                }
            };
            host.faults.register(a.id, fault);
            Spawned {
                deliver: addr,
                stop: None,
                flush: None,
                gateway: None,
            }
        }
        ActorKind::Scheduler(s) => {
            let table = tables.get(CsvTable::DECISIONS, CsvTable::DECISIONS_HEADER)?;
            // Checked by name first for the file's error message; the slot
            // then loads it (with shipped weights for a learned policy) and
            // is what `policy.swap` replaces while the run goes on.
            policy(cluster, a.id)?;
            let slot = match (&s.external, first_policy(s) != s.policy) {
                (Some(ext), true) => PolicySlot::new_external(
                    LyreoPolicies,
                    &ExternalOptions {
                        url: ext.url.clone(),
                        deadline_ns: ext.deadline_or(DEFAULT_SLOT_DEADLINE_NS),
                        fallback: Some(first_policy(s).to_string()),
                    },
                    None,
                    Path::new("cluster.toml"),
                    clock.now_ns(),
                    "config",
                ),
                _ => PolicySlot::new(
                    LyreoPolicies,
                    &s.policy,
                    None,
                    Path::new("cluster.toml"),
                    clock.now_ns(),
                    "config",
                ),
            }
            .map_err(|e| anyhow!("scheduler {:?}: policy {:?}: {e}", a.name, s.policy))?;
            let slot = Arc::new(slot);
            policies.register(a.id, slot.clone());
            let sched_policy = SchedulerPolicy::new(slot, seed);
            let mut sites = Vec::with_capacity(s.servers.len());
            for &sid in &s.servers {
                let sa = cluster.actor(sid);
                let ss = server_spec(cluster, sid)?;
                let profile = class_profile(sa, ss)?;
                let (x, y) = server_position(cluster.run.seed, sid, ss);
                sites.push(ServerSite {
                    position: Position { x, y },
                    obs: edgemu_serving::server::initial_obs(&profile, ss.bandwidth_hz),
                });
            }
            let report_timeout_ns = s
                .slot_ns
                .saturating_mul(edgemu_serving::availability::DEFAULT_TIMEOUT_SLOTS);
            let settings = SchedulerSettings {
                slot_ns: s.slot_ns,
                epsilon: s.epsilon,
                nu: s.nu,
                report_timeout_ns,
            };
            // The core is made where it will run (its policy is not Send).
            let make_core = move |p: &SchedulerPolicy| {
                SchedulerCore::new(sites, settings, p.seen.spec.build(seed))
            };
            let setup = SchedulerSetup {
                id: a.id,
                slot_ns: s.slot_ns,
                collect_ns: s.collect_ns,
                servers: s.servers.clone(),
                names,
                live: live.clone(),
                report_timeout_ns,
                log,
                external: host.external.clone(),
                external_allowed: !virtual_time,
            };
            let route = router.clone().recipient::<RouteBatch>();
            let addr = if virtual_time {
                let core = make_core(&sched_policy);
                SchedulerActor::new(setup, core, sched_policy, clock, route, table).start()
            } else {
                // Real time: the scheduler decides on a thread of its own,
                // so its slot timer never waits behind the burst of work
                // its host's users, links and servers do at a slot's
                // start (at 1000 users on one host, decisions ran up to
                // 30 ms late while the host used 0.14 cores).
                let arbiter = actix::Arbiter::new();
                SchedulerActor::start_in_arbiter(&arbiter.handle(), move |_| {
                    let core = make_core(&sched_policy);
                    SchedulerActor::new(setup, core, sched_policy, clock, route, table)
                })
            };
            host.faults.register(a.id, addr.clone().recipient());
            Spawned {
                deliver: addr.clone().recipient(),
                stop: None,
                // At the end it closes its external policy's connection.
                flush: (!virtual_time).then(|| addr.recipient()),
                gateway: None,
            }
        }
        _ => return Ok(None),
    }))
}

/// Builds the inputs of `host`'s users that take seconds (ShareGPT
/// lengths, tokenized once per process), before the host joins the mesh: a
/// host busy tokenizing after joining misses its heartbeats and its peers
/// take it for down. Errors are left for the users' own set-up to report.
pub fn prepare_inputs(cluster: &Cluster, host: edgemu_codec::ids::HostId) {
    for a in cluster.actors.iter().filter(|a| a.host == host) {
        if let ActorKind::User(u) = &a.kind {
            if u.workload == WorkloadKind::ShareGpt {
                let _ = Workload::sharegpt(u.max_input, u.max_output);
            }
        }
    }
}

fn user_setup(
    cluster: &Cluster,
    a: &ActorSpec,
    u: &UserSpec,
    seed: u64,
    names: Vec<String>,
    log: edgemu_actors::events::ActorLog,
) -> Result<UserSetup> {
    let sched = scheduler_spec(cluster, u.scheduler)?;
    let workload = match u.workload {
        WorkloadKind::LmsysLike => Workload::parse(u.workload.name()),
        WorkloadKind::ShareGpt => Workload::sharegpt(u.max_input, u.max_output),
    }
    .map_err(|e| anyhow!("user {:?}: workload {}: {e}", a.name, u.workload.name()))?;
    let mobility =
        Mobility::parse(u.mobility.name()).map_err(|e| anyhow!("user {:?}: {e}", a.name))?;
    Ok(UserSetup {
        id: a.id,
        name: a.name.clone(),
        scheduler: u.scheduler,
        slot_ns: sched.slot_ns,
        start_ns: u.start_ns,
        stop_ns: u.stop_ns,
        mobility,
        area: Area {
            width_m: u.area_m[0],
            height_m: u.area_m[1],
        },
        power_dbm: (u.power_dbm[0], u.power_dbm[1]),
        workload,
        max_input: u.max_input,
        max_output: u.max_output,
        seed,
        uplinks: sched
            .servers
            .iter()
            .map(|&s| (s, link_between(cluster, a.id, s)))
            .collect(),
        names,
        log,
    })
}

/// A real server's profile: its speed measured on this machine (cached per
/// model and machine, see `edgemu_gpu::calibrate`) with its class's KV
/// capacity; its class's figures, with a warning, if measuring fails.
fn calibrated(name: &str, backend: &mut RealBackend, class: &Profile) -> Profile {
    let t0 = std::time::Instant::now();
    let cache = edgemu_assets::cache_dir();
    match edgemu_gpu::calibrate::calibrate(backend, KvDtype::F32, class, cache.as_deref()) {
        Ok((p, how)) => {
            tracing::info!(
                server = %name,
                calibration = ?how,
                prefill_tok_s = p.prefill_tok_s,
                decode_step_ms = p.step_time(1, 0) * 1e3,
                decode_step_b8_ms = p.step_time(8, 0) * 1e3,
                took_s = t0.elapsed().as_secs_f64(),
                "real server measured its speed"
            );
            p
        }
        Err(e) => {
            tracing::warn!(server = %name, error = %e, "speed not measured; the scheduler plans with the class's figures");
            class.clone()
        }
    }
}

/// Loads the model of a `backend = "real"` server on the CPU.
fn real_backend(name: &str, model: RealModel, seed: u64) -> Result<RealBackend> {
    let device = edgemu_gpu::model::parse_device("cpu")
        .map_err(|e| anyhow!("server {name:?}: CPU device: {e}"))?;
    let lm = match model {
        RealModel::SmolLm2 => edgemu_gpu::model::ModelSource::new(None, None)
            .load(&device, None)
            .map_err(|e| {
                anyhow!(
                    "server {name:?} (backend = \"real\"): cannot load SmolLM2: {e} (fetch it with `edgemu fetch model`, or set EDGEMU_MODEL_DIR)"
                )
            })?,
        RealModel::Tiny => edgemu_gpu::model::load_tiny(seed, &device, None)
            .map_err(|e| anyhow!("server {name:?}: tiny model: {e}"))?,
    };
    let eos = lm.tokenizer.eos_id();
    Ok(RealBackend::new(lm.model, KvDtype::F32, eos))
}
