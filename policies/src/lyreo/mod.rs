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
//! Implemented here: [`LeastLoaded`] (predicted KV memory-time workload),
//! [`RandomPolicy`], and the learned family in [`learned`] (LYREO, Ly-PPO,
//! PPO, LYREO-Count, LYREO-NoLB) with safetensors weights. `Static` is not a policy but a server mode (static
//! batching) combined with one of these assignments; see [`PolicySpec`].

mod heuristics;
pub mod learned;
mod observation;
mod queues;

use std::path::PathBuf;
use std::sync::Arc;

use edgemu_assets::Asset;

pub use heuristics::{LeastLoaded, RandomPolicy};
pub use learned::{LearnedModel, LearnedPolicy, Rollout, Variant};
pub use observation::{
    RequestObs, ServerCapability, ServerObs, SlotLoad, SlotObservation, PAIR_FEATURES,
};
pub use queues::LyapunovQueues;

/// A request-scheduling policy: one server per request of the slot.
pub trait SchedulingPolicy {
    /// The policy's name as given on the command line.
    fn name(&self) -> &str;

    /// Writes into `out` one server index (`< obs.servers.len()`) per request of
    /// `obs.requests`, in order. `out` is cleared first.
    fn assign(&mut self, obs: &SlotObservation, out: &mut Vec<usize>);

    /// Requests a guard placed with a fallback instead of the policy's own
    /// choice so far (a learned policy off its training distribution; see
    /// `learned`'s module doc). Zero for policies without a guard.
    fn fallbacks(&self) -> u64 {
        0
    }

    /// Whether the policy reads [`RequestObs::solo_rate_bps`]. A scheduler
    /// leaves the rates out of the observation it gives a policy that says
    /// no: R×S Shannon rates are most of a large slot's decision.
    fn reads_rates(&self) -> bool {
        true
    }
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
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// The name as given (e.g. `static`, `least-loaded`), without a weights path.
    pub name: String,
    /// The assignment rule's name (`least-loaded`, `random`, or a learned one).
    pub assignment: String,
    pub batching: ServerBatching,
    /// A learned policy's validated networks and where they came from (a
    /// path, or `built-in policies/weights/<name>.safetensors`).
    pub learned: Option<(Arc<LearnedModel>, PathBuf)>,
    /// A learned policy falls back to Least-Loaded off its training
    /// distribution (`learned`'s module doc); `raw:NAME` turns that off.
    pub guarded: bool,
}

impl PartialEq for PolicySpec {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name
            && self.guarded == o.guarded
            && self.assignment == o.assignment
            && self.batching == o.batching
            && match (&self.learned, &o.learned) {
                (None, None) => true,
                (Some(a), Some(b)) => a.0 == b.0,
                _ => false,
            }
    }
}

/// The non-learned policy names this build knows.
pub const HEURISTIC_POLICIES: &[&str] = &["least-loaded", "random", "static"];

/// The learned policy names of the paper (the shipped weights of
/// `policies/weights/`, built in, by default; or `NAME=PATH`).
pub const LEARNED_POLICIES: &[&str] = &["lyreo", "ly-ppo", "ppo", "lyreo-count", "lyreo-nolb"];

/// Errors naming a policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LyreoPolicyError {
    #[error(
        "unknown policy `{name}` (valid: {}, {})",
        HEURISTIC_POLICIES.join(", "),
        LEARNED_POLICIES.join(", ")
    )]
    Unknown { name: String },
    #[error(
        "policy `{name}` is a learned policy and needs trained weights: {what} (train with \
         `edgemu train lyreo --policy {name}`, or give `{name}=PATH`)"
    )]
    NotAvailable { name: String, what: String },
}

/// An arm name taken apart, before any weights are read (the one parser of
/// arm names: [`PolicySpec::parse`] and the policy slot's swap use it).
#[derive(Debug, Clone, PartialEq)]
pub struct ArmName {
    /// Lower-cased, without a weights path.
    pub name: String,
    pub batching: ServerBatching,
    /// `least-loaded`, `random` or a learned name.
    pub assignment: String,
    /// Set for a learned assignment.
    pub variant: Option<Variant>,
    /// False for `raw:NAME`: the network alone, without the guard.
    pub guarded: bool,
    /// The `NAME=PATH` weights path, if given.
    pub path: Option<PathBuf>,
}

