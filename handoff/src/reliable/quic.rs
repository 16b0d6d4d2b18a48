//! QUIC over the link model: a `quinn-proto` client endpoint sends the
//! stream on one unidirectional QUIC stream to a server endpoint, both
//! driven on our clock in one event loop (quinn-proto's own test `Pair`
//! pattern, with our [`LinkModel`](edgemu_links::LinkModel) in between).
//!
//! Configuration, and why:
//! - Congestion control: quinn-proto's default, **CUBIC** (RFC 9438), with
//!   its pacer; loss recovery is quinn's RFC 9002 (ACK-based packet- and
//!   time-threshold detection, PTO probes), untouched.
//! - Datagrams: a fixed 1400-B UDP payload (`initial_mtu` = `min_mtu` =
//!   1400, MTU discovery off), the size of a PriorityFEC frame; the link is
//!   charged 28 B more per datagram (IPv4 + UDP). No GSO (one datagram per
//!   transmit).
//! - Flow control: quinn's defaults (1.25 MB stream receive window, 10 MB
//!   send window), well above the 250-kB bandwidth-delay product of the
//!   paper's 100 Mb/s × 20 ms link.
//! - TLS 1.3 through rustls on ring (no aws-lc-rs: no C toolchain build);
//!   the server's certificate is a self-signed Ed25519 one made in-process
//!   by rcgen with a fixed serial, so every handshake packet has the same
//!   size on every run (ECDSA signatures vary in length) and the run is
//!   reproducible by seed even though key material is fresh each time.
//! - Randomness: both endpoints' RNGs (packet-number skipping, CIDs' count)
//!   are seeded from the run's seed. Connection-ID bytes and TLS keys come
//!   from system randomness but never change a packet's size or timing.

use super::clock::QuicClock;
use super::path::{min_opt, outcome, Path, RunEnd, SpinGuard};
use super::pattern::{self, Pattern};
use super::{
    seeds, DeliveryLog, ReliableError, ReliableOutcome, ReliableProtocol, ReliableRun,
    IPV4_UDP_HEADER, IP_MTU,
};
use bytes::BytesMut;
use quinn_proto::congestion::CubicConfig;
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ServerConfig, StreamId, TransportConfig,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::RootCertStore;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

const PROTOCOL: &str = "QUIC";
const CLIENT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 50_000);
const SERVER_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4_433);
const SERVER_NAME: &str = "localhost";
/// UDP payload of every QUIC datagram.
const UDP_PAYLOAD: u16 = (IP_MTU - IPV4_UDP_HEADER) as u16;
/// Bytes handed to the send stream per write call.
const WRITE_CHUNK: usize = 64 * 1024;

fn tls_err(what: impl ToString) -> ReliableError {
    ReliableError::Tls {
        protocol: PROTOCOL,
        what: what.to_string(),
    }
}

fn transport_config() -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    t.initial_mtu(UDP_PAYLOAD)
        .min_mtu(UDP_PAYLOAD)
        .mtu_discovery_config(None)
        .enable_segmentation_offload(false)
        .congestion_controller_factory(Arc::new(CubicConfig::default()));
    Arc::new(t)
}

/// Client and server configurations sharing one fresh self-signed cert.
fn configs() -> Result<(ClientConfig, ServerConfig), ReliableError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(tls_err)?;
    let mut params =
        rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()]).map_err(tls_err)?;
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    let cert = params.self_signed(&key).map_err(tls_err)?;
    let cert_der: CertificateDer<'static> = cert.der().clone();
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));

    let mut roots = RootCertStore::empty();
    roots.add(cert_der.clone()).map_err(tls_err)?;
    let mut client = ClientConfig::with_root_certificates(Arc::new(roots)).map_err(tls_err)?;
    client.transport_config(transport_config());
    let mut server = ServerConfig::with_single_cert(vec![cert_der], key_der).map_err(tls_err)?;
    server.transport_config(transport_config());
    Ok((client, server))
}

