//! The kernel's own TCP between two network namespaces: a sender thread
//! that has entered one namespace writes a byte stream to a receiver
//! thread in the other, which logs how many bytes it has read in order,
//! and when. With the namespaces joined by an attached link
//! ([`super::pair`]), this is Linux's TCP (CUBIC, SACK, RACK-TLP, its
//! own buffers and pacing, as the host's sysctls configure it) over the
//! link model, the reliable baseline the PriorityFEC experiment sets
//! beside smoltcp's.
//!
//! One implementation serves three users: the experiment's `tcp-kernel`
//! row and `bench attach` ([`over_attached_link`], [`transfer`]), and
//! agents' `tcp-kernel` handoffs in a live run ([`AgentStreams`], the
//! host's side of `edgemu_actors::handoff::stream::KernelStreams`).
//!
//! Times are ns from the moment the sender calls `connect` (its SYN),
//! as for the virtual-time baselines; both threads read one monotonic
//! clock. Every wait has a timeout: a stream ends when every byte has
//! been read, when it is stopped, or at its horizon (the sender then
//! resets the connection); the receiver gives up at its own deadline, and
//! a `connect` or `accept` waits at most [`CONNECT_TIMEOUT`] (a `connect`
//! no longer than the sender's horizon).

use anyhow::{bail, Context as _, Result};
use edgemu_actors::handoff::stream::{KernelStreams, StreamProgress};
use edgemu_codec::ids::ActorId;
use edgemu_handoff::reliable::DeliveryLog;
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the kernel's TCP achieved.
#[derive(Debug, Clone, Default)]
pub struct KernelTcpOutcome {
    /// Bytes the sender was asked to move.
    pub bytes: u64,
    /// In-order bytes the receiver had read, ns from `connect`.
    pub delivery: DeliveryLog,
    /// When the receiver had read every byte, ns.
    pub completion_ns: Option<u64>,
    /// Segments the sender's kernel sent (`tcpi_segs_out`).
    pub segments_out: u64,
    /// Segments it sent again (`tcpi_total_retrans`).
    pub retransmissions: u64,
}

/// How long `connect` and `accept` may take (the SYN may be lost).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The granularity of the threads' checks of the horizon.
const POLL: Duration = Duration::from_millis(50);

/// Runs `f` on a new thread that has entered network namespace `netns`.
pub(crate) fn in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    crate::netns::spawn_in(netns, |_| {}, f)
}

/// [`in_netns`] for a stream: a failure to enter the namespace is
/// recorded in `progress`, which is marked finished.
fn stream_in_netns<T: Send + 'static>(
    netns: &str,
    progress: Arc<StreamProgress>,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    crate::netns::spawn_in(
        netns,
        move |e| {
            progress.fail(format!("{e:#}"));
            progress.finish();
        },
        f,
    )
}

pub(crate) use crate::netns::joined;

/// The sender's kernel counters (`TCP_INFO`).
fn tcp_info(s: &TcpStream) -> (u64, u64) {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return (0, 0);
    }
    (
        u64::from(info.tcpi_segs_out),
        u64::from(info.tcpi_total_retrans),
    )
}

/// Ends the connection at once (RST) so the receiver stops reading.
fn reset(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads `size_of::<linger>()` bytes from `linger`.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Starts a thread in namespace `netns` that listens on `bind`, accepts
/// one connection and reads up to `bytes` into `progress` (keeping the
/// bytes when `keep`), until the peer closes or resets, `progress` is
/// stopped, or `give_up` has passed. `ready` hears when the listener is
/// bound. Errors end up in `progress`.
pub fn spawn_receiver(
    netns: &str,
    bind: SocketAddrV4,
    bytes: usize,
    give_up: Duration,
    keep: bool,
    progress: Arc<StreamProgress>,
    ready: Option<std::sync::mpsc::Sender<()>>,
) -> std::thread::JoinHandle<Result<()>> {
    let p = progress.clone();
    stream_in_netns(netns, progress, move || {
        let run = || -> Result<()> {
            let t0 = Instant::now();
            let l = bind_reusable(bind).with_context(|| format!("binding {bind}"))?;
            if let Some(r) = ready {
                let _ = r.send(());
            }
            let mut c = loop {
                match l.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if would_block(&e) => {
                        if p.stopped() || t0.elapsed() > give_up {
                            bail!("no connection to {bind} within {give_up:?}");
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(e).context("accepting"),
                }
            };
            c.set_nonblocking(false)?;
            c.set_read_timeout(Some(POLL))?;
            let mut total = 0usize;
            let mut buf = vec![0u8; 256 * 1024];
            while total < bytes && !p.stopped() && t0.elapsed() < give_up {
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let n = n.min(bytes - total);
                        total += n;
                        p.append(&buf[..n], Instant::now(), keep);
                    }
                    Err(e) if would_block(&e) => {}
                    // The sender's reset at its horizon.
                    Err(_) => break,
                }
            }
            Ok(())
        };
        let out = run();
        if let Err(e) = &out {
            p.fail(format!("{e:#}"));
        }
        p.finish();
        out
    })
}

