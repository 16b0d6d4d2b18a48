//! The LYREO edge-serving system as cores without I/O: mobility, workloads,
//! radio cells (Shannon uplink), edge-server slot cores around the batching
//! engine, the request-scheduler core with Lyapunov virtual queues, and the
//! slotted co-simulation harness.
//!
//! Time is integer nanoseconds (`u64`) everywhere; randomness is seeded
//! `ChaCha8Rng`, so a run is reproducible bit for bit by its seed. The same
//! cores are meant to run inside actors later; the harness composes them
//! directly (users → radio → servers → scheduler), one slot at a time.

pub mod availability;
pub mod error;
pub mod harness;
pub mod mobility;
pub mod radio;
pub mod scheduler;
pub mod server;
pub mod workload;

pub use availability::Availability;
pub use error::ServingError;
pub use harness::{run_episode, run_episode_with, EpisodeOutcome, GpuMix, Scenario, Summary};
pub use scheduler::{LyapunovQueues, SchedulerCore};
pub use server::{Dropped, RequestRecord, ServerReport, ServerSlotCore};

pub use edgemu_links::time::NS_PER_S;
