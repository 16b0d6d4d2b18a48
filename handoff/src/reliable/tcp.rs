//! TCP over the link model: two `smoltcp` interfaces (sender 10.0.0.1,
//! receiver 10.0.0.2), each on a [`LinkPort`] device whose transmit offers
//! IP packets to our [`LinkModel`](edgemu_links::LinkModel) and whose
//! receive is fed from it, driven on our clock (smoltcp's clock is in
//! microseconds: our ns time floored).
//!
//! Configuration, and why:
//! - Congestion control: smoltcp's **CUBIC** (feature `socket-tcp-cubic`,
//!   RFC 9438 since smoltcp 0.14); loss recovery is smoltcp's: fast
//!   retransmit on three duplicate ACKs, RTO per RFC 6298 (1 s minimum,
//!   exponential backoff). The receiver sends SACK blocks, but smoltcp's
//!   sender does not use them (no SACK-based recovery, no RACK), and its
//!   1-s minimum RTO is far above Linux's 200 ms: under bursty loss this
//!   TCP recovers more slowly than a Linux sender would. Delayed ACKs are
//!   smoltcp's default (10 ms, immediate on every second segment and on
//!   out-of-order data). Nagle is off so the last partial segment is not
//!   held for an RTT. The connection aborts (an error) after
//!   ≈ 924.6 s without hearing from the peer, Linux's default.
//! - Sizes: IP MTU 1428 B (the same per-packet budget as QUIC and the
//!   1400-B PriorityFEC frames), so MSS = 1428 − 40 = 1388 B (no TCP
//!   timestamps). Socket buffers [`TCP_RX_BUFFER`] = [`TCP_TX_BUFFER`] =
//!   1 MiB, four times the 250-kB bandwidth-delay product of 100 Mb/s ×
//!   20 ms, so the advertised window (scaled, shift 5) never limits a
//!   CUBIC window that fits the path, and out-of-order data survives a
//!   loss burst; the receiver reassembles up to 32 out-of-order ranges
//!   (feature `assembler-max-segment-count-32`; smoltcp's default is 4).
//! - Randomness: each interface's seed (initial sequence numbers) comes
//!   from the run's seed; smoltcp has no other randomness.

use super::clock::{smoltcp_instant, smoltcp_ns};
use super::path::{min_opt, outcome, Path, RunEnd, SpinGuard};
use super::pattern::{self, Pattern};
use super::{
    seeds, DeliveryLog, ReliableError, ReliableOutcome, ReliableProtocol, ReliableRun, IP_MTU,
};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address, Ipv4Packet, TcpPacket};
use std::collections::VecDeque;

const PROTOCOL: &str = "TCP";
/// Receive buffer of each socket, bytes.
pub const TCP_RX_BUFFER: usize = 1 << 20;
/// Send buffer of each socket, bytes.
pub const TCP_TX_BUFFER: usize = 1 << 20;
const CLIENT_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
const CLIENT_PORT: u16 = 49_152;
const SERVER_PORT: u16 = 4_433;
/// A connection that has heard nothing from its peer for this long aborts:
/// Linux's default (`tcp_retries2` = 15 with a 200-ms RTO floor, ≈ 924.6 s).
/// Without it a dead link would keep the sender retrying forever.
const TCP_USER_TIMEOUT_MS: u64 = 924_600;
/// Bytes handed to the send buffer per call.
const WRITE_CHUNK: usize = 64 * 1024;

/// A network device whose wire is one direction of our link model each way:
/// `outbox` collects what the stack transmits, `inbox` holds what the link
/// delivered.
#[derive(Default)]
struct LinkPort {
    outbox: Vec<Vec<u8>>,
    inbox: VecDeque<Vec<u8>>,
}

struct PortRx(Vec<u8>);

impl phy::RxToken for PortRx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

struct PortTx<'a>(&'a mut Vec<Vec<u8>>);

impl phy::TxToken for PortTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0; len];
        let r = f(&mut packet);
        self.0.push(packet);
        r
    }
}

impl Device for LinkPort {
    type RxToken<'a> = PortRx;
    type TxToken<'a> = PortTx<'a>;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let packet = self.inbox.pop_front()?;
        Some((PortRx(packet), PortTx(&mut self.outbox)))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(PortTx(&mut self.outbox))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = IP_MTU;
        // Our link never corrupts bytes: skip checksum work both ways.
        caps.checksum = ChecksumCapabilities::ignored();
        caps
    }
}

/// One TCP endpoint: interface, device and its one socket.
struct Host {
    iface: Interface,
    port: LinkPort,
    sockets: SocketSet<'static>,
    socket: SocketHandle,
}

impl Host {
    fn new(ip: Ipv4Address, seed: u64) -> Self {
        let mut port = LinkPort::default();
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = seed;
        let mut iface = Interface::new(config, &mut port, smoltcp_instant(0));
        iface.update_ip_addrs(|addrs| {
            // Capacity is at least one address; the vector starts empty.
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(ip), 24));
        });
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; TCP_RX_BUFFER]),
            tcp::SocketBuffer::new(vec![0; TCP_TX_BUFFER]),
        );
        socket.set_congestion_control(tcp::CongestionControl::Cubic);
        socket.set_nagle_enabled(false);
        socket.set_timeout(Some(smoltcp::time::Duration::from_millis(
            TCP_USER_TIMEOUT_MS,
        )));
        let mut sockets = SocketSet::new(Vec::new());
        let socket = sockets.add(socket);
        Host {
            iface,
            port,
            sockets,
            socket,
        }
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.socket)
    }

    fn poll(&mut self, now: u64) {
        let _ = self
            .iface
            .poll(smoltcp_instant(now), &mut self.port, &mut self.sockets);
    }

    fn poll_at(&mut self, now: u64) -> Option<u64> {
        self.iface
            .poll_at(smoltcp_instant(now), &self.sockets)
            .map(smoltcp_ns)
    }
}

