//! The LYREO edge-serving system as cores without I/O: mobility, workloads,
//! radio cells (Shannon uplink), edge-server slot cores around the batching
//! engine, the request-scheduler core with Lyapunov virtual queues, and the
//! slotted co-simulation harness.
