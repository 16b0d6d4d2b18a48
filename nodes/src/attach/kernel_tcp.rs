//! The kernel's own TCP between two network namespaces: a sender thread
//! that has entered one namespace writes a byte stream to a receiver
//! thread in the other, which logs how many bytes it has read in order,
//! and when. With the namespaces joined by an attached link
//! ([`super::pair`]), this is Linux's TCP (CUBIC, SACK, RACK-TLP, its
//! own buffers and pacing, as the host's sysctls configure it) over the
//! link model, the reliable baseline the PriorityFEC experiment sets
//! beside smoltcp's.
//!
//! Times are ns from the moment the sender calls `connect` (its SYN),
//! as for the virtual-time baselines; both threads read one monotonic
//! clock. Every wait has a timeout: the transfer ends when every byte has
//! been read, or at the horizon (the sender then resets the connection),
//! and the receiver gives up a second after the horizon.

use anyhow::{bail, Context as _, Result};
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
    let path = std::path::Path::new("/run/netns").join(netns);
    std::thread::spawn(move || {
        let ns =
            std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: setns on a valid namespace file descriptor changes only
        // this thread's network namespace.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("entering {} (root is needed)", path.display()));
        }
        f()
    })
}

pub(crate) fn joined<T>(h: std::thread::JoinHandle<Result<T>>, what: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("the {what} thread panicked"))?
}

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
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let give_up = horizon + Duration::from_secs(1) + CONNECT_TIMEOUT;
    let receiver = in_netns(to_netns, move || -> Result<Vec<(Instant, u64)>> {
        let l = TcpListener::bind(to).with_context(|| format!("binding {to}"))?;
        let _ = port_tx.send(l.local_addr()?.port());
        l.set_nonblocking(true)?;
        let t0 = Instant::now();
        let mut c = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if t0.elapsed() > CONNECT_TIMEOUT {
                        bail!("no connection to {to} within {CONNECT_TIMEOUT:?}");
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e).context("accepting"),
            }
        };
        c.set_nonblocking(false)?;
        c.set_read_timeout(Some(POLL))?;
        let mut log = Vec::new();
        let mut total = 0u64;
        let mut buf = vec![0u8; 256 * 1024];
        while total < bytes && t0.elapsed() < give_up {
            match c.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n as u64;
                    log.push((Instant::now(), total));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // The sender's reset at the horizon.
                Err(_) => break,
            }
        }
        Ok(log)
    });
    let port = match port_rx.recv_timeout(CONNECT_TIMEOUT) {
        Ok(p) => p,
        Err(_) => {
            joined(receiver, "receiver")?;
            bail!("the receiver did not start");
        }
    };
    let dest = SocketAddr::V4(SocketAddrV4::new(*to.ip(), port));
    let sender = in_netns(from, move || -> Result<(Instant, u64, u64)> {
        let t0 = Instant::now();
        let mut s = TcpStream::connect_timeout(&dest, CONNECT_TIMEOUT)
            .with_context(|| format!("connecting to {dest}"))?;
        s.set_write_timeout(Some(POLL))?;
        let mut sent = 0usize;
        while sent < payload.len() && t0.elapsed() < horizon {
            match s.write(&payload[sent..]) {
                Ok(n) => sent += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e).context("sending"),
            }
        }
        // Wait for the receiver to read the rest, up to the horizon.
        let _ = s.shutdown(std::net::Shutdown::Write);
        s.set_read_timeout(Some(POLL))?;
        let mut one = [0u8; 1];
        while t0.elapsed() < horizon {
            match s.read(&mut one) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let (segs, retrans) = tcp_info(&s);
        reset(&s);
        Ok((t0, segs, retrans))
    });
    let sent = joined(sender, "sender");
    let log = joined(receiver, "receiver")?;
    let (t0, segments_out, retransmissions) = sent?;
    let mut delivery = DeliveryLog::default();
    for (t, total) in log {
        delivery.record(t.saturating_duration_since(t0).as_nanos() as u64, total);
    }
    let completion_ns = delivery.time_of(bytes).filter(|_| bytes > 0);
    Ok(KernelTcpOutcome {
        bytes,
        delivery,
        completion_ns,
        segments_out,
        retransmissions,
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