/// Counts data segments whose sequence range was sent before.
#[derive(Default)]
struct RetransmitCounter {
    /// One past the highest sequence number sent with data.
    snd_max: Option<i32>,
    retransmissions: u64,
}

impl RetransmitCounter {
    fn observe(&mut self, ip_packet: &[u8]) {
        let Ok(ip) = Ipv4Packet::new_checked(ip_packet) else {
            return;
        };
        let Ok(seg) = TcpPacket::new_checked(ip.payload()) else {
            return;
        };
        let len = seg.payload().len();
        if len == 0 {
            return;
        }
        let start = seg.seq_number().0;
        let end = start.wrapping_add(len as i32);
        match self.snd_max {
            Some(max) if max.wrapping_sub(start) > 0 => {
                self.retransmissions += 1;
                if end.wrapping_sub(max) > 0 {
                    self.snd_max = Some(end);
                }
            }
            _ => self.snd_max = Some(end),
        }
    }
}

fn connect_err(what: impl ToString) -> ReliableError {
    ReliableError::Connect {
        protocol: PROTOCOL,
        what: what.to_string(),
    }
}

/// Sends `run.bytes` over TCP and records in-order delivery (module docs).
pub fn run_tcp(run: &ReliableRun) -> Result<ReliableOutcome, ReliableError> {
    let mut client = Host::new(CLIENT_IP, seeds::derive(run.seed, seeds::CLIENT));
    let mut server = Host::new(SERVER_IP, seeds::derive(run.seed, seeds::SERVER));
    server.socket().listen(SERVER_PORT).map_err(connect_err)?;
    {
        let Host {
            iface,
            sockets,
            socket,
            ..
        } = &mut client;
        sockets
            .get_mut::<tcp::Socket>(*socket)
            .connect(
                iface.context(),
                (IpAddress::Ipv4(SERVER_IP), SERVER_PORT),
                CLIENT_PORT,
            )
            .map_err(connect_err)?;
    }

    let mut path = Path::new(run);
    let stop_ns = run.stop_ns();
    let pattern = Pattern::new(WRITE_CHUNK);
    let mut retx = RetransmitCounter::default();
    let mut written: u64 = 0;
    let mut read: u64 = 0;
    let mut delivery = DeliveryLog::default();
    let mut completion_ns = None;
    let mut guard = SpinGuard::new(PROTOCOL, run.bytes);
    let mut now: u64 = 0;

    loop {
        while let Some(a) = path.forward.poll(now) {
            server.port.inbox.push_back(a.packet);
        }
        while let Some(a) = path.reverse.poll(now) {
            client.port.inbox.push_back(a.packet);
        }

        // Sender application fills the send buffer, the stacks run, the
        // receiver application drains (which opens the window), and the
        // receiver's stack runs again to advertise it.
        write(&mut client, &pattern, run.bytes, &mut written);
        client.poll(now);
        write(&mut client, &pattern, run.bytes, &mut written);
        server.poll(now);
        let socket = server.socket();
        if let Err(offset) = drain(socket, &mut read) {
            return Err(ReliableError::Corrupt {
                protocol: PROTOCOL,
                offset,
            });
        }
        if server.socket().state() != tcp::State::Listen {
            delivery.record(now, read);
        }
        server.poll(now);
        if read >= run.bytes {
            completion_ns = Some(now);
            break;
        }
        if client.socket().state() == tcp::State::Closed {
            return Err(ReliableError::ConnectionLost {
                protocol: PROTOCOL,
                at_ns: now,
                what: "sender socket closed".into(),
            });
        }

        for packet in client.port.outbox.drain(..) {
            retx.observe(&packet);
            let size = u32::try_from(packet.len()).unwrap_or(u32::MAX);
            let _ = path.forward.offer(now, size, packet);
        }
        for packet in server.port.outbox.drain(..) {
            let size = u32::try_from(packet.len()).unwrap_or(u32::MAX);
            let _ = path.reverse.offer(now, size, packet);
        }

        let timers = min_opt(client.poll_at(now), server.poll_at(now));
        match guard.next_instant(now, timers, &path, stop_ns, read)? {
            Some(next) => now = next,
            None => {
                now = stop_ns;
                break;
            }
        }
    }

    Ok(outcome(
        run,
        &path,
        RunEnd {
            protocol: ReliableProtocol::Tcp,
            completion_ns,
            retransmissions: retx.retransmissions,
            end_ns: now,
            delivery,
        },
    ))
}

/// Fills the sender's socket buffer with the next stream bytes.
fn write(host: &mut Host, pattern: &Pattern, bytes: u64, written: &mut u64) {
    let socket = host.socket();
    while *written < bytes && socket.can_send() {
        let chunk = pattern.slice(*written, bytes - *written);
        match socket.send_slice(chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => *written += n as u64,
        }
    }
}

/// Reads everything in order from the receiver's socket, checking the
/// bytes; Err(offset) at the first wrong byte.
fn drain(socket: &mut tcp::Socket<'static>, read: &mut u64) -> Result<(), u64> {
    while socket.can_recv() {
        let at = *read;
        let ok = socket
            .recv(|data| (data.len(), (data.len(), pattern::matches(at, data))))
            .unwrap_or((0, true));
        if !ok.1 {
            return Err(at);
        }
        if ok.0 == 0 {
            break;
        }
        *read += ok.0 as u64;
    }
    Ok(())
}
