//! The LYREO actor kinds of `cluster.toml` (issue 8): `user`, `server` and
//! `scheduler`. Only what a file can get wrong is checked here (names,
//! ranges, references between the three kinds); the policy name is checked
//! against the policy registry when the host starts (this crate does not
//! depend on `edgemu-policies`).

use crate::error::ActionError;
use crate::fields::*;
use crate::units::fmt_duration;
use edgemu_codec::ids::ActorId;
use serde_json::Value;

/// Keys of each LYREO kind.
pub(crate) fn keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "user" => &[
            "name",
            "host",
            "kind",
            "scheduler",
            "mobility",
            "area",
            "power_dbm",
            "workload",
            "max_input",
            "max_output",
            "start",
            "stop",
        ],
        "server" => &[
            "name",
            "host",
            "kind",
            "gpu",
            "backend",
            "model",
            "bandwidth_mhz",
            "position",
            "url",
            "api_key_env",
            "timeout",
        ],
        "gateway" => &[
            "name",
            "host",
            "kind",
            "scheduler",
            "listen",
            "model",
            "served_model_name",
            "api_key_env",
            "max_tokens",
            "max_input",
            "max_output",
            "timeout",
            "position",
            "power_dbm",
            "http_thread",
        ],
        "scheduler" => &[
            "name", "host", "kind", "servers", "policy", "external", "epsilon", "nu", "slot",
            "collect",
        ],
        _ => return None,
    })
}

/// How a user moves (`mobility = "random-walk" | "random-waypoint"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MobilityKind {
    RandomWalk,
    RandomWaypoint,
}

impl MobilityKind {
    pub fn name(self) -> &'static str {
        match self {
            MobilityKind::RandomWalk => "random-walk",
            MobilityKind::RandomWaypoint => "random-waypoint",
        }
    }
}

/// Where request lengths come from (`workload = "lmsys-like" | "sharegpt"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    LmsysLike,
    ShareGpt,
}

impl WorkloadKind {
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::LmsysLike => "lmsys-like",
            WorkloadKind::ShareGpt => "sharegpt",
        }
    }
}

/// A `kind = "user"` actor: a mobile user sending one request per slot.
#[derive(Clone, Debug, PartialEq)]
pub struct UserSpec {
    /// The `scheduler` actor its requests go to (its slot length too).
    pub scheduler: ActorId,
    pub mobility: MobilityKind,
    /// Service area, metres (width, height); default 200 × 200.
    pub area_m: [f64; 2],
    /// Transmit power range, dBm; the user's power is drawn in it (seeded).
    pub power_dbm: [f64; 2],
    pub workload: WorkloadKind,
    /// Lengths are truncated to these (tokens).
    pub max_input: u32,
    pub max_output: u32,
    pub start_ns: u64,
    pub stop_ns: Option<u64>,
}

/// How a gateway turns text into tokens and back (`model = …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayModel {
    /// No tokenizer: a prompt's length is estimated (one token per four
    /// bytes of UTF-8), and generated tokens are shown as placeholder words.
    /// For clusters of modeled servers, which only need lengths.
    Modeled,
    /// SmolLM2-135M-Instruct's tokenizer and chat template, from the model
    /// file (fetched on first use): prompts reach a `backend = "real"`
    /// server as their real tokens, and its tokens come back as text.
    SmolLm2,
}

/// Which thread serves a gateway's HTTP (`http_thread`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GatewayHttpThread {
    /// The thread of the gateway's host, beside the gateway actor: a
    /// request and its tokens pass between HTTP and actor without waking
    /// another thread, so the gateway adds the least time; HTTP work
    /// (parsing bodies, writing events) shares the thread with the host's
    /// other actors.
    Host,
    /// A thread of its own: HTTP work never delays the host's other
    /// actors, and every request and its end cross between two threads
    /// (each crossing waits for the OS to run the other thread).
    Own,
}

impl GatewayHttpThread {
    /// Every placement, in the order `NAMES` lists them.
    pub const ALL: [Self; 2] = [GatewayHttpThread::Host, GatewayHttpThread::Own];
    /// The values of `http_thread`.
    pub const NAMES: [&'static str; 2] = [Self::ALL[0].name(), Self::ALL[1].name()];

    pub const fn name(self) -> &'static str {
        match self {
            GatewayHttpThread::Host => "host",
            GatewayHttpThread::Own => "own",
        }
    }

