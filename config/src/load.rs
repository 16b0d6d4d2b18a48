//! From TOML text to a validated [`Cluster`].

use crate::action::{parse_layer, PARAM_KEYS};
use crate::command::{Command, Resolved};
use crate::error::{ActionError, ConfigError, Diagnostic, Diagnostics};
use crate::fields::*;
use crate::model::*;
use crate::node::{line_col, locate, Node};
use crate::replicate::ReplicaGroup;
use crate::units::fmt_duration;
use edgemu_codec::ids::{ActorId, HostId, LinkId};
use edgemu_links::LinkParams;
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::Spanned;

const TOP_KEYS: &[&str] = &["run", "hosts", "actors", "links", "chaos"];
const RUN_KEYS: &[&str] = &[
    "name",
    "duration",
    "seed",
    "time",
    "results",
    "token_env",
    "sample",
];
const HOST_KEYS: &[&str] = &["name", "listen", "advertise", "control", "cpus", "memory"];
const ACTOR_KINDS: &[&str] = &[
    "constant",
    "bursty",
    "pinger",
    "sink",
    "user",
    "server",
    "scheduler",
    "agent",
    "gateway",
    "attach",
];
const CHAOS_KEYS: &[&str] = &["at", "command", "for", "every"];

/// The drop-tail queue of a link direction that does not set `queue`: like
/// a router's buffer, 100 ms of the link's rate (a bandwidth-delay product
/// for a 100 ms round trip), at least 64 KiB and at most 64 MiB; 1 MiB for
/// a rate trace or an unlimited rate. `queue = "unlimited"` asks for none.
pub fn default_queue_bytes(rate: &edgemu_links::RateSpec) -> u64 {
    match rate {
        edgemu_links::RateSpec::Fixed { bps } => (bps / 80).clamp(64 << 10, 64 << 20),
        _ => 1 << 20,
    }
}

/// The shortest `every` a `[[chaos]]` entry may repeat with: a repeating
/// command is a control action, not a traffic generator, and each firing
/// costs a round of actor messages (and, for remote targets, the mesh).
pub const MIN_EVERY_NS: u64 = 100_000_000;

fn actor_keys(kind: &str) -> &'static [&'static str] {
    if let Some(keys) = crate::lyreo::keys(kind) {
        return keys;
    }
    if kind == "agent" {
        return crate::agent::KEYS;
    }
    match kind {
        "constant" => &[
            "name", "host", "kind", "to", "via", "rate", "size", "payload", "start", "stop",
        ],
        "attach" => &[
            "name", "host", "kind", "to", "via", "netns", "address", "mtu",
        ],
        "bursty" => &[
            "name", "host", "kind", "to", "via", "burst", "interval", "size", "start", "stop",
        ],
        "pinger" => &[
            "name",
            "host",
            "kind",
            "to",
            "via",
            "reply_via",
            "interval",
            "size",
            "start",
            "stop",
        ],
        "sink" => &["name", "host", "kind"],
        // Unknown kind: accept every key some kind has, report the kind.
        _ => &[
            "name",
            "host",
            "kind",
            "to",
            "via",
            "reply_via",
            "rate",
            "burst",
            "interval",
            "size",
            "start",
            "stop",
        ],
    }
}

pub(crate) fn load(text: &str, source: &Path) -> Result<Cluster, ConfigError> {
    let root: Spanned<Node> = toml::from_str(text).map_err(|e| {
        let (line, column) = line_col(text, e.span().map(|s| s.start).unwrap_or(0));
        ConfigError::Invalid(Diagnostics(vec![Diagnostic {
            file: source.to_path_buf(),
            line,
            column,
            message: e.message().trim().to_string(),
        }]))
    })?;
    let mut loader = Loader {
        text,
        source,
        base_dir: source.parent().unwrap_or(Path::new("")).to_path_buf(),
        diags: Vec::new(),
    };
    let cluster = loader.cluster(&root);
    if loader.diags.is_empty() {
        let mut cluster = cluster;
        cluster.digest = cluster.compute_digest();
        Ok(cluster)
    } else {
        Err(loader.finish())
    }
}

struct Loader<'a> {
    text: &'a str,
    source: &'a Path,
    base_dir: PathBuf,
    /// (byte offset, message).
    diags: Vec<(usize, String)>,
}

/// One entry of an array of tables, with its JSON form.
struct Entry<'n> {
    node: &'n Spanned<Node>,
    obj: Obj,
}

/// Name → index of its first definition, and where that was.
struct Names {
    what: &'static str,
    list: Vec<String>,
    first: HashMap<String, usize>,
}

impl Names {
    fn new(what: &'static str, entries: &[Entry<'_>]) -> Names {
        let list: Vec<String> = entries
            .iter()
            .map(|e| match e.obj.get("name") {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            })
            .collect();
        let mut first = HashMap::new();
        for (i, n) in list.iter().enumerate() {
            if !n.is_empty() {
                first.entry(n.clone()).or_insert(i);
            }
        }
        Names { what, list, first }
    }

    fn resolve(&self, key: &str, name: &str) -> Result<usize, ActionError> {
        self.first
            .get(name)
            .copied()
            .ok_or_else(|| ActionError::UnknownName {
                field: key.to_string(),
                what: self.what,
                name: name.to_string(),
                known: {
                    let mut known: Vec<String> = Vec::new();
                    for n in self.list.iter().filter(|n| !n.is_empty()) {
                        if !known.contains(n) {
                            known.push(n.clone());
                        }
                    }
                    known
                },
            })
    }
}

