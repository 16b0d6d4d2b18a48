//! Repair schedulers for the KV handoff (being built).
pub mod ddqn;
