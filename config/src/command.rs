//! The control protocol as types: one serde-tagged [`Command`] enum shared by
//! the control websocket, the mesh (a forwarded command is the same JSON) and
//! `[[chaos]]` entries, and the typed replies ([`Reply`], [`Applied`],
//! [`StatusReply`], [`PolicyReply`]). `docs/control-schema.json` is
//! generated from these types ([`json_schema`]), and a test keeps it current.
//!
//! One vocabulary, one parser: a request on the wire is `{"id": …, "token":
//! …, "cmd": "<name>", <keys>}`, a chaos entry is `command = "<name>"` plus
//! the same keys (and its own `at`, `every`, `for`). Both become a
//! [`Command`] through [`Command::from_fields`] (serde: unknown keys and
//! wrong types are errors that name the key, so `edgemu check` can point at
//! it), and [`Command::resolve`] resolves names and units against the
//! cluster into a [`Resolved`] command — the only place a command's meaning
//! is decided, so the edge parses once and every host acts on the same
//! typed value.
//!
//! Adding a command: add a variant here (its keys as fields, doc comments
//! become the schema's descriptions), its name in [`Command::NAMES`] and
//! [`Command::name`], a case in [`Command::resolve`], and — for a new kind
//! of target — one variant of the router's target enum and one handler on
//! the host (see `nodes/src/host/route.rs`).

use crate::action::{check_run_file_name, parse_layer, resolve_actor, resolve_host, resolve_link};
use crate::error::ActionError;
use crate::fields::{describe_value, duration_value, missing, Errs, Obj};
use crate::model::{Cluster, LinkPatch, NetAction};
use base64::Engine as _;
use edgemu_codec::ids::{ActorId, Direction, LinkId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which direction of a link (`"ab"`: from `a` to `b`); both when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Ab,
    Ba,
}

impl From<Dir> for Direction {
    fn from(d: Dir) -> Direction {
        match d {
            Dir::Ab => Direction::AtoB,
            Dir::Ba => Direction::BtoA,
        }
    }
}

/// A link command's target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkTarget {
    /// The link's name in `cluster.toml`.
    pub link: String,
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub dir: Option<Dir>,
    /// Heal after this long (a duration like `"3s"`); `link.kill` only.
    #[serde(default, rename = "for")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
}

/// `link.set`: a link, a direction, and the parameters to change (same
/// syntax as in `[[links]]`; at least one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkSet {
    pub link: String,
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub dir: Option<Dir>,
    /// Heal (remove this change) after this long.
    #[serde(default, rename = "for")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    /// A rate like `"20Mbps"` or `"unlimited"`.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// A mahimahi trace file inside the config's folder.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub rate_trace: Option<String>,
    /// A step trace file inside the config's folder.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub rate_steps: Option<String>,
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub rtt: Option<String>,
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// A size like `"256KiB"` or `"unlimited"`.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A loss table as in `[[links]]`: `{"model": "ge", "eps_g": …}`.
    #[serde(default, with = "crate::command_wire::loss_table")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Map<String, Value>>")]
    pub loss: Option<Map<String, Value>>,
}

/// Two different hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostPair {
    /// Two different host names, like `["alpha", "beta"]`.
    #[schemars(length(min = 2, max = 2))]
    pub hosts: Vec<String>,
    /// Heal after this long; `host.partition` only.
    #[serde(default, rename = "for")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
}

/// `link.flap`: random up/down with exponential holding times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkFlap {
    pub link: String,
    /// Mean up time (a duration).
    pub mtbf: String,
    /// Mean down time (a duration).
    pub mttr: String,
    /// Default: the run's seed.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop flapping at this run time (a duration from the start).
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// `metrics.subscribe`: a `{"event": "metrics", …}` message every `interval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// Period (a duration, default `"1s"`, at least 10 ms).
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// `policy.get`, `policy.rollback`: the actor whose policy slot is meant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyTarget {
    /// The name of an actor that holds a policy (a request scheduler, a
    /// handoff sender).
    pub actor: String,
}

/// `policy.swap`: a policy name and/or weights (a file or inline bytes);
/// validated on the owning host before the atomic swap, the old policy
/// kept on any error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySwap {
    pub actor: String,
    /// The policy to run (`"least-loaded"`, `"lyreo"`, `"priorityfec-ddqn"`,
    /// …); absent: the active policy's name with new weights.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// A safetensors weights file, relative to the config file's folder
    /// (no `..`, at most 64 MiB), read on the host that owns `actor`.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    /// The safetensors bytes inline, standard base64; at most 512 KiB
    /// decoded.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub weights_base64: Option<String>,
    /// With `policy = "external"`: the policy process's websocket
    /// (`ws://host:port`); default: the actor's `external.url`.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// With `policy = "external"`: how long a decision waits for the
    /// policy process (a duration); default: the actor's
    /// `external.deadline`, else 20 ms for a slot and 2 ms for a repair
    /// decision.
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// With `policy = "external"`: the built-in policy that decides when the
    /// policy process does not (timeout, error, malformed or masked action,
    /// no connection); default: the actor's `external.fallback`, else the
    /// active policy (weights, if given, are the fallback's).
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// `actor.kill`, `actor.restart`: one actor (a LYREO user, server or
/// scheduler, an agent; link probes cannot be killed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActorTarget {
    /// The actor's name in `cluster.toml`.
    pub actor: String,
    /// Restart by itself after this long (a duration like `"5s"`);
    /// `actor.kill` only.
    #[serde(default, rename = "for")]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
}

