//! [`PolicySlot`]: the active policy of one decider (a request scheduler,
//! a handoff sender's repair scheduler), swappable while a run goes on.
//!
//! The model. A slot holds one immutable, validated [`LoadedPolicy`] behind
//! an [`arc_swap::ArcSwap`]. A decider reads it at each decision boundary
//! ([`PolicySlot::get`], or [`PolicySlot::changed_since`] to rebuild its own
//! mutable policy object only when the version changed): one atomic load,
//! no lock, so a swap never blocks or drops a decision, a decision never
//! sees half a policy, and the decision after the swap sees the new one.
//!
//! [`PolicySlot::swap`] validates first — the name against the problem's
//! policies, the weights through [`crate::nn::WeightsFile`] (tensor names,
//! shapes, dtype F32, finite values, metadata kind and version) — and only
//! then replaces the pointer; on any error the old policy stays and the
//! error is returned. The replaced versions are kept (the last
//! [`HISTORY`]), so [`PolicySlot::rollback`] returns to the previous one.
//!
//! A version is named by its hash: SHA-256 over the policy name, a zero
//! byte and the weights bytes (none for a policy without weights), in hex.
//! The same name and bytes give the same version on every host and run.
//!
//! A version may also ask a policy process ([`PolicySlot::swap_external`],
//! [`PolicySlot::new_external`]): its name is `external`, its version
//! `external:<url>`, its [`LoadedPolicy::external`] says where and how long
//! to wait, and its spec is the fallback's (by default the policy that was
//! active, weights kept), so a decider that cannot get an answer decides
//! with the spec as it would without the external policy.
//!
//! What a slot can hold is a [`PolicyKind`]: [`LyreoPolicies`] (the LYREO
//! family and its baselines, as [`PolicySpec`]s) and [`RepairPolicies`]
//! (the PriorityFEC DDQN and the baseline repair schedulers, as
//! [`RepairSpec`]s). [`ControlledPolicy`] is the object-safe face the host's
//! control plane uses, whatever the kind.
//!
//! An actor with a swappable policy (on the host, register the slot with
//! `HostActors::policies.register(actor_id, slot.clone())`):
//!
//! ```
//! use std::{path::Path, sync::Arc};
//! use edgemu_policies::lyreo::SlotObservation;
//! use edgemu_policies::slot::{LyreoPolicies, PolicySlot};
//!
//! let slot = Arc::new(
//!     PolicySlot::new(LyreoPolicies, "least-loaded", None, Path::new("-"), 0, "config")
//!         .expect("a known policy"),
//! );
//! // The decider's state: the version it built from, and what it built.
//! let mut seen = slot.get();
//! let mut policy = seen.spec.build(7);
//! let mut out = Vec::new();
//! let obs = SlotObservation {
//!     slot: 0,
//!     slot_s: 1.0,
//!     requests: vec![],
//!     servers: vec![],
//!     z: vec![],
//!     epsilon: 0.01,
//!     nu: 1.0,
//! };
//! for _slot in 0..3 {
//!     // Decision boundary: pick up a swap, if one landed.
//!     if let Some(now) = slot.changed_since(&seen) {
//!         policy = now.spec.build(7);
//!         seen = now;
//!     }
//!     policy.assign(&obs, &mut out);
//!     // Record `seen.version` with each decision.
//! }
//! slot.swap(Some("random"), None, Path::new("-"), 1_000, "control").unwrap();
//! assert!(slot.changed_since(&seen).is_some());
//! ```

use std::path::Path;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use crate::lyreo::{LearnedModel, PolicySpec, ServerBatching};
use crate::nn::PolicyError;
use crate::repair::ddqn::{DdqnNet, DdqnScheduler};
use crate::repair::RepairScheduler;
use crate::repair::{DeficitHeuristic, FixedRate, FlecRt, NoRepair};

/// How many replaced versions a slot keeps for rollback.
pub const HISTORY: usize = 8;

/// Why a swap or a rollback was refused (the active policy is unchanged).
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("unknown {problem} policy `{name}` (valid: {valid})")]
    UnknownPolicy {
        problem: &'static str,
        name: String,
        valid: String,
    },
    #[error("{0}")]
    Weights(#[from] PolicyError),
    #[error("{0}")]
    Invalid(String),
    #[error("no earlier version to roll back to")]
    NoPrevious,
}

