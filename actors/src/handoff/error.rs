//! [`AgentError`]: why an agent could not load its model, set up its task,
//! start a handoff, or rebuild and decode what it received. It reaches
//! text only where it is recorded: the event log, a `handoffs.csv` row's
//! outcome, the host's log.

use edgemu_handoff::HandoffError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    #[error("CPU device: {0}")]
    Device(String),
    #[error("tiny model: {0}")]
    TinyModel(String),
    /// The SmolLM2 weights are not where they are looked for.
    #[error("{0} (fetch it with scripts/fetch-model.sh and set EDGEMU_MODEL_DIR)")]
    ModelMissing(String),
    #[error("loading SmolLM2: {0}")]
    ModelLoad(String),
    #[error("the ChatML cue has no tokens")]
    NoCue,
    #[error("the model has no ChatML chat template")]
    NoChatTemplate,
    #[error("ShareGPT data: {0}")]
    ShareGpt(String),
    #[error("{set} contexts of {n_tokens} tokens: {reason}")]
    Contexts {
        set: &'static str,
        n_tokens: u32,
        reason: String,
    },
    /// The transport layout or the sender could not be built.
    #[error(transparent)]
    Transport(#[from] HandoffError),
    #[error("prefill: {0}")]
    Prefill(String),
    #[error("rebuild: {0}")]
    Rebuild(String),
    #[error("decode: {0}")]
    Decode(String),
    #[error("handoff decode {0} did not finish")]
    Unfinished(u64),
    #[error("{arrived} blocks arrived for a context of {expected} blocks")]
    BlockCount { arrived: usize, expected: usize },
    /// The agent's engine never loaded; every request to it fails so.
    #[error("no model: {0}")]
    NoModel(Box<AgentError>),
    /// The compute actor is gone (the run is ending).
    #[error("compute: {0}")]
    Compute(actix::MailboxError),
    #[error("no link direction towards the next agent on this host")]
    NoLinkOut,
}