/// Nothing but the command name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoKeys {}

/// One control command, tagged by `cmd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "cmd")]
pub enum Command {
    /// Counters of every host (links, router, mesh): a [`StatusReply`].
    #[serde(rename = "status")]
    Status(NoKeys),
    /// The same as `status`.
    #[serde(rename = "metrics")]
    Metrics(NoKeys),
    #[serde(rename = "metrics.subscribe")]
    MetricsSubscribe(Subscribe),
    #[serde(rename = "link.kill")]
    LinkKill(LinkTarget),
    #[serde(rename = "link.restore")]
    LinkRestore(LinkTarget),
    #[serde(rename = "link.set")]
    LinkSet(LinkSet),
    #[serde(rename = "link.flap")]
    LinkFlap(LinkFlap),
    #[serde(rename = "host.partition")]
    HostPartition(HostPair),
    #[serde(rename = "host.heal")]
    HostHeal(HostPair),
    /// The active policy of an actor: a [`PolicyReply`].
    #[serde(rename = "policy.get")]
    PolicyGet(PolicyTarget),
    /// Swap an actor's policy: a [`PolicyReply`] with the new version.
    #[serde(rename = "policy.swap")]
    PolicySwap(PolicySwap),
    /// Return an actor's policy to its previous version: a [`PolicyReply`].
    #[serde(rename = "policy.rollback")]
    PolicyRollback(PolicyTarget),
    /// Kill an actor (it drops what it holds; see docs/control.md): an
    /// [`Applied`].
    #[serde(rename = "actor.kill")]
    ActorKill(ActorTarget),
    /// Restart a killed actor, empty: an [`Applied`].
    #[serde(rename = "actor.restart")]
    ActorRestart(ActorTarget),
    /// End the run on every host.
    #[serde(rename = "run.stop")]
    RunStop(NoKeys),
}

/// A command with names resolved against the cluster: what hosts act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Status,
    Subscribe {
        interval_ns: u64,
    },
    RunStop,
    /// A command on links or hosts, with its optional self-heal delay.
    Action {
        action: NetAction,
        for_ns: Option<u64>,
    },
    /// A command on the policy slot of `actor` (owned by the actor's host).
    Policy {
        actor: ActorId,
        op: PolicyOp,
    },
}

/// What to do with a policy slot.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyOp {
    Get,
    Rollback,
    /// At least one of `policy` and `weights` is given; `external` exactly
    /// when `policy` is `external`.
    Swap {
        policy: Option<String>,
        weights: Option<Weights>,
        external: Option<ExternalSwap>,
    },
}

/// A `policy.swap` to `external`, its settings resolved against the
/// actor's `external` table; the deadline and fallback left out default on
/// the owning host (the problem's deadline, the active policy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalSwap {
    pub url: String,
    pub deadline_ns: Option<u64>,
    pub fallback: Option<String>,
}

/// Where `policy.swap` weights come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Weights {
    /// A file relative to the config file's folder (name checked; read with
    /// [`crate::read_run_file`] on the owning host, off its actors' thread).
    File(String),
    /// Decoded inline bytes.
    Inline(Arc<[u8]>),
}

/// Largest decoded `weights_base64` of a `policy.swap`.
pub const MAX_INLINE_WEIGHTS_BYTES: usize = 512 * 1024;
/// Largest weights file a `policy.swap` may name (as the policies crate).
pub const MAX_WEIGHTS_FILE_BYTES: u64 = 64 << 20;

/// The request envelope keys that are not part of a command.
pub const ENVELOPE_KEYS: &[&str] = &["id", "token"];

/// Commands whose fault `for` can heal.
pub const HEALABLE: &[&str] = &["link.kill", "link.set", "host.partition", "actor.kill"];

/// The error for `for` on a command with nothing to heal.
pub(crate) fn nothing_to_heal(name: &str) -> ActionError {
    ActionError::invalid(
        "for",
        format!(
            "{name:?} has no fault to heal; `for` is valid only with {}",
            HEALABLE.join(", ")
        ),
    )
}

