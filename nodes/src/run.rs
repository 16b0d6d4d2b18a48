//! `edgemu run` and `edgemu node`: run the hosts of a cluster file and print
//! the summary tables ([`crate::results::summary`]): latency per policy
//! version, server load and KV, handoffs, links, flows and events. `edgemu
//! run` also writes them to `summary.md` and the `tables` key of
//! `summary.json`.

use crate::host::supervisor::HostSummary;
use crate::host::{run_host_real, run_virtual, HostOptions};
use crate::results::{self, flow_table, LinkRow, RunTables};
use anyhow::{Context as _, Result};
use edgemu_config::{Cluster, TimeMode};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub fn load(path: &Path) -> Result<Arc<Cluster>> {
    let cluster = Cluster::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Arc::new(cluster))
}

fn progress_bar(cluster: &Cluster, show: bool) -> Option<indicatif::ProgressBar> {
    if !show {
        return None;
    }
    let secs = cluster.run.duration_ns.div_ceil(1_000_000_000);
    let pb = indicatif::ProgressBar::new(secs);
    let style = indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:40}] {pos}/{len} s")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(match cluster.run.time {
        TimeMode::Real => format!("{} (real time)", cluster.run.name),
        TimeMode::Virtual => format!("{} (virtual time)", cluster.run.name),
    });
    Some(pb)
}

/// What a finished run left.
pub struct RunOutcome {
    pub dir: PathBuf,
    pub hosts: Vec<HostSummary>,
}

/// Runs every host of the file in this process: one thread and actix system
/// per host over loopback websockets in real time, or all in one paused
/// system in virtual time.
pub fn run_all(
    cluster: Arc<Cluster>,
    run_id: Option<String>,
    show_progress: bool,
) -> Result<RunOutcome> {
    let pb = progress_bar(&cluster, show_progress);
    let outcome = match cluster.run.time {
        TimeMode::Virtual => {
            let (dir, hosts) = run_virtual(cluster.clone(), run_id, pb.clone())?;
            RunOutcome { dir, hosts }
        }
        TimeMode::Real => {
            // All hosts must agree on the folder before the run starts.
            let run_id = run_id.unwrap_or_else(|| {
                results::run_id(&cluster.run.name, edgemu_actors::clock::unix_now_ns())
            });
            let mut threads = Vec::new();
            for (i, h) in cluster.hosts.iter().enumerate() {
                let cluster = cluster.clone();
                let opts = HostOptions {
                    run_id: Some(run_id.clone()),
                    wait_peers: Some(Duration::from_secs(10)),
                    progress: if i == 0 { pb.clone() } else { None },
                    ..Default::default()
                };
                let id = h.id;
                let name = h.name.clone();
                let t = std::thread::Builder::new()
                    .name(format!("host-{name}"))
                    .spawn(move || actix::System::new().block_on(run_host_real(cluster, id, opts)))
                    .with_context(|| format!("starting the thread of host {name}"))?;
                threads.push((h.name.clone(), t));
            }
            let mut hosts = Vec::new();
            for (name, t) in threads {
                let r = t
                    .join()
                    .map_err(|_| anyhow::anyhow!("host {name} panicked"))?;
                hosts.push(r.with_context(|| format!("host {name}"))?);
            }
            RunOutcome {
                dir: cluster.run.results_dir.join(&run_id),
                hosts,
            }
        }
    };
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let tables = RunTables::read(&outcome.dir, &links_of(&outcome.hosts));
    let summary = serde_json::json!({ "hosts": outcome.hosts, "tables": tables.json() });
    results::write_file(
        &outcome.dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    results::write_file(
        &outcome.dir.join("summary.md"),
        tables.markdown().as_bytes(),
    )?;
    Ok(outcome)
}

/// Runs one host of the file (one machine of a multi-machine run).
pub fn run_node(
    cluster: Arc<Cluster>,
    host: &str,
    run_id: Option<String>,
    wait_peers: Duration,
    show_progress: bool,
) -> Result<HostSummary> {
    let spec = cluster
        .host_by_name(host)
        .with_context(|| {
            let names: Vec<&str> = cluster.hosts.iter().map(|h| h.name.as_str()).collect();
            format!(
                "no host {host:?} in {}; hosts are: {}",
                cluster.source.display(),
                names.join(", ")
            )
        })?
        .clone();
    if cluster.run.time == TimeMode::Virtual {
        anyhow::bail!(
            "{} uses time = \"virtual\", which runs every host in one process: use `edgemu run`",
            cluster.source.display()
        );
    }
    let opts = HostOptions {
        run_id,
        wait_peers: Some(wait_peers),
        progress: progress_bar(&cluster, show_progress),
        ..Default::default()
    };
    let pb = opts.progress.clone();
    let r = actix::System::new().block_on(run_host_real(cluster, spec.id, opts));
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    r
}

fn links_of(hosts: &[HostSummary]) -> Vec<LinkRow> {
    hosts.iter().flat_map(|h| h.links.iter().cloned()).collect()
}

/// The terminal summary of a run: the tables of [`RunTables`] read from the
/// results folder, with the flows measured by probe sinks after the links.
pub fn print_summary(dir: &Path, hosts: &[HostSummary]) {
    let tables = RunTables::read(dir, &links_of(hosts));
    let flows: Vec<_> = hosts.iter().flat_map(|h| h.flows.iter().cloned()).collect();
    let has = |name: &str| tables.get(name).is_some();
    let print_flows = || {
        println!("\nFlows (measured at the sink / pinger):");
        print!("{}", flow_table(&flows));
    };
    for t in &tables.tables {
        if t.name == "events" && !flows.is_empty() {
            print_flows();
        }
        println!("\n{}", t.text().trim_end());
        if t.name == "servers" && !has("handoffs") {
            println!("\nHandoffs: none in this run (no <host>/handoffs.csv).");
        }
    }
    if !has("events") && !flows.is_empty() {
        print_flows();
    }
    for s in &tables.skipped {
        eprintln!("skipped: {s}");
    }
    for h in hosts {
        let r = &h.router;
        let dropped = r.dropped_queue_full
            + r.dropped_peer_down
            + r.dropped_partition
            + r.dropped_unknown
            + r.dropped_bad_route;
        if dropped > 0 {
            println!(
                "host {}: router dropped {dropped} envelopes (queue full {}, peer down {}, partition {}, unknown {}, bad route {})",
                h.host, r.dropped_queue_full, r.dropped_peer_down, r.dropped_partition, r.dropped_unknown, r.dropped_bad_route
            );
        }
    }
    println!(
        "\nresults: {} (these tables: summary.md; plots: edgemu report {})",
        dir.display(),
        dir.display()
    );
}
