//! Parameters of one direction of a link.

use std::sync::Arc;

/// One direction of a link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    pub rate: RateSpec,
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
    /// Uniform jitter added to each packet's delay, in [0, jitter_ns], ns.
    pub jitter_ns: u64,
    /// Drop-tail queue limit in bytes (waiting for serialization). None = unbounded.
    pub queue_bytes: Option<u64>,
    pub loss: LossSpec,
    pub delivery: Delivery,
    /// Allow jitter to reorder packets.
    pub reorder: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RateSpec {
    /// No serialization delay.
    Unlimited,
    /// Bits per second. 0 carries nothing: the model drops every offer as
    /// `Down` (config validation rejects it).
    Fixed { bps: u64 },
    /// Rate following a trace (see `trace` module).
    Trace(Arc<crate::RateTrace>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum LossSpec {
    None,
    Bernoulli {
        p: f64,
    },
    /// Two-state Markov chain. Per packet: in state Good lose with `eps_g`,
    /// in Bad with `eps_b`; then move Good→Bad with `p_gb`, Bad→Good with `p_bg`.
    GilbertElliott {
        eps_g: f64,
        eps_b: f64,
        p_gb: f64,
        p_bg: f64,
    },
    /// Loss state (good/bad or a per-interval loss probability) following a trace.
    Trace(Arc<crate::LossTrace>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Lost packets are dropped.
    Datagram,
    /// Lost packets arrive late: each loss adds one retransmission delay
    /// (the link's RTT, 2·delay, plus its own serialization again).
    Reliable,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            rate: RateSpec::Unlimited,
            delay_ns: 0,
            jitter_ns: 0,
            queue_bytes: None,
            loss: LossSpec::None,
            delivery: Delivery::Datagram,
            reorder: false,
        }
    }
}