impl Command {
    /// Every command name, in schema order.
    pub const NAMES: &'static [&'static str] = &[
        "status",
        "metrics",
        "metrics.subscribe",
        "link.kill",
        "link.restore",
        "link.set",
        "link.flap",
        "host.partition",
        "host.heal",
        "policy.get",
        "policy.swap",
        "policy.rollback",
        "actor.kill",
        "actor.restart",
        "run.stop",
    ];

    /// Deserializes a request object (envelope keys are ignored).
    pub fn from_request(request: &Value) -> Result<Command, ActionError> {
        let Value::Object(obj) = request else {
            return Err(ActionError::invalid(
                "cmd",
                "a request must be a JSON object",
            ));
        };
        let mut obj = obj.clone();
        for k in ENVELOPE_KEYS {
            obj.remove(*k);
        }
        Command::from_fields(&obj)
    }

    /// Deserializes `{"cmd": name, <keys>}`. Errors name the key at fault
    /// (serde's own message, with the key found), so a `[[chaos]]` entry's
    /// error points at its line.
    pub fn from_fields(obj: &Map<String, Value>) -> Result<Command, ActionError> {
        let name = match obj.get("cmd") {
            None => return Err(missing("cmd", "a command name")),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(ActionError::invalid(
                    "cmd",
                    format!("expected a string, found {}", describe_value(v)),
                ))
            }
        };
        if !Command::NAMES.contains(&name.as_str()) {
            return Err(ActionError::UnknownCommand {
                command: name,
                valid: Command::NAMES.iter().map(|s| s.to_string()).collect(),
            });
        }
        let attempt =
            |o: &Map<String, Value>| serde_json::from_value::<Command>(Value::Object(o.clone()));
        attempt(obj).map_err(|e| locate_error(&name, obj, &e.to_string(), attempt))
    }

    /// The request object a control socket parses into this command
    /// (`{"cmd": name, <keys>}`; keys left out are absent, not `null`).
    pub fn to_request(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(obj) = &mut v {
            obj.retain(|_, value| !value.is_null());
        }
        v
    }

    /// The command's name (`cmd`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Status(_) => "status",
            Command::Metrics(_) => "metrics",
            Command::MetricsSubscribe(_) => "metrics.subscribe",
            Command::LinkKill(_) => "link.kill",
            Command::LinkRestore(_) => "link.restore",
            Command::LinkSet(_) => "link.set",
            Command::LinkFlap(_) => "link.flap",
            Command::HostPartition(_) => "host.partition",
            Command::HostHeal(_) => "host.heal",
            Command::PolicyGet(_) => "policy.get",
            Command::PolicySwap(_) => "policy.swap",
            Command::PolicyRollback(_) => "policy.rollback",
            Command::ActorKill(_) => "actor.kill",
            Command::ActorRestart(_) => "actor.restart",
            Command::RunStop(_) => "run.stop",
        }
    }

    /// The command's `for` key, for the commands that have one (a chaos
    /// entry sets it from its own `for`).
    pub fn heal_after_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            Command::LinkKill(t) | Command::LinkRestore(t) => Some(&mut t.for_),
            Command::LinkSet(s) => Some(&mut s.for_),
            Command::HostPartition(p) | Command::HostHeal(p) => Some(&mut p.for_),
            Command::ActorKill(t) | Command::ActorRestart(t) => Some(&mut t.for_),
            _ => None,
        }
    }

    /// Whether a `[[chaos]]` entry may run this command (not the ones that
    /// only answer a client).
    pub fn in_chaos(&self) -> bool {
        !matches!(
            self,
            Command::Status(_) | Command::Metrics(_) | Command::MetricsSubscribe(_)
        )
    }

    /// Resolves names and units against `cluster` (may read trace files
    /// that `link.set` names: call it off an actor's thread). Weights files
    /// are only checked by name here; the owning host reads them.
    pub fn resolve(&self, cluster: &Cluster) -> Result<Resolved, ActionError> {
        let base_dir = cluster.source.parent().unwrap_or(std::path::Path::new(""));
        let for_ns = |f: &Option<String>| -> Result<Option<u64>, ActionError> {
            f.as_deref()
                .map(|s| duration_value("for", &Value::String(s.into()), true))
                .transpose()
        };
        let no_for = |f: &Option<String>| match f {
            Some(_) => Err(nothing_to_heal(self.name())),
            None => Ok(()),
        };
        let action = |action: NetAction, for_ns: Option<u64>| Resolved::Action { action, for_ns };
        Ok(match self {
            Command::Status(_) | Command::Metrics(_) => Resolved::Status,
            Command::RunStop(_) => Resolved::RunStop,
            Command::MetricsSubscribe(s) => {
                let ns = match &s.interval {
                    None => 1_000_000_000,
                    Some(i) => duration_value("interval", &Value::String(i.clone()), false)?,
                };
                Resolved::Subscribe {
                    interval_ns: ns.max(10_000_000),
                }
            }
            Command::LinkKill(t) => action(
                NetAction::LinkKill {
                    link: resolve_link(cluster, "link", &t.link)?,
                    dir: t.dir.map(Into::into),
                },
                for_ns(&t.for_)?,
            ),
            Command::LinkRestore(t) => {
                no_for(&t.for_)?;
                action(
                    NetAction::LinkRestore {
                        link: resolve_link(cluster, "link", &t.link)?,
                        dir: t.dir.map(Into::into),
                    },
                    None,
                )
            }
            Command::LinkSet(s) => {
                let link = resolve_link(cluster, "link", &s.link)?;
                let mut obj = Obj::new();
                for (k, v) in [
                    ("rate", &s.rate),
                    ("rate_trace", &s.rate_trace),
                    ("rate_steps", &s.rate_steps),
                    ("delay", &s.delay),
                    ("rtt", &s.rtt),
                    ("jitter", &s.jitter),
                    ("queue", &s.queue),
                ] {
                    if let Some(v) = v {
                        obj.insert(k.into(), Value::String(v.clone()));
                    }
                }
                if let Some(l) = &s.loss {
                    obj.insert("loss".into(), Value::Object(l.clone()));
                }
                let mut errs = Errs::default();
                let layer = parse_layer(&obj, base_dir, &mut errs);
                if let Some(e) = errs.0.into_iter().next() {
                    return Err(e);
                }
                if layer.is_empty() {
                    return Err(missing(
                        "rate",
                        "at least one of `rate`, `rate_trace`, `rate_steps`, `delay`, `rtt`, `jitter`, `queue`, `loss`",
                    ));
                }
                action(
                    NetAction::LinkSet {
                        link,
                        dir: s.dir.map(Into::into),
                        patch: LinkPatch {
                            rate: layer.rate,
                            delay_ns: layer.delay_ns,
                            jitter_ns: layer.jitter_ns,
                            queue_bytes: layer.queue_bytes,
                            loss: layer.loss,
                        },
                    },
                    for_ns(&s.for_)?,
                )
            }
            Command::LinkFlap(f) => action(
                NetAction::LinkFlap {
                    link: resolve_link(cluster, "link", &f.link)?,
                    mtbf_ns: duration_value("mtbf", &Value::String(f.mtbf.clone()), true)?,
                    mttr_ns: duration_value("mttr", &Value::String(f.mttr.clone()), true)?,
                    seed: f.seed.unwrap_or(cluster.run.seed),
                    until_ns: f
                        .until
                        .as_deref()
                        .map(|u| duration_value("until", &Value::String(u.into()), false))
                        .transpose()?,
                },
                None,
            ),
            Command::HostPartition(p) => {
                let (a, b) = two_hosts(cluster, &p.hosts)?;
                action(NetAction::HostPartition { a, b }, for_ns(&p.for_)?)
            }
            Command::HostHeal(p) => {
                no_for(&p.for_)?;
                let (a, b) = two_hosts(cluster, &p.hosts)?;
                action(NetAction::HostHeal { a, b }, None)
            }
            Command::PolicyGet(t) => Resolved::Policy {
                actor: resolve_actor(cluster, "actor", &t.actor)?,
                op: PolicyOp::Get,
            },
            Command::PolicyRollback(t) => Resolved::Policy {
                actor: resolve_actor(cluster, "actor", &t.actor)?,
                op: PolicyOp::Rollback,
            },
            Command::PolicySwap(s) => {
                let actor = resolve_actor(cluster, "actor", &s.actor)?;
                Resolved::Policy {
                    actor,
                    op: resolve_swap(s, cluster, actor)?,
                }
            }
            Command::ActorKill(t) => action(
                NetAction::ActorKill {
                    actor: faultable_actor(cluster, &t.actor)?,
                },
                for_ns(&t.for_)?,
            ),
            Command::ActorRestart(t) => {
                no_for(&t.for_)?;
                action(
                    NetAction::ActorRestart {
                        actor: faultable_actor(cluster, &t.actor)?,
                    },
                    None,
                )
            }
        })
    }
}

