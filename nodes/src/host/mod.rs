//! One host's part of a run, under real or virtual time.
//!
//! Real time ([`run_host_real`]): bind the mesh, wait for the coordinator's
//! start announcement (the coordinator waits for its peers first), map the
//! announced unix start time to the local clock, create the results folder
//! and the actors, serve the control websocket, and run until the duration
//! is over, `run.stop`, Ctrl-C or SIGTERM.
//!
//! Virtual time ([`run_virtual`]): every host of the file in one process, on
//! one current-thread actix system whose tokio clock is paused and advances
//! only when all actors are idle; routers reach each other in-process. No
//! network I/O happens, so a given file and seed reproduce bit for bit.

pub mod chaos_timeline;
pub mod commands;
pub mod faults;
pub mod keys;
pub mod policies;
pub mod registry;

/// The context-KV caches (moka, weighed by bytes) of this host's agents, by
/// agent: shared with the agents' compute actors, read without a message.
pub type KvCaches = registry::ActorRegistry<std::sync::Arc<edgemu_gpu::kv_cache::ContextKvCache>>;
pub mod route;
pub mod spawn;
pub mod spawn_agents;
pub mod spawn_lyreo;
pub mod supervisor;

use crate::control;
use crate::mesh::{Mesh, MeshTargets};
use crate::results::{self, HostResults, SharedEvents};
use actix::prelude::*;
use anyhow::{Context as _, Result};
use edgemu_actors::clock::{unix_now_ns, Clock, PreciseTimer, Timer};
use edgemu_actors::events::EventLog;
use edgemu_actors::messages::PeerStatus;
use edgemu_actors::router::{Inbound, InboundBatch, PeerSendError, PeerSender, Router, SetPeer};
use edgemu_codec::ids::HostId;
use edgemu_config::{Cluster, TimeMode};
use edgemu_protocol::Envelope;
use spawn::spawn_host_actors;
use std::sync::Arc;
use std::time::Duration;
use supervisor::{HostSummary, StopRun, Supervisor};
use tokio::sync::oneshot;

/// Options of one host process.
#[derive(Clone, Debug, Default)]
pub struct HostOptions {
    /// Override the results folder name.
    pub run_id: Option<String>,
    /// How long the coordinator waits for all peers before starting anyway.
    pub wait_peers: Option<Duration>,
    /// Show a progress bar for this host.
    pub progress: Option<indicatif::ProgressBar>,
    /// Policy slots to add to the host's registry (slots of actors built
    /// outside the config, e.g. by a test).
    pub policies: policies::PolicyRegistry,
}

/// The cluster token from the environment variable the config names.
/// Without it, only loopback addresses may be used.
pub fn cluster_token(cluster: &Cluster, host: HostId) -> Result<Vec<u8>> {
    let var = &cluster.run.token_env;
    match std::env::var(var) {
        Ok(t) if !t.is_empty() => Ok(t.into_bytes()),
        _ => {
            let h = cluster.host(host);
            // Advertising a non-loopback address means peers reach this
            // host over a network, whatever it binds.
            let exposed = !h.advertise.is_loopback()
                || [Some(h.listen), h.control]
                    .into_iter()
                    .flatten()
                    .any(|a| !a.ip().is_loopback());
            if exposed {
                anyhow::bail!(
                    "host {} listens on or advertises a non-loopback address: set the cluster token in the environment variable {var} (same value on every host)",
                    h.name
                );
            }
            Ok(Vec::new())
        }
    }
}

fn run_facts(cluster: &Cluster, start_unix_ns: Option<u64>) -> serde_json::Value {
    serde_json::json!({
        "name": cluster.run.name,
        "seed": cluster.run.seed,
        "time": match cluster.run.time { TimeMode::Real => "real", TimeMode::Virtual => "virtual" },
        "duration_ns": cluster.run.duration_ns,
        "git_revision": results::git_revision(),
        "config_digest": cluster.digest.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "hosts": cluster.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
        "start_unix_ns": start_unix_ns,
    })
}

fn actor_names(cluster: &Cluster) -> Vec<String> {
    cluster.actors.iter().map(|a| a.name.clone()).collect()
}

