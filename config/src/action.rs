//! What the typed commands ([`crate::command::Command`]) and `[[links]]`
//! tables share: the link-parameter keys and their parser, name resolution,
//! and the confined reading of files a config or a command names.

use crate::error::ActionError;
use crate::fields::*;
use crate::model::Cluster;
use edgemu_codec::ids::{ActorId, HostId, LinkId};
use edgemu_links::{Delivery, LinkParams, LossSpec, LossTrace, RateSpec, RateTrace};
use std::path::Path;
use std::sync::Arc;

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

    pub(crate) fn is_empty(&self) -> bool {
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
    let bytes = read_confined(base_dir, key, "trace file", name, MAX_TRACE_BYTES)?;
    String::from_utf8(bytes)
        .map_err(|_| ActionError::invalid(key, format!("trace file {name:?}: not UTF-8 text")))
}

/// Checks that `name` may name a file of the run: relative, without `..`.
pub(crate) fn check_run_file_name(key: &str, name: &str) -> Result<(), ActionError> {
    use std::path::Component;
    let rel = Path::new(name);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if name.is_empty() || rel.is_absolute() || !plain {
        return Err(ActionError::invalid(
            key,
            format!(
                "file {name:?}: expected a path relative to the config file's folder, without `..`"
            ),
        ));
    }
    Ok(())
}

/// Reads a file a command names (a `policy.swap` weights file) under the
/// same rules as trace files: inside the config file's folder, a regular
/// file of at most `max_bytes`; no error quotes what the file holds.
pub fn read_run_file(
    cluster: &Cluster,
    key: &str,
    name: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, ActionError> {
    let base_dir = cluster.source.parent().unwrap_or(Path::new(""));
    read_confined(base_dir, key, "file", name, max_bytes)
}

fn read_confined(
    base_dir: &Path,
    key: &str,
    what: &str,
    name: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, ActionError> {
    use std::io::Read as _;
    let bad = |why: String| ActionError::invalid(key, format!("{what} {name:?}: {why}"));
    check_run_file_name(key, name).map_err(|_| {
        bad("expected a path relative to the config file's folder, without `..`".into())
    })?;
    let rel = Path::new(name);
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
    if meta.len() > max_bytes {
        return Err(bad(format!(
            "{} bytes, more than the limit of {max_bytes}",
            meta.len()
        )));
    }
    let file = std::fs::File::open(&path).map_err(|e| bad(format!("cannot open: {e}")))?;
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err(bad(format!("more than the limit of {max_bytes} bytes")));
    }
    Ok(bytes)
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

pub(crate) fn resolve_actor(
    cluster: &Cluster,
    key: &str,
    name: &str,
) -> Result<ActorId, ActionError> {
    let names = cluster.actors.iter().map(|a| a.name.as_str());
    resolve(key, "actor", name, names).map(|i| ActorId(i as u32))
}
