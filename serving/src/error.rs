//! The crate's error type.

/// Errors from building or running a serving scenario.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("unknown workload `{name}` (valid: {valid})")]
    UnknownWorkload { name: String, valid: String },
    #[error("workload `{name}` is not available: {why}")]
    WorkloadUnavailable { name: String, why: String },
    #[error("unknown GPU mix `{name}` (valid: hom, mod, het)")]
    UnknownMix { name: String },
    #[error("unknown mobility model `{name}` (valid: random-walk, random-waypoint)")]
    UnknownMobility { name: String },
    #[error(transparent)]
    Policy(#[from] edgemu_policies::lyreo::LyreoPolicyError),
    #[error("invalid scenario: {0}")]
    Invalid(String),
    #[error("server {server}'s report of slot {slot} refused: {reason}")]
    Report {
        server: usize,
        slot: u64,
        reason: crate::scheduler::ReportRefused,
    },
    /// Training settings a run cannot use, or a run that cannot go on.
    #[error("training: {0}")]
    Train(String),
    /// A training step failed; `during` says where (seed, episode, phase).
    #[error("{during}: {source}")]
    During {
        during: String,
        #[source]
        source: Box<ServingError>,
    },
    #[error("server {server}: {source}")]
    Engine {
        server: usize,
        #[source]
        source: Box<edgemu_engine::EngineError>,
    },
}
