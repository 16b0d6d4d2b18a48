//! The KV-cache handoff transport (PriorityFEC and its baselines) as cores
//! without I/O: transport blocks and frames, source ordering, the sender and
//! receiver state machines, the reliable baselines (TCP, QUIC) over the link
//! model, and the co-simulation harness on an exact nanosecond clock.

pub mod reliable;
