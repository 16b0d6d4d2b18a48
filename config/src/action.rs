//! The command vocabulary shared by `[[chaos]]` entries and the control
//! plane ([`parse_action`]), and the link-parameter keys shared by
//! `[[links]]` tables and `link.set`.

use crate::error::ActionError;
use crate::fields::*;
use crate::model::{ChaosAction, Cluster, LinkPatch};
use edgemu_codec::ids::{Direction, HostId, LinkId};
use edgemu_links::{Delivery, LinkParams, LossSpec, LossTrace, RateSpec, RateTrace};
use serde_json::{Map, Value};
use std::path::Path;
use std::sync::Arc;

/// Every command [`parse_action`] knows.
pub const COMMANDS: &[&str] = &[
    "link.kill",
    "link.restore",
    "link.set",
    "host.partition",
    "host.heal",
    "link.flap",
    "run.stop",
];

/// Keys of a link direction, in `[[links]]`, `[links.ab]` and `[links.ba]`.
pub(crate) const PARAM_KEYS: &[&str] = &[
    "rate",
    "rate_trace",
    "rate_steps",
    "delay",
    "rtt",
    "jitter",
    "queue",
    "loss",
    "delivery",
    "reorder",
];

/// Keys of `link.set`: the link, the direction, and what a [`LinkPatch`] can change.
const LINK_SET_KEYS: &[&str] = &[
    "link",
    "dir",
    "rate",
    "rate_trace",
    "rate_steps",
    "delay",
    "rtt",
    "jitter",
    "queue",
    "loss",
];

/// The keys of a link direction that were given; `None` = not given.
#[derive(Clone, Debug, Default)]
pub(crate) struct ParamLayer {
    pub rate: Option<RateSpec>,
    pub delay_ns: Option<u64>,
    pub jitter_ns: Option<u64>,
    pub queue_bytes: Option<Option<u64>>,
    pub loss: Option<LossSpec>,
    pub delivery: Option<Delivery>,
    pub reorder: Option<bool>,
}

impl ParamLayer {
    pub fn apply(&self, p: &mut LinkParams) {
        if let Some(r) = &self.rate {
            p.rate = r.clone();
        }
        if let Some(d) = self.delay_ns {
            p.delay_ns = d;
        }
        if let Some(j) = self.jitter_ns {
            p.jitter_ns = j;
        }
        if let Some(q) = self.queue_bytes {
            p.queue_bytes = q;
        }
        if let Some(l) = &self.loss {
            p.loss = l.clone();
        }
        if let Some(d) = self.delivery {
            p.delivery = d;
        }
        if let Some(r) = self.reorder {
            p.reorder = r;
        }
    }

    fn is_empty(&self) -> bool {
        self.rate.is_none()
            && self.delay_ns.is_none()
            && self.jitter_ns.is_none()
            && self.queue_bytes.is_none()
            && self.loss.is_none()
            && self.delivery.is_none()
            && self.reorder.is_none()
    }
}

