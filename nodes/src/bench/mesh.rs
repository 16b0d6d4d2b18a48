//! `edgemu bench mesh`: envelopes/s and payload bytes/s through one mesh
//! websocket between two hosts on loopback, next to raw TCP in the same run.
//!
//! The websocket side is the real mesh: two [`Mesh`]es (each host on its
//! own thread and actix system, as `edgemu run` does), handshake included.
//! On host `a` a generator pushes byte-string envelopes (`Msg::KvFrame`) into the peer's
//! bounded outbound queue as fast as it takes them (yielding to the session
//! task when it is full); the session batches them into frames; on host `b`
//! the session decodes every frame and hands each envelope to a counting
//! actor standing in for the router. Rates are measured at the receiver
//! over a fixed window after a short warm-up, counting payload bytes only.
//!
//! The TCP side writes the same payload bytes over a tokio `TcpStream`
//! (`write_all` of one reused 1 MiB buffer — the kernel's best case; the
//! mesh writes frames of 64 KiB — and, as a
//! second figure, of one 1400-byte payload per write) to a reader on
//! another thread that reads into a 256 KiB buffer.
//!
//! Beside the rates, each side's CPU seconds per GB of payload moved in
//! the same windows (the sending and receiving host threads for the
//! websocket, the writer and reader threads for TCP): on a shared machine
//! they vary far less than the rates, and they say which side bounds the
//! mesh and by how much it costs more than the kernel's own copy.
//!
//! Aim: `ratio_1400` = websocket / TCP (1 MiB writes) ≥ 0.5.