/// One problem's policies: how a name and optional weights become a
/// validated, immutable spec.
pub trait PolicyKind: Send + Sync + 'static {
    /// What a slot of this kind holds; deciders build their policy from it.
    type Spec: Send + Sync + 'static;
    /// The problem, for messages and replies (`"request scheduling"`).
    fn problem(&self) -> &'static str;
    /// Validates `name` with `weights` (safetensors bytes; `None`: the
    /// policy's shipped weights, or none for a heuristic). `label` names the
    /// bytes in errors. Returns the spec and the weights bytes it was built
    /// from (hashed into the version; empty for a heuristic).
    fn load(
        &self,
        name: &str,
        weights: Option<&[u8]>,
        label: &Path,
    ) -> Result<(Self::Spec, Vec<u8>), SlotError>;
    /// Whether `next` may replace `active` while the run goes on (what the
    /// rest of the system fixed at start must still hold). Default: always.
    fn check_swap(&self, _active: &Self::Spec, _next: &Self::Spec) -> Result<(), SlotError> {
        Ok(())
    }
}

/// Where a version that asks a policy process (`external`) sends its
/// decisions; its [`LoadedPolicy::spec`] is the fallback's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalTarget {
    /// The policy process's websocket (`ws://host:port`).
    pub url: String,
    /// How long a decision waits for the answer, ns.
    pub deadline_ns: u64,
    /// The built-in policy that decides when the process does not.
    pub fallback: String,
    /// The fallback's version hash.
    pub fallback_version: String,
}

/// What a swap to `external` asks for (the host fills in the defaults of
/// the actor's `external` table and of the problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalOptions {
    pub url: String,
    pub deadline_ns: u64,
    /// `None`: the active policy (its weights kept) decides on a fallback.
    pub fallback: Option<String>,
}

/// The name of a version that asks a policy process.
pub const EXTERNAL: &str = "external";

/// The version string of an external policy at `url`.
pub fn external_version(url: &str) -> String {
    format!("{EXTERNAL}:{url}")
}

/// One version of a slot's policy.
#[derive(Debug)]
pub struct LoadedPolicy<S> {
    /// The policy's name (`least-loaded`, `lyreo`, `priorityfec-ddqn`, …).
    pub name: String,
    /// SHA-256 of name, a zero byte and weights bytes, in hex.
    pub version: String,
    /// When it became active (run time, ns).
    pub loaded_at_ns: u64,
    /// Who asked for it (`"config"`, `"control"`, `"chaos#3"`, …).
    pub requested_by: String,
    /// The policy's spec; for an external version, the fallback's.
    pub spec: Arc<S>,
    /// `Some` for `external`: where decisions are asked (then `name` is
    /// `external` and `version` is `external:<url>`).
    pub external: Option<Arc<ExternalTarget>>,
}

/// What `policy.get` and a successful swap or rollback report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyInfo {
    pub problem: &'static str,
    pub name: String,
    pub version: String,
    pub loaded_at_ns: u64,
    pub requested_by: String,
    /// The version a rollback would return to.
    pub previous: Option<String>,
}

/// The version hash of `name` with `weights`.
pub fn version_hash(name: &str, weights: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0u8]);
    h.update(weights);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The active policy of one decider, swappable at decision boundaries.
pub struct PolicySlot<K: PolicyKind> {
    kind: K,
    active: ArcSwap<LoadedPolicy<K::Spec>>,
    /// Replaced versions, oldest first; also serializes writers.
    history: Mutex<Vec<Arc<LoadedPolicy<K::Spec>>>>,
}