    /// The placement `http_thread = name` asks for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Where the HTTP runs, in words ("the host's thread").
    pub fn placement(self) -> &'static str {
        match self {
            GatewayHttpThread::Host => "the host's thread",
            GatewayHttpThread::Own => "its own thread",
        }
    }
}

impl GatewayModel {
    pub fn name(self) -> &'static str {
        match self {
            GatewayModel::Modeled => "modeled",
            GatewayModel::SmolLm2 => "smollm2",
        }
    }

    /// The model id `/v1/models` lists when `served_model_name` is not given.
    pub fn default_served_name(self) -> &'static str {
        match self {
            GatewayModel::Modeled => "edgemu-modeled",
            GatewayModel::SmolLm2 => "SmolLM2-135M-Instruct",
        }
    }
}

/// A `kind = "gateway"` actor: an OpenAI-compatible HTTP endpoint whose
/// requests enter the emulated system as a mobile user's requests.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewaySpec {
    /// The scheduler its requests go to.
    pub scheduler: ActorId,
    /// Where it serves HTTP.
    pub listen: std::net::SocketAddr,
    pub model: GatewayModel,
    /// The model id clients name (`model` in a request body).
    pub served_model_name: String,
    /// Environment variable holding the API key clients must send as
    /// `Authorization: Bearer …`; required for a non-loopback `listen`.
    pub api_key_env: Option<String>,
    /// Output tokens when a request does not say (`max_tokens`).
    pub max_tokens: u32,
    /// Longest prompt accepted, tokens.
    pub max_input: u32,
    /// Most output tokens a request may ask for.
    pub max_output: u32,
    /// A request with no final answer this long after it arrived is
    /// answered with an error (timeout), ns.
    pub timeout_ns: u64,
    /// Where its radio sits in the area, metres.
    pub position_m: [f64; 2],
    /// Its transmit power, dBm.
    pub power_dbm: f64,
    /// Which thread serves its HTTP.
    pub http_thread: GatewayHttpThread,
}

/// A server's GPU class (`gpu = "rtx3080" | "rtx3090" | "rtx4090"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuClass {
    Rtx3080,
    Rtx3090,
    Rtx4090,
}

impl GpuClass {
    pub fn name(self) -> &'static str {
        match self {
            GpuClass::Rtx3080 => "rtx3080",
            GpuClass::Rtx3090 => "rtx3090",
            GpuClass::Rtx4090 => "rtx4090",
        }
    }
}

/// Which model a `backend = "real"` server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealModel {
    /// SmolLM2-135M-Instruct from `EDGEMU_MODEL_DIR` (`model = "smollm2"`).
    SmolLm2,
    /// A tiny random-weight Llama built in memory (`model = "tiny"`), for
    /// tests that must not need the download.
    Tiny,
}

/// What computes a server's batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerBackend {
    /// The GPU class's cost model (prefill rate, decode time vs. KV).
    Modeled,
    /// The candle Llama on the CPU, wall-clock timed.
    Real(RealModel),
    /// An OpenAI-compatible serving stack outside edgemu (`backend =
    /// "openai"`), and where it is.
    OpenAi(OpenAiBackend),
}

impl ServerBackend {
    /// The real model it runs, if it runs one in edgemu.
    pub fn real_model(&self) -> Option<RealModel> {
        match self {
            ServerBackend::Real(m) => Some(*m),
            ServerBackend::Modeled | ServerBackend::OpenAi(_) => None,
        }
    }
}

/// Where a `backend = "openai"` server sends its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAiBackend {
    /// Base URL of the API as written, `http://host:port/v1`.
    pub url: String,
    /// Its `host:port` (port 80 when the URL gives none).
    pub authority: String,
    /// Its path, without a trailing `/` (`/v1`; empty for the root).
    pub base_path: String,
    /// The model id to ask for.
    pub model: String,
    /// Environment variable holding its API key, if it needs one.
    pub api_key_env: Option<String>,
    /// Longest a request may take there, ns.
    pub timeout_ns: u64,
}

