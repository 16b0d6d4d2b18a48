//! Attach points (`kind = "attach"`): unmodified programs on the emulated
//! network. Each attach point creates a network namespace and, inside it, a
//! TUN device (`edgemu0`, the file's address, up, with loopback up). Every
//! IP packet the namespace routes out of the device is read by a thread of
//! the attach point's own, handed to its actor, and sent as an
//! `Msg::IpPacket` to the attach point `to` over the link `via`, whose
//! link actor applies rate, delay, jitter, queue, loss and chaos, as for
//! any packet, from the time the packet was read (so the hand-off between
//! threads is not added to its delay); the far attach point writes it into
//! its device, and its namespace's kernel takes it from there. So `ping`, `curl`, `iperf3` or
//! the kernel's TCP run inside the namespaces (`ip netns exec NAME …`)
//! and see the link.
//!
//! The TUN device comes from the `tun-rs` crate (kept up to date, Linux
//! offloads, a synchronous API that needs no runtime of its own). The
//! namespace is made with `ip netns add` and removed with `ip netns del`
//! when the host's run ends (also after Ctrl-C); a namespace of that name
//! that already exists is an error, never reused. Root is needed.

pub mod kernel_tcp;
pub mod pair;

use actix::prelude::*;
use anyhow::{Context as _, Result};
use edgemu_actors::clock::Clock;
use edgemu_actors::link_actor::{LinkActor, OfferAt};
use edgemu_actors::messages::{Deliver, Route};
use edgemu_actors::router::InboundGate;
use edgemu_codec::ids::{ActorId, LinkId};
use edgemu_config::attach::AttachSpec;
use edgemu_protocol::{Envelope, Msg};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tun_rs::{DeviceBuilder, SyncDevice};

/// The device's name inside its namespace.
pub const DEVICE: &str = "edgemu0";

/// Packets read from the device per message to the actor, at most.
const READ_BATCH: usize = 64;
/// Packets read and not yet taken by the actor, at most: past this the
/// reader drops what it reads (counted), as a NIC drops when its ring is
/// full, instead of growing the actor's mailbox without limit.
const READ_BACKLOG: usize = 4096;

/// Builds the TUN device inside namespace `netns` (a short-lived thread
/// enters it: a thread's namespace is its own). The file opened is
/// `/run/netns/<netns>`, whose name the config checked (letters, digits,
/// `-`, `_`, `.`; no `/`), at start, on that thread, never an actor's.
fn device_in(netns: &str, spec: &AttachSpec) -> Result<SyncDevice> {
    let (addr, prefix, mtu) = (spec.address, spec.prefix, spec.mtu);
    crate::netns::run_in(netns, move || -> Result<SyncDevice> {
        let dev = DeviceBuilder::new()
            .name(DEVICE)
            .ipv4(addr, prefix, None)
            .mtu(mtu)
            .enable(true)
            .build_sync()
            .context("creating the TUN device (/dev/net/tun; root is needed)")?;
        dev.set_nonblocking(true)
            .context("making the TUN device non-blocking")?;
        Ok(dev)
    })
}

/// Counters of one attach point.
#[derive(Debug)]
pub struct AttachCounters {
    pub read_packets: AtomicU64,
    pub written_packets: AtomicU64,
    /// Packets the device would not take (its queue full) or that failed.
    pub write_dropped: AtomicU64,
    /// Packets read and not yet taken by the actor; its drops are the
    /// packets read while the actor was [`READ_BACKLOG`] behind.
    pub backlog: InboundGate,
}

impl Default for AttachCounters {
    fn default() -> Self {
        AttachCounters {
            read_packets: AtomicU64::new(0),
            written_packets: AtomicU64::new(0),
            write_dropped: AtomicU64::new(0),
            backlog: InboundGate::new(READ_BACKLOG),
        }
    }
}

/// Packets read from the device, to send, each with the run time it was
/// read at.
#[derive(Message)]
#[rtype(result = "()")]
struct Outbound(Vec<(u64, Vec<u8>)>);

/// The attach point's actor: device → link, link → device.
pub struct AttachActor {
    id: ActorId,
    to: ActorId,
    via: Option<LinkId>,
    /// The actor of link `via` in the direction leaving this attach point
    /// (on this host, as the sender's links are).
    link: Option<Addr<LinkActor>>,
    dev: Arc<SyncDevice>,
    router: Recipient<Route>,
    counters: Arc<AttachCounters>,
}

impl Actor for AttachActor {
    type Context = Context<Self>;
}