impl ArmName {
    /// See [`PolicySpec::parse`] for the names.
    pub fn parse(name: &str) -> Result<ArmName, LyreoPolicyError> {
        let (name, path) = match name.split_once('=') {
            Some((n, p)) => (n, Some(PathBuf::from(p.trim()))),
            None => (name, None),
        };
        let lower = name.trim().to_ascii_lowercase();
        // `static` alone is the paper's Static baseline: LYREO's network as
        // trained, under static batching, so it is not guarded either.
        let (guarded, rest) = match lower.strip_prefix("raw:") {
            Some(rest) => (false, rest.to_string()),
            None => (lower != "static", lower.clone()),
        };
        let (batching, assignment) = match rest.split_once(':') {
            Some(("static", inner)) => (ServerBatching::Static, inner.to_string()),
            None if rest == "static" => {
                let inner = if Variant::Lyreo.has_default_weights() {
                    "lyreo"
                } else {
                    "least-loaded"
                };
                (ServerBatching::Static, inner.to_string())
            }
            _ => (ServerBatching::Continuous, rest.clone()),
        };
        let (assignment, variant) = match assignment.as_str() {
            "ll" | "least-loaded" | "leastloaded" => ("least-loaded".to_string(), None),
            "random" => ("random".to_string(), None),
            other => match Variant::parse(other) {
                Some(v) => (other.to_string(), Some(v)),
                None => {
                    return Err(LyreoPolicyError::Unknown {
                        name: name.to_string(),
                    })
                }
            },
        };
        if lower.starts_with("raw:") && variant.is_none() {
            // `raw:` names the unguarded network; a heuristic has none.
            return Err(LyreoPolicyError::Unknown {
                name: name.to_string(),
            });
        }
        Ok(ArmName {
            name: lower,
            batching,
            assignment,
            variant,
            path,
            guarded,
        })
    }
}

impl PolicySpec {
    /// Parses an arm name: `least-loaded` (also `ll`), `random`, a learned
    /// name (`lyreo`, `ly-ppo`, `ppo`, `lyreo-count`, `lyreo-nolb`; weights
    /// from the shipped file, or `NAME=PATH`), or `static` (= the paper's
    /// Static: static batching with LYREO's assignment when LYREO's weights
    /// are shipped, else Least-Loaded — write `static:random` for another
    /// one; the paper's Static runs LYREO's network unguarded). `raw:NAME`
    /// is a learned policy without its off-distribution guard. Learned
    /// weights are loaded and validated here.
    pub fn parse(name: &str) -> Result<Self, LyreoPolicyError> {
        let arm = ArmName::parse(name)?;
        let learned = match arm.variant {
            None => None,
            Some(variant) => {
                let src = arm
                    .path
                    .map(Asset::File)
                    .unwrap_or_else(|| variant.default_weights());
                let model = LearnedModel::from_source(&src, variant).map_err(|e| {
                    LyreoPolicyError::NotAvailable {
                        name: arm.assignment.clone(),
                        what: e.to_string(),
                    }
                })?;
                Some((Arc::new(model), src.label()))
            }
        };
        Ok(PolicySpec {
            name: arm.name,
            assignment: arm.assignment,
            batching: arm.batching,
            learned,
            guarded: arm.guarded,
        })
    }

    /// Builds the assignment policy; `seed` drives any randomness.
    pub fn build(&self, seed: u64) -> Box<dyn SchedulingPolicy> {
        if let Some((model, _)) = &self.learned {
            return Box::new(if self.guarded {
                LearnedPolicy::greedy(model.clone())
            } else {
                LearnedPolicy::unguarded(model.clone())
            });
        }
        match self.assignment.as_str() {
            "random" => Box::new(RandomPolicy::new(seed)),
            _ => Box::new(LeastLoaded::new()),
        }
    }
}

#[cfg(test)]
mod tests;