/// A `kind = "server"` actor: an edge server with its radio cell.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSpec {
    pub gpu: GpuClass,
    pub backend: ServerBackend,
    /// Uplink bandwidth `B_s`, Hz.
    pub bandwidth_hz: f64,
    /// Position in the area, metres; `None`: drawn from the run seed.
    pub position_m: Option<[f64; 2]>,
}

/// A `kind = "scheduler"` actor.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerSpec {
    /// The servers it assigns to, in order (index = server index).
    pub servers: Vec<ActorId>,
    /// Policy name as `PolicySpec::parse` reads it (`least-loaded`,
    /// `random`, `lyreo`, `static`, … or `name=weights.safetensors`), or
    /// `external` (ask the policy process of `external`).
    pub policy: String,
    /// Where an external policy is asked (required with `policy =
    /// "external"`; otherwise what a `policy.swap` to `external` uses).
    pub external: Option<crate::external::ExternalPolicy>,
    pub epsilon: f64,
    pub nu: f64,
    /// Slot length Δ, ns.
    pub slot_ns: u64,
    /// How long after a slot starts the scheduler decides (requests that
    /// arrive later wait for the next slot), ns.
    pub collect_ns: u64,
}

/// `[a, b]` of two finite numbers.
fn opt_pair(obj: &Obj, key: &str, what: &str) -> Result<Option<[f64; 2]>, ActionError> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let bad = || ActionError::invalid(key, format!("expected {what}, found {}", describe_value(v)));
    let Value::Array(items) = v else {
        return Err(bad());
    };
    match items.as_slice() {
        [a, b] => match (a.as_f64(), b.as_f64()) {
            (Some(a), Some(b)) if a.is_finite() && b.is_finite() => Ok(Some([a, b])),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn token_limit(obj: &Obj, key: &str, default: u32, errs: &mut Errs) -> u32 {
    match errs.ok(opt_u64(obj, key)).flatten() {
        None => default,
        Some(n) if (1..=65_536).contains(&n) => n as u32,
        Some(n) => {
            errs.push(ActionError::invalid(
                key,
                format!("expected a number of tokens from 1 to 65536, found {n}"),
            ));
            default
        }
    }
}

/// Parses the fields of a `user` (`resolve` maps an actor name to its index).
pub(crate) fn user(
    obj: &Obj,
    resolve: &dyn Fn(&str, &str) -> Result<usize, ActionError>,
    errs: &mut Errs,
) -> (UserSpec, Option<usize>) {
    let scheduler = errs.ok(req_str(obj, "scheduler", "the name of a scheduler actor")
        .and_then(|s| resolve("scheduler", s)));
    let mobility = match errs
        .ok(opt_enum(
            obj,
            "mobility",
            &["random-walk", "random-waypoint"],
        ))
        .flatten()
    {
        Some("random-waypoint") => MobilityKind::RandomWaypoint,
        _ => MobilityKind::RandomWalk,
    };
    let area_m = errs
        .ok(opt_pair(
            obj,
            "area",
            "[width, height] in metres, e.g. [200, 200]",
        ))
        .flatten()
        .unwrap_or([200.0, 200.0]);
    if area_m.iter().any(|&x| x <= 0.0) {
        errs.push(ActionError::invalid(
            "area",
            format!("expected a positive width and height, found {area_m:?}"),
        ));
    }
    let power_dbm = errs
        .ok(opt_pair(
            obj,
            "power_dbm",
            "[low, high] in dBm, e.g. [15, 25]",
        ))
        .flatten()
        .unwrap_or([15.0, 25.0]);
    if power_dbm[0] > power_dbm[1] || power_dbm[1] > 60.0 {
        errs.push(ActionError::invalid(
            "power_dbm",
            format!("expected [low, high] with low <= high <= 60 dBm, found {power_dbm:?}"),
        ));
    }
    let workload = match errs
        .ok(opt_enum(obj, "workload", &["lmsys-like", "sharegpt"]))
        .flatten()
    {
        Some("sharegpt") => WorkloadKind::ShareGpt,
        _ => WorkloadKind::LmsysLike,
    };
    let max_input = token_limit(obj, "max_input", 2048, errs);
    let max_output = token_limit(obj, "max_output", 2048, errs);
    let start_ns = errs
        .ok(opt_duration(obj, "start", false))
        .flatten()
        .unwrap_or(0);
    let stop_ns = errs.ok(opt_duration(obj, "stop", false)).flatten();
    if let Some(stop) = stop_ns.filter(|&s| s <= start_ns) {
        errs.push(ActionError::invalid(
            "stop",
            format!(
                "expected a time after `start` ({}), found {:?}",
                fmt_duration(start_ns),
                fmt_duration(stop)
            ),
        ));
    }
    (
        UserSpec {
            scheduler: ActorId(scheduler.unwrap_or(0) as u32),
            mobility,
            area_m,
            power_dbm,
            workload,
            max_input,
            max_output,
            start_ns,
            stop_ns,
        },
        scheduler,
    )
}

/// Parses the fields of a `gateway` (`resolve` maps an actor name to its
/// index; `listen` is parsed by the caller, which owns address checks).
pub(crate) fn gateway(
    obj: &Obj,
    listen: Option<std::net::SocketAddr>,
    resolve: &dyn Fn(&str, &str) -> Result<usize, ActionError>,
    errs: &mut Errs,
) -> (GatewaySpec, Option<usize>) {
    let scheduler = errs.ok(req_str(obj, "scheduler", "the name of a scheduler actor")
        .and_then(|s| resolve("scheduler", s)));
    let model = match errs
        .ok(opt_enum(obj, "model", &["modeled", "smollm2"]))
        .flatten()
    {
        Some("smollm2") => GatewayModel::SmolLm2,
        _ => GatewayModel::Modeled,
    };
    let served_model_name = match errs.ok(opt_str(obj, "served_model_name")).flatten() {
        Some(n) if !n.trim().is_empty() && n.len() <= 256 => n.to_string(),
        Some(n) => {
            errs.push(ActionError::invalid(
                "served_model_name",
                format!("expected a model id of 1 to 256 characters, found {n:?}"),
            ));
            model.default_served_name().to_string()
        }
        None => model.default_served_name().to_string(),
    };
    let api_key_env = errs
        .ok(opt_str(obj, "api_key_env"))
        .flatten()
        .map(str::to_string);
    if let Some(addr) = listen {
        if !addr.ip().is_loopback() && api_key_env.is_none() {
            errs.push(ActionError::invalid(
                "api_key_env",
                format!("gateway listens on {addr}, which is not a loopback address; expected `api_key_env`, the environment variable holding the key clients send as `Authorization: Bearer …`"),
            ));
        }
    }
    let max_input = token_limit(obj, "max_input", 2048, errs);
    let max_output = token_limit(obj, "max_output", 2048, errs);
    let max_tokens = token_limit(obj, "max_tokens", 256, errs);
    if max_tokens > max_output {
        errs.push(ActionError::invalid(
            "max_tokens",
            format!("expected at most `max_output` ({max_output}), found {max_tokens}"),
        ));
    }
    let timeout_ns = errs
        .ok(opt_duration(obj, "timeout", true))
        .flatten()
        .unwrap_or(60_000_000_000);
    let position_m = errs
        .ok(opt_pair(
            obj,
            "position",
            "[x, y] in metres, e.g. [100, 100]",
        ))
        .flatten()
        .unwrap_or([100.0, 100.0]);
    let power_dbm = errs.ok(opt_f64(obj, "power_dbm")).flatten().unwrap_or(20.0);
    if !(power_dbm.is_finite() && power_dbm <= 60.0) {
        errs.push(ActionError::invalid(
            "power_dbm",
            format!("expected a power of at most 60 dBm, found {power_dbm}"),
        ));
    }
    let http_thread = errs
        .ok(opt_enum(obj, "http_thread", &GatewayHttpThread::NAMES))
        .flatten()
        .and_then(GatewayHttpThread::from_name)
        .unwrap_or(GatewayHttpThread::Host);
    (
        GatewaySpec {
            scheduler: ActorId(scheduler.unwrap_or(0) as u32),
            listen: listen.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            model,
            served_model_name,
            api_key_env,
            max_tokens: max_tokens.min(max_output),
            max_input,
            max_output,
            timeout_ns,
            position_m,
            power_dbm,
            http_thread,
        },
        scheduler,
    )
}

/// Parses the fields of a `server`.
pub(crate) fn server(obj: &Obj, errs: &mut Errs) -> ServerSpec {
    let gpu = match errs
        .ok(opt_enum(obj, "gpu", &["rtx3080", "rtx3090", "rtx4090"]))
        .flatten()
    {
        Some("rtx3090") => GpuClass::Rtx3090,
        Some("rtx4090") => GpuClass::Rtx4090,
        _ => GpuClass::Rtx3080,
    };
    let backend = errs
        .ok(opt_enum(obj, "backend", &["modeled", "real", "openai"]))
        .flatten()
        .unwrap_or("modeled");
    let openai = (backend == "openai").then(|| openai_backend(obj, errs));
    let backend_name = backend;
    if backend != "openai" {
        for key in ["url", "api_key_env", "timeout"] {
            if obj.contains_key(key) {
                errs.push(ActionError::invalid(
                    key,
                    format!(
                        "`{key}` is only for `backend = \"openai\"`; remove it or set the backend"
                    ),
                ));
            }
        }
    }
    let model = if backend == "openai" {
        None
    } else {
        errs.ok(opt_enum(obj, "model", &["smollm2", "tiny"]))
            .flatten()
    };
    let backend = match (backend_name, model, openai) {
        ("openai", _, Some(o)) => ServerBackend::OpenAi(o),
        ("real", Some("tiny"), _) => ServerBackend::Real(RealModel::Tiny),
        ("real", _, _) => ServerBackend::Real(RealModel::SmolLm2),
        (_, Some(_), _) => {
            errs.push(ActionError::invalid(
                "model",
                "`model` is only for `backend = \"real\"`; remove it or set the backend",
            ));
            ServerBackend::Modeled
        }
        _ => ServerBackend::Modeled,
    };
    let mhz = errs
        .ok(opt_f64(obj, "bandwidth_mhz"))
        .flatten()
        .unwrap_or(10.0);
    if !(mhz > 0.0 && mhz <= 1000.0) {
        errs.push(ActionError::invalid(
            "bandwidth_mhz",
            format!("expected a bandwidth in MHz above 0 and at most 1000, found {mhz}"),
        ));
    }
    let position_m = errs
        .ok(opt_pair(
            obj,
            "position",
            "[x, y] in metres, e.g. [50, 150]",
        ))
        .flatten();
    ServerSpec {
        gpu,
        backend,
        bandwidth_hz: mhz * 1e6,
        position_m,
    }
}

/// The `url`, `model`, `api_key_env` and `timeout` of a `backend = "openai"` server.
fn openai_backend(obj: &Obj, errs: &mut Errs) -> OpenAiBackend {
    let url = errs
        .ok(req_str(
            obj,
            "url",
            "the server's API base URL, e.g. \"http://127.0.0.1:8080/v1\"",
        ))
        .unwrap_or("")
        .to_string();
    let (authority, base_path) = if url.is_empty() {
        Default::default()
    } else {
        match parse_http_url(&url) {
            Ok(parts) => parts,
            Err(why) => {
                errs.push(ActionError::invalid(
                    "url",
                    format!("{why}; expected an http:// URL like \"http://127.0.0.1:8080/v1\" (https is not spoken: put a local proxy in front)"),
                ));
                Default::default()
            }
        }
    };
    let model = errs
        .ok(req_str(
            obj,
            "model",
            "the model id the server serves, as its /v1/models lists it",
        ))
        .unwrap_or("")
        .to_string();
    let api_key_env = errs
        .ok(opt_str(obj, "api_key_env"))
        .flatten()
        .map(str::to_string);
    let timeout_ns = errs
        .ok(opt_duration(obj, "timeout", true))
        .flatten()
        .unwrap_or(120_000_000_000);
    OpenAiBackend {
        url,
        authority,
        base_path,
        model,
        api_key_env,
        timeout_ns,
    }
}

/// An `http://host[:port][/path]` URL's `host:port` (port 80 when none is
/// given) and path without a trailing `/`; an error says what is wrong.
pub fn parse_http_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    if rest.contains(['?', '#']) {
        return Err(format!(
            "{url:?} has a query or fragment; give the API's base path only"
        ));
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(format!(
            "{url:?} has user info; give a key with `api_key_env`"
        ));
    }
    // `host`, `host:port`, `[v6]` or `[v6]:port`.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.starts_with('[') || h.ends_with(']')) => (h, Some(p)),
        _ => (authority, None),
    };
    if host.is_empty()
        || host.contains(char::is_whitespace)
        || (host.contains(':') && !host.starts_with('['))
    {
        return Err(format!("{url:?} has no host"));
    }
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("{url:?} has port {p:?}, expected 1 to 65535")),
        },
    };
    Ok((
        format!("{host}:{port}"),
        path.trim_end_matches('/').to_string(),
    ))
}