impl Handler<Outbound> for AttachActor {
    type Result = ();
    fn handle(&mut self, m: Outbound, _: &mut Context<Self>) {
        self.counters.backlog.done_many(m.0.len());
        for (read_ns, p) in m.0 {
            let envelope = Envelope {
                src: self.id,
                dst: self.to,
                via: self.via,
                sent_at_ns: read_ns,
                due_ns: None,
                payload: Msg::IpPacket(p),
            };
            match &self.link {
                // Offered at the time it was read, so the hand-off from the
                // reader thread to this one adds nothing to its delay.
                Some(link) => link.do_send(OfferAt {
                    envelope,
                    at_ns: read_ns,
                }),
                None => self.router.do_send(Route(envelope)),
            }
        }
    }
}

impl Handler<Deliver> for AttachActor {
    type Result = ();
    fn handle(&mut self, m: Deliver, _: &mut Context<Self>) {
        let Msg::IpPacket(p) = m.envelope.payload else {
            return;
        };
        match self.dev.send(&p) {
            Ok(_) => self
                .counters
                .written_packets
                .fetch_add(1, Ordering::Relaxed),
            // A full device queue drops, as a NIC's would.
            Err(_) => self.counters.write_dropped.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// What the host keeps of an attach point to close it at the end.
pub struct AttachGuard {
    stop: Arc<AtomicBool>,
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
    netns: Mutex<Option<crate::netns::Netns>>,
    pub name: String,
    pub counters: Arc<AttachCounters>,
}

impl AttachGuard {
    /// Stops the reader and removes the namespace (with its device).
    pub fn close(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.reader.lock().ok().and_then(|mut r| r.take()) {
            let _ = t.join();
        }
        if let Some(ns) = self.netns.lock().ok().and_then(|mut ns| ns.take()) {
            let c = &self.counters;
            tracing::info!(
                attach = %self.name,
                netns = %ns.name(),
                read = c.read_packets.load(Ordering::Relaxed),
                read_dropped = c.backlog.dropped(),
                written = c.written_packets.load(Ordering::Relaxed),
                write_dropped = c.write_dropped.load(Ordering::Relaxed),
                "attach point closed (packets read from and written to its device)"
            );
        }
    }
}

impl Drop for AttachGuard {
    fn drop(&mut self) {
        self.close();
    }
}

/// Creates attach point `name`'s namespace and device and starts its actor
/// and reader thread.
pub fn spawn(
    id: ActorId,
    name: &str,
    spec: &AttachSpec,
    clock: Clock,
    router: Recipient<Route>,
    link: Option<Addr<LinkActor>>,
) -> Result<(Recipient<Deliver>, AttachGuard)> {
    let ns = crate::netns::Netns::create(&spec.netns)
        .with_context(|| format!("attach point {name:?}"))?;
    let dev =
        Arc::new(device_in(&spec.netns, spec).with_context(|| format!("attach point {name:?}"))?);
    let counters = Arc::new(AttachCounters::default());
    let addr = AttachActor {
        id,
        to: spec.route.to,
        via: spec.route.via,
        link,
        dev: dev.clone(),
        router,
        counters: counters.clone(),
    }
    .start();
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, counters2, out) = (stop.clone(), counters.clone(), addr.clone().recipient());
    let mtu = usize::from(spec.mtu);
    let reader = std::thread::Builder::new()
        .name(format!("attach-{name}"))
        .spawn(move || read_loop(&dev, &stop2, &counters2, &out, mtu, clock))
        .context("starting the attach reader thread")?;
    tracing::info!(attach = %name, netns = %spec.netns, address = %spec.address, "attach point up: run programs with `ip netns exec {} …`", spec.netns);
    Ok((
        addr.recipient(),
        AttachGuard {
            stop,
            reader: Mutex::new(Some(reader)),
            netns: Mutex::new(Some(ns)),
            name: name.to_string(),
            counters,
        },
    ))
}

/// Reads the device until stopped: waits (at most 100 ms at a time, to see
/// the stop flag) for packets, then takes every packet that is ready, up to
/// [`READ_BATCH`], and hands them to the actor in one message.
fn read_loop(
    dev: &SyncDevice,
    stop: &AtomicBool,
    counters: &AttachCounters,
    out: &Recipient<Outbound>,
    mtu: usize,
    clock: Clock,
) {
    let fd = dev.as_raw_fd();
    let mut buf = vec![0u8; mtu.max(1500) + 64];
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the device's open descriptor.
        let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
        if ready <= 0 {
            continue;
        }
        let mut batch = Vec::new();
        while batch.len() < READ_BATCH {
            match dev.recv(&mut buf) {
                Ok(n) if n > 0 => batch.push((clock.now_ns(), buf[..n].to_vec())),
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the TUN device");
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
        if !batch.is_empty() {
            counters
                .read_packets
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            batch.truncate(counters.backlog.admit_many(batch.len()));
            if !batch.is_empty() {
                out.do_send(Outbound(batch));
            }
        }
    }
}