/// An actor that `actor.kill` / `actor.restart` can reach: every kind but
/// the link probes (`constant`, `bursty`, `pinger`, `sink`), which measure
/// links and have nothing to lose (kill their link instead).
fn faultable_actor(cluster: &Cluster, name: &str) -> Result<ActorId, ActionError> {
    let id = resolve_actor(cluster, "actor", name)?;
    let kind = &cluster.actor(id).kind;
    if kind.is_link_probe() {
        return Err(ActionError::invalid(
            "actor",
            format!(
                "actor {name:?} is a {} (a link probe), which cannot be killed or restarted; kill its link instead (`link.kill`)",
                kind.kind_name()
            ),
        ));
    }
    Ok(id)
}

fn resolve_swap(
    s: &PolicySwap,
    cluster: &Cluster,
    actor: ActorId,
) -> Result<PolicyOp, ActionError> {
    if let Some(p) = &s.policy {
        if p.trim().is_empty() {
            return Err(ActionError::invalid(
                "policy",
                "expected a policy name, found an empty string",
            ));
        }
    }
    let external = resolve_external_swap(s, cluster, actor)?;
    let weights = match (&s.weights, &s.weights_base64) {
        (Some(_), Some(_)) => {
            return Err(ActionError::invalid(
                "weights_base64",
                "give either `weights` (a file) or `weights_base64` (the bytes), not both",
            ))
        }
        (Some(name), None) => {
            check_run_file_name("weights", name)?;
            Some(Weights::File(name.clone()))
        }
        (None, Some(b64)) => Some(Weights::Inline(decode_inline(b64)?.into())),
        (None, None) => None,
    };
    if s.policy.is_none() && weights.is_none() {
        return Err(missing(
            "policy",
            "a policy name, weights (`weights` or `weights_base64`), or both",
        ));
    }
    Ok(PolicyOp::Swap {
        policy: s.policy.clone(),
        weights,
        external,
    })
}

