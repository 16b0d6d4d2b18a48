//! Request-scheduling policies for LYREO (paper §IV) and its baselines.
//!
//! Each slot the scheduler core (in `edgemu-serving`) hands a policy one
//! [`SlotObservation`]: the slot's requests ([`RequestObs`]: lengths and the
//! channel to every server), the servers' end-of-last-slot reports
//! ([`ServerObs`]) and the Lyapunov virtual queues `Z_s`. The policy returns
//! one server index per request ([`SchedulingPolicy::assign`]).
//!
//! The shape is chosen so the learned policies of the paper plug in without
//! changing the caller: a PPO actor is a per-request categorical over servers,
//! whose logits come from a network over request features, server features and
//! `Z` — [`SlotObservation::pair_features`] gives exactly that input, one
//! fixed-size normalized vector per (request, server) pair, and the requests of
//! a slot are decided in order so a policy may account for what it already
//! placed in this slot (the heuristics here do).
//!
//! Implemented here: [`LeastLoaded`] (predicted KV memory-time workload) and
//! [`RandomPolicy`]. `Static` is not a policy but a server mode (static
//! batching) combined with one of these assignments; see [`PolicySpec`].

mod heuristics;
mod observation;

pub use heuristics::{LeastLoaded, RandomPolicy};
pub use observation::{RequestObs, ServerObs, SlotObservation, PAIR_FEATURES};

/// A request-scheduling policy: one server per request of the slot.
pub trait SchedulingPolicy {
    /// The policy's name as given on the command line.
    fn name(&self) -> &str;

    /// Writes into `out` one server index (`< obs.servers.len()`) per request of
    /// `obs.requests`, in order. `out` is cleared first.
    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>);
}

/// How servers batch decode for an experiment arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerBatching {
    /// DEED: late joining when KV fits, early eviction (continuous batching).
    Continuous,
    /// The paper's Static baseline: no joining a running batch, everyone
    /// leaves with the longest.
    Static,
}

/// A named experiment arm: an assignment policy plus the servers' batching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// The name as given (e.g. `static`, `least-loaded`).
    pub name: String,
    /// The assignment rule's name (`least-loaded`, `random`, or a learned one).
    pub assignment: String,
    pub batching: ServerBatching,
}

/// The non-learned policy names this build knows.
pub const HEURISTIC_POLICIES: &[&str] = &["least-loaded", "random", "static"];

/// The learned policy names of the paper, to be built on this trait with a
/// weights file (not in this build).
pub const LEARNED_POLICIES: &[&str] = &["lyreo", "ly-ppo", "ppo", "lyreo-count", "lyreo-nolb"];

/// Errors naming a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LyreoPolicyError {
    #[error("unknown policy `{name}` (valid: {})", HEURISTIC_POLICIES.join(", "))]
    Unknown { name: String },
    #[error(
        "policy `{name}` is a learned policy and needs trained weights, which this build does \
         not have yet (available now: {})",
        HEURISTIC_POLICIES.join(", ")
    )]
    NotAvailable { name: String },
}

impl PolicySpec {
    /// Parses an arm name: `least-loaded` (also `ll`), `random`, or
    /// `static` (= the paper's Static: static batching; its assignment is
    /// LYREO's in the paper, Least-Loaded here until LYREO lands — write
    /// `static:random` for another one).
    pub fn parse(name: &str) -> Result<Self, LyreoPolicyError> {
        let lower = name.trim().to_ascii_lowercase();
        let (batching, assignment) = match lower.split_once(':') {
            Some(("static", inner)) => (ServerBatching::Static, inner.to_string()),
            None if lower == "static" => (ServerBatching::Static, "least-loaded".to_string()),
            _ => (ServerBatching::Continuous, lower.clone()),
        };
        let assignment = match assignment.as_str() {
            "ll" | "least-loaded" | "leastloaded" => "least-loaded".to_string(),
            "random" => "random".to_string(),
            other if LEARNED_POLICIES.contains(&other) => {
                return Err(LyreoPolicyError::NotAvailable {
                    name: name.to_string(),
                })
            }
            _ => {
                return Err(LyreoPolicyError::Unknown {
                    name: name.to_string(),
                })
            }
        };
        Ok(PolicySpec {
            name: lower,
            assignment,
            batching,
        })
    }

    /// Builds the assignment policy; `seed` drives any randomness.
    pub fn build(&self, seed: u64) -> Box<dyn SchedulingPolicy> {
        match self.assignment.as_str() {
            "random" => Box::new(RandomPolicy::new(seed)),
            _ => Box::new(LeastLoaded::new()),
        }
    }
}

#[cfg(test)]
mod tests;