/// A LYREO reference checked once all actors are known: actor `actor`'s
/// field `key` names actor `to`, which must be of kind `kind`.
struct PendingKind {
    actor: usize,
    key: &'static str,
    to: usize,
    kind: &'static str,
}

/// Checks made once all actors and links are known.
struct PendingRoute {
    actor: usize,
    to: usize,
    /// (key, link index)
    links: Vec<(&'static str, usize)>,
}

impl<'a> Loader<'a> {
    fn finish(mut self) -> ConfigError {
        // By place, then text: the copies of a replicated entry report at
        // one place, and each distinct message once.
        self.diags.sort();
        self.diags.dedup();
        ConfigError::Invalid(Diagnostics(
            self.diags
                .iter()
                .map(|(offset, message)| {
                    let (line, column) = line_col(self.text, *offset);
                    Diagnostic {
                        file: self.source.to_path_buf(),
                        line,
                        column,
                        message: message.clone(),
                    }
                })
                .collect(),
        ))
    }

    fn line_of(&self, node: &Spanned<Node>, field: &str) -> usize {
        line_col(self.text, locate(node, Some(field), false).start).0
    }

    fn report(&mut self, node: &Spanned<Node>, e: ActionError) {
        let at_key = matches!(e, ActionError::UnknownField { .. });
        // A replicated actor's `host` comes from its template's `hosts`.
        let field = match e.field() {
            Some("host") if node.get_ref().entry("hosts").is_some() => Some("hosts"),
            f => f,
        };
        let span = locate(node, field, at_key);
        self.diags.push((span.start, e.to_string()));
    }

    fn report_all(&mut self, node: &Spanned<Node>, errs: Errs) {
        for e in errs.0 {
            self.report(node, e);
        }
    }

    /// The tables of `[[key]]`; anything else there is reported.
    fn entries<'n>(&mut self, root: &'n Spanned<Node>, key: &str) -> Vec<Entry<'n>> {
        let Some((_, value)) = root.get_ref().entry(key) else {
            return Vec::new();
        };
        let expected = format!("an array of tables ([[{key}]] sections)");
        let Node::Array(items) = value.get_ref() else {
            let found = describe_value(&value.get_ref().to_json());
            self.report(
                root,
                ActionError::invalid(key, format!("expected {expected}, found {found}")),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items {
            match item.get_ref().to_json() {
                Value::Object(obj) => out.push(Entry { node: item, obj }),
                other => {
                    let found = describe_value(&other);
                    self.diags.push((
                        item.span().start,
                        format!("`{key}`: expected {expected}, found {found}"),
                    ));
                }
            }
        }
        out
    }

    /// `entries` with every replicated entry expanded into its copies
    /// ([`crate::replicate`]); each copy keeps the template's node, so its
    /// errors point there.
    fn replicate<'n>(
        &mut self,
        entries: Vec<Entry<'n>>,
        what: &'static str,
    ) -> (Vec<Entry<'n>>, Vec<ReplicaGroup>) {
        let mut out = Vec::with_capacity(entries.len());
        let mut groups = Vec::new();
        for e in entries {
            match crate::replicate::expand(&e.obj, what) {
                Ok((copies, group)) => {
                    out.extend(copies.into_iter().map(|obj| Entry { node: e.node, obj }));
                    groups.extend(group);
                }
                Err(err) => {
                    self.report(e.node, err);
                    let mut obj = e.obj;
                    obj.remove("count");
                    obj.remove("hosts");
                    out.push(Entry { node: e.node, obj });
                }
            }
        }
        (out, groups)
    }