/// The settings of a swap to `external` (the entry's, else the actor's
/// `external` table's); `url`, `deadline` and `fallback` belong to that
/// swap only.
fn resolve_external_swap(
    s: &PolicySwap,
    cluster: &Cluster,
    actor: ActorId,
) -> Result<Option<ExternalSwap>, ActionError> {
    use crate::external::{check_deadline, check_fallback, check_url, EXTERNAL_POLICY};
    let to_external = s
        .policy
        .as_deref()
        .is_some_and(|p| p.trim().eq_ignore_ascii_case(EXTERNAL_POLICY));
    if !to_external {
        for (key, v) in [
            ("url", &s.url),
            ("deadline", &s.deadline),
            ("fallback", &s.fallback),
        ] {
            if v.is_some() {
                return Err(ActionError::invalid(
                    key,
                    format!("`{key}` is a setting of an external policy; give it with `policy = \"external\"`"),
                ));
            }
        }
        return Ok(None);
    }
    if cluster.run.time == crate::TimeMode::Virtual {
        return Err(virtual_external("policy"));
    }
    let spec = cluster.get_actor(actor);
    let (table, room) = match spec.map(|a| &a.kind) {
        Some(crate::ActorKind::Scheduler(sc)) => (
            sc.external.as_ref(),
            Some(sc.slot_ns.saturating_sub(sc.collect_ns)),
        ),
        Some(crate::ActorKind::Agent(ag)) => (ag.external.as_ref(), None),
        _ => {
            return Err(ActionError::invalid(
                "policy",
                format!(
                    "actor {:?} decides nothing an external policy could: expected a scheduler or an agent",
                    s.actor
                ),
            ))
        }
    };
    let url = match (&s.url, table) {
        (Some(u), _) => u.clone(),
        (None, Some(t)) => t.url.clone(),
        (None, None) => {
            return Err(missing(
                "url",
                "the policy process's websocket, like \"ws://127.0.0.1:7300\" (the actor has no `external` table to take it from)",
            ))
        }
    };
    check_url("url", &url)?;
    let deadline_ns = match &s.deadline {
        Some(d) => Some(duration_value("deadline", &Value::String(d.clone()), true)?),
        None => table.and_then(|t| t.deadline_ns),
    };
    if let Some(d) = deadline_ns {
        check_deadline("deadline", d)?;
        if let Some(room) = room.filter(|&r| d >= r) {
            return Err(ActionError::invalid(
                "deadline",
                format!(
                    "expected a deadline shorter than the scheduler's slot less `collect` ({}), found {}",
                    crate::units::fmt_duration(room),
                    crate::units::fmt_duration(d)
                ),
            ));
        }
    }
    let fallback = match &s.fallback {
        Some(f) => {
            check_fallback("fallback", f)?;
            Some(f.trim().to_ascii_lowercase())
        }
        None => table.and_then(|t| t.fallback.clone()),
    };
    Ok(Some(ExternalSwap {
        url,
        deadline_ns,
        fallback,
    }))
}

/// Why an external policy is refused in a virtual-time run.
pub(crate) fn virtual_external(key: &str) -> ActionError {
    ActionError::invalid(
        key,
        "an external policy is a process asked over a websocket in real time; a virtual-time run (time = \"virtual\") does no real I/O and cannot wait for it: use a built-in policy, or time = \"real\"",
    )
}

