//! The control protocol as types: one serde-tagged [`Command`] enum shared by
//! the control websocket, the mesh (a forwarded command is the same JSON) and
//! `[[chaos]]` entries (same keys, checked by the same [`parse_action`]), and
//! the typed [`Reply`]. `docs/control-schema.json` is generated from these
//! types (`edgemu_config::command::json_schema`), and a test keeps it current.
//!
//! A request on the wire is `{"id": …, "token": …, "cmd": "<name>", <keys>}`.
//! [`Command::from_request`] strips the envelope keys (`id`, `token`),
//! deserializes the rest (unknown keys and wrong types are errors) and
//! [`Command::resolve`] resolves names against the cluster into a
//! [`Resolved`] command — the only place a command's meaning is decided, so
//! the edge parses once and every host acts on the same typed value.
//!
//! Adding a command: add a variant here (its keys as fields, doc comments
//! become the schema's descriptions), a case in [`Command::resolve`], and
//! — for a new kind of target — one variant of the router's target enum and
//! one handler on the host (see `nodes/src/host/route.rs`).

use crate::action::parse_action;
use crate::error::ActionError;
use crate::model::{ChaosAction, Cluster};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which direction of a link (`"ab"`: from `a` to `b`); both when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    Ab,
    Ba,
}

/// A link command's target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkTarget {
    /// The link's name in `cluster.toml`.
    pub link: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<Dir>,
    /// Heal after this long (a duration like `"3s"`); `link.kill` only.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
}

/// `link.set`: a link, a direction, and the parameters to change (same
/// syntax as in `[[links]]`; at least one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkSet {
    pub link: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<Dir>,
    /// Heal (remove this change) after this long.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    /// A rate like `"20Mbps"` or `"unlimited"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// A mahimahi trace file inside the config's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_trace: Option<String>,
    /// A step trace file inside the config's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_steps: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// A size like `"256KiB"` or `"unlimited"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A loss table as in `[[links]]`: `{"model": "ge", "eps_g": …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<Map<String, Value>>,
}

/// Two different hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostPair {
    pub hosts: [String; 2],
    /// Heal after this long; `host.partition` only.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop flapping at this run time (a duration from the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// `metrics.subscribe`: a `{"event": "metrics", …}` message every `interval`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Subscribe {
    /// Period (a duration, default `"1s"`, at least 10 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

/// Nothing but the command name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoKeys {}

/// One control command, tagged by `cmd`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "cmd")]
pub enum Command {
    /// Counters of every host (links, router, mesh).
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
    /// End the run on every host.
    #[serde(rename = "run.stop")]
    RunStop(NoKeys),
}

/// A command with names resolved against the cluster: what hosts act on.
#[derive(Debug, Clone)]
pub enum Resolved {
    Status,
    Subscribe {
        interval_ns: u64,
    },
    RunStop,
    /// A command on links or hosts, with its optional self-heal delay.
    Action {
        action: ChaosAction,
        for_ns: Option<u64>,
    },
}

/// The request envelope keys that are not part of a command.
pub const ENVELOPE_KEYS: &[&str] = &["id", "token"];

impl Command {
    /// Deserializes a request object (envelope keys are ignored).
    pub fn from_request(request: &Value) -> Result<Command, String> {
        let Value::Object(obj) = request else {
            return Err("a request must be a JSON object".into());
        };
        let mut obj = obj.clone();
        for k in ENVELOPE_KEYS {
            obj.remove(*k);
        }
        match obj.get("cmd") {
            None => return Err("missing \"cmd\"".into()),
            Some(Value::String(_)) => {}
            Some(_) => return Err("\"cmd\" must be a string".into()),
        }
        serde_json::from_value(Value::Object(obj)).map_err(|e| e.to_string())
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
            Command::RunStop(_) => "run.stop",
        }
    }

    /// Resolves names and units against `cluster` (may read trace files
    /// that `link.set` names: call it off an actor's thread).
    pub fn resolve(&self, cluster: &Cluster) -> Result<Resolved, ActionError> {
        match self {
            Command::Status(_) | Command::Metrics(_) => return Ok(Resolved::Status),
            Command::RunStop(_) => return Ok(Resolved::RunStop),
            Command::MetricsSubscribe(s) => {
                let ns = match &s.interval {
                    None => 1_000_000_000,
                    Some(i) => crate::units::parse_duration_ns(i)
                        .map_err(|e| ActionError::invalid("interval", e.to_string()))?,
                };
                return Ok(Resolved::Subscribe {
                    interval_ns: ns.max(10_000_000),
                });
            }
            _ => {}
        }
        // One validation path for control and chaos: the keys go through
        // `parse_action`, exactly as a `[[chaos]]` entry's do.
        let Ok(Value::Object(mut fields)) = serde_json::to_value(self) else {
            return Err(ActionError::invalid("cmd", "not an object"));
        };
        fields.remove("cmd");
        let for_ns = match fields.remove("for") {
            Some(Value::String(s)) => Some(
                crate::units::parse_duration_ns(&s)
                    .map_err(|e| ActionError::invalid("for", e.to_string()))?,
            ),
            _ => None,
        };
        let action = parse_action(cluster, self.name(), &fields)?;
        Ok(Resolved::Action { action, for_ns })
    }
}

/// What one target of a command did (an element of `applied`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppliedTarget {
    /// The host that owns the target.
    pub host: String,
    /// What was acted on, like `"link wan ab"` or `"peer beta"`.
    pub target: String,
    /// Run time (ns) at which it took effect.
    pub effective_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of a command that acts on targets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Applied {
    pub applied: Vec<AppliedTarget>,
    /// Hosts that could not be reached or refused, one line each.
    #[serde(default)]
    pub errors: Vec<String>,
}

/// The reply to one request: `ok` with a `result`, or an `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reply {
    /// The request's `id`, echoed.
    pub id: Value,
    pub ok: bool,
    /// `status`: `{"hosts": [...]}`; link and host commands: an [`Applied`];
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
        applied: Applied,
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
        assert!(e.contains("rate"), "{e}");
        let e = Command::from_request(&serde_json::json!({"cmd": "link.zap"})).unwrap_err();
        assert!(e.contains("link.zap"), "{e}");
        assert!(Command::from_request(&serde_json::json!({"cmd": 3})).is_err());
        assert!(Command::from_request(&serde_json::json!([1])).is_err());
        assert_eq!(
            Command::from_request(&serde_json::json!({"cmd": "status"})).unwrap(),
            Command::Status(NoKeys {})
        );
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
