//! What agents tell each other about a KV handoff besides the KV frames
//! and feedback ([`crate::Msg::KvFrame`], [`crate::Msg::KvFeedback`], which
//! cross the emulated link so that it charges exactly the transport core's
//! frame sizes): [`AgentMsg`], sent directly over the mesh (no link, like
//! the LYREO messages).

use edgemu_config::RebuildMode;
use edgemu_handoff::{BlockLayout, Scheme};
use serde::{Deserialize, Serialize};

/// Everything the receiving agent needs to receive, rebuild and decode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffOffer {
    /// The sender's handoff id (also the transport session).
    pub handoff: u32,
    /// Handoff start (run ns): core time 0 on both sides.
    pub t0_ns: u64,
    /// D after `t0_ns`.
    pub deadline_ns: u64,
    /// ρ = (D − T_ow)/T_ser of this deadline.
    pub rho: f64,
    pub layout: BlockLayout,
    pub utilities: Vec<f64>,
    /// The context's tokens (agent B's prompt starts with them).
    pub tokens: Vec<u32>,
    pub context_id: String,
    pub scheme: Scheme,
    pub policy: String,
    pub policy_version: String,
    pub rebuild: RebuildMode,
    pub decode_tokens: u32,
    pub k: u16,
    pub feedback_every: u32,
    pub source_packets: u32,
    /// Whether the sender's cache had the context.
    pub cache_hit: bool,
    /// `Some(port)`: the KV comes over the kernel's TCP through the attach
    /// points of the handoff's link (scheme `tcp-kernel`), to this port of
    /// the receiving side's attach point, as a byte stream in block order;
    /// no frames follow. `None`: frames of `scheme` over the link.
    pub kernel_tcp: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentMsg {
    /// A handoff starts (sent before its first frame).
    Offer(Box<HandoffOffer>),
    /// The sender stopped the handoff (killed): the receiver records it
    /// aborted with the reason.
    Abort {
        handoff: u32,
        reason: String,
        /// Repair frames the sender had sent.
        repair_sent: u32,
    },
    /// The sender's last counters, sent when its sending is over.
    SenderDone {
        handoff: u32,
        source_sent: u32,
        repair_sent: u32,
    },
}

impl From<AgentMsg> for crate::Msg {
    fn from(m: AgentMsg) -> Self {
        crate::Msg::Agent(m)
    }
}