/// Decodes inline weights, refusing an oversized blob before decoding it.
fn decode_inline(b64: &str) -> Result<Vec<u8>, ActionError> {
    let key = "weights_base64";
    let decoded_len = b64.len() / 4 * 3;
    if decoded_len > MAX_INLINE_WEIGHTS_BYTES + 3 {
        return Err(ActionError::invalid(
            key,
            format!(
                "about {decoded_len} bytes, more than the {MAX_INLINE_WEIGHTS_BYTES}-byte limit for inline weights; name a file under the config's folder with `weights`"
            ),
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ActionError::invalid(key, format!("not valid base64: {e}")))?;
    if bytes.len() > MAX_INLINE_WEIGHTS_BYTES {
        return Err(ActionError::invalid(
            key,
            format!(
                "{} bytes, more than the {MAX_INLINE_WEIGHTS_BYTES}-byte limit for inline weights",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

fn two_hosts(
    cluster: &Cluster,
    hosts: &[String],
) -> Result<(edgemu_codec::ids::HostId, edgemu_codec::ids::HostId), ActionError> {
    let [a, b] = hosts else {
        return Err(ActionError::invalid(
            "hosts",
            format!(
                "expected two host names, like [\"alpha\", \"beta\"], found {} names",
                hosts.len()
            ),
        ));
    };
    let (a, b) = (
        resolve_host(cluster, "hosts", a)?,
        resolve_host(cluster, "hosts", b)?,
    );
    if a == b {
        return Err(ActionError::invalid(
            "hosts",
            format!(
                "expected two different hosts, found {:?} twice",
                cluster.host(a).name
            ),
        ));
    }
    Ok((a, b))
}

/// Turns serde's error for command `name` into one that names the key.
/// Serde names the key for unknown and missing keys; for a wrong type or
/// value it does not, so the key whose removal changes the outcome is
/// found by trying without each one (commands have a dozen keys at most;
/// a larger object is not searched).
fn locate_error(
    name: &str,
    obj: &Map<String, Value>,
    msg: &str,
    attempt: impl Fn(&Map<String, Value>) -> Result<Command, serde_json::Error>,
) -> ActionError {
    let ticked: Vec<&str> = msg.split('`').skip(1).step_by(2).collect();
    if msg.starts_with("unknown field `") {
        if let Some((field, valid)) = ticked.split_first() {
            return ActionError::UnknownField {
                field: field.to_string(),
                context: format!("command {name:?}"),
                valid: valid.iter().map(|s| s.to_string()).collect(),
            };
        }
    }
    if msg.starts_with("missing field `") {
        if let Some(field) = ticked.first() {
            return missing(field, &format!("a value (see {name:?} in docs/control.md)"));
        }
    }
    if obj.len() <= 16 {
        for key in obj.keys().filter(|k| *k != "cmd") {
            let mut without = obj.clone();
            without.remove(key);
            let culprit = match attempt(&without) {
                Ok(_) => true,
                Err(e) => e.to_string() == format!("missing field `{key}`"),
            };
            if culprit {
                return ActionError::invalid(key, msg.to_string());
            }
        }
    }
    ActionError::invalid("cmd", format!("{name:?}: {msg}"))
}

/// What one target of a command did (an element of `applied`).
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
// Serialize: `crate::command_wire` (optional fields left out of JSON when empty,
// always present in bincode).
pub struct AppliedTarget {
    /// The host that owns the target.
    pub host: String,
    /// What was acted on, like `"link wan ab"`, `"peer beta"` or
    /// `"actor s1"`.
    pub target: String,
    /// Run time (ns) at which it took effect.
    pub effective_ns: u64,
    /// What it did, when the target says (an actor: `"killed; dropped 3
    /// requests (2 running, 1 queued)"`, `"already dead"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of a command that acts on links or hosts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Applied {
    pub applied: Vec<AppliedTarget>,
    /// Hosts that could not be reached or refused, one line each.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The result of `policy.get`, `policy.swap` and `policy.rollback`: the
/// slot's active version after the command.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
// Serialize: `crate::command_wire` (optional fields left out of JSON when empty,
// always present in bincode).
pub struct PolicyReply {
    /// The host that owns the actor.
    pub host: String,
    pub actor: String,
    /// The decision problem (`"request scheduling"`, `"repair"`).
    pub problem: String,
    /// The active policy's name.
    pub policy: String,
    /// SHA-256 (hex) of the name, a zero byte and the weights bytes.
    pub version: String,
    /// Run time (ns) at which this version became active.
    pub loaded_at_ns: u64,
    /// Who asked for it: `"config"`, `"control"`, `"control (via alpha)"`,
    /// `"chaos#3"`.
    pub requested_by: String,
    /// The version `policy.rollback` would return to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// One direction of a link, as `status` reports it.
// Also what the link actor answers `GetLinkStats` with: the one snapshot type
// of a link direction (`status`, the dashboard, `/metrics`, `links.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkStatus {
    /// The link's id (its position in `cluster.toml`).
    #[schemars(with = "u32")]
    pub link: LinkId,
    pub name: String,
    /// `"ab"` or `"ba"`.
    #[serde(with = "direction_text")]
    #[schemars(with = "String")]
    pub dir: Direction,
    /// Run time of the reading (ns).
    pub t_ns: u64,
    pub up: bool,
    /// Configured rate now, bits/s (absent: unlimited or a trace).
    pub rate_bps: Option<u64>,
    pub delay_ns: u64,
    /// Packets offered, delivered, lost to the loss model, dropped by the
    /// full queue, dropped while down; retransmissions (reliable delivery).
    pub offered: u64,
    pub delivered: u64,
    pub lost: u64,
    pub queue_dropped: u64,
    pub down_dropped: u64,
    pub retransmissions: u64,
    pub bytes_offered: u64,
    pub bytes_delivered: u64,
    pub queued_bytes: u64,
    pub delay_p50_ns: u64,
    pub delay_p99_ns: u64,
    pub delay_max_ns: u64,
    /// The loss model's stationary loss, if it has one.
    pub expected_loss: Option<f64>,
}

/// A [`Direction`] as the control protocol writes it: `"ab"` or `"ba"`.
mod direction_text {
    use super::Dir;
    use edgemu_codec::ids::Direction;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(d: &Direction, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Direction::AtoB => Dir::Ab,
            Direction::BtoA => Dir::Ba,
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Direction, D::Error> {
        Dir::deserialize(d).map(Direction::from)
    }
}

/// A host's router: envelopes delivered and dropped, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouterStatus {
    pub delivered_local: u64,
    pub sent_remote: u64,
    pub received_remote: u64,
    pub dropped_unknown: u64,
    pub dropped_queue_full: u64,
    pub dropped_peer_down: u64,
    pub dropped_partition: u64,
    pub dropped_bad_route: u64,
    /// Envelopes from peers dropped because the router was too far behind.
    pub dropped_inbound_full: u64,
}

/// The mesh session with one peer host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MeshPeerStatus {
    pub up: bool,
    /// Frames that could not be decoded (dropped).
    pub malformed_frames: u64,
    /// Control frames dropped because the control queue to the peer was full.
    pub control_dropped: u64,
    /// Sessions ended because a write did not finish in time.
    pub write_timeouts: u64,
    /// Sessions ended because the peer was silent too long.
    pub silences: u64,
}

/// What a host's control socket refused (zero without a control address).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ControlStatus {
    /// Requests that were not a JSON object (or were binary frames).
    pub malformed_requests: u64,
    /// Requests with a missing or wrong token.
    pub unauthorized: u64,
    /// Connections closed because a message or frame was over the size limit.
    pub oversized_messages: u64,
    /// Connections, requests and subscriptions refused by a limit.
    pub refused_busy: u64,
}

/// The counters of one host, or why they are missing.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
// Serialize: `crate::command_wire` (optional fields left out of JSON when empty,
// always present in bincode).
pub struct HostStatus {
    pub host: String,
    /// Run time of the reading (ns).
    pub t_ns: u64,
    /// The link directions this host sends.
    pub links: Vec<LinkStatus>,
    pub router: RouterStatus,
    /// Mesh sessions by peer host name (empty in virtual time).
    pub mesh: BTreeMap<String, MeshPeerStatus>,
    /// The host's control socket.
    #[serde(default)]
    pub control: ControlStatus,
    /// The context-KV cache of each agent on this host (moka, weighed by
    /// bytes): `hits`, `misses`, `evictions`, `entries`, `bytes`,
    /// `capacity_bytes`. Absent without agents.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kv_caches: BTreeMap<String, BTreeMap<String, u64>>,
    /// How loaded the host is (real time only; absent in virtual time and
    /// before the first second of a run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<HostLoad>,
    /// Set when the host could not be asked; then the counters are empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How loaded a host is: how late a 10 ms timer on its actor thread fires
/// (over the last few seconds) and the CPU the process uses. A host whose
/// timers fall late delays every link, slot and decision it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostLoad {
    /// Lateness of the host's probe timer over the window, ms.
    pub timer_late_p50_ms: f64,
    pub timer_late_p99_ms: f64,
    pub timer_late_max_ms: f64,
    /// Ticks in the window, and those more than one period late.
    pub ticks: u64,
    pub late_ticks: u64,
    /// The window, s.
    pub window_s: f64,
    /// CPU cores the process used over the last second (user + system).
    pub cpu_cores: f64,
    /// CPU seconds the process used since it started.
    pub cpu_s: f64,
}

/// The result of `status` and `metrics` (and each metrics event).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatusReply {
    pub hosts: Vec<HostStatus>,
}

/// A command's typed result: what a host answers a command with (and a
/// forwarded command's reply carries between hosts); the control socket
/// writes it as the `result` of its [`Reply`] ([`CommandReply::to_json`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandReply {
    /// `status`, `metrics`.
    Status(StatusReply),
    /// Link, host and actor commands, `run.stop`.
    Applied(Applied),
    /// `policy.get`, `policy.swap`, `policy.rollback`.
    Policy(PolicyReply),
}

impl CommandReply {
    /// The reply's JSON, as the `result` of a [`Reply`].
    pub fn to_json(&self) -> Result<Value, serde_json::Error> {
        match self {
            CommandReply::Status(r) => serde_json::to_value(r),
            CommandReply::Applied(r) => serde_json::to_value(r),
            CommandReply::Policy(r) => serde_json::to_value(r),
        }
    }
}

/// The reply to one request: `ok` with a `result`, or an `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reply {
    /// The request's `id`, echoed.
    pub id: Value,
    pub ok: bool,
    /// `status`, `metrics`: a [`StatusReply`]; link, host and actor
    /// commands and `run.stop`: an [`Applied`]; `policy.*`: a [`PolicyReply`];
    /// `metrics.subscribe`: `{"subscribed": true}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    pub fn new(id: Value, result: Result<Value, String>) -> Reply {
        match result {
            Ok(v) => Reply {
                id,
                ok: true,
                result: Some(v),
                error: None,
            },
            Err(e) => Reply {
                id,
                ok: false,
                result: None,
                error: Some(e),
            },
        }
    }
}

/// The protocol's JSON Schema (requests and replies), as written to
/// `docs/control-schema.json`.
pub fn json_schema() -> String {
    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct ControlProtocol {
        /// A request: `id` (any JSON, echoed), `token` (unless given in the
        /// websocket upgrade), and one command.
        request: Command,
        reply: Reply,
        /// `result` of link, host, actor and `run.stop` commands.
        applied: Applied,
        /// `result` of `status` and `metrics`.
        status: StatusReply,
        /// `result` of `policy.get`, `policy.swap`, `policy.rollback`.
        policy: PolicyReply,
    }
    let schema = schemars::schema_for!(ControlProtocol);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_into_commands() {
        let c = Command::from_request(&serde_json::json!({
            "id": 4, "token": "t", "cmd": "link.kill", "link": "wan", "dir": "ab", "for": "3s"
        }))
        .unwrap();
        assert_eq!(
            c,
            Command::LinkKill(LinkTarget {
                link: "wan".into(),
                dir: Some(Dir::Ab),
                for_: Some("3s".into())
            })
        );
        let e = Command::from_request(
            &serde_json::json!({"cmd": "link.kill", "link": "wan", "rate": "1Mbps"}),
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("rate"));
        assert!(e.to_string().contains("valid keys: link, dir, for"), "{e}");
        let e = Command::from_request(&serde_json::json!({"cmd": "link.zap"})).unwrap_err();
        assert!(matches!(e, ActionError::UnknownCommand { .. }), "{e}");
        assert!(e.to_string().contains("link.zap"), "{e}");
        assert!(Command::from_request(&serde_json::json!({"cmd": 3})).is_err());
        assert!(Command::from_request(&serde_json::json!([1])).is_err());
        assert_eq!(
            Command::from_request(&serde_json::json!({"cmd": "status"})).unwrap(),
            Command::Status(NoKeys {})
        );
    }

    #[test]
    fn errors_name_the_key_at_fault() {
        let at = |v: Value| {
            Command::from_request(&v)
                .unwrap_err()
                .field()
                .map(str::to_string)
        };
        use serde_json::json;
        assert_eq!(
            at(json!({"cmd": "link.kill", "link": "wan", "dir": "up"})),
            Some("dir".into())
        );
        assert_eq!(
            at(json!({"cmd": "link.kill", "link": 5})),
            Some("link".into())
        );
        assert_eq!(
            at(json!({"cmd": "link.flap", "link": "wan", "mtbf": "1s"})),
            Some("mttr".into())
        );
        assert_eq!(
            at(json!({"cmd": "link.flap", "link": "wan", "mtbf": "1s", "mttr": "1s", "seed": -1})),
            Some("seed".into())
        );
        assert_eq!(
            at(json!({"cmd": "policy.swap", "actor": "s", "weights": ["x"]})),
            Some("weights".into())
        );
    }

    #[test]
    fn names_list_every_variant() {
        // Every listed name is a variant (serde does not call it unknown)
        // and `name()` agrees.
        for name in Command::NAMES {
            let e = serde_json::from_value::<Command>(serde_json::json!({ "cmd": name }));
            if let Err(e) = &e {
                assert!(!e.to_string().contains("unknown variant"), "{name}: {e}");
            }
            if let Ok(c) = e {
                assert_eq!(c.name(), *name);
            }
        }
        let schema: Value = serde_json::from_str(&json_schema()).unwrap();
        let variants = schema["$defs"]["Command"]["oneOf"]
            .as_array()
            .map_or(0, |a| a.len());
        assert_eq!(variants, Command::NAMES.len());
    }

    #[test]
    fn inline_weights_are_capped_before_decoding() {
        let big = "A".repeat(MAX_INLINE_WEIGHTS_BYTES / 3 * 4 + 64);
        let e = decode_inline(&big).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        assert!(decode_inline("%%%")
            .unwrap_err()
            .to_string()
            .contains("base64"));
        assert_eq!(decode_inline("AAEC").unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn link_status_writes_its_id_and_direction_as_the_protocol_does() {
        let l = LinkStatus {
            link: LinkId(3),
            name: "wan".into(),
            dir: Direction::BtoA,
            t_ns: 1,
            up: true,
            rate_bps: None,
            delay_ns: 0,
            offered: 0,
            delivered: 0,
            lost: 0,
            queue_dropped: 0,
            down_dropped: 0,
            retransmissions: 0,
            bytes_offered: 0,
            bytes_delivered: 0,
            queued_bytes: 0,
            delay_p50_ns: 0,
            delay_p99_ns: 0,
            delay_max_ns: 0,
            expected_loss: Some(0.5),
        };
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["link"], 3);
        assert_eq!(v["dir"], "ba");
        assert_eq!(serde_json::from_value::<LinkStatus>(v).unwrap(), l);
        let mut bad = serde_json::to_value(&l).unwrap();
        bad["dir"] = "up".into();
        assert!(serde_json::from_value::<LinkStatus>(bad).is_err());
    }

    #[test]
    fn the_schema_in_docs_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/control-schema.json");
        let fresh = json_schema();
        if std::env::var_os("EDGEMU_WRITE_SCHEMA").is_some() {
            std::fs::write(&path, &fresh).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == fresh,
            "docs/control-schema.json is out of date: run EDGEMU_WRITE_SCHEMA=1 cargo test -p edgemu-config the_schema_in_docs_is_current"
        );
    }
}