/// Parses the fields of a `scheduler`; returns the server indices for the
/// cross checks.
pub(crate) fn scheduler(
    obj: &Obj,
    resolve: &dyn Fn(&str, &str) -> Result<usize, ActionError>,
    errs: &mut Errs,
) -> (SchedulerSpec, Vec<usize>) {
    let mut idx = Vec::new();
    match obj.get("servers") {
        None => errs.push(missing("servers", "an array of server actor names")),
        Some(Value::Array(items)) if !items.is_empty() => {
            for item in items {
                match item {
                    Value::String(s) => {
                        if let Some(i) = errs.ok(resolve("servers", s)) {
                            if idx.contains(&i) {
                                errs.push(ActionError::invalid(
                                    "servers",
                                    format!("server {s:?} is listed twice; expected each once"),
                                ));
                            } else {
                                idx.push(i);
                            }
                        }
                    }
                    v => errs.push(ActionError::invalid(
                        "servers",
                        format!("expected server actor names, found {}", describe_value(v)),
                    )),
                }
            }
        }
        Some(v) => errs.push(ActionError::invalid(
            "servers",
            format!(
                "expected a non-empty array of server actor names, found {}",
                describe_value(v)
            ),
        )),
    }
    let policy = errs
        .ok(opt_str(obj, "policy"))
        .flatten()
        .unwrap_or("least-loaded")
        .to_string();
    if policy.trim().is_empty() {
        errs.push(ActionError::invalid(
            "policy",
            "expected a policy name, found an empty string",
        ));
    }
    let external = crate::external::external(obj, errs);
    crate::external::require_table(&policy, external.as_ref(), obj, errs);
    let epsilon = errs.ok(opt_f64(obj, "epsilon")).flatten().unwrap_or(0.01);
    if epsilon < 0.0 {
        errs.push(ActionError::invalid(
            "epsilon",
            format!("expected a tolerance >= 0, found {epsilon}"),
        ));
    }
    let nu = errs.ok(opt_f64(obj, "nu")).flatten().unwrap_or(0.5);
    if nu < 0.0 {
        errs.push(ActionError::invalid(
            "nu",
            format!("expected a weight >= 0, found {nu}"),
        ));
    }
    let slot_ns = errs
        .ok(opt_duration(obj, "slot", true))
        .flatten()
        .unwrap_or(1_000_000_000);
    let collect_ns = errs
        .ok(opt_duration(obj, "collect", true))
        .flatten()
        .unwrap_or((slot_ns / 10).min(100_000_000));
    if collect_ns >= slot_ns {
        errs.push(ActionError::invalid(
            "collect",
            format!(
                "expected a time shorter than the slot ({}), found {}",
                fmt_duration(slot_ns),
                fmt_duration(collect_ns)
            ),
        ));
    }
    // The decision is made `collect` into the slot and must land in it.
    if let Some(d) = external.as_ref().and_then(|e| e.deadline_ns) {
        let room = slot_ns.saturating_sub(collect_ns);
        if d >= room {
            errs.push(ActionError::invalid(
                "external.deadline",
                format!(
                    "expected a deadline shorter than the slot less `collect` ({}), found {}",
                    fmt_duration(room),
                    fmt_duration(d)
                ),
            ));
        }
    }
    (
        SchedulerSpec {
            servers: idx.iter().map(|&i| ActorId(i as u32)).collect(),
            policy,
            external,
            epsilon,
            nu,
            slot_ns,
            collect_ns,
        },
        idx,
    )
}
