//! Reliable-transport baselines of the KV handoff: the whole serialized KV
//! stream (FIFO block order) sent over **real** protocol implementations,
//! sans-IO, on our exact nanosecond clock and our [`LinkModel`], one per
//! direction (forward carries data, reverse carries ACKs):
//!
//! - **QUIC** ([`run_quic`]): `quinn-proto` client and server endpoints, one
//!   unidirectional stream, quinn's default congestion control (CUBIC), its
//!   pacer and its RFC 9002 loss recovery (packet- and time-threshold loss
//!   detection, PTO). TLS 1.3 through rustls on ring with an in-process
//!   self-signed Ed25519 certificate (rcgen).
//! - **TCP** ([`run_tcp`]): two `smoltcp` interfaces, one TCP connection,
//!   smoltcp's CUBIC, its fast retransmit and RTO recovery, SACK-capable
//!   receiver with up to 32 out-of-order ranges.
//!
//! The link carries IPv4 packets: a QUIC datagram is charged its UDP payload
//! plus [`IPV4_UDP_HEADER`] bytes, a TCP segment its whole IP packet. Both
//! protocols use the same IP MTU, [`IP_MTU`] = 1428 B (a 1400-B UDP payload,
//! the size of a PriorityFEC frame), so every scheme sees the same per-packet
//! budget.
//!
//! A run records, at each time, how many bytes the receiving application has
//! read in order ([`DeliveryLog`]); the protocols' behaviour does not depend
//! on the deadline, so one long run answers every deadline of a seed.
//! [`complete_blocks`] maps a delivered prefix to complete FIFO blocks.
//!
//! What to expect (`cargo run --release -p edgemu-handoff --example
//! reliable_grid`, 35.4-MB SmolLM2 KV stream, 5 seeds): on the paper's GE
//! channel (8.4 % loss) both loss-based controllers collapse — QUIC/CUBIC
//! completes in 75–80 s (≈ 3.6 Mb/s, as 1.22·MSS/(RTT·√p) predicts) and
//! delivers 3.0 % of the bytes by the ρ = 0.8 deadline; smoltcp's TCP
//! needs hours (its 1-s minimum RTO backs off to 60 s while the per-packet
//! GE chain, which only moves when a packet is sent, stays in Bad) and
//! delivers 0.2 % (it completes in 7 400–10 000 s). Without loss, QUIC completes in 3.07 s (T_ser = 2.83 s)
//! and TCP in 8.3 s (slow start overflows the one-BDP queue; without SACK
//! recovery smoltcp falls back to a 1-s RTO and go-back-N).

mod blocks;
mod clock;
mod delivery;
mod error;
mod path;
mod pattern;
mod quic;
mod seeds;
mod tcp;

pub use blocks::complete_blocks;
pub use delivery::DeliveryLog;
pub use error::ReliableError;
pub use quic::run_quic;
pub use tcp::{run_tcp, TCP_RX_BUFFER, TCP_TX_BUFFER};

use edgemu_links::time::NS_PER_S;
#[cfg(doc)]
use edgemu_links::LinkModel;
use edgemu_links::{paper_channel, LinkParams, LossSpec};

/// IP MTU of both protocols: IPv4 packets of at most this many bytes.
pub const IP_MTU: usize = 1428;
/// IPv4 (20 B) + UDP (8 B) headers charged to the link per QUIC datagram.
pub const IPV4_UDP_HEADER: usize = 28;

/// One reliable transfer to emulate.
#[derive(Clone, Debug, PartialEq)]
pub struct ReliableRun {
    /// Bytes of application data to move (the serialized KV stream).
    pub bytes: u64,
    /// Sender → receiver direction (data).
    pub forward: LinkParams,
    /// Receiver → sender direction (ACKs, flow-control updates).
    pub reverse: LinkParams,
    /// Seeds both links' loss and jitter and the protocols' own randomness.
    pub seed: u64,
    /// The deadline `delivered_in_order_at_deadline` is read at, ns from the
    /// start of the connection (the client's first packet).
    pub deadline_ns: u64,
    /// The run stops when every byte has been read or at this time, ns;
    /// at least `deadline_ns` (a smaller value is raised to it). Set it past
    /// the deadline to learn the completion time of a late transfer.
    pub horizon_ns: u64,
}