use super::common::{free_ports, print_json};
use super::BenchArgs;
use crate::host::supervisor::Control;
use crate::mesh::{BaseRtt, Mesh, MeshTargets};
use crate::results::render;
use actix::prelude::*;
use anyhow::{Context as _, Result};
use edgemu_actors::messages::PeerStatus;
use edgemu_actors::router::{InboundBatch, InboundGate, PeerSendError, PeerSender, INBOUND_LIMIT};
use edgemu_codec::ids::{ActorId, HostId};
use edgemu_config::command::CommandReply;
use edgemu_config::{Cluster, ControlError};
use edgemu_protocol::{Envelope, Msg};
use edgemu_stats::cpu::{current_thread_id, CpuClock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AIM_RATIO: f64 = 0.5;

/// What a [`CountingRouter`] got: envelopes and their payload bytes.
#[derive(Default)]
pub(crate) struct Counts {
    envelopes: AtomicU64,
    bytes: AtomicU64,
}

impl Counts {
    pub(crate) fn snapshot(&self) -> (u64, u64) {
        (
            self.envelopes.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }
}

/// Stands in for host `b`'s router and supervisor: counts what arrives.
pub(crate) struct CountingRouter(pub(crate) Arc<Counts>, pub(crate) Arc<InboundGate>);

impl Actor for CountingRouter {
    type Context = Context<Self>;
}

impl Handler<InboundBatch> for CountingRouter {
    type Result = ();
    fn handle(&mut self, msg: InboundBatch, _: &mut Context<Self>) {
        self.1.done_many(msg.0.len());
        let n: u64 = msg
            .0
            .iter()
            .map(|e| match &e.payload {
                Msg::KvFrame(b) => b.len() as u64,
                _ => 0,
            })
            .sum();
        self.0
            .envelopes
            .fetch_add(msg.0.len() as u64, Ordering::Relaxed);
        self.0.bytes.fetch_add(n, Ordering::Relaxed);
    }
}

impl Handler<Control> for CountingRouter {
    type Result = Result<CommandReply, ControlError>;
    fn handle(&mut self, _: Control, _: &mut Context<Self>) -> Self::Result {
        Err(ControlError::NotStarted)
    }
}

impl Handler<PeerStatus> for CountingRouter {
    type Result = ();
    fn handle(&mut self, _: PeerStatus, _: &mut Context<Self>) {}
}

impl Handler<BaseRtt> for CountingRouter {
    type Result = ();
    fn handle(&mut self, _: BaseRtt, _: &mut Context<Self>) {}
}

fn mesh_cluster(dir: &std::path::Path, ports: [u16; 2]) -> Result<Arc<Cluster>> {
    let text = format!(
        r#"[run]
name = "bench-mesh"
duration = "60s"
time = "real"
token_env = "EDGEMU_BENCH_TOKEN_UNUSED"

[[hosts]]
name = "a"
listen = "127.0.0.1:{}"

[[hosts]]
name = "b"
listen = "127.0.0.1:{}"

[[actors]]
name = "sink-a"
host = "a"
kind = "sink"

[[actors]]
name = "sink-b"
host = "b"
kind = "sink"
"#,
        ports[0], ports[1]
    );
    let path = dir.join("cluster.toml");
    let c = Cluster::from_str(&text, &path)
        .map_err(|e| anyhow::anyhow!("generated cluster file: {e}"))?;
    Ok(Arc::new(c))
}

/// One measured phase: payloads of `size` bytes for `secs`.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    envelopes_per_s: f64,
    mbps: f64,
    /// CPU seconds per GB of payload of the sending and receiving threads.
    sender_cpu_s_per_gb: f64,
    receiver_cpu_s_per_gb: f64,
}

/// The CPU clocks of a sending and a receiving thread, each set by its
/// thread when it starts.
#[derive(Clone, Default)]
struct SideClocks {
    sender: Arc<std::sync::Mutex<Vec<u64>>>,
    receiver: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl SideClocks {
    /// Registers the calling thread as one side.
    fn join(ids: &Arc<std::sync::Mutex<Vec<u64>>>) {
        if let (Some(id), Ok(mut v)) = (current_thread_id(), ids.lock()) {
            v.push(id);
        }
    }

    /// CPU seconds used so far by (sender, receiver).
    fn now(&self) -> (f64, f64) {
        (
            CpuClock::Threads(self.sender.clone()).seconds(),
            CpuClock::Threads(self.receiver.clone()).seconds(),
        )
    }
}

/// CPU seconds per GB of `bytes` payload over a window.
fn per_gb(cpu_s: f64, bytes: u64) -> f64 {
    if bytes == 0 {
        f64::NAN
    } else {
        cpu_s / (bytes as f64 / 1e9)
    }
}

fn window(
    before: (u64, u64),
    after: (u64, u64),
    dt: Duration,
    cpu: ((f64, f64), (f64, f64)),
) -> Phase {
    let s = dt.as_secs_f64().max(1e-9);
    let bytes = after.1.saturating_sub(before.1);
    let ((s0, r0), (s1, r1)) = cpu;
    Phase {
        envelopes_per_s: after.0.saturating_sub(before.0) as f64 / s,
        mbps: bytes as f64 * 8.0 / s / 1e6,
        sender_cpu_s_per_gb: per_gb(s1 - s0, bytes),
        receiver_cpu_s_per_gb: per_gb(r1 - r0, bytes),
    }
}

/// Pushes envelopes of `size` bytes into `peer` for `warmup + secs`;
/// returns the receiver's rates over the last `secs`.
async fn drive(
    peer: &dyn PeerSender,
    counts: &Counts,
    clocks: &SideClocks,
    size: usize,
    warmup: Duration,
    secs: Duration,
) -> Result<Phase> {
    let template = Envelope {
        src: ActorId(0),
        dst: ActorId(1),
        via: None,
        sent_at_ns: 0,
        due_ns: None,
        payload: Msg::KvFrame(vec![0u8; size]),
    };
    let t0 = Instant::now();
    // The window's start: when, the receiver's counts, the CPU clocks.
    type Mark = (Instant, (u64, u64), (f64, f64));
    let mut mark: Option<Mark> = None;
    loop {
        let now = Instant::now();
        if mark.is_none() && now >= t0 + warmup {
            mark = Some((now, counts.snapshot(), clocks.now()));
        }
        if let Some((m, before, cpu0)) = mark {
            if now >= m + secs {
                let (after, cpu1) = (counts.snapshot(), clocks.now());
                return Ok(window(before, after, now - m, (cpu0, cpu1)));
            }
        }
        // One allocation and copy per envelope, as an actor producing the
        // payload makes; an envelope refused by a full queue is dropped.
        for _ in 0..256 {
            match peer.try_send(template.clone()) {
                Ok(()) => {}
                Err(PeerSendError::Full) => break,
                Err(PeerSendError::Down) => {
                    anyhow::bail!("the mesh session went down during the benchmark")
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

struct WsFigures {
    small: Phase,
    large: Phase,
    /// Envelopes host b's gate refused (its router was behind past the
    /// reader's wait).
    receiver_dropped: u64,
}

fn ws_bench(warmup: Duration, secs: Duration) -> Result<WsFigures> {
    let dir = super::common::ScratchDir::new("mesh")?;
    let cluster = mesh_cluster(dir.path(), free_ports()?)?;
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clocks = SideClocks::default();

    let b = {
        let cluster = cluster.clone();
        let counts = counts.clone();
        let stop = stop.clone();
        let receiver = clocks.receiver.clone();
        std::thread::Builder::new()
            .name("bench-host-b".into())
            .spawn(move || -> Result<u64> {
                SideClocks::join(&receiver);
                actix::System::new().block_on(async move {
                    let targets = MeshTargets::default();
                    let mesh = Mesh::start(cluster, HostId(1), Vec::new(), targets.clone()).await?;
                    let gate = Arc::new(InboundGate::new(INBOUND_LIMIT));
                    let r = CountingRouter(counts, gate.clone()).start();
                    targets.set(
                        (r.clone().recipient(), gate.clone()),
                        r.clone().recipient(),
                        vec![r.clone().recipient()],
                        r.recipient(),
                    );
                    while !stop.load(Ordering::Acquire) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let dropped = gate.dropped();
                    mesh.say_goodbye("bench over");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok(dropped)
                })
            })
            .context("starting host b")?
    };

    let a_result = std::thread::Builder::new()
        .name("bench-host-a".into())
        .spawn({
            let counts = counts.clone();
            move || -> Result<(Phase, Phase)> {
                SideClocks::join(&clocks.sender);
                actix::System::new().block_on(async move {
                    let mesh =
                        Mesh::start(cluster, HostId(0), Vec::new(), MeshTargets::default()).await?;
                    let t0 = Instant::now();
                    while mesh.peers_up() < 1 {
                        if t0.elapsed() > Duration::from_secs(10) {
                            anyhow::bail!("the mesh session did not come up within 10 s");
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    let senders = mesh.peer_senders();
                    let (_, peer) = senders.first().context("no peer sender")?;
                    let small = drive(peer.as_ref(), &counts, &clocks, 64, warmup, secs).await?;
                    let large = drive(peer.as_ref(), &counts, &clocks, 1400, warmup, secs).await?;
                    mesh.say_goodbye("bench over");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok((small, large))
                })
            }
        })
        .context("starting host a")?
        .join();
    stop.store(true, Ordering::Release);
    let b_result = b.join();
    let (small, large) = a_result.map_err(|_| anyhow::anyhow!("host a panicked"))??;
    let receiver_dropped = b_result.map_err(|_| anyhow::anyhow!("host b panicked"))??;
    Ok(WsFigures {
        small,
        large,
        receiver_dropped,
    })
}

/// Raw TCP over loopback: `write_len`-byte `write_all`s of 1400-byte payloads.
fn tcp_bench(write_len: usize, warmup: Duration, secs: Duration) -> Result<Phase> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding the TCP bench listener")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let bytes = Arc::new(AtomicU64::new(0));
    let clocks = SideClocks::default();
    let reader = {
        let bytes = bytes.clone();
        let receiver = clocks.receiver.clone();
        std::thread::Builder::new()
            .name("bench-tcp-rx".into())
            .spawn(move || -> Result<()> {
                SideClocks::join(&receiver);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let (mut s, _) = listener.accept().await?;
                    let mut buf = vec![0u8; 256 * 1024];
                    loop {
                        let n = s.read(&mut buf).await?;
                        if n == 0 {
                            return Ok(());
                        }
                        bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                })
            })?
    };
    let writer = {
        let bytes = bytes.clone();
        std::thread::Builder::new()
            .name("bench-tcp-tx".into())
            .spawn(move || -> Result<Phase> {
                SideClocks::join(&clocks.sender);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let mut s = tokio::net::TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    let chunk = vec![0u8; write_len.max(1)];
                    let t0 = Instant::now();
                    let mut mark: Option<(Instant, u64, (f64, f64))> = None;
                    loop {
                        s.write_all(&chunk).await?;
                        let now = Instant::now();
                        if mark.is_none() && now >= t0 + warmup {
                            mark = Some((now, bytes.load(Ordering::Acquire), clocks.now()));
                        }
                        if let Some((m, b0, cpu0)) = mark {
                            if now >= m + secs {
                                let (b1, cpu1) = (bytes.load(Ordering::Acquire), clocks.now());
                                let _ = s.shutdown().await;
                                return Ok(window((0, b0), (0, b1), now - m, (cpu0, cpu1)));
                            }
                        }
                    }
                })
            })?
    };
    let phase = writer
        .join()
        .map_err(|_| anyhow::anyhow!("TCP writer panicked"))??;
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("TCP reader panicked"))??;
    Ok(phase)
}

/// `edgemu bench mesh`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct MeshArgs {
    #[command(flatten)]
    pub common: BenchArgs,
    /// Rounds of (websocket, raw TCP) windows; the table gives each
    /// figure's median over the rounds. Every round is a fresh saturated
    /// session, and a session that goes down in a round is counted.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn report(args: &MeshArgs) -> Result<serde_json::Value> {
    let (warmup, secs) = if args.common.quick {
        (Duration::from_millis(200), Duration::from_millis(600))
    } else {
        (Duration::from_millis(500), Duration::from_secs(3))
    };
    let rounds = args.rounds.max(1);
    // Raw TCP gets its best case: 1 MiB writes (the mesh's frame budget).
    let batch = 1400 * (edgemu_codec::wire::MAX_FRAME_BYTES / 4 / 1400);
    let bar = super::common::progress(rounds as u64, "bench mesh rounds");
    let (mut ws_large, mut ws_small, mut ws_env_small, mut ws_env_large) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut tcp_large, mut tcp_small, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    // CPU s/GB: websocket sender, receiver; TCP (1 MiB writes) writer, reader.
    let mut cpu: [Vec<f64>; 4] = Default::default();
    let (mut sessions_down, mut receiver_dropped) = (0u64, 0u64);
    // Loopback TCP's own rate swings by ±30 % between windows on a shared
    // machine, so websocket and TCP windows alternate and each round gives
    // its own ratio.
    for _ in 0..rounds {
        let ws = match ws_bench(warmup, secs) {
            Ok(ws) => ws,
            Err(e) if e.to_string().contains("went down") => {
                sessions_down += 1;
                tracing::warn!("bench mesh: {e:#}");
                bar.inc(1);
                continue;
            }
            Err(e) => return Err(e),
        };
        let tcp = tcp_bench(batch, warmup, secs)?;
        let tcp_1400 = tcp_bench(1400, warmup, secs)?;
        receiver_dropped += ws.receiver_dropped;
        ws_large.push(ws.large.mbps);
        ws_small.push(ws.small.mbps);
        ws_env_small.push(ws.small.envelopes_per_s);
        ws_env_large.push(ws.large.envelopes_per_s);
        tcp_large.push(tcp.mbps);
        tcp_small.push(tcp_1400.mbps);
        ratios.push(if tcp.mbps > 0.0 {
            ws.large.mbps / tcp.mbps
        } else {
            0.0
        });
        for (all, v) in cpu.iter_mut().zip([
            ws.large.sender_cpu_s_per_gb,
            ws.large.receiver_cpu_s_per_gb,
            tcp.sender_cpu_s_per_gb,
            tcp.receiver_cpu_s_per_gb,
        ]) {
            all.push(v);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(serde_json::json!({
        "ws_mbps_1400": median(ws_large),
        "tcp_mbps_1400": median(tcp_large),
        "ratio_1400": median(ratios.clone()),
        "ratio_1400_min": ratios.iter().copied().fold(f64::INFINITY, f64::min),
        "ratio_1400_max": ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "ratios_1400": ratios,
        "envelopes_per_s_64": median(ws_env_small),
        "ws_mbps_64": median(ws_small),
        "envelopes_per_s_1400": median(ws_env_large),
        "tcp_mbps_1400_per_write": median(tcp_small),
        "tcp_write_bytes": batch,
        "ws_sender_cpu_s_per_gb": median(cpu[0].clone()),
        "ws_receiver_cpu_s_per_gb": median(cpu[1].clone()),
        "tcp_sender_cpu_s_per_gb": median(cpu[2].clone()),
        "tcp_receiver_cpu_s_per_gb": median(cpu[3].clone()),
        "window_s": secs.as_secs_f64(),
        "rounds": rounds,
        "sessions_down": sessions_down,
        "receiver_dropped": receiver_dropped,
    }))
}

pub fn run(args: &MeshArgs) -> Result<()> {
    let v = report(args)?;
    if args.common.json {
        return print_json(&v);
    }
    let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
    println!(
        "bench mesh: one loopback websocket between two hosts (real mesh, receiver decodes every frame), \
         payload bytes only, {} s windows, medians of {} rounds",
        f("window_s"),
        f("rounds")
    );
    println!(
        "raw TCP: write_all of {} B buffers (and of one 1400 B payload per write), alternating with the websocket\n",
        f("tcp_write_bytes")
    );
    let rows = vec![
        vec![
            "websocket, 64 B".to_string(),
            format!("{:.0}", f("envelopes_per_s_64")),
            format!("{:.1}", f("ws_mbps_64")),
            String::new(),
            String::new(),
        ],
        vec![
            "websocket, 1400 B".to_string(),
            format!("{:.0}", f("envelopes_per_s_1400")),
            format!("{:.1}", f("ws_mbps_1400")),
            format!("{:.3}", f("ratio_1400")),
            format!("{:.2}", f("ratio_1400") / AIM_RATIO),
        ],
        vec![
            "raw TCP, 1 MiB writes".to_string(),
            String::new(),
            format!("{:.1}", f("tcp_mbps_1400")),
            String::new(),
            String::new(),
        ],
        vec![
            "raw TCP, 1400 B writes".to_string(),
            String::new(),
            format!("{:.1}", f("tcp_mbps_1400_per_write")),
            String::new(),
            String::new(),
        ],
    ];
    print!(
        "{}",
        render(
            &["path", "envelopes/s", "Mb/s", "ws/TCP", "ratio/aim (0.5)"],
            &rows
        )
    );
    let cpu_row = |side: &str, ws: &str, tcp: &str| {
        vec![
            side.to_string(),
            format!("{:.3}", f(ws)),
            format!("{:.3}", f(tcp)),
            format!("{:.2}", f(ws) / f(tcp)),
        ]
    };
    println!("\nCPU seconds per GB of payload (the same windows; medians):\n");
    print!(
        "{}",
        render(
            &[
                "side",
                "websocket, 1400 B",
                "raw TCP, 1 MiB writes",
                "ws/TCP"
            ],
            &[
                cpu_row(
                    "sending thread",
                    "ws_sender_cpu_s_per_gb",
                    "tcp_sender_cpu_s_per_gb"
                ),
                cpu_row(
                    "receiving thread",
                    "ws_receiver_cpu_s_per_gb",
                    "tcp_receiver_cpu_s_per_gb"
                ),
            ]
        )
    );
    println!(
        "\nws/TCP per round: {:.3} to {:.3}; saturated sessions down: {} of {} rounds; \
         envelopes the receiver dropped (its router behind): {}",
        f("ratio_1400_min"),
        f("ratio_1400_max"),
        f("sessions_down"),
        f("rounds"),
        f("receiver_dropped")
    );
    Ok(())
}
