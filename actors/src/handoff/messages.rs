//! What agents tell each other besides the KV frames and feedback (which
//! cross the emulated link as raw bytes, [`Msg::Bytes`], so the link
//! charges exactly the core's frame sizes). These control messages travel
//! as JSON in `Msg::Bytes` directly over the mesh (no link, like the LYREO
//! control messages): an agent tells a received envelope apart by whether
//! it crossed a link (`due_ns` set) and who sent it.

use edgemu_codec::wire::Msg;
use edgemu_handoff::BlockLayout;
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
    pub scheme: String,
    pub policy: String,
    pub policy_version: String,
    pub rebuild: String,
    pub decode_tokens: u32,
    pub k: u16,
    pub feedback_every: u32,
    pub source_packets: u32,
    /// Whether the sender's cache had the context.
    pub cache_hit: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "agent", rename_all = "snake_case")]
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

impl AgentMsg {
    pub fn to_msg(&self) -> Msg {
        Msg::Bytes(serde_json::to_vec(self).unwrap_or_default())
    }

    pub fn from_msg(msg: &Msg) -> Option<AgentMsg> {
        match msg {
            Msg::Bytes(b) => serde_json::from_slice(b).ok(),
            _ => None,
        }
    }
}
