//! The KV-cache handoff transport (PriorityFEC and its baselines) as cores
//! without I/O: transport blocks and frames, source ordering, the sender and
//! receiver state machines, the reliable baselines (TCP, QUIC) over the link
//! model, and the co-simulation harness on an exact nanosecond clock.
//!
//! Modules: [`blocks`] (layout, utilities, source order), [`frame`] (KV
//! frames over the codec's FEC format), [`feedback`] (receiver reports),
//! [`sender`], [`receiver`], [`scheme`] (the registry of compared schemes),
//! [`scenario`] (assembling one handoff: blocks, links, deadline, and the
//! sender and receiver cores), [`harness`] (sender → link → receiver
//! co-simulation).

pub mod blocks;
pub mod error;
pub mod feedback;
pub mod frame;

pub use blocks::{
    cell_utilities, check_utilities, placeholder_utilities, source_sequence, BlockLayout,
    SourceOrder,
};
pub use error::HandoffError;
pub use feedback::Feedback;
pub use frame::{decode_frame, KvFrame};
pub mod harness;
pub mod receiver;
pub mod reliable;
pub mod scenario;
pub mod scheme;
pub mod sender;
pub mod stepper;
pub mod timing;
pub mod train;

pub use harness::{
    run_handoff, run_handoff_timed, synthetic_payload, HandoffPair, HandoffRun, RunOptions,
};
pub use receiver::{
    utility_of_complete, HandoffReceiver, HandoffReport, ReceivedBlock, ReceivedKv, ReceiverConfig,
};
pub use scenario::{Deadline, HandoffScenario};
pub use scheme::{scheme, Scheme, SchemeSpec, SCHEMES};
pub use sender::{
    shaping_potential, Decision, HandoffSender, PotentialWeights, RepairGate, SenderConfig,
    SenderStats,
};
pub use stepper::{RepairEnvOptions, RepairStep, RepairStepper};
