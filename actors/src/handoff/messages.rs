//! What agents tell each other: the protocol's handoff control messages
//! ([`AgentMsg`], [`HandoffOffer`], see `edgemu_protocol::handoff`),
//! directly over the mesh; and the KV frames and feedback
//! (`Msg::KvFrame`, `Msg::KvFeedback`), over the emulated link between
//! their servers, which charges exactly the transport core's frame sizes.

pub use edgemu_protocol::handoff::{AgentMsg, HandoffOffer};