/// Largest trace file `cluster.toml` or `link.set` may name.
pub const MAX_TRACE_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a trace file named in a config or a control command.
///
/// Only a regular file inside the config file's folder may be read: the
/// name must be relative, without `..`, and must not lead outside the
/// folder through a symbolic link; the file may hold at most
/// [`MAX_TRACE_BYTES`]. No error quotes what the file holds.
fn read_file(base_dir: &Path, key: &str, name: &str) -> Result<String, ActionError> {
    use std::io::Read as _;
    use std::path::Component;
    let bad = |why: String| ActionError::invalid(key, format!("trace file {name:?}: {why}"));
    let rel = Path::new(name);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if name.is_empty() || rel.is_absolute() || !plain {
        return Err(bad(
            "expected a path relative to the config file's folder, without `..`".into(),
        ));
    }
    let base = if base_dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base_dir
    };
    let base = base
        .canonicalize()
        .map_err(|e| bad(format!("cannot resolve the config file's folder: {e}")))?;
    let path = base
        .join(rel)
        .canonicalize()
        .map_err(|e| bad(format!("cannot open: {e}")))?;
    if !path.starts_with(&base) {
        return Err(bad("leads outside the config file's folder".into()));
    }
    let meta = std::fs::metadata(&path).map_err(|e| bad(format!("cannot open: {e}")))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    if meta.len() > MAX_TRACE_BYTES {
        return Err(bad(format!(
            "{} bytes, more than the limit of {MAX_TRACE_BYTES}",
            meta.len()
        )));
    }
    let file = std::fs::File::open(&path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(bad(format!(
            "more than the limit of {MAX_TRACE_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))
}

/// A trace parse error that names the line and what was expected, never
/// the text found there (the file could be anything).
fn trace_error(key: &str, name: &str, e: edgemu_links::LinkError) -> ActionError {
    use edgemu_links::LinkError;
    let what = match e {
        LinkError::Parse { line, expected, .. } => format!("line {line}: expected {expected}"),
        LinkError::TimeOrder { line, order, .. } => {
            format!("line {line}: a timestamp must be {order} the previous one")
        }
        LinkError::FirstNotZero { line, .. } => {
            format!("line {line}: the first entry must be at 0 ms")
        }
        other => other.to_string(),
    };
    ActionError::invalid(key, format!("in trace {name:?}: {what}"))
}

/// Reads the link-direction keys of `obj` (the caller has checked which
/// keys are allowed). Trace paths are relative to `base_dir`.
pub(crate) fn parse_layer(obj: &Obj, base_dir: &Path, errs: &mut Errs) -> ParamLayer {
    let mut layer = ParamLayer::default();
    let rate_keys: Vec<&str> = ["rate", "rate_trace", "rate_steps"]
        .into_iter()
        .filter(|k| obj.contains_key(*k))
        .collect();
    if rate_keys.len() > 1 {
        errs.push(ActionError::invalid(
            rate_keys[1],
            format!(
                "set only one of `rate`, `rate_trace` and `rate_steps`; found `{}` and `{}`",
                rate_keys[0], rate_keys[1]
            ),
        ));
    }
    if let Some(r) = errs.ok(opt_rate(obj, "rate", true)).flatten() {
        layer.rate = Some(match r {
            None => RateSpec::Unlimited,
            Some(bps) => RateSpec::Fixed { bps },
        });
    }
    for (key, steps) in [("rate_trace", false), ("rate_steps", true)] {
        let Some(name) = errs.ok(opt_str(obj, key)).flatten() else {
            continue;
        };
        let parsed = read_file(base_dir, key, name).and_then(|text| {
            let r = if steps {
                RateTrace::parse_steps(&text)
            } else {
                RateTrace::parse_mahimahi(&text)
            };
            r.map_err(|e| trace_error(key, name, e))
        });
        if let Some(t) = errs.ok(parsed) {
            layer.rate = Some(RateSpec::Trace(Arc::new(t)));
        }
    }
    if obj.contains_key("delay") && obj.contains_key("rtt") {
        errs.push(ActionError::invalid(
            "rtt",
            "set either `delay` (one-way) or `rtt` (round trip, one-way = rtt/2), not both",
        ));
    }
    layer.delay_ns = errs.ok(opt_duration(obj, "delay", false)).flatten();
    if let Some(rtt) = errs.ok(opt_duration(obj, "rtt", false)).flatten() {
        layer.delay_ns.get_or_insert(rtt / 2);
    }
    layer.jitter_ns = errs.ok(opt_duration(obj, "jitter", false)).flatten();
    layer.queue_bytes = errs.ok(opt_bytes(obj, "queue", true)).flatten();
    if let Some(t) = errs.ok(opt_table(obj, "loss")).flatten() {
        match parse_loss(t, base_dir) {
            Ok(l) => layer.loss = Some(l),
            Err(e) => errs.0.extend(e.into_iter().map(|e| e.nested("loss"))),
        }
    }
    layer.delivery = errs
        .ok(opt_enum(obj, "delivery", &["datagram", "reliable"]))
        .flatten()
        .map(|d| match d {
            "reliable" => Delivery::Reliable,
            _ => Delivery::Datagram,
        });
    layer.reorder = errs.ok(opt_bool(obj, "reorder")).flatten();
    layer
}

const LOSS_MODELS: &[&str] = &["none", "bernoulli", "ge", "trace"];

/// A loss table: `{ model = "none" | "bernoulli" | "ge" | "trace", … }`.
pub(crate) fn parse_loss(obj: &Obj, base_dir: &Path) -> Result<LossSpec, Vec<ActionError>> {
    let mut errs = Errs::default();
    let model = match obj.get("model") {
        None => {
            return Err(vec![missing(
                "model",
                "\"none\", \"bernoulli\", \"ge\" or \"trace\"",
            )])
        }
        Some(_) => match opt_enum(obj, "model", LOSS_MODELS) {
            Ok(m) => m.unwrap_or("none"),
            Err(e) => return Err(vec![e]),
        },
    };
    let keys: &[&'static str] = match model {
        "none" => &["model"],
        "bernoulli" => &["model", "p"],
        "ge" => &["model", "eps_g", "eps_b", "p_gb", "p_bg"],
        _ => &["model", "file", "eps_g", "eps_b"],
    };
    check_keys(obj, keys, &format!("loss model {model:?}"), &mut errs);
    let spec = match model {
        "none" => Some(LossSpec::None),
        "bernoulli" => errs
            .ok(req_probability(obj, "p"))
            .map(|p| LossSpec::Bernoulli { p }),
        "ge" => {
            let eps_g = errs.ok(req_probability(obj, "eps_g"));
            let eps_b = errs.ok(req_probability(obj, "eps_b"));
            let p_gb = errs.ok(req_probability(obj, "p_gb"));
            let p_bg = errs.ok(req_probability(obj, "p_bg"));
            match (eps_g, eps_b, p_gb, p_bg) {
                (Some(eps_g), Some(eps_b), Some(p_gb), Some(p_bg)) => {
                    Some(LossSpec::GilbertElliott {
                        eps_g,
                        eps_b,
                        p_gb,
                        p_bg,
                    })
                }
                _ => None,
            }
        }
        _ => {
            let eps_g = errs.ok(opt_probability(obj, "eps_g")).flatten();
            let eps_b = errs.ok(opt_probability(obj, "eps_b")).flatten();
            let file = errs.ok(req_str(obj, "file", "a loss trace file name"));
            file.and_then(|name| {
                let parsed = read_file(base_dir, "file", name).and_then(|text| {
                    LossTrace::parse(&text).map_err(|e| trace_error("file", name, e))
                });
                errs.ok(parsed)
            })
            .map(|t| {
                let t = t.with_state_loss(eps_g.unwrap_or(0.0), eps_b.unwrap_or(1.0));
                LossSpec::Trace(Arc::new(t))
            })
        }
    };
    match spec {
        Some(s) if errs.0.is_empty() => Ok(s),
        _ => Err(errs.0),
    }
}

/// Position of `name` among `names` (the id of the named object), or the
/// error listing the defined names.
fn resolve<'a>(
    key: &str,
    what: &'static str,
    name: &str,
    names: impl Iterator<Item = &'a str> + Clone,
) -> Result<usize, ActionError> {
    names
        .clone()
        .position(|n| n == name)
        .ok_or_else(|| ActionError::UnknownName {
            field: key.to_string(),
            what,
            name: name.to_string(),
            known: names.map(str::to_string).collect(),
        })
}

pub(crate) fn resolve_link(
    cluster: &Cluster,
    key: &str,
    name: &str,
) -> Result<LinkId, ActionError> {
    let names = cluster.links.iter().map(|l| l.name.as_str());
    resolve(key, "link", name, names).map(|i| LinkId(i as u32))
}

pub(crate) fn resolve_host(
    cluster: &Cluster,
    key: &str,
    name: &str,
) -> Result<HostId, ActionError> {
    let names = cluster.hosts.iter().map(|h| h.name.as_str());
    resolve(key, "host", name, names).map(|i| HostId(i as u16))
}

fn req_link(cluster: &Cluster, obj: &Obj) -> Result<LinkId, ActionError> {
    let name = req_str(obj, "link", "the name of a link")?;
    resolve_link(cluster, "link", name)
}

fn opt_dir(obj: &Obj) -> Result<Option<Direction>, ActionError> {
    Ok(opt_enum(obj, "dir", &["ab", "ba"])?.map(|d| match d {
        "ab" => Direction::AtoB,
        _ => Direction::BtoA,
    }))
}

fn two_hosts(cluster: &Cluster, obj: &Obj) -> Result<(HostId, HostId), ActionError> {
    let expected = "two host names, like [\"alpha\", \"beta\"]";
    let v = obj.get("hosts").ok_or_else(|| missing("hosts", expected))?;
    let list = match v {
        Value::Array(list) if list.len() == 2 => list,
        other => {
            return Err(ActionError::invalid(
                "hosts",
                format!("expected {expected}, found {}", describe_value(other)),
            ))
        }
    };
    let mut ids = Vec::with_capacity(2);
    for item in list {
        let Value::String(name) = item else {
            return Err(ActionError::invalid(
                "hosts",
                format!("expected {expected}, found {}", describe_value(item)),
            ));
        };
        ids.push(resolve_host(cluster, "hosts", name)?);
    }
    if ids[0] == ids[1] {
        return Err(ActionError::invalid(
            "hosts",
            format!(
                "expected two different hosts, found {:?} twice",
                cluster.hosts[ids[0].0 as usize].name
            ),
        ));
    }
    Ok((ids[0], ids[1]))
}

/// Turns a control command and its fields into a [`ChaosAction`], resolving
/// names against `cluster`. `fields` holds only the command's own keys
/// (strip any request id or envelope keys first); an unknown key is an error.
/// `[[chaos]]` entries go through this same function (with `at`, `command`,
/// `for` and `every` taken out), so both accept the same vocabulary:
///
/// | command | keys |
/// |---|---|
/// | `link.kill`, `link.restore` | `link`, optional `dir` (`"ab"` / `"ba"`; default both) |
/// | `link.set` | `link`, optional `dir`, and at least one of `rate`, `rate_trace`, `rate_steps`, `delay`, `rtt`, `jitter`, `queue`, `loss` (as in `[[links]]`) |
/// | `host.partition`, `host.heal` | `hosts = ["alpha", "beta"]` |
/// | `link.flap` | `link`, `mtbf`, `mttr`, optional `seed` (default: the run's seed), optional `until` |
/// | `run.stop` | — |
///
/// Trace files named by `link.set` are relative to the config file's folder.
pub fn parse_action(
    cluster: &Cluster,
    command: &str,
    fields: &Map<String, Value>,
) -> Result<ChaosAction, ActionError> {
    let base_dir = cluster.source.parent().unwrap_or(Path::new(""));
    let keys: &[&'static str] = match command {
        "link.kill" | "link.restore" => &["link", "dir"],
        "link.set" => LINK_SET_KEYS,
        "host.partition" | "host.heal" => &["hosts"],
        "link.flap" => &["link", "mtbf", "mttr", "seed", "until"],
        "run.stop" => &[],
        _ => {
            return Err(ActionError::UnknownCommand {
                command: command.to_string(),
                valid: COMMANDS.to_vec(),
            })
        }
    };
    let mut errs = Errs::default();
    check_keys(fields, keys, &format!("command {command:?}"), &mut errs);
    if let Some(e) = errs.0.into_iter().next() {
        return Err(e);
    }
    Ok(match command {
        "link.kill" => ChaosAction::LinkKill {
            link: req_link(cluster, fields)?,
            dir: opt_dir(fields)?,
        },
        "link.restore" => ChaosAction::LinkRestore {
            link: req_link(cluster, fields)?,
            dir: opt_dir(fields)?,
        },
        "link.set" => {
            let link = req_link(cluster, fields)?;
            let dir = opt_dir(fields)?;
            let mut errs = Errs::default();
            let layer = parse_layer(fields, base_dir, &mut errs);
            if let Some(e) = errs.0.into_iter().next() {
                return Err(e);
            }
            if layer.is_empty() {
                return Err(missing(
                    "rate",
                    "at least one of `rate`, `rate_trace`, `rate_steps`, `delay`, `rtt`, `jitter`, `queue`, `loss`",
                ));
            }
            ChaosAction::LinkSet {
                link,
                dir,
                patch: LinkPatch {
                    rate: layer.rate,
                    delay_ns: layer.delay_ns,
                    jitter_ns: layer.jitter_ns,
                    queue_bytes: layer.queue_bytes,
                    loss: layer.loss,
                },
            }
        }
        "host.partition" => {
            let (a, b) = two_hosts(cluster, fields)?;
            ChaosAction::HostPartition { a, b }
        }
        "host.heal" => {
            let (a, b) = two_hosts(cluster, fields)?;
            ChaosAction::HostHeal { a, b }
        }
        "link.flap" => ChaosAction::LinkFlap {
            link: req_link(cluster, fields)?,
            mtbf_ns: req_duration(fields, "mtbf", true)?,
            mttr_ns: req_duration(fields, "mttr", true)?,
            seed: opt_u64(fields, "seed")?.unwrap_or(cluster.run.seed),
            until_ns: opt_duration(fields, "until", false)?,
        },
        _ => ChaosAction::RunStop,
    })
}