/// Runs one host under real time, inside an actix system.
pub async fn run_host_real(
    cluster: Arc<Cluster>,
    host: HostId,
    opts: HostOptions,
) -> Result<HostSummary> {
    let host_name = cluster.host(host).name.clone();
    let keys = keys::ClusterKeys::from_token(&cluster_token(&cluster, host)?);
    let targets = MeshTargets::default();
    spawn_lyreo::prepare_inputs(&cluster, host);
    let mut mesh = Mesh::start(cluster.clone(), host, keys.mesh.clone(), targets.clone()).await?;
    if mesh.is_coordinator() {
        let wait = opts.wait_peers.unwrap_or(Duration::from_secs(30));
        let t0 = std::time::Instant::now();
        while mesh.peers_up() < mesh.peer_count() && t0.elapsed() < wait {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if mesh.peers_up() < mesh.peer_count() {
            tracing::warn!(host = %host_name, up = mesh.peers_up(), of = mesh.peer_count(), "starting without every peer");
        }
        mesh.announce_start(unix_now_ns() + 500_000_000);
    } else {
        tracing::info!(host = %host_name, "waiting for the coordinator to start the run");
    }
    // A coordinator waits `wait` for its peers before it announces; a host
    // that hears nothing for twice that (plus slack) is told so.
    let wait = opts.wait_peers.unwrap_or(Duration::from_secs(30));
    let start_timeout = wait.saturating_mul(2) + Duration::from_secs(5);
    let start_unix = match tokio::time::timeout(start_timeout, mesh.wait_start()).await {
        Ok(Some(v)) => v,
        Ok(None) => anyhow::bail!("mesh stopped before the run started"),
        Err(_) => {
            let coordinator = crate::mesh::coordinator(&cluster)
                .map(|h| cluster.host(h).name.clone())
                .unwrap_or_default();
            anyhow::bail!(
                "host {host_name}: no start from the coordinator {coordinator:?} within {start_timeout:?}; is it running, with the same cluster.toml and token, and reachable at {}?",
                crate::mesh::coordinator(&cluster)
                    .map(|h| cluster.host(h).advertise.to_string())
                    .unwrap_or_default()
            )
        }
    };
    let clock = Clock::from_unix_epoch(start_unix);
    let run_id = opts
        .run_id
        .clone()
        .unwrap_or_else(|| results::run_id(&cluster.run.name, start_unix));
    let run_dir =
        results::create_run_dir(&cluster, &run_id, run_facts(&cluster, Some(start_unix)))?;
    let shared_events = SharedEvents::default();
    let recent = crate::dashboard::RecentEvents::default();
    let events = EventLog::new(recent.tee(Box::new(shared_events.clone())));
    let res = HostResults::create(&run_dir, &host_name, &shared_events, actor_names(&cluster))?;
    let web = crate::dashboard::Web::new(
        cluster.clone(),
        crate::metrics::HostMetrics::new(&host_name),
        recent,
    );
    let timer =
        Timer::Precise(PreciseTimer::start(&host_name).context("starting the timer thread")?);

    // The actors are in place before the epoch, and their timers count
    // from it: spawning hundreds of them after it would make every host's
    // first slot late by its own start-up time.
    let probes = res.probes.clone();
    let actors = spawn_host_actors(
        &cluster,
        host,
        clock,
        &timer,
        false,
        &events,
        &|| Box::new(probes.clone()),
        Some(&res.dir),
    )?;
    for (h, s) in mesh.peer_senders() {
        actors.router.do_send(SetPeer {
            host: h,
            sender: Some(s),
        });
    }
    actors.policies.extend_from(&opts.policies);
    tokio::time::sleep_until(clock.epoch()).await;
    let (done_tx, done_rx) = oneshot::channel();
    let sup = Supervisor::new(
        cluster.clone(),
        host,
        clock,
        actors.clone(),
        events.clone(),
        Some(res),
        Some(mesh.forwarder()),
        opts.progress.clone(),
        done_tx,
    )
    .start();
    targets.set(
        (
            actors.router.clone().recipient::<InboundBatch>(),
            actors.inbound.clone(),
        ),
        sup.clone().recipient(),
        vec![
            actors.router.clone().recipient::<PeerStatus>(),
            sup.clone().recipient::<PeerStatus>(),
        ],
        sup.clone().recipient(),
    );
    // Peers that came up before the actors existed.
    for (h, _) in mesh.peer_senders() {
        if mesh.peer_is_up(h) {
            actors.router.do_send(PeerStatus {
                peer: h,
                up: true,
                left: false,
            });
        }
    }
    // Served until this function returns (the handle stops it on drop).
    let _control = match cluster.host(host).control {
        Some(addr) => Some(
            control::serve_on_own_thread(
                addr,
                sup.clone(),
                keys.control.clone(),
                cluster.clone(),
                host,
                web.clone(),
            )
            .await
            .with_context(|| format!("starting the control websocket on {addr}"))?,
        ),
        None => None,
    };
    // Served until this function returns (each handle stops its server).
    let mut _gateways = Vec::new();
    for (id, addr) in &actors.gateways {
        let a = cluster.actor(*id);
        if let edgemu_config::ActorKind::Gateway(spec) = &a.kind {
            _gateways.push(
                crate::gateway::serve(&a.name, spec, addr.clone(), actors.lyreo.clone()).await?,
            );
        }
    }
    let stop = sup.clone();
    actix_rt::spawn(async move {
        wait_for_signal().await;
        stop.do_send(StopRun {
            reason: "signal".into(),
        });
    });
    let summary = done_rx
        .await
        .context("host supervisor ended without a summary");
    for a in &actors.attaches {
        a.close();
    }
    let summary = summary?;
    mesh.say_goodbye("run finished");
    tokio::time::sleep(Duration::from_millis(100)).await;
    tracing::info!(host = %host_name, dir = %run_dir.display(), "host finished");
    Ok(summary)
}

/// Ctrl-C or SIGTERM.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// In-process peer for virtual time: straight to the other host's router
/// (`.1` is the sending host).
struct VirtualPeer(Addr<Router>, HostId);

impl PeerSender for VirtualPeer {
    fn try_send(&self, envelope: Envelope) -> Result<(), PeerSendError> {
        self.0.do_send(Inbound(envelope, self.1));
        Ok(())
    }
}

/// Runs every host of the file under paused tokio time in this process.
/// Returns the run folder and each host's summary.
pub fn run_virtual(
    cluster: Arc<Cluster>,
    run_id: Option<String>,
    progress: Option<indicatif::ProgressBar>,
) -> Result<(std::path::PathBuf, Vec<HostSummary>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .context("building the paused tokio runtime")?;
    let mut rt = Some(rt);
    let system = actix::System::with_tokio_rt(move || {
        rt.take()
            .unwrap_or_else(|| unreachable!("the runtime factory is called once"))
    });
    let run_id = run_id.unwrap_or_else(|| results::run_id(&cluster.run.name, unix_now_ns()));
    let run_dir = results::create_run_dir(&cluster, &run_id, run_facts(&cluster, None))?;
    let dir = run_dir.clone();
    let summaries = system.block_on(async move {
        let clock = Clock::new(tokio::time::Instant::now());
        let mut all = Vec::new();
        let mut routers = Vec::new();
        for h in &cluster.hosts {
            let shared_events = SharedEvents::default();
            let events = EventLog::new(Box::new(shared_events.clone()));
            let res = HostResults::create(&dir, &h.name, &shared_events, actor_names(&cluster))?;
            let probes = res.probes.clone();
            let actors = spawn_host_actors(
                &cluster,
                h.id,
                clock,
                &Timer::Tokio,
                true,
                &events,
                &|| Box::new(probes.clone()),
                Some(&res.dir),
            )?;
            routers.push((h.id, actors.router.clone()));
            all.push((h.id, actors, events, res));
        }
        for (h, actors, _, _) in &all {
            for (peer, addr) in &routers {
                if peer != h {
                    actors.router.do_send(SetPeer {
                        host: *peer,
                        sender: Some(Box::new(VirtualPeer(addr.clone(), *h))),
                    });
                }
            }
        }
        let mut waits = Vec::new();
        for (i, (h, actors, events, res)) in all.into_iter().enumerate() {
            let (done_tx, done_rx) = oneshot::channel();
            let progress = if i == 0 { progress.clone() } else { None };
            Supervisor::new(
                cluster.clone(),
                h,
                clock,
                actors,
                events,
                Some(res),
                None,
                progress,
                done_tx,
            )
            .start();
            waits.push(done_rx);
        }
        let mut summaries = Vec::new();
        for w in waits {
            summaries.push(
                w.await
                    .context("a host supervisor ended without a summary")?,
            );
        }
        System::current().stop();
        anyhow::Ok(summaries)
    })?;
    Ok((run_dir, summaries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_advertise_address_requires_a_token() {
        let text = "[run]\nduration = \"1s\"\ntoken_env = \"EDGEMU_TEST_TOKEN_NEVER_SET\"\n[[hosts]]\nname = \"a\"\nlisten = \"127.0.0.1:7101\"\nadvertise = \"10.1.2.3:7101\"\n";
        let c = Cluster::from_str(text, std::path::Path::new("t.toml")).expect("cluster");
        let e = cluster_token(&c, HostId(0)).expect_err("token required");
        assert!(e.to_string().contains("EDGEMU_TEST_TOKEN_NEVER_SET"), "{e}");
        let local = text.replace("10.1.2.3", "127.0.0.1");
        let c = Cluster::from_str(&local, std::path::Path::new("t.toml")).expect("cluster");
        assert!(cluster_token(&c, HostId(0)).is_ok());
    }
}