/// A listener that can bind again at once after an earlier stream on the
/// same port (its connection may still be in TIME_WAIT), non-blocking.
fn bind_reusable(addr: SocketAddrV4) -> std::io::Result<TcpListener> {
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // sockaddr_in is fully initialized before bind reads it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let l = <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(fd);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        if libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(fd, 4) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        l.set_nonblocking(true)?;
        Ok(l)
    }
}

/// Starts a thread in namespace `netns` that connects to `dest` (again
/// while it is refused: the receiver may not listen yet) and writes
/// `payload`, until it has all been read, `progress` is stopped or
/// `horizon` has passed since the start; then it resets the connection
/// and stores the kernel's counters in `progress`. Returns the time of the
/// first `connect`.
pub fn spawn_sender(
    netns: &str,
    dest: SocketAddrV4,
    payload: Arc<[u8]>,
    horizon: Duration,
    progress: Arc<StreamProgress>,
) -> std::thread::JoinHandle<Result<Instant>> {
    let p = progress.clone();
    stream_in_netns(netns, progress, move || {
        let t0 = Instant::now();
        let run = || -> Result<()> {
            let dest = SocketAddr::V4(dest);
            let mut s = loop {
                // A connect never outlasts the horizon (the SYN may be lost).
                let left = horizon.saturating_sub(t0.elapsed()).min(CONNECT_TIMEOUT);
                if left.is_zero() {
                    bail!("no connection to {dest} within {horizon:?}");
                }
                match TcpStream::connect_timeout(&dest, left) {
                    Ok(s) => break s,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::ConnectionRefused
                            && !p.stopped()
                            && t0.elapsed() < horizon =>
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(e).with_context(|| format!("connecting to {dest}")),
                }
            };
            s.set_write_timeout(Some(POLL))?;
            let mut sent = 0usize;
            let live = |p: &StreamProgress| !p.stopped() && t0.elapsed() < horizon;
            while sent < payload.len() && live(&p) {
                match s.write(&payload[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if would_block(&e) => {}
                    Err(e) => return Err(e).context("sending"),
                }
            }
            // Wait for the receiver to read the rest (it closes), up to the horizon.
            let _ = s.shutdown(std::net::Shutdown::Write);
            s.set_read_timeout(Some(POLL))?;
            let mut one = [0u8; 1];
            while live(&p) {
                match s.read(&mut one) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if would_block(&e) => {}
                    Err(_) => break,
                }
            }
            let (segs, retrans) = tcp_info(&s);
            p.segments_out
                .store(segs, std::sync::atomic::Ordering::Relaxed);
            p.retransmissions
                .store(retrans, std::sync::atomic::Ordering::Relaxed);
            reset(&s);
            Ok(())
        };
        let out = run();
        if let Err(e) = &out {
            p.fail(format!("{e:#}"));
        }
        p.finish();
        out.map(|_| t0)
    })
}

/// Sends `payload` from namespace `from` to `to` (an address in namespace
/// `to_netns`) over the kernel's TCP, for at most `horizon`.
pub fn transfer(
    from: &str,
    to_netns: &str,
    to: SocketAddrV4,
    payload: Arc<[u8]>,
    horizon: Duration,
) -> Result<KernelTcpOutcome> {
    let bytes = payload.len() as u64;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let give_up = horizon + Duration::from_secs(1) + CONNECT_TIMEOUT;
    let rx = StreamProgress::new();
    let receiver = spawn_receiver(
        to_netns,
        to,
        payload.len(),
        give_up,
        false,
        rx.clone(),
        Some(ready_tx),
    );
    if ready_rx.recv_timeout(CONNECT_TIMEOUT).is_err() {
        joined(receiver, "receiver")?;
        bail!("the receiver did not start");
    }
    let tx = StreamProgress::new();
    let sender = spawn_sender(from, to, payload, horizon, tx.clone());
    let sent = joined(sender, "sender");
    let received = joined(receiver, "receiver");
    let t0 = sent?;
    received?;
    let mut delivery = DeliveryLog::default();
    for (t, total) in rx.log() {
        delivery.record(t.saturating_duration_since(t0).as_nanos() as u64, total);
    }
    let completion_ns = delivery.time_of(bytes).filter(|_| bytes > 0);
    use std::sync::atomic::Ordering::Relaxed;
    Ok(KernelTcpOutcome {
        bytes,
        delivery,
        completion_ns,
        segments_out: tx.segments_out.load(Relaxed),
        retransmissions: tx.retransmissions.load(Relaxed),
    })
}