fn endpoint(seed: u64, stream: u64, server: Option<ServerConfig>) -> Endpoint {
    let mut cfg = EndpointConfig::default();
    cfg.rng_seed(Some(seeds::derive_32(seed, stream)));
    Endpoint::new(Arc::new(cfg), server.map(Arc::new), false, None)
}

/// Hands a connection's endpoint events to its endpoint and back.
fn exchange_endpoint_events(ep: &mut Endpoint, ch: ConnectionHandle, conn: &mut Connection) {
    while let Some(ev) = conn.poll_endpoint_events() {
        if let Some(back) = ep.handle_event(ch, ev) {
            conn.handle_event(back);
        }
    }
}

/// Offers every datagram the connection wants to send now to `link`.
fn flush(
    conn: &mut Connection,
    clock: &QuicClock,
    now: u64,
    buf: &mut Vec<u8>,
    link: &mut edgemu_links::LinkModel<Vec<u8>>,
) {
    while let Some(t) = conn.poll_transmit(clock.instant(now), 1, buf) {
        let size = t.size.min(buf.len());
        let wire = u32::try_from(size + IPV4_UDP_HEADER).unwrap_or(u32::MAX);
        let _ = link.offer(now, wire, buf[..size].to_vec());
        buf.clear();
    }
}

fn lost(at_ns: u64, what: impl ToString) -> ReliableError {
    ReliableError::ConnectionLost {
        protocol: PROTOCOL,
        at_ns,
        what: what.to_string(),
    }
}