impl ReliableRun {
    /// A run that stops at the deadline.
    pub fn new(
        bytes: u64,
        forward: LinkParams,
        reverse: LinkParams,
        seed: u64,
        deadline_ns: u64,
    ) -> Self {
        ReliableRun {
            bytes,
            forward,
            reverse,
            seed,
            deadline_ns,
            horizon_ns: deadline_ns,
        }
    }

    /// The paper's setting: GE loss on the data direction, a clean reverse
    /// direction of the same rate and delay (ACKs are few and small; the
    /// paper describes one lossy bottleneck).
    pub fn paper(bytes: u64, seed: u64, deadline_ns: u64) -> Self {
        ReliableRun::new(
            bytes,
            paper_link(paper_channel::ge_loss()),
            paper_link(LossSpec::None),
            seed,
            deadline_ns,
        )
    }

    /// The same run continued until `horizon_ns` (or completion).
    pub fn with_horizon(mut self, horizon_ns: u64) -> Self {
        self.horizon_ns = horizon_ns;
        self
    }

    fn stop_ns(&self) -> u64 {
        self.horizon_ns.max(self.deadline_ns)
    }
}

/// Drop-tail queue of the paper link: one bandwidth-delay product
/// (100 Mb/s × 20 ms = 250 kB). The paper does not give one; a BDP is the
/// classic router sizing, and the FEC schemes, which pace at the link rate,
/// never fill it.
pub const PAPER_QUEUE_BYTES: u64 = 250_000;

/// One direction of the paper's main link
/// ([`edgemu_links::paper_channel::direction`]) with `loss` and a one-BDP
/// drop-tail queue.
pub fn paper_link(loss: LossSpec) -> LinkParams {
    LinkParams {
        queue_bytes: Some(PAPER_QUEUE_BYTES),
        ..paper_channel::direction(loss)
    }
}

/// Which protocol produced an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReliableProtocol {
    Quic,
    Tcp,
}

impl ReliableProtocol {
    pub fn name(self) -> &'static str {
        match self {
            ReliableProtocol::Quic => "QUIC",
            ReliableProtocol::Tcp => "TCP",
        }
    }
}

/// What a reliable transfer achieved.
#[derive(Clone, Debug, PartialEq)]
pub struct ReliableOutcome {
    pub protocol: ReliableProtocol,
    /// Bytes the run was asked to move.
    pub bytes: u64,
    /// In-order bytes the receiving application had read at the deadline.
    pub delivered_in_order_at_deadline: u64,
    /// When the receiver had read every byte, ns (None: not by the horizon).
    pub completion_ns: Option<u64>,
    /// Packets the sender offered to the forward link (handshake included).
    pub packets_sent: u64,
    /// Packets the receiver offered to the reverse link.
    pub reverse_packets_sent: u64,
    /// Retransmissions as the protocol sees them. QUIC: packets its loss
    /// detection declared lost (their frames are resent in new packets).
    /// TCP: data segments sent again (sequence range already sent).
    pub retransmissions: u64,
    /// Forward packets the link's loss model erased.
    pub forward_lost: u64,
    /// Forward packets the link's drop-tail queue refused.
    pub forward_queue_dropped: u64,
    /// Reverse packets lost or queue-dropped.
    pub reverse_dropped: u64,
    /// Bytes charged to the forward link (IP packets).
    pub forward_bytes: u64,
    /// When the run stopped, ns.
    pub end_ns: u64,
    /// In-order bytes read by the receiving application over time.
    pub delivery: DeliveryLog,
}

impl ReliableOutcome {
    /// In-order bytes read by `t_ns`.
    pub fn delivered_at(&self, t_ns: u64) -> u64 {
        self.delivery.delivered_at(t_ns)
    }

    /// Fraction of the bytes read in order by `t_ns` (1.0 for an empty run).
    pub fn delivered_fraction_at(&self, t_ns: u64) -> f64 {
        if self.bytes == 0 {
            return 1.0;
        }
        self.delivered_at(t_ns) as f64 / self.bytes as f64
    }

    /// Application goodput to completion, bits per second.
    pub fn goodput_bps(&self) -> Option<f64> {
        let t = self.completion_ns?;
        (t > 0).then(|| self.bytes as f64 * 8.0 * NS_PER_S as f64 / t as f64)
    }
}

#[cfg(test)]
mod tests;