/// Attached devices' MTU for [`over_attached_link`]: the IP MTU of the
/// virtual-time baselines ([`edgemu_handoff::reliable::IP_MTU`]), so every
/// scheme sees the same per-packet budget.
pub const KERNEL_TCP_MTU: u16 = edgemu_handoff::reliable::IP_MTU as u16;

/// `payload` over the kernel's TCP through a pair of attach points joined
/// by a link with `forward` (data) and `reverse` (ACK) parameters; the
/// forward direction's random draws are seeded by `forward_seed`, as the
/// co-simulation harness seeds its forward link, so the i-th packet offered
/// to it meets the same loss draw as in a virtual-time run of that seed.
pub fn over_attached_link(
    forward: &edgemu_links::LinkParams,
    reverse: &edgemu_links::LinkParams,
    forward_seed: u64,
    payload: Arc<[u8]>,
    horizon: Duration,
) -> Result<KernelTcpOutcome> {
    use super::pair::{with_attached_pair, PairSpec, B_ADDR};
    let spec = PairSpec {
        link_toml: String::new(),
        seed: forward_seed,
        mtu: Some(KERNEL_TCP_MTU),
    };
    with_attached_pair(
        &spec,
        |c| {
            if let Some(l) = c.links.first_mut() {
                l.ab = forward.clone();
                l.ba = reverse.clone();
                l.seeds = [Some(forward_seed), None];
            }
        },
        |p| {
            transfer(
                &p.a,
                &p.b,
                SocketAddrV4::new(B_ADDR, 5301),
                payload,
                horizon,
            )
        },
    )
}

/// The `tcp-kernel` handoffs of one agent (the scheme's `via` joins two
/// attach points: its `a` end on the sender's host, its `b` end on the
/// receiver's): where its own streams leave from, and where it receives.
#[derive(Debug, Default)]
pub struct AgentStreams {
    /// Per receiving agent: this agent's attach point's namespace and the
    /// receiver's attach point's address.
    send_from: std::collections::BTreeMap<ActorId, (String, std::net::Ipv4Addr)>,
    /// Per sending agent: this agent's attach point's namespace and address.
    receive_at: std::collections::BTreeMap<ActorId, (String, std::net::Ipv4Addr)>,
}

impl AgentStreams {
    /// Agent `me`'s streams in `cluster`, if it sends or receives any.
    pub fn for_agent(cluster: &edgemu_config::Cluster, me: ActorId) -> Option<AgentStreams> {
        use edgemu_config::agent::KERNEL_TCP_SCHEME;
        use edgemu_config::ActorKind;
        let attach = |id: ActorId| match &cluster.actor(id).kind {
            ActorKind::Attach(s) => Some((s.netns.clone(), s.address)),
            _ => None,
        };
        let mut out = AgentStreams::default();
        for a in &cluster.actors {
            let ActorKind::Agent(spec) = &a.kind else {
                continue;
            };
            let Some(task) = spec
                .handoff
                .as_ref()
                .filter(|t| t.scheme == KERNEL_TCP_SCHEME)
            else {
                continue;
            };
            let Some(l) = cluster.links.get(task.via.0 as usize) else {
                continue;
            };
            let (Some((ns_a, _)), Some((ns_b, addr_b))) = (attach(l.a), attach(l.b)) else {
                continue;
            };
            if a.id == me {
                out.send_from.insert(task.to, (ns_a, addr_b));
            } else if task.to == me {
                out.receive_at.insert(a.id, (ns_b, addr_b));
            }
        }
        (!out.send_from.is_empty() || !out.receive_at.is_empty()).then_some(out)
    }
}

impl KernelStreams for AgentStreams {
    fn send(
        &self,
        to: ActorId,
        port: u16,
        payload: Arc<[u8]>,
        horizon: Duration,
    ) -> Arc<StreamProgress> {
        let Some((netns, addr)) = self.send_from.get(&to) else {
            return StreamProgress::failed("no tcp-kernel attach point towards this receiver");
        };
        let progress = StreamProgress::new();
        // Detached: the thread ends by itself at the horizon at the latest.
        let _ = spawn_sender(
            netns,
            SocketAddrV4::new(*addr, port),
            payload,
            horizon,
            progress.clone(),
        );
        progress
    }

    fn receive(
        &self,
        from: ActorId,
        port: u16,
        bytes: usize,
        give_up: Duration,
    ) -> Arc<StreamProgress> {
        let Some((netns, addr)) = self.receive_at.get(&from) else {
            return StreamProgress::failed("no tcp-kernel attach point from this sender");
        };
        let progress = StreamProgress::new();
        let _ = spawn_receiver(
            netns,
            SocketAddrV4::new(*addr, port),
            bytes,
            give_up,
            true,
            progress.clone(),
            None,
        );
        progress
    }
}
