//! The compared schemes: a scheme is a source order, a repair scheduler and
//! the repair gate its scheduler runs under (see [`crate::sender`]).
//!
//! | name | order | scheduler | gate | budget |
//! |---|---|---|---|---|
//! | `udp` | FIFO | none | — | 0 |
//! | `uniform-fec` | FIFO | fixed rate, 1 per 8 sources | window | B_rep |
//! | `flec-rt` | FIFO | FlEC-RT | window | B_rep |
//! | `priority-only` | priority | none | — | 0 |
//! | `priority-fixed-fec` | priority | fixed rate, 1 per 8 sources | window | B_rep |
//! | `rl-fec-only` | FIFO | DDQN (built elsewhere) | deficit | B_rep |
//! | `priorityfec` | priority | DDQN (built elsewhere) | deficit | B_rep |
//! | `deficit-heuristic` | priority | deficit heuristic | deficit | B_rep |
//!
//! The DDQN entries take a `Box<dyn RepairScheduler>` from the caller (the
//! policies crate's `DdqnScheduler` with loaded weights);
//! `deficit-heuristic` is the rule whose trajectories seed the DDQN replay,
//! listed so its recovered utility can be compared.

use edgemu_policies::repair::{DeficitHeuristic, FixedRate, FlecRt, NoRepair, RepairScheduler};

use crate::blocks::SourceOrder;
use crate::error::HandoffError;
use crate::sender::RepairGate;

/// Where a scheme's scheduler comes from.
#[derive(Debug, Clone, Copy)]
pub enum SchedulerSource {
    /// No repair at all (zero budget).
    NoRepair,
    /// A rule from `policies::repair`.
    Builtin(fn() -> Box<dyn RepairScheduler>),
    /// A scheduler built by the caller (the DDQN).
    External,
}

/// Which scheme, as a plain value (what a handoff offer tells the
/// receiver): the key of [`SCHEMES`], in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Scheme {
    Udp,
    UniformFec,
    FlecRt,
    PriorityOnly,
    PriorityFixedFec,
    RlFecOnly,
    PriorityFec,
    DeficitHeuristic,
}

impl Scheme {
    /// The scheme's entry in [`SCHEMES`].
    pub fn spec(self) -> &'static SchemeSpec {
        &SCHEMES[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

/// One compared scheme.
#[derive(Debug, Clone, Copy)]
pub struct SchemeSpec {
    pub scheme: Scheme,
    pub name: &'static str,
    pub order: SourceOrder,
    pub gate: RepairGate,
    pub scheduler: SchedulerSource,
    pub about: &'static str,
}

impl SchemeSpec {
    /// Whether this scheme may send repair (else its budget is 0).
    pub fn repairs(&self) -> bool {
        !matches!(self.scheduler, SchedulerSource::NoRepair)
    }

    pub fn needs_external(&self) -> bool {
        matches!(self.scheduler, SchedulerSource::External)
    }

    /// The scheme's scheduler: its own, or `external` for the DDQN schemes.
    pub fn scheduler(
        &self,
        external: Option<Box<dyn RepairScheduler>>,
    ) -> Result<Box<dyn RepairScheduler>, HandoffError> {
        match self.scheduler {
            SchedulerSource::NoRepair => Ok(Box::new(NoRepair)),
            SchedulerSource::Builtin(make) => Ok(make()),
            SchedulerSource::External => external.ok_or(HandoffError::NeedsScheduler(self.name)),
        }
    }
}

fn fixed() -> Box<dyn RepairScheduler> {
    Box::new(FixedRate::default())
}
fn flec() -> Box<dyn RepairScheduler> {
    Box::new(FlecRt)
}
fn deficit() -> Box<dyn RepairScheduler> {
    Box::new(DeficitHeuristic)
}

/// Every scheme, in the order tables list them.
pub const SCHEMES: &[SchemeSpec] = &[
    SchemeSpec {
        scheme: Scheme::Udp,
        name: "udp",
        order: SourceOrder::Fifo,
        gate: RepairGate::Deficit,
        scheduler: SchedulerSource::NoRepair,
        about: "FIFO source, no retransmission, no FEC",
    },
    SchemeSpec {
        scheme: Scheme::UniformFec,
        name: "uniform-fec",
        order: SourceOrder::Fifo,
        gate: RepairGate::Window,
        scheduler: SchedulerSource::Builtin(fixed),
        about: "FIFO source, one repair per 8 sources",
    },
    SchemeSpec {
        scheme: Scheme::FlecRt,
        name: "flec-rt",
        order: SourceOrder::Fifo,
        gate: RepairGate::Window,
        scheduler: SchedulerSource::Builtin(flec),
        about: "FIFO source, repair from feedback, loss/burst estimates and deadline",
    },
    SchemeSpec {
        scheme: Scheme::PriorityOnly,
        name: "priority-only",
        order: SourceOrder::Priority,
        gate: RepairGate::Deficit,
        scheduler: SchedulerSource::NoRepair,
        about: "utility order, no repair",
    },
    SchemeSpec {
        scheme: Scheme::PriorityFixedFec,
        name: "priority-fixed-fec",
        order: SourceOrder::Priority,
        gate: RepairGate::Window,
        scheduler: SchedulerSource::Builtin(fixed),
        about: "utility order, one repair per 8 sources",
    },
    SchemeSpec {
        scheme: Scheme::RlFecOnly,
        name: "rl-fec-only",
        order: SourceOrder::Fifo,
        gate: RepairGate::Deficit,
        scheduler: SchedulerSource::External,
        about: "FIFO source, DDQN repair scheduler",
    },
    SchemeSpec {
        scheme: Scheme::PriorityFec,
        name: "priorityfec",
        order: SourceOrder::Priority,
        gate: RepairGate::Deficit,
        scheduler: SchedulerSource::External,
        about: "utility order, DDQN repair scheduler",
    },
    SchemeSpec {
        scheme: Scheme::DeficitHeuristic,
        name: "deficit-heuristic",
        order: SourceOrder::Priority,
        gate: RepairGate::Deficit,
        scheduler: SchedulerSource::Builtin(deficit),
        about: "utility order, repair while the estimated deficit is positive",
    },
];

/// The scheme called `name`.
pub fn scheme(name: &str) -> Result<&'static SchemeSpec, HandoffError> {
    SCHEMES
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| HandoffError::UnknownScheme(name.to_string()))
}

/// The schemes that run without an external scheduler.
pub fn builtin_schemes() -> impl Iterator<Item = &'static SchemeSpec> {
    SCHEMES.iter().filter(|s| !s.needs_external())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_value_names_its_own_entry() {
        for (i, spec) in SCHEMES.iter().enumerate() {
            assert_eq!(spec.scheme as usize, i, "{} is out of order", spec.name);
            assert_eq!(spec.scheme.name(), spec.name);
        }
        // The last variant is the last entry: no variant without one.
        assert_eq!(Scheme::DeficitHeuristic as usize, SCHEMES.len() - 1);
    }
}
