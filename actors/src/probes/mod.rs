//! Probe actors: traffic sources and sinks that measure what links do.
//!
//! - [`Sender`]: constant-rate (`size` bytes every `size·8/rate`) or bursty
//!   (`burst` packets back to back every `interval`) flow of [`Probe`]s.
//! - [`Pinger`]: a [`Ping`] every `interval`; the sink answers with a
//!   [`Pong`] over the reply link, and the pinger records the round trip.
//! - [`Sink`]: records every packet's send time, model arrival time and
//!   receive time, streams them to a [`ProbeLog`], and keeps a per-flow
//!   summary (packets, bytes, sequence gaps, delay and delay-error percentiles).
//!
//! [`Probe`]: edgemu_protocol::Probe
//! [`Ping`]: edgemu_protocol::Ping
//! [`Pong`]: edgemu_protocol::Pong

mod pinger;
mod sender;
mod sink;

pub use pinger::Pinger;
pub use sender::{Sender, SenderPattern};
pub use sink::{FlowSummary, Sink};

use edgemu_codec::ids::ActorId;
use serde::Serialize;

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    /// A one-way probe packet seen by a sink.
    Packet,
    /// A ping's round trip seen by the pinger.
    Rtt,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeRecord {
    pub kind: RecordKind,
    /// The sending actor (the flow).
    pub flow: ActorId,
    /// The actor that recorded it.
    pub at: ActorId,
    pub seq: u64,
    pub size: u32,
    pub sent_ns: u64,
    /// The link model's arrival time, when a link was crossed.
    pub due_ns: Option<u64>,
    pub recv_ns: u64,
}

/// Where probe records go (a CSV file in the results folder).
pub trait ProbeLog: Send {
    fn record(&mut self, r: &ProbeRecord);
    fn flush(&mut self) {}
}

/// A probe log that keeps nothing.
pub struct DiscardLog;
impl ProbeLog for DiscardLog {
    fn record(&mut self, _: &ProbeRecord) {}
}
