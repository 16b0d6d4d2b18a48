//! The LYREO edge-serving system as cores without I/O: mobility, workloads,
//! radio cells (Shannon uplink), edge-server slot cores around the batching
//! engine, the request-scheduler core with Lyapunov virtual queues, the
//! slotted co-simulation harness, a live server's upload gathering, and PPO
//! training of the learned LYREO family on it ([`train`]).
//!
//! Time is integer nanoseconds (`u64`) everywhere; randomness is seeded
//! `ChaCha8Rng`, so a run is reproducible bit for bit by its seed. The
//! harness composes the cores directly (users → radio → servers →
//! scheduler), one slot at a time; the LYREO actors run the same cores.

pub mod availability;
pub mod error;
pub mod external_load;
pub mod harness;
pub mod mobility;
pub mod radio;
pub mod scheduler;
pub mod server;
pub mod stepper;
pub mod train;
pub mod uploads;
pub mod workload;

pub use availability::Availability;
pub use error::ServingError;
pub use external_load::ExternalLoad;
pub use harness::{run_episode, run_episode_with, EpisodeOutcome, GpuMix, Scenario, Summary};
pub use scheduler::{LyapunovQueues, SchedulerCore};
pub use server::{Dropped, RequestRecord, ServerReport, ServerSlotCore, TokenEvent};
pub use stepper::{SlotStep, SlotStepper};
pub use uploads::{ExpectedUpload, ReleasedBatch, UploadGathering};

pub use edgemu_links::time::NS_PER_S;