/// Sends `run.bytes` over QUIC and records in-order delivery (module docs).
pub fn run_quic(run: &ReliableRun) -> Result<ReliableOutcome, ReliableError> {
    let clock = QuicClock::new();
    let (client_cfg, server_cfg) = configs()?;
    let mut client_ep = endpoint(run.seed, seeds::CLIENT, None);
    let mut server_ep = endpoint(run.seed, seeds::SERVER, Some(server_cfg));
    let mut path = Path::new(run);
    let stop_ns = run.stop_ns();
    let pattern = Pattern::new(WRITE_CHUNK);
    let mut buf = Vec::with_capacity(usize::from(UDP_PAYLOAD));

    let (client_ch, mut client) = client_ep
        .connect(clock.instant(0), client_cfg, SERVER_ADDR, SERVER_NAME)
        .map_err(|e| ReliableError::Connect {
            protocol: PROTOCOL,
            what: e.to_string(),
        })?;
    let mut server: Option<(ConnectionHandle, Connection)> = None;
    let mut send_stream: Option<StreamId> = None;
    let mut recv_stream: Option<StreamId> = None;
    let mut written: u64 = 0;
    let mut finished = false;
    let mut read: u64 = 0;
    let mut delivery = DeliveryLog::default();
    let mut completion_ns = None;
    let mut guard = SpinGuard::new(PROTOCOL, run.bytes);
    let mut now: u64 = 0;

    loop {
        // Arrivals.
        while let Some(a) = path.forward.poll(now) {
            let data = BytesMut::from(&a.packet[..]);
            match server_ep.handle(clock.instant(now), CLIENT_ADDR, None, None, data, &mut buf) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    if server.is_some() {
                        server_ep.ignore(incoming);
                    } else {
                        match server_ep.accept(incoming, clock.instant(now), &mut buf, None) {
                            Ok(pair) => server = Some(pair),
                            Err(e) => return Err(lost(now, e.cause)),
                        }
                    }
                }
                Some(DatagramEvent::ConnectionEvent(_, ev)) => {
                    if let Some((_, conn)) = server.as_mut() {
                        conn.handle_event(ev);
                    }
                }
                Some(DatagramEvent::Response(t)) => {
                    let size = t.size.min(buf.len());
                    let wire = u32::try_from(size + IPV4_UDP_HEADER).unwrap_or(u32::MAX);
                    let _ = path.reverse.offer(now, wire, buf[..size].to_vec());
                }
                None => {}
            }
            buf.clear();
        }
        while let Some(a) = path.reverse.poll(now) {
            let data = BytesMut::from(&a.packet[..]);
            match client_ep.handle(clock.instant(now), SERVER_ADDR, None, None, data, &mut buf) {
                Some(DatagramEvent::ConnectionEvent(_, ev)) => client.handle_event(ev),
                Some(DatagramEvent::NewConnection(incoming)) => client_ep.ignore(incoming),
                Some(DatagramEvent::Response(t)) => {
                    let size = t.size.min(buf.len());
                    let wire = u32::try_from(size + IPV4_UDP_HEADER).unwrap_or(u32::MAX);
                    let _ = path.forward.offer(now, wire, buf[..size].to_vec());
                }
                None => {}
            }
            buf.clear();
        }

        // Timers.
        if client.poll_timeout().is_some_and(|t| clock.ns(t) <= now) {
            client.handle_timeout(clock.instant(now));
        }
        if let Some((_, conn)) = server.as_mut() {
            if conn.poll_timeout().is_some_and(|t| clock.ns(t) <= now) {
                conn.handle_timeout(clock.instant(now));
            }
        }

        // Sender application.
        while let Some(ev) = client.poll() {
            if let Event::ConnectionLost { reason } = ev {
                return Err(lost(now, reason));
            }
        }
        if send_stream.is_none() && !client.is_handshaking() {
            send_stream = client.streams().open(Dir::Uni);
        }
        if let Some(id) = send_stream {
            let mut stream = client.send_stream(id);
            while written < run.bytes {
                let chunk = pattern.slice(written, run.bytes - written);
                match stream.write(chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => written += n as u64,
                }
            }
            if written == run.bytes && !finished {
                finished = stream.finish().is_ok();
            }
        }
        exchange_endpoint_events(&mut client_ep, client_ch, &mut client);

        // Receiver application.
        if let Some((ch, conn)) = server.as_mut() {
            while let Some(ev) = conn.poll() {
                if let Event::ConnectionLost { reason } = ev {
                    return Err(lost(now, reason));
                }
            }
            if recv_stream.is_none() {
                recv_stream = conn.streams().accept(Dir::Uni);
            }
            if let Some(id) = recv_stream {
                let mut stream = conn.recv_stream(id);
                if let Ok(mut chunks) = stream.read(true) {
                    while let Ok(Some(chunk)) = chunks.next(usize::MAX) {
                        if chunk.offset != read || !pattern::matches(read, &chunk.bytes) {
                            return Err(ReliableError::Corrupt {
                                protocol: PROTOCOL,
                                offset: chunk.offset,
                            });
                        }
                        read += chunk.bytes.len() as u64;
                    }
                    let _ = chunks.finalize();
                }
                delivery.record(now, read);
            }
            exchange_endpoint_events(&mut server_ep, *ch, conn);
        }
        if read >= run.bytes {
            completion_ns = Some(now);
            break;
        }

        // Departures.
        flush(&mut client, &clock, now, &mut buf, &mut path.forward);
        if let Some((_, conn)) = server.as_mut() {
            flush(conn, &clock, now, &mut buf, &mut path.reverse);
        }

        // Next event.
        let timers = min_opt(
            client.poll_timeout().map(|t| clock.ns(t)),
            server
                .as_mut()
                .and_then(|(_, c)| c.poll_timeout())
                .map(|t| clock.ns(t)),
        );
        match guard.next_instant(now, timers, &path, stop_ns, read)? {
            Some(next) => now = next,
            None => {
                now = stop_ns;
                break;
            }
        }
    }

    let retransmissions = client.stats().path.lost_packets;
    Ok(outcome(
        run,
        &path,
        RunEnd {
            protocol: ReliableProtocol::Quic,
            completion_ns,
            retransmissions,
            end_ns: now,
            delivery,
        },
    ))
}