impl<K: PolicyKind> PolicySlot<K> {
    /// A slot starting with `name` (and `weights`, see [`PolicyKind::load`]).
    pub fn new(
        kind: K,
        name: &str,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<Self, SlotError> {
        let first = load(&kind, name, weights, label, now_ns, requested_by)?;
        Ok(PolicySlot {
            kind,
            active: ArcSwap::from_pointee(first),
            history: Mutex::new(Vec::new()),
        })
    }

    /// A slot starting with an external policy (`opts.fallback` is
    /// required here: there is no active policy to fall back on;
    /// `weights` are the fallback's).
    pub fn new_external(
        kind: K,
        opts: &ExternalOptions,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<Self, SlotError> {
        let first = load_external(&kind, opts, None, weights, label, now_ns, requested_by)?;
        Ok(PolicySlot {
            kind,
            active: ArcSwap::from_pointee(first),
            history: Mutex::new(Vec::new()),
        })
    }

    /// Makes an external policy active (validated first, like
    /// [`PolicySlot::swap`]; on any error nothing changes).
    pub fn swap_external(
        &self,
        opts: &ExternalOptions,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError> {
        let current = self.get();
        let next = load_external(
            &self.kind,
            opts,
            Some(&current),
            weights,
            label,
            now_ns,
            requested_by,
        )?;
        self.kind.check_swap(&current.spec, &next.spec)?;
        self.install(next)
    }

    fn install(&self, next: LoadedPolicy<K::Spec>) -> Result<PolicyInfo, SlotError> {
        let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.active.swap(Arc::new(next));
        history.push(old);
        if history.len() > HISTORY {
            history.remove(0);
        }
        Ok(self.info_with(&history))
    }

    /// The active version (one atomic load; call it at each decision).
    pub fn get(&self) -> Arc<LoadedPolicy<K::Spec>> {
        self.active.load_full()
    }

    /// The active version if it is not `seen` (a decider rebuilds then).
    pub fn changed_since(
        &self,
        seen: &Arc<LoadedPolicy<K::Spec>>,
    ) -> Option<Arc<LoadedPolicy<K::Spec>>> {
        let now = self.active.load();
        (!Arc::ptr_eq(&now, seen)).then(|| Arc::clone(&now))
    }

    /// Validates `name` (default: the active policy's) with `weights` and
    /// makes it active; on any error nothing changes.
    pub fn swap(
        &self,
        name: Option<&str>,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError> {
        if name.is_none() && weights.is_none() {
            return Err(SlotError::Invalid(
                "give a policy name, weights, or both".into(),
            ));
        }
        let current = self.get();
        let name = name.unwrap_or(&current.name);
        // Validation happens before the lock: a slow parse never holds up
        // another writer, and readers never wait at all.
        let next = load(&self.kind, name, weights, label, now_ns, requested_by)?;
        self.kind.check_swap(&current.spec, &next.spec)?;
        self.install(next)
    }

    /// Makes the previous version active again (as loaded now, by
    /// `requested_by`); the version rolled back from is dropped.
    pub fn rollback(&self, now_ns: u64, requested_by: &str) -> Result<PolicyInfo, SlotError> {
        let mut history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let prev = history.pop().ok_or(SlotError::NoPrevious)?;
        self.active.store(Arc::new(LoadedPolicy {
            name: prev.name.clone(),
            version: prev.version.clone(),
            loaded_at_ns: now_ns,
            requested_by: requested_by.to_string(),
            spec: prev.spec.clone(),
            external: prev.external.clone(),
        }));
        Ok(self.info_with(&history))
    }

    pub fn info(&self) -> PolicyInfo {
        let history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        self.info_with(&history)
    }

    fn info_with(&self, history: &[Arc<LoadedPolicy<K::Spec>>]) -> PolicyInfo {
        let a = self.get();
        PolicyInfo {
            problem: self.kind.problem(),
            name: a.name.clone(),
            version: a.version.clone(),
            loaded_at_ns: a.loaded_at_ns,
            requested_by: a.requested_by.clone(),
            previous: history.last().map(|p| p.version.clone()),
        }
    }
}

fn load<K: PolicyKind>(
    kind: &K,
    name: &str,
    weights: Option<&[u8]>,
    label: &Path,
    now_ns: u64,
    requested_by: &str,
) -> Result<LoadedPolicy<K::Spec>, SlotError> {
    let name = name.trim().to_ascii_lowercase();
    // `NAME=PATH` reads a file elsewhere (the CLI's syntax): a swap names
    // its weights explicitly, confined by the host.
    if name.is_empty() || name.contains(['=', '/', '\\']) {
        return Err(SlotError::Invalid(format!(
            "policy name {name:?}: expected a bare name like \"least-loaded\"; give weights separately"
        )));
    }
    if name == EXTERNAL {
        return Err(SlotError::Invalid(
            "an external policy needs its settings (a url; optionally a deadline and a fallback): swap with `policy = \"external\"` and `url`, or configure the actor's `external` table".into(),
        ));
    }
    let (spec, bytes) = kind.load(&name, weights, label)?;
    Ok(LoadedPolicy {
        version: version_hash(&name, &bytes),
        name,
        loaded_at_ns: now_ns,
        requested_by: requested_by.to_string(),
        spec: Arc::new(spec),
        external: None,
    })
}

/// An external version: the fallback loaded by name (with `weights`), or,
/// without a name, the active version's policy as it is (its weights kept).
fn load_external<K: PolicyKind>(
    kind: &K,
    opts: &ExternalOptions,
    active: Option<&LoadedPolicy<K::Spec>>,
    weights: Option<&[u8]>,
    label: &Path,
    now_ns: u64,
    requested_by: &str,
) -> Result<LoadedPolicy<K::Spec>, SlotError> {
    if opts.url.trim().is_empty() {
        return Err(SlotError::Invalid(
            "an external policy needs the url of its policy process".into(),
        ));
    }
    if opts.deadline_ns == 0 {
        return Err(SlotError::Invalid(
            "an external policy needs a deadline above 0".into(),
        ));
    }
    // The active version's fallback, when it is itself external.
    let active_fallback = active.map(|a| match &a.external {
        Some(e) => (e.fallback.clone(), e.fallback_version.clone()),
        None => (a.name.clone(), a.version.clone()),
    });
    let (fallback, fallback_version, spec) = match (&opts.fallback, weights, active) {
        (None, None, Some(a)) => {
            let (name, version) = active_fallback.unwrap_or_default();
            (name, version, Arc::clone(&a.spec))
        }
        (name, _, _) => {
            let name = match (name, &active_fallback) {
                (Some(n), _) => n.clone(),
                (None, Some((n, _))) => n.clone(),
                (None, None) => {
                    return Err(SlotError::Invalid(
                        "an external policy needs a fallback policy".into(),
                    ))
                }
            };
            let v = load(kind, &name, weights, label, now_ns, requested_by)?;
            (v.name, v.version, v.spec)
        }
    };
    Ok(LoadedPolicy {
        name: EXTERNAL.to_string(),
        version: external_version(&opts.url),
        loaded_at_ns: now_ns,
        requested_by: requested_by.to_string(),
        spec,
        external: Some(Arc::new(ExternalTarget {
            url: opts.url.clone(),
            deadline_ns: opts.deadline_ns,
            fallback,
            fallback_version,
        })),
    })
}

/// The control plane's view of any slot.
pub trait ControlledPolicy: Send + Sync {
    fn info(&self) -> PolicyInfo;
    fn swap(
        &self,
        name: Option<&str>,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError>;
    fn rollback(&self, now_ns: u64, requested_by: &str) -> Result<PolicyInfo, SlotError>;
    fn swap_external(
        &self,
        opts: &ExternalOptions,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError>;
    /// The active version's external target, if it asks a policy process.
    fn external(&self) -> Option<Arc<ExternalTarget>>;
}

impl<K: PolicyKind> ControlledPolicy for PolicySlot<K> {
    fn info(&self) -> PolicyInfo {
        PolicySlot::info(self)
    }
    fn swap(
        &self,
        name: Option<&str>,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError> {
        PolicySlot::swap(self, name, weights, label, now_ns, requested_by)
    }
    fn rollback(&self, now_ns: u64, requested_by: &str) -> Result<PolicyInfo, SlotError> {
        PolicySlot::rollback(self, now_ns, requested_by)
    }
    fn swap_external(
        &self,
        opts: &ExternalOptions,
        weights: Option<&[u8]>,
        label: &Path,
        now_ns: u64,
        requested_by: &str,
    ) -> Result<PolicyInfo, SlotError> {
        PolicySlot::swap_external(self, opts, weights, label, now_ns, requested_by)
    }
    fn external(&self) -> Option<Arc<ExternalTarget>> {
        self.get().external.clone()
    }
}

/// Request scheduling: [`PolicySpec`]s (`least-loaded`, `random`, `static`,
/// `static:<assignment>`, and the learned `lyreo`, `ly-ppo`, `ppo`,
/// `lyreo-count`, `lyreo-nolb`, which take weights).
#[derive(Debug, Clone, Copy, Default)]
pub struct LyreoPolicies;

impl PolicyKind for LyreoPolicies {
    type Spec = PolicySpec;

    fn problem(&self) -> &'static str {
        "request scheduling"
    }

    fn load(
        &self,
        name: &str,
        weights: Option<&[u8]>,
        label: &Path,
    ) -> Result<(PolicySpec, Vec<u8>), SlotError> {
        let arm = crate::lyreo::ArmName::parse(name).map_err(|_| SlotError::UnknownPolicy {
            problem: "request scheduling",
            name: name.to_string(),
            valid: format!(
                "{}, {}",
                crate::lyreo::HEURISTIC_POLICIES.join(", "),
                crate::lyreo::LEARNED_POLICIES.join(", ")
            ),
        })?;
        let Some(variant) = arm.variant else {
            if weights.is_some() {
                return Err(SlotError::Invalid(format!(
                    "policy `{name}` has no weights; weights go with a learned policy ({})",
                    crate::lyreo::LEARNED_POLICIES.join(", ")
                )));
            }
            let spec = PolicySpec {
                name: arm.name,
                assignment: arm.assignment,
                batching: arm.batching,
                learned: None,
                guarded: arm.guarded,
            };
            return Ok((spec, Vec::new()));
        };
        let (bytes, label) = match weights {
            Some(b) => (b.to_vec(), label.to_path_buf()),
            None => {
                let src = variant.default_weights();
                (
                    crate::shipped::read_weights(&src)?.into_owned(),
                    src.label(),
                )
            }
        };
        let model = LearnedModel::from_bytes(&bytes, &label, variant)?;
        let spec = PolicySpec {
            name: arm.name,
            assignment: arm.assignment,
            batching: arm.batching,
            learned: Some((Arc::new(model), label)),
            guarded: arm.guarded,
        };
        Ok((spec, bytes))
    }

    /// The servers' batching is set from the configured policy when they
    /// start and does not follow the scheduler's slot, so a swap between
    /// static batching (`static…`) and continuous batching (DEED: every
    /// other policy) would label requests with a batching they did not get.
    fn check_swap(&self, active: &PolicySpec, next: &PolicySpec) -> Result<(), SlotError> {
        if active.batching == next.batching {
            return Ok(());
        }
        let mode = |b: ServerBatching| match b {
            ServerBatching::Static => "static batching",
            ServerBatching::Continuous => "continuous batching",
        };
        Err(SlotError::Invalid(format!(
            "policy `{}` needs {}, but the servers run {} (fixed when they started; the active policy is `{}`): swap to a policy with the same batching",
            next.name,
            mode(next.batching),
            mode(active.batching),
            active.name
        )))
    }
}

/// A validated repair scheduler: build one per handoff sender with
/// [`RepairSpec::build`].
#[derive(Debug, Clone)]
pub enum RepairSpec {
    Ddqn(Arc<DdqnNet>),
    NoRepair,
    FixedRate,
    FlecRt,
    DeficitHeuristic,
}

impl RepairSpec {
    pub fn build(&self) -> Box<dyn RepairScheduler> {
        match self {
            RepairSpec::Ddqn(net) => Box::new(DdqnScheduler::new((**net).clone())),
            RepairSpec::NoRepair => Box::new(NoRepair),
            RepairSpec::FixedRate => Box::new(FixedRate::default()),
            RepairSpec::FlecRt => Box::new(FlecRt),
            RepairSpec::DeficitHeuristic => Box::new(DeficitHeuristic),
        }
    }
}

/// The repair scheduler names a [`RepairPolicies`] slot takes.
pub const REPAIR_POLICIES: &[&str] = &[
    "priorityfec-ddqn",
    "no-repair",
    "fixed-rate",
    "flec-rt",
    "deficit-heuristic",
];

/// Handoff repair scheduling: the PriorityFEC DDQN (`priorityfec-ddqn`,
/// weights of kind `repair-ddqn`) and the baselines.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepairPolicies;

impl PolicyKind for RepairPolicies {
    type Spec = RepairSpec;

    fn problem(&self) -> &'static str {
        "repair"
    }

    fn load(
        &self,
        name: &str,
        weights: Option<&[u8]>,
        label: &Path,
    ) -> Result<(RepairSpec, Vec<u8>), SlotError> {
        let spec = match name {
            "priorityfec-ddqn" | "ddqn" => {
                let (bytes, label) = match weights {
                    Some(b) => (b.to_vec(), label.to_path_buf()),
                    None => {
                        let src = crate::shipped::shipped(&crate::shipped::REPAIR_DDQN);
                        (
                            crate::shipped::read_weights(&src)?.into_owned(),
                            src.label(),
                        )
                    }
                };
                let net = DdqnNet::from_bytes(&bytes, &label)?;
                return Ok((RepairSpec::Ddqn(Arc::new(net)), bytes));
            }
            "no-repair" => RepairSpec::NoRepair,
            "fixed-rate" => RepairSpec::FixedRate,
            "flec-rt" => RepairSpec::FlecRt,
            "deficit-heuristic" => RepairSpec::DeficitHeuristic,
            _ => {
                return Err(SlotError::UnknownPolicy {
                    problem: "repair",
                    name: name.to_string(),
                    valid: REPAIR_POLICIES.join(", "),
                })
            }
        };
        if weights.is_some() {
            return Err(SlotError::Invalid(format!(
                "policy `{name}` has no weights; weights go with priorityfec-ddqn"
            )));
        }
        Ok((spec, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lyreo::Variant;

    fn ddqn_bytes(seed: u64) -> Vec<u8> {
        DdqnNet::random(seed).to_weights().to_bytes().unwrap()
    }

    fn label() -> std::path::PathBuf {
        std::path::PathBuf::from("<test>")
    }

    #[test]
    fn version_hash_is_stable_and_covers_name_and_bytes() {
        let a = version_hash("priorityfec-ddqn", b"abc");
        assert_eq!(a, version_hash("priorityfec-ddqn", b"abc"));
        assert_eq!(a.len(), 64);
        assert_ne!(a, version_hash("priorityfec-ddqn", b"abd"));
        assert_ne!(a, version_hash("ddqn", b"abc"));
        // The separator keeps name and bytes apart.
        assert_ne!(version_hash("ab", b"c"), version_hash("a", b"bc"));
        // SHA-256 of "least-loaded\0": a known value, so a changed hash
        // recipe shows up here.
        let ll = version_hash("least-loaded", b"");
        let mut h = Sha256::new();
        h.update(b"least-loaded\0");
        let want: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(ll, want);
        // Same weights, same version, across slots.
        let w = ddqn_bytes(1);
        let s1 = PolicySlot::new(RepairPolicies, "no-repair", None, &label(), 0, "t").unwrap();
        let s2 = PolicySlot::new(RepairPolicies, "fixed-rate", None, &label(), 0, "t").unwrap();
        let v1 = s1
            .swap(Some("priorityfec-ddqn"), Some(&w), &label(), 5, "a")
            .unwrap();
        let v2 = s2
            .swap(Some("priorityfec-ddqn"), Some(&w), &label(), 9, "b")
            .unwrap();
        assert_eq!(v1.version, v2.version);
        assert_eq!(v1.version, version_hash("priorityfec-ddqn", &w));
    }

    #[test]
    fn bad_weights_keep_the_old_version() {
        let good = ddqn_bytes(7);
        let slot = PolicySlot::new(
            RepairPolicies,
            "priorityfec-ddqn",
            Some(&good),
            &label(),
            10,
            "config",
        )
        .unwrap();
        let before = slot.info();
        assert_eq!(before.loaded_at_ns, 10);
        assert_eq!(before.requested_by, "config");
        assert_eq!(before.previous, None);

        // Wrong shapes: an LYREO file in a repair slot.
        let lyreo = LearnedModel::new(Variant::Lyreo, 1)
            .to_weights("t")
            .to_bytes()
            .unwrap();
        // A NaN in a tensor.
        let mut nan = DdqnNet::random(3).to_weights();
        let (shape, data) = nan.tensor("q.0.bias").unwrap();
        let (shape, mut data) = (shape.to_vec(), data.to_vec());
        data[5] = f32::NAN;
        nan.insert("q.0.bias", shape, data);
        let nan = nan.to_bytes().unwrap();
        type Case<'a> = (Option<&'a str>, Option<&'a [u8]>, &'a str);
        let cases: Vec<Case> = vec![
            (None, Some(&lyreo), "kind"),
            (None, Some(&nan), "not finite"),
            (None, Some(b"not safetensors"), "safetensors"),
            (Some("fifo"), None, "unknown repair policy `fifo`"),
            (Some("no-repair"), Some(&good), "has no weights"),
            (Some("priorityfec-ddqn=/etc/passwd"), None, "bare name"),
            (None, None, "give a policy name"),
        ];
        for (name, weights, want) in cases {
            let e = slot
                .swap(name, weights, &label(), 20, "control")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{name:?}: {e}");
            assert_eq!(slot.info(), before, "{name:?} changed the slot");
        }
        assert!(matches!(slot.get().spec.as_ref(), RepairSpec::Ddqn(_)));
    }

    #[test]
    fn a_swap_that_would_change_the_servers_batching_or_names_a_path_is_refused() {
        let slot =
            PolicySlot::new(LyreoPolicies, "least-loaded", None, &label(), 0, "config").unwrap();
        let before = slot.info();
        let e = slot
            .swap(Some("static:random"), None, &label(), 1, "control")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("static batching") && e.contains("continuous batching"),
            "{e}"
        );
        let e = slot
            .swap(Some("lyreo=/etc/passwd"), None, &label(), 1, "control")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bare name"), "{e}");
        assert_eq!(slot.info(), before, "the active policy is unchanged");
        // Same batching: fine, aliases included.
        assert_eq!(
            slot.swap(Some("random"), None, &label(), 2, "control")
                .unwrap()
                .name,
            "random"
        );
        assert_eq!(slot.get().spec.assignment, "random");
        slot.swap(Some("LL"), None, &label(), 3, "control").unwrap();
        assert_eq!(slot.get().spec.assignment, "least-loaded");

        let stat =
            PolicySlot::new(LyreoPolicies, "static:random", None, &label(), 0, "config").unwrap();
        assert_eq!(stat.get().spec.batching, ServerBatching::Static);
        assert!(stat
            .swap(Some("least-loaded"), None, &label(), 1, "control")
            .is_err());
        stat.swap(Some("static:least-loaded"), None, &label(), 1, "control")
            .unwrap();
    }

    #[test]
    fn swap_then_rollback_restores_the_previous_version() {
        let slot =
            PolicySlot::new(LyreoPolicies, "least-loaded", None, &label(), 0, "config").unwrap();
        let first = slot.get();
        assert_eq!(first.name, "least-loaded");
        assert!(slot.changed_since(&first).is_none());
        assert!(matches!(
            slot.rollback(1, "control"),
            Err(SlotError::NoPrevious)
        ));

        let w = LearnedModel::new(Variant::Lyreo, 2)
            .to_weights("t")
            .to_bytes()
            .unwrap();
        let info = slot
            .swap(Some("lyreo"), Some(&w), &label(), 100, "control")
            .unwrap();
        assert_eq!(info.name, "lyreo");
        assert_eq!(info.version, version_hash("lyreo", &w));
        assert_eq!(info.previous.as_deref(), Some(first.version.as_str()));
        assert_eq!(
            (info.loaded_at_ns, info.requested_by.as_str()),
            (100, "control")
        );
        // A decider holding the old version sees the change at its next decision.
        let now = slot.changed_since(&first).expect("changed");
        assert!(now.spec.learned.is_some());
        // Weights only: the active policy's name with new weights.
        let w2 = LearnedModel::new(Variant::Lyreo, 3)
            .to_weights("t")
            .to_bytes()
            .unwrap();
        let info2 = slot
            .swap(None, Some(&w2), &label(), 200, "chaos#2")
            .unwrap();
        assert_eq!(info2.name, "lyreo");
        assert_ne!(info2.version, info.version);

        let back = slot.rollback(300, "control").unwrap();
        assert_eq!(back.version, info.version);
        assert_eq!(
            (back.loaded_at_ns, back.requested_by.as_str()),
            (300, "control")
        );
        let back = slot.rollback(400, "control").unwrap();
        assert_eq!(back.version, first.version);
        assert_eq!(back.name, "least-loaded");
        assert_eq!(back.previous, None);
        assert!(slot.get().spec.learned.is_none());
        assert!(matches!(
            slot.rollback(500, "control"),
            Err(SlotError::NoPrevious)
        ));
    }

    #[test]
    fn an_external_version_keeps_the_active_policy_as_its_fallback() {
        let w = ddqn_bytes(5);
        let slot = PolicySlot::new(
            RepairPolicies,
            "priorityfec-ddqn",
            Some(&w),
            &label(),
            0,
            "config",
        )
        .unwrap();
        let first = slot.get();
        let opts = ExternalOptions {
            url: "ws://127.0.0.1:7300".into(),
            deadline_ns: 2_000_000,
            fallback: None,
        };
        let info = slot
            .swap_external(&opts, None, &label(), 10, "control")
            .unwrap();
        assert_eq!(info.name, "external");
        assert_eq!(info.version, "external:ws://127.0.0.1:7300");
        assert_eq!(info.previous.as_deref(), Some(first.version.as_str()));
        let now = slot.get();
        let t = now.external.as_ref().expect("external");
        assert_eq!(
            (t.fallback.as_str(), t.fallback_version.as_str()),
            ("priorityfec-ddqn", first.version.as_str())
        );
        // The same weights, not the shipped ones.
        assert!(Arc::ptr_eq(&now.spec, &first.spec));
        // Swapping again (a new url) keeps the fallback; a named one replaces it.
        slot.swap_external(
            &ExternalOptions {
                url: "ws://127.0.0.1:7301".into(),
                ..opts.clone()
            },
            None,
            &label(),
            11,
            "control",
        )
        .unwrap();
        assert!(Arc::ptr_eq(&slot.get().spec, &first.spec));
        slot.swap_external(
            &ExternalOptions {
                fallback: Some("no-repair".into()),
                ..opts.clone()
            },
            None,
            &label(),
            12,
            "control",
        )
        .unwrap();
        assert!(matches!(slot.get().spec.as_ref(), RepairSpec::NoRepair));
        assert_eq!(slot.get().external.as_ref().unwrap().fallback, "no-repair");
        // Refusals leave the slot as it was.
        let before = slot.info();
        for (o, want) in [
            (
                ExternalOptions {
                    fallback: Some("fifo".into()),
                    ..opts.clone()
                },
                "unknown repair policy",
            ),
            (
                ExternalOptions {
                    url: " ".into(),
                    ..opts.clone()
                },
                "url",
            ),
        ] {
            let e = slot
                .swap_external(&o, None, &label(), 13, "control")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = slot
            .swap(Some("external"), None, &label(), 13, "control")
            .unwrap_err()
            .to_string();
        assert!(e.contains("url"), "{e}");
        assert_eq!(slot.info(), before);
        // Rollback walks back through the external versions.
        slot.rollback(14, "control").unwrap();
        assert_eq!(
            slot.get().external.as_ref().unwrap().url,
            "ws://127.0.0.1:7301"
        );
        slot.rollback(15, "control").unwrap();
        slot.rollback(16, "control").unwrap();
        assert!(slot.get().external.is_none());
        assert_eq!(slot.get().version, first.version);
    }

    #[test]
    fn a_slot_can_start_external_and_keeps_the_batching_rule() {
        let opts = ExternalOptions {
            url: "ws://127.0.0.1:7300".into(),
            deadline_ns: 20_000_000,
            fallback: Some("least-loaded".into()),
        };
        let slot =
            PolicySlot::new_external(LyreoPolicies, &opts, None, &label(), 0, "config").unwrap();
        assert_eq!(slot.get().spec.assignment, "least-loaded");
        assert!(PolicySlot::new_external(
            LyreoPolicies,
            &ExternalOptions {
                fallback: None,
                ..opts.clone()
            },
            None,
            &label(),
            0,
            "config"
        )
        .is_err());
        // The fallback must batch like the servers do.
        let e = slot
            .swap_external(
                &ExternalOptions {
                    fallback: Some("static:random".into()),
                    ..opts
                },
                None,
                &label(),
                1,
                "control",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("static batching"), "{e}");
        slot.swap(Some("random"), None, &label(), 2, "control")
            .unwrap();
        assert!(slot.get().external.is_none());
    }

    #[test]
    fn history_is_bounded() {
        let slot =
            PolicySlot::new(RepairPolicies, "no-repair", None, &label(), 0, "config").unwrap();
        for i in 0..(HISTORY as u64 + 5) {
            let name = if i % 2 == 0 { "fixed-rate" } else { "flec-rt" };
            slot.swap(Some(name), None, &label(), i, "t").unwrap();
        }
        let mut n = 0;
        while slot.rollback(0, "t").is_ok() {
            n += 1;
        }
        assert_eq!(n, HISTORY);
    }

    #[test]
    fn repair_specs_build_their_schedulers() {
        for name in REPAIR_POLICIES {
            let w = (*name == "priorityfec-ddqn").then(|| ddqn_bytes(4));
            let slot =
                PolicySlot::new(RepairPolicies, name, w.as_deref(), &label(), 0, "t").unwrap();
            assert_eq!(slot.get().spec.build().name(), *name);
        }
    }

    #[test]
    fn decisions_during_swaps_see_whole_versions_in_order() {
        use crate::repair::{ActionMask, RepairObservation};
        let nets: Vec<Vec<u8>> = (0..20).map(ddqn_bytes).collect();
        let versions: Vec<String> = nets
            .iter()
            .map(|w| version_hash("priorityfec-ddqn", w))
            .collect();
        let slot = Arc::new(
            PolicySlot::new(
                RepairPolicies,
                "priorityfec-ddqn",
                Some(&nets[0]),
                &label(),
                0,
                "config",
            )
            .unwrap(),
        );
        let decider = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                // A decider: reads the slot at each decision boundary and
                // rebuilds its scheduler only when the version changed.
                let mut seen = slot.get();
                let mut sched = seen.spec.build();
                let obs = RepairObservation::default();
                let mut order = vec![seen.version.clone()];
                for _ in 0..20_000 {
                    if let Some(now) = slot.changed_since(&seen) {
                        sched = now.spec.build();
                        order.push(now.version.clone());
                        seen = now;
                    }
                    let _ = sched.decide(&obs, ActionMask([true; 4]));
                }
                order
            })
        };
        for (i, w) in nets.iter().enumerate().skip(1) {
            slot.swap(None, Some(w), &label(), i as u64, "control")
                .unwrap();
        }
        let order = decider.join().unwrap();
        // Every version a decision used is a whole, known one, in swap order.
        let idx: Vec<usize> = order
            .iter()
            .map(|v| versions.iter().position(|k| k == v).expect("known version"))
            .collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "{idx:?}");
        assert_eq!(slot.get().version, versions[19]);
    }
}