    fn cluster(&mut self, root: &Spanned<Node>) -> Cluster {
        let top = match root.get_ref().to_json() {
            Value::Object(o) => o,
            _ => Obj::new(),
        };
        let mut errs = Errs::default();
        check_keys(&top, TOP_KEYS, "the top level", &mut errs);
        self.report_all(root, errs);

        let run = self.run(root);
        let host_entries = self.entries(root, "hosts");
        let actor_entries = self.entries(root, "actors");
        let link_entries = self.entries(root, "links");
        let (actor_entries, mut replicas) = self.replicate(actor_entries, "actor");
        let (link_entries, link_replicas) = self.replicate(link_entries, "link");
        replicas.extend(link_replicas);
        let chaos_entries = self.entries(root, "chaos");
        let host_names = Names::new("host", &host_entries);
        let actor_names = Names::new("actor", &actor_entries);
        let link_names = Names::new("link", &link_entries);

        if host_entries.is_empty() {
            self.report(
                root,
                missing(
                    "hosts",
                    "at least one [[hosts]] table with `name` and `listen`",
                ),
            );
        }
        if host_entries.len() > usize::from(u16::MAX) {
            self.report(
                root,
                ActionError::invalid("hosts", "too many hosts (at most 65535)"),
            );
        }
        let hosts = self.hosts(&host_entries);
        self.duplicates(&actor_entries, "actor");
        self.duplicates(&link_entries, "link");

        let mut pending = Vec::new();
        let mut kinds = Vec::new();
        let actors: Vec<ActorSpec> = actor_entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let names = (&host_names, &actor_names, &link_names);
                self.actor(i, e, names, &mut pending, &mut kinds)
            })
            .collect();
        self.lyreo_references(&actor_entries, &actors, &kinds);
        let links: Vec<LinkSpec> = link_entries
            .iter()
            .enumerate()
            .map(|(i, e)| self.link(i, e, &actor_names))
            .collect();
        self.agent_references(&actor_entries, &actors, &links);
        if run.time == TimeMode::Virtual {
            for (a, e) in actors.iter().zip(&actor_entries) {
                if matches!(&a.kind, ActorKind::Server(s) if matches!(s.backend, crate::ServerBackend::OpenAi(_)))
                {
                    self.report(
                        e.node,
                        ActionError::invalid(
                            "backend",
                            "an \"openai\" backend is a real server reached over HTTP; it cannot run under `time = \"virtual\"`",
                        ),
                    );
                }
                if matches!(a.kind, ActorKind::Attach(_)) {
                    self.report(
                        e.node,
                        ActionError::invalid(
                            "kind",
                            "an attach point carries real programs' packets in real time; it cannot run under `time = \"virtual\"`",
                        ),
                    );
                }
                if matches!(a.kind, ActorKind::Gateway(_)) {
                    self.report(
                        e.node,
                        ActionError::invalid(
                            "kind",
                            "a gateway serves HTTP clients in real time; it cannot run under `time = \"virtual\"` (use real time, or users for a virtual run)",
                        ),
                    );
                }
                let external = match &a.kind {
                    ActorKind::Scheduler(s) => Some(s.policy.as_str()),
                    ActorKind::Agent(g) => g.policy.as_deref(),
                    _ => None,
                }
                .is_some_and(|p| {
                    p.trim()
                        .eq_ignore_ascii_case(crate::external::EXTERNAL_POLICY)
                });
                if external {
                    self.report(e.node, crate::command::virtual_external("policy"));
                }
            }
        }
        for p in pending {
            let node = actor_entries[p.actor].node;
            let (me, to) = (&actors[p.actor], &actors[p.to]);
            if !to.kind.receives() {
                self.report(
                    node,
                    ActionError::invalid(
                        "to",
                        format!(
                            "actor {:?} is a {} and cannot receive; expected a receiving actor (kind \"sink\")",
                            to.name,
                            to.kind.kind_name()
                        ),
                    ),
                );
            }
            for (key, l) in p.links {
                let link = &links[l];
                let joins =
                    (link.a == me.id && link.b == to.id) || (link.a == to.id && link.b == me.id);
                if !joins {
                    self.report(
                        node,
                        ActionError::invalid(
                            key,
                            format!(
                                "link {:?} joins {:?} and {:?}, not {:?} and {:?}; expected a link between this actor and its `to`",
                                link.name,
                                actors[link.a.0 as usize].name,
                                actors[link.b.0 as usize].name,
                                me.name,
                                to.name
                            ),
                        ),
                    );
                }
            }
        }

        let mut cluster = Cluster {
            source: self.source.to_path_buf(),
            digest: [0; 32],
            run,
            hosts,
            actors,
            links,
            chaos: Vec::new(),
            replicas,
        };
        let chaos: Vec<ChaosSpec> = chaos_entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| self.chaos(i, e, &cluster))
            .collect();
        cluster.chaos = chaos;
        cluster
    }

    fn run(&mut self, root: &Spanned<Node>) -> RunSpec {
        let stem = self
            .source
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cluster".into());
        let mut run = RunSpec {
            name: stem,
            // Until a valid `duration` is read: no chaos time is beyond it.
            duration_ns: u64::MAX,
            seed: 0,
            time: TimeMode::Real,
            results_dir: self.base_dir.join("results"),
            token_env: "EDGEMU_TOKEN".into(),
            sample_ns: 1_000_000_000,
        };
        let Some((_, node)) = root.get_ref().entry("run") else {
            self.report(
                root,
                missing("run", "a [run] table with at least `duration = \"20s\"`"),
            );
            return run;
        };
        let Value::Object(obj) = node.get_ref().to_json() else {
            self.report(root, ActionError::invalid("run", "expected a [run] table"));
            return run;
        };
        let mut errs = Errs::default();
        check_keys(&obj, RUN_KEYS, "[run]", &mut errs);
        if let Some(name) = errs.ok(opt_str(&obj, "name")).flatten() {
            if name.trim().is_empty() {
                errs.push(ActionError::invalid(
                    "name",
                    "expected a run name, found an empty string",
                ));
            }
            run.name = name.to_string();
        }
        if let Some(d) = errs.ok(req_duration(&obj, "duration", true)) {
            run.duration_ns = d;
        }
        if let Some(s) = errs.ok(opt_u64(&obj, "seed")).flatten() {
            run.seed = s;
        }
        if let Some(t) = errs
            .ok(opt_enum(&obj, "time", &["real", "virtual"]))
            .flatten()
        {
            run.time = if t == "virtual" {
                TimeMode::Virtual
            } else {
                TimeMode::Real
            };
        }
        if let Some(r) = errs.ok(opt_str(&obj, "results")).flatten() {
            if r.is_empty() {
                errs.push(ActionError::invalid(
                    "results",
                    "expected a folder, found an empty string",
                ));
            }
            run.results_dir = self.base_dir.join(r);
        }
        if let Some(t) = errs.ok(opt_str(&obj, "token_env")).flatten() {
            if t.is_empty() || t.contains('=') || t.contains('\0') {
                errs.push(ActionError::invalid(
                    "token_env",
                    format!("expected the name of an environment variable, found {t:?}"),
                ));
            }
            run.token_env = t.to_string();
        }
        if let Some(s) = errs.ok(opt_duration(&obj, "sample", true)).flatten() {
            run.sample_ns = s;
        }
        self.report_all(node, errs);
        run
    }

    fn duplicates(&mut self, entries: &[Entry<'_>], what: &str) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for e in entries {
            let Some(Value::String(name)) = e.obj.get("name") else {
                continue;
            };
            let line = self.line_of(e.node, "name");
            if let Some(first) = seen.get(name) {
                self.report(
                    e.node,
                    ActionError::invalid(
                        "name",
                        format!("duplicate {what} name {name:?}; it is already defined at line {first}, expected a unique name"),
                    ),
                );
            } else {
                seen.insert(name.clone(), line);
            }
        }
    }

    fn hosts(&mut self, entries: &[Entry<'_>]) -> Vec<HostSpec> {
        self.duplicates(entries, "host");
        let placeholder: SocketAddr = ([0, 0, 0, 0], 0).into();
        // address → (host name, key, line)
        let mut used: HashMap<SocketAddr, (String, &'static str, usize)> = HashMap::new();
        let mut hosts = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let mut errs = Errs::default();
            check_keys(&e.obj, HOST_KEYS, "[[hosts]]", &mut errs);
            let name = errs
                .ok(req_name(&e.obj, "name", "a host name"))
                .unwrap_or("")
                .to_string();
            let listen = errs.ok(req_addr(&e.obj, "listen"));
            let advertise = errs.ok(opt_peer_addr(&e.obj, "advertise")).flatten();
            let control = errs.ok(opt_addr(&e.obj, "control")).flatten();
            let cpus = errs.ok(opt_f64(&e.obj, "cpus")).flatten();
            if cpus.is_some_and(|c| !(c > 0.0 && c <= 4096.0)) {
                errs.push(ActionError::invalid(
                    "cpus",
                    "expected a number of CPU cores above 0 (e.g. 2 or 0.5)",
                ));
            }
            let memory = errs
                .ok(opt_bytes(&e.obj, "memory", false))
                .flatten()
                .flatten();
            for (key, addr) in [("listen", listen), ("control", control)] {
                let Some(addr) = addr else { continue };
                let line = self.line_of(e.node, key);
                match used.get(&addr) {
                    Some((other, other_key, other_line)) => errs.push(ActionError::invalid(
                        key,
                        format!(
                            "address {addr} is already the {other_key} address of host {other:?} (line {other_line}); expected an address no other host or control socket uses"
                        ),
                    )),
                    None => {
                        used.insert(addr, (name.clone(), key, line));
                    }
                }
            }
            self.report_all(e.node, errs);
            let listen = listen.unwrap_or(placeholder);
            hosts.push(HostSpec {
                id: HostId(i as u16),
                name,
                listen,
                advertise: advertise.unwrap_or(PeerAddr::Ip(listen)),
                control,
                resources: HostResources {
                    cpus,
                    memory_bytes: memory,
                },
            });
        }
        hosts
    }

    /// Users name schedulers, schedulers name servers, and every server is
    /// scheduled by exactly one scheduler.
    fn lyreo_references(
        &mut self,
        entries: &[Entry<'_>],
        actors: &[ActorSpec],
        kinds: &[PendingKind],
    ) {
        for k in kinds {
            let to = &actors[k.to];
            if to.kind.kind_name() != k.kind {
                self.report(
                    entries[k.actor].node,
                    ActionError::invalid(
                        k.key,
                        format!(
                            "actor {:?} is a {}; expected a {} actor",
                            to.name,
                            to.kind.kind_name(),
                            k.kind
                        ),
                    ),
                );
            }
        }
        for (i, a) in actors.iter().enumerate() {
            if !matches!(a.kind, ActorKind::Server(_)) {
                continue;
            }
            let by: Vec<&str> = actors
                .iter()
                .filter(|s| match &s.kind {
                    ActorKind::Scheduler(spec) => spec.servers.contains(&a.id),
                    _ => false,
                })
                .map(|s| s.name.as_str())
                .collect();
            let problem = match by.as_slice() {
                [] => format!(
                    "server {:?} is in no scheduler's `servers`; expected exactly one scheduler to list it",
                    a.name
                ),
                [_] => continue,
                many => format!(
                    "server {:?} is listed by several schedulers ({}); expected exactly one",
                    a.name,
                    many.join(", ")
                ),
            };
            self.report(entries[i].node, ActionError::invalid("kind", problem));
        }
    }

    /// An agent's server is on its host and gives it a model (its real
    /// backend, or the agent's own `model` when the server is modeled); its `via`
    /// joins it and its `hand_to`, with a fixed rate when the deadline is ρ.
    fn agent_references(
        &mut self,
        entries: &[Entry<'_>],
        actors: &[ActorSpec],
        links: &[LinkSpec],
    ) {
        for (i, a) in actors.iter().enumerate() {
            let ActorKind::Agent(spec) = &a.kind else {
                continue;
            };
            let node = entries[i].node;
            if let Some(s) = actors.get(spec.server.0 as usize) {
                if let ActorKind::Server(ss) = &s.kind {
                    if s.host != a.host {
                        self.report(node, ActionError::invalid("server", format!(
                            "server {:?} is on another host; expected a server on this agent's host", s.name)));
                    }
                    match (ss.backend.real_model(), spec.model) {
                        (None, None) => {
                            self.report(node, ActionError::invalid("server", format!(
                                "server {:?} has the modeled backend, whose cost model has no weights; give the agent `model = \"smollm2\"` (or \"tiny\") or bind it to a server with backend = \"real\"", s.name)));
                        }
                        (Some(m), Some(am)) if m != am => {
                            self.report(node, ActionError::invalid("model", format!(
                                "server {:?} runs {m:?} but the agent asks for {am:?}; a handed-off KV cache is only meaningful to the same model (remove `model` to use the server's)", s.name)));
                        }
                        _ => {}
                    }
                }
            }
            let Some(task) = &spec.handoff else {
                continue;
            };
            let (Some(l), Some(to)) = (
                links.get(task.via.0 as usize),
                actors.get(task.to.0 as usize),
            ) else {
                continue;
            };
            if task.scheme == crate::agent::KERNEL_TCP_SCHEME {
                // The KV crosses the link between two attach points as the
                // kernel's TCP: its `a` end on this agent's host, its `b`
                // end on the receiver's.
                let (la, lb) = (&actors[l.a.0 as usize], &actors[l.b.0 as usize]);
                let ok = matches!(la.kind, ActorKind::Attach(_))
                    && matches!(lb.kind, ActorKind::Attach(_))
                    && la.host == a.host
                    && lb.host == to.host;
                if !ok {
                    self.report(node, ActionError::invalid("via", format!(
                        "scheme \"tcp-kernel\" sends the KV over the kernel's TCP between two attach points: link {:?} must join an attach point on this agent's host (its `a`) and one on {:?}'s host (its `b`), not {:?} and {:?}",
                        l.name, to.name, la.name, lb.name)));
                    continue;
                }
            } else if !l.joins(a.id, to.id) {
                self.report(node, ActionError::invalid("via", format!(
                    "link {:?} joins {:?} and {:?}, not {:?} and {:?}; expected a link between this agent and its `hand_to`",
                    l.name, actors[l.a.0 as usize].name, actors[l.b.0 as usize].name, a.name, to.name)));
                continue;
            }
            // A tcp-kernel link's `a` end is the sender's attach point.
            let dir = l
                .direction_from(a.id)
                .unwrap_or(edgemu_codec::ids::Direction::AtoB);
            let fixed = matches!(l.params(dir).rate, edgemu_links::RateSpec::Fixed { .. });
            if matches!(task.deadline, crate::agent::HandoffDeadline::Rho(_)) && !fixed {
                self.report(node, ActionError::invalid("rho", format!(
                    "link {:?} has no fixed rate towards {:?}, so rho has no T_ser; give a fixed `rate` or the deadline as `ttft`", l.name, to.name)));
            }
        }
    }

    fn actor(
        &mut self,
        i: usize,
        e: &Entry<'_>,
        (hosts, actors, links): (&Names, &Names, &Names),
        pending: &mut Vec<PendingRoute>,
        kinds: &mut Vec<PendingKind>,
    ) -> ActorSpec {
        let obj = &e.obj;
        let mut errs = Errs::default();
        let name = errs
            .ok(req_name(obj, "name", "an actor name"))
            .unwrap_or("")
            .to_string();
        let host = errs
            .ok(req_str(obj, "host", "the name of a host").and_then(|h| hosts.resolve("host", h)))
            .unwrap_or(0);
        let kind = errs
            .ok(req_str(
                obj,
                "kind",
                "one of \"constant\", \"bursty\", \"pinger\", \"sink\", \"user\", \"server\", \"scheduler\", \"agent\"",
            )
            .and_then(|_| opt_enum(obj, "kind", ACTOR_KINDS).map(|k| k.unwrap_or("sink"))))
            .unwrap_or("?");
        let context = if ACTOR_KINDS.contains(&kind) {
            format!("kind {kind:?}")
        } else {
            "an actor".into()
        };
        check_keys(obj, actor_keys(kind), &context, &mut errs);

        let mut route = Route {
            to: ActorId(0),
            via: None,
        };
        let mut reply_via = None;
        let (mut start_ns, mut stop_ns) = (0, None);
        let lyreo = crate::lyreo::keys(kind).is_some() || kind == "agent";
        if kind != "sink" && !lyreo {
            let mut p = PendingRoute {
                actor: i,
                to: i,
                links: Vec::new(),
            };
            let to = errs.ok(req_str(obj, "to", "the name of the destination actor")
                .and_then(|t| actors.resolve("to", t)));
            if to == Some(i) {
                errs.push(ActionError::invalid(
                    "to",
                    "an actor cannot send to itself; expected another actor",
                ));
            }
            for key in ["via", "reply_via"] {
                let l = errs
                    .ok(opt_str(obj, key)
                        .and_then(|l| l.map(|l| links.resolve(key, l)).transpose()));
                if let Some(Some(l)) = l {
                    let id = LinkId(l as u32);
                    if key == "via" {
                        route.via = Some(id);
                    } else {
                        reply_via = Some(id);
                    }
                    p.links.push((key, l));
                }
            }
            if let Some(to) = to.filter(|&t| t != i) {
                route.to = ActorId(to as u32);
                p.to = to;
                pending.push(p);
            }
            start_ns = errs
                .ok(opt_duration(obj, "start", false))
                .flatten()
                .unwrap_or(0);
            stop_ns = errs.ok(opt_duration(obj, "stop", false)).flatten();
            if let Some(stop) = stop_ns {
                if stop <= start_ns {
                    errs.push(ActionError::invalid(
                        "stop",
                        format!(
                            "expected a time after `start` ({}), found {:?}",
                            fmt_duration(start_ns),
                            fmt_duration(stop)
                        ),
                    ));
                }
            }
        }
        let size = |errs: &mut Errs, default: u32| {
            errs.ok(opt_packet_size(obj, "size"))
                .flatten()
                .unwrap_or(default)
        };
        let kind = match kind {
            "constant" => ActorKind::ConstantSender {
                rate_bps: errs
                    .ok(opt_rate(obj, "rate", false).and_then(|r| {
                        r.flatten().ok_or_else(|| {
                            missing("rate", "a rate like \"20Mbps\" (bps, Kbps, Mbps, Gbps)")
                        })
                    }))
                    .unwrap_or(1),
                size: size(&mut errs, 1400),
                real_bytes: errs
                    .ok(opt_enum(obj, "payload", &["declared", "bytes"]))
                    .flatten()
                    == Some("bytes"),
                route,
                start_ns,
                stop_ns,
            },
            "bursty" => {
                let burst = errs.ok(opt_u64(obj, "burst")).flatten().unwrap_or(16);
                if burst == 0 || burst > u64::from(u32::MAX) {
                    errs.push(ActionError::invalid(
                        "burst",
                        format!(
                            "expected a number of packets from 1 to {}, found {burst}",
                            u32::MAX
                        ),
                    ));
                }
                ActorKind::BurstySender {
                    burst: burst.clamp(1, u64::from(u32::MAX)) as u32,
                    size: size(&mut errs, 1400),
                    interval_ns: errs
                        .ok(opt_duration(obj, "interval", true))
                        .flatten()
                        .unwrap_or(100_000_000),
                    route,
                    start_ns,
                    stop_ns,
                }
            }
            "pinger" => ActorKind::Pinger {
                reply_via: reply_via.or(route.via),
                size: size(&mut errs, 64),
                interval_ns: errs
                    .ok(opt_duration(obj, "interval", true))
                    .flatten()
                    .unwrap_or(100_000_000),
                route,
                start_ns,
                stop_ns,
            },
            "user" => {
                let resolve = |key: &str, n: &str| actors.resolve(key, n);
                let (spec, to) = crate::lyreo::user(obj, &resolve, &mut errs);
                if let Some(to) = to {
                    kinds.push(PendingKind {
                        actor: i,
                        key: "scheduler",
                        to,
                        kind: "scheduler",
                    });
                }
                ActorKind::User(spec)
            }
            "gateway" => {
                let resolve = |key: &str, n: &str| actors.resolve(key, n);
                let listen = errs.ok(req_addr(obj, "listen"));
                let (spec, to) = crate::lyreo::gateway(obj, listen, &resolve, &mut errs);
                if let Some(to) = to {
                    kinds.push(PendingKind {
                        actor: i,
                        key: "scheduler",
                        to,
                        kind: "scheduler",
                    });
                }
                ActorKind::Gateway(spec)
            }
            "attach" => ActorKind::Attach(crate::attach::attach(obj, &name, &mut errs, route)),
            "server" => ActorKind::Server(crate::lyreo::server(obj, &mut errs)),
            "agent" => {
                let resolve = |key: &str, n: &str| actors.resolve(key, n);
                let resolve_link = |key: &str, n: &str| links.resolve(key, n);
                let (spec, refs) = crate::agent::agent(obj, &resolve, &resolve_link, &mut errs);
                if let Some(to) = refs.server {
                    kinds.push(PendingKind {
                        actor: i,
                        key: "server",
                        to,
                        kind: "server",
                    });
                }
                if let Some(to) = refs.hand_to {
                    if to == i {
                        errs.push(ActionError::invalid(
                            "hand_to",
                            "an agent cannot hand to itself; expected another agent",
                        ));
                    }
                    kinds.push(PendingKind {
                        actor: i,
                        key: "hand_to",
                        to,
                        kind: "agent",
                    });
                }
                // No spec: its error is reported and the file refused.
                spec.map_or(ActorKind::Sink, ActorKind::Agent)
            }
            "scheduler" => {
                let resolve = |key: &str, n: &str| actors.resolve(key, n);
                let (spec, servers) = crate::lyreo::scheduler(obj, &resolve, &mut errs);
                kinds.extend(servers.into_iter().map(|to| PendingKind {
                    actor: i,
                    key: "servers",
                    to,
                    kind: "server",
                }));
                ActorKind::Scheduler(spec)
            }
            _ => ActorKind::Sink,
        };
        self.report_all(e.node, errs);
        ActorSpec {
            id: ActorId(i as u32),
            name,
            host: HostId(host as u16),
            kind,
        }
    }

    fn link(&mut self, i: usize, e: &Entry<'_>, actors: &Names) -> LinkSpec {
        let obj = &e.obj;
        let mut errs = Errs::default();
        let mut valid: Vec<&'static str> = vec!["name", "a", "b"];
        valid.extend_from_slice(PARAM_KEYS);
        valid.extend_from_slice(&["ab", "ba", "seed"]);
        check_keys(obj, &valid, "[[links]]", &mut errs);
        let name = errs
            .ok(req_name(obj, "name", "a link name"))
            .unwrap_or("")
            .to_string();
        let mut ends = [None; 2];
        for (slot, key) in ["a", "b"].into_iter().enumerate() {
            ends[slot] = errs.ok(req_str(obj, key, "the name of an endpoint actor")
                .and_then(|n| actors.resolve(key, n)));
        }
        if let [Some(a), Some(b)] = ends {
            if a == b {
                errs.push(ActionError::invalid(
                    "b",
                    format!(
                        "both ends are {:?}; expected a link between two different actors",
                        actors.list[a]
                    ),
                ));
            }
        }
        let ends = ends.map(|e| e.unwrap_or(0));
        let both = parse_layer(obj, &self.base_dir, &mut errs);
        if obj.contains_key("seed") {
            errs.push(ActionError::invalid(
                "seed",
                "set `seed` in [links.ab] or [links.ba]: each direction draws from its own random stream",
            ));
        }
        let mut dirs = [LinkParams::default(), LinkParams::default()];
        let mut seeds = [None; 2];
        for (slot, key) in ["ab", "ba"].into_iter().enumerate() {
            both.apply(&mut dirs[slot]);
            let mut queue_given = both.queue_bytes.is_some();
            if let Some(t) = errs.ok(opt_table(obj, key)).flatten() {
                let mut sub = Errs::default();
                let mut keys: Vec<&str> = PARAM_KEYS.to_vec();
                keys.push("seed");
                check_keys(t, &keys, &format!("[links.{key}]"), &mut sub);
                seeds[slot] = sub.ok(opt_u64(t, "seed")).flatten();
                let layer = parse_layer(t, &self.base_dir, &mut sub);
                layer.apply(&mut dirs[slot]);
                queue_given |= layer.queue_bytes.is_some();
                errs.0.extend(sub.0.into_iter().map(|e| e.nested(key)));
            }
            if !queue_given {
                dirs[slot].queue_bytes = Some(default_queue_bytes(&dirs[slot].rate));
            }
        }
        self.report_all(e.node, errs);
        let [ab, ba] = dirs;
        LinkSpec {
            id: LinkId(i as u32),
            name,
            a: ActorId(ends[0] as u32),
            b: ActorId(ends[1] as u32),
            ab,
            ba,
            seeds,
        }
    }

    fn chaos(&mut self, i: usize, e: &Entry<'_>, cluster: &Cluster) -> Option<ChaosSpec> {
        let obj = &e.obj;
        let mut errs = Errs::default();
        let duration = cluster.run.duration_ns;
        let at_ns = errs.ok(req_duration(obj, "at", false));
        if let Some(at) = at_ns.filter(|&at| at > duration) {
            errs.push(ActionError::invalid(
                "at",
                format!(
                    "{} is beyond the run's duration ({}); expected a time within the run",
                    fmt_duration(at),
                    fmt_duration(duration)
                ),
            ));
        }
        let for_ns = errs.ok(opt_duration(obj, "for", true)).flatten();
        let every_ns = errs.ok(opt_duration(obj, "every", true)).flatten();
        if let Some(ev) = every_ns.filter(|&ev| ev < MIN_EVERY_NS) {
            errs.push(ActionError::invalid(
                "every",
                format!(
                    "{} is shorter than the minimum repeat period ({}); expected a period of at least {}",
                    fmt_duration(ev),
                    fmt_duration(MIN_EVERY_NS),
                    fmt_duration(MIN_EVERY_NS)
                ),
            ));
        }
        if let (Some(f), Some(ev)) = (for_ns, every_ns) {
            if ev < f {
                errs.push(ActionError::invalid(
                    "every",
                    format!(
                        "{} is shorter than `for` ({}); expected a period at least as long as the fault",
                        fmt_duration(ev),
                        fmt_duration(f)
                    ),
                ));
            }
        }
        let chaos_names: Vec<&str> = Command::NAMES
            .iter()
            .copied()
            .filter(|n| !matches!(*n, "status" | "metrics" | "metrics.subscribe"))
            .collect();
        let name = errs.ok(req_str(
            obj,
            "command",
            &format!("one of {}", chaos_names.join(", ")),
        ));
        let mut request = None;
        let mut command = None;
        if let Some(name) = name {
            // The entry's keys, less its own, are a control request's: one
            // typed parse for both.
            let mut fields: Obj = obj
                .iter()
                .filter(|(k, _)| !CHAOS_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            fields.insert("cmd".into(), Value::String(name.to_string()));
            match Command::from_fields(&fields) {
                Ok(mut cmd) if cmd.in_chaos() => {
                    if let (Some(f), Some(v)) = (for_ns, obj.get("for")) {
                        match (cmd.heal_after_mut(), v) {
                            (Some(slot), Value::String(s)) if f > 0 => *slot = Some(s.clone()),
                            _ => errs.push(crate::command::nothing_to_heal(name)),
                        }
                    }
                    match cmd.resolve(cluster) {
                        Ok(r) => request = Some(r),
                        Err(e) => errs.push(e),
                    }
                    command = Some(cmd);
                }
                Ok(_) | Err(ActionError::UnknownCommand { .. }) => {
                    errs.push(ActionError::invalid(
                        "command",
                        format!(
                            "unknown command {name:?}; expected one of: {}",
                            chaos_names.join(", ")
                        ),
                    ));
                }
                Err(ActionError::UnknownField {
                    field,
                    context,
                    mut valid,
                }) => {
                    for k in CHAOS_KEYS {
                        if !valid.iter().any(|v| v == k) {
                            valid.push(k.to_string());
                        }
                    }
                    errs.push(ActionError::UnknownField {
                        field,
                        context,
                        valid,
                    });
                }
                Err(other) => errs.push(other),
            }
            if every_ns.is_some() && matches!(name, "link.flap" | "run.stop") {
                errs.push(ActionError::invalid(
                    "every",
                    format!("{name:?} cannot repeat; remove `every`"),
                ));
            }
            if let (
                Some(Resolved::Action {
                    action:
                        NetAction::LinkFlap {
                            until_ns: Some(until),
                            ..
                        },
                    ..
                }),
                Some(at),
            ) = (&request, at_ns)
            {
                if *until <= at {
                    errs.push(ActionError::invalid(
                        "until",
                        format!(
                            "expected a time after `at` ({}), found {:?}",
                            fmt_duration(at),
                            fmt_duration(*until)
                        ),
                    ));
                }
            }
        }
        let ok = errs.0.is_empty();
        self.report_all(e.node, errs);
        match (ok, at_ns, command, request) {
            (true, Some(at_ns), Some(command), Some(request)) => Some(ChaosSpec {
                index: i + 1,
                at_ns,
                command,
                request,
                every_ns,
            }),
            _ => None,
        }
    }
}

/// `"ip:port"`, or `"name:port"` with a DNS name (resolved at each dial).
fn opt_peer_addr(obj: &Obj, key: &str) -> Result<Option<PeerAddr>, ActionError> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let bad = || {
        ActionError::invalid(
            key,
            format!(
                "expected \"ip:port\" or \"dns-name:port\" (e.g. \"10.0.0.2:7101\", \"edge1.edgemu:7101\"), found {}",
                describe_value(v)
            ),
        )
    };
    let s = v.as_str().ok_or_else(bad)?;
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(Some(PeerAddr::Ip(a)));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if port == 0 || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(bad());
    }
    Ok(Some(PeerAddr::Name {
        host: host.to_ascii_lowercase(),
        port,
    }))
}

fn opt_addr(obj: &Obj, key: &str) -> Result<Option<SocketAddr>, ActionError> {
    let Some(s) = opt_str(obj, key)? else {
        return Ok(None);
    };
    s.parse().map(Some).map_err(|_| {
        ActionError::invalid(
            key,
            format!("expected a socket address like \"127.0.0.1:7101\", found {s:?}"),
        )
    })
}

fn req_addr(obj: &Obj, key: &str) -> Result<SocketAddr, ActionError> {
    opt_addr(obj, key)?.ok_or_else(|| missing(key, "a socket address like \"127.0.0.1:7101\""))
}

#[cfg(test)]
mod documented_keys {
    //! The key tables of `docs/cluster-toml.md` list exactly the keys the
    //! parser accepts, so a key added to one is added to the other.
    use super::{actor_keys, ACTOR_KINDS, CHAOS_KEYS, HOST_KEYS, PARAM_KEYS, RUN_KEYS};

    /// The first column's keys of the first table under `heading`.
    fn table_keys(doc: &str, heading: &str) -> Vec<String> {
        let at = doc
            .find(&format!("\n{heading}"))
            .unwrap_or_else(|| panic!("no heading {heading:?}"));
        doc[at..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2) // the header and its rule
            .map(|l| {
                let cell = l.split('|').nth(1).expect("a first cell").trim();
                cell.trim_matches('`').to_string()
            })
            .collect()
    }

    /// Every key some actor kind or a link accepts is named (as `` `key` ``,
    /// a direction's table as `` `[links.ab]` ``) in the doc.
    #[test]
    fn every_actor_and_link_key_is_documented() {
        let doc = include_str!("../../docs/cluster-toml.md");
        let mut missing = Vec::new();
        for kind in ACTOR_KINDS {
            for key in actor_keys(kind) {
                if !doc.contains(&format!("`{key}`")) {
                    missing.push(format!("{kind}.{key}"));
                }
            }
        }
        for key in PARAM_KEYS.iter().chain(&["seed"]) {
            if !doc.contains(&format!("`{key}`")) {
                missing.push(format!("links.{key}"));
            }
        }
        for table in ["ab", "ba"] {
            if !doc.contains(&format!("`[links.{table}]`")) {
                missing.push(format!("links.{table}"));
            }
        }
        assert!(
            missing.is_empty(),
            "not in docs/cluster-toml.md: {missing:?}"
        );
    }

    #[test]
    fn the_documented_tables_list_every_key_and_no_other() {
        let doc = include_str!("../../docs/cluster-toml.md");
        for (heading, keys) in [
            ("## `[run]`", RUN_KEYS),
            ("## `[[hosts]]`", HOST_KEYS),
            ("## `[[chaos]]`", CHAOS_KEYS),
        ] {
            let mut documented = table_keys(doc, heading);
            let mut parsed: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            documented.sort();
            parsed.sort();
            assert_eq!(documented, parsed, "{heading}");
        }
    }
}
