//! The `agent` actor kind of `cluster.toml` (issue 11): an LLM agent bound
//! to a real edge server, and the KV handoff task it runs.
//!
//! ```toml
//! [[actors]]
//! name = "agent-a"
//! host = "alpha"
//! kind = "agent"
//! server = "edge-a"          # a `server` on the same host with backend = "real"
//! kv_cache = "256MiB"        # moka cache of context KV, weighed by bytes;
//!                             # also the most KV an offer may ask it to receive
//! hand_to = "agent-b"        # the agent it hands its context to
//! via = "wan"                # the link joining the two agents
//! contexts = "builtin"       # or "sharegpt" (evaluation contexts by seed)
//! context_tokens = 256       # a multiple of 16
//! context_count = 4          # distinct contexts, cycled
//! context_seed = 0
//! start = "2s"
//! every = "8s"               # and/or handoffs
//! handoffs = 3
//! rho = 0.8                  # or ttft = "400ms"
//! scheme = "priorityfec"     # or another FEC scheme, or "tcp-kernel" (via: a link
//!                            # between two attach points, `a` here, `b` at hand_to's host)
//! policy = "deficit-heuristic"  # the repair slot's first policy (default: the scheme's)
//! # policy = "external"         # ask a policy process at each repair decision:
//! # external = { url = "ws://127.0.0.1:7301", deadline = "2ms", fallback = "priorityfec-ddqn" }
//! rebuild = "zero-fill"      # or "mask"
//! decode_tokens = 8
//! coding_window = 256        # K: most source packets one repair combines
//! ```
//!
//! Only what a file can get wrong is checked here; the scheme is checked
//! against a fixed list (this crate does not depend on `edgemu-handoff`),
//! the repair policy against the policy registry when the host starts.

use crate::error::ActionError;
use crate::fields::*;
use edgemu_codec::ids::{ActorId, LinkId};

/// Keys of `kind = "agent"`: its own, then those of its handoff task.
pub(crate) const KEYS: &[&str] =
    &concat::<{ OWN_KEYS.len() + TASK_KEYS.len() }>(OWN_KEYS, TASK_KEYS);

/// Keys every agent may have (`policy` is also the receiving side's).
const OWN_KEYS: &[&str] = &[
    "name", "host", "kind", "server", "model", "kv_cache", "hand_to", "via", "policy", "external",
];

/// Keys that describe a handoff task: only with `hand_to`.
const TASK_KEYS: &[&str] = &[
    "contexts",
    "context_tokens",
    "context_count",
    "context_seed",
    "start",
    "every",
    "handoffs",
    "rho",
    "ttft",
    "scheme",
    "rebuild",
    "decode_tokens",
    "coding_window",
];

const fn concat<const N: usize>(a: &[&'static str], b: &[&'static str]) -> [&'static str; N] {
    assert!(a.len() + b.len() == N);
    let mut out = [""; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - a.len()];
        i += 1;
    }
    out
}

/// The longest context a task hands off (`context_tokens`), and so the
/// longest a peer's offer may ask a receiving agent to rebuild.
pub const MAX_CONTEXT_TOKENS: u32 = 4096;
/// The most tokens a task decodes after a handoff (`decode_tokens`), and so
/// the most a peer's offer may ask a receiving agent to decode.
pub const MAX_DECODE_TOKENS: u32 = 512;
/// The widest coding window (`coding_window`): a receiver's decoding work
/// grows with it, so a peer's offer may not ask for more.
pub const MAX_CODING_WINDOW: u16 = 4096;

/// The coding window K when `coding_window` is not given: a handoff
/// scenario's default (`edgemu_handoff::scenario::DEFAULT_K`; this crate does
/// not depend on it, a test in `edgemu-actors` checks they agree).
pub const DEFAULT_CODING_WINDOW: u16 = 256;

/// Schemes the agent actors drive: every FEC scheme of `edgemu-handoff`,
/// and [`KERNEL_TCP_SCHEME`]. The sans-IO TCP and QUIC run only in the
/// co-simulation harness: their cores are driven by a poll loop over the
/// link model, not through link actors.
pub const AGENT_SCHEMES: &[&str] = &[
    "priorityfec",
    "udp",
    "uniform-fec",
    "flec-rt",
    "priority-only",
    "rl-fec-only",
    "priority-fixed-fec",
    "deficit-heuristic",
    KERNEL_TCP_SCHEME,
];

/// The KV in block order over the kernel's TCP (real time, root): `via`
/// names a link between two attach points, its `a` end on the sending
/// agent's host and its `b` end on the receiving agent's; the sender's
/// stream leaves from the `a` end's namespace to the `b` end's address.
pub const KERNEL_TCP_SCHEME: &str = "tcp-kernel";

/// Where the handed-off contexts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextSource {
    /// The built-in short conversations of `edgemu-data` (no download).
    Builtin,
    /// ShareGPT evaluation contexts (`EDGEMU_DATA_DIR`).
    ShareGpt,
}

impl ContextSource {
    pub fn name(self) -> &'static str {
        match self {
            ContextSource::Builtin => "builtin",
            ContextSource::ShareGpt => "sharegpt",
        }
    }
}

/// The decode-start deadline of a handoff.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HandoffDeadline {
    /// ρ = (D − T_ow)/T_ser with the link's configured rate and delay.
    Rho(f64),
    /// An absolute budget D after the handoff starts, ns.
    Ttft(u64),
}

/// How the receiver rebuilds missing KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RebuildMode {
    ZeroFill,
    Mask,
}

impl RebuildMode {
    pub fn name(self) -> &'static str {
        match self {
            RebuildMode::ZeroFill => "zero-fill",
            RebuildMode::Mask => "mask",
        }
    }
}

/// A handoff task: what an agent hands to the next one.
#[derive(Clone, Debug, PartialEq)]
pub struct HandoffTask {
    pub to: ActorId,
    pub via: LinkId,
    pub contexts: ContextSource,
    pub context_tokens: u32,
    pub context_count: u32,
    pub context_seed: u64,
    pub start_ns: u64,
    /// Period between handoffs (`None`: back to back is not allowed; one
    /// handoff unless `handoffs` says more, then every 2 × D at the least).
    pub every_ns: Option<u64>,
    /// Handoffs in all (`None` with `every`: until the run ends).
    pub count: Option<u32>,
    pub deadline: HandoffDeadline,
    pub scheme: String,
    pub rebuild: RebuildMode,
    pub decode_tokens: u32,
    /// K of the streaming RLC (paper §IV-A): the most source packets one
    /// repair combines. Wider windows repair more holes per repair on a
    /// mildly lossy channel but need as many innovative repairs as there are
    /// holes in the window before anything decodes, which stalls on a very
    /// lossy one (see docs/experiments/priorityfec.md).
    pub coding_window: u16,
}

/// A `kind = "agent"` actor.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    /// Its edge server (same host).
    pub server: ActorId,
    /// The LLM the agent prefills, exports, rebuilds and decodes with:
    /// `model = "smollm2"|"tiny"`. `None`: its server's real model (the key
    /// is required when the server is modeled, whose cost model has no
    /// weights).
    pub model: Option<crate::RealModel>,
    /// Capacity of its context KV cache, bytes.
    pub kv_cache_bytes: u64,
    /// The repair slot's first policy (`None`: the scheme's default;
    /// `external`: ask the policy process of `external`).
    pub policy: Option<String>,
    /// Where an external repair policy is asked (required with `policy =
    /// "external"`; otherwise what a `policy.swap` to `external` uses).
    pub external: Option<crate::external::ExternalPolicy>,
    pub handoff: Option<HandoffTask>,
}

/// What the cross checks need: server and hand_to indices.
pub(crate) struct AgentRefs {
    pub server: Option<usize>,
    pub hand_to: Option<usize>,
}

fn ranged(
    obj: &Obj,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
    errs: &mut Errs,
) -> u64 {
    match errs.ok(opt_u64(obj, key)).flatten() {
        None => default,
        Some(n) if range.contains(&n) => n,
        Some(n) => {
            errs.push(ActionError::invalid(
                key,
                format!(
                    "expected a number from {} to {}, found {n}",
                    range.start(),
                    range.end()
                ),
            ));
            default
        }
    }
}

/// Parses the fields of an `agent` (`actors`/`links` map names to indices);
/// no spec when its `server` is missing or unknown (reported in `errs`).
pub(crate) fn agent(
    obj: &Obj,
    actors: &dyn Fn(&str, &str) -> Result<usize, ActionError>,
    links: &dyn Fn(&str, &str) -> Result<usize, ActionError>,
    errs: &mut Errs,
) -> (Option<AgentSpec>, AgentRefs) {
    let server = errs.ok(
        req_str(obj, "server", "the name of a server actor on this host")
            .and_then(|s| actors("server", s)),
    );
    let model = errs
        .ok(opt_enum(obj, "model", &["smollm2", "tiny"]))
        .flatten()
        .map(|m| match m {
            "tiny" => crate::RealModel::Tiny,
            _ => crate::RealModel::SmolLm2,
        });
    let kv_cache_bytes = errs
        .ok(opt_bytes(obj, "kv_cache", false))
        .flatten()
        .flatten()
        .unwrap_or(256 << 20);
    let policy = errs
        .ok(opt_str(obj, "policy"))
        .flatten()
        .map(str::to_string);
    let external = crate::external::external(obj, errs);
    crate::external::require_table(
        policy.as_deref().unwrap_or(""),
        external.as_ref(),
        obj,
        errs,
    );
    let hand_to = errs
        .ok(opt_str(obj, "hand_to").and_then(|h| h.map(|h| actors("hand_to", h)).transpose()))
        .flatten();
    let via = errs
        .ok(opt_str(obj, "via").and_then(|l| l.map(|l| links("via", l)).transpose()))
        .flatten();
    let has_task = obj.contains_key("hand_to");
    if !has_task {
        if obj.contains_key("via") {
            errs.push(ActionError::invalid(
                "via",
                "`via` names the link to `hand_to`; set `hand_to` or remove it",
            ));
        }
        for &k in TASK_KEYS {
            if obj.contains_key(k) {
                errs.push(ActionError::invalid(
                    k,
                    format!("`{k}` describes a handoff; set `hand_to` (and `via`) or remove it"),
                ));
            }
        }
    } else if !obj.contains_key("via") {
        errs.push(missing(
            "via",
            "the name of the link joining this agent and its `hand_to`",
        ));
    }
    let contexts = match errs
        .ok(opt_enum(obj, "contexts", &["builtin", "sharegpt"]))
        .flatten()
    {
        Some("sharegpt") => ContextSource::ShareGpt,
        _ => ContextSource::Builtin,
    };
    let context_tokens = ranged(
        obj,
        "context_tokens",
        16..=u64::from(MAX_CONTEXT_TOKENS),
        256,
        errs,
    ) as u32;
    if !context_tokens.is_multiple_of(16) {
        errs.push(ActionError::invalid(
            "context_tokens",
            format!("expected a multiple of 16 (one transport block), found {context_tokens}"),
        ));
    }
    let context_count = ranged(obj, "context_count", 1..=1024, 1, errs) as u32;
    let context_seed = errs.ok(opt_u64(obj, "context_seed")).flatten().unwrap_or(0);
    let start_ns = errs
        .ok(opt_duration(obj, "start", false))
        .flatten()
        .unwrap_or(1_000_000_000);
    let every_ns = errs.ok(opt_duration(obj, "every", true)).flatten();
    let count = obj
        .contains_key("handoffs")
        .then(|| ranged(obj, "handoffs", 1..=1_000_000, 1, errs) as u32);
    let rho = errs.ok(opt_f64(obj, "rho")).flatten();
    let ttft = errs.ok(opt_duration(obj, "ttft", true)).flatten();
    let deadline = match (rho, ttft) {
        (Some(_), Some(_)) => {
            errs.push(ActionError::invalid(
                "ttft",
                "give the deadline as `rho` or as `ttft`, not both",
            ));
            HandoffDeadline::Rho(0.8)
        }
        (Some(r), None) => {
            if !(r > 0.0 && r <= 100.0) {
                errs.push(ActionError::invalid(
                    "rho",
                    format!("expected a normalized deadline above 0 and at most 100, found {r}"),
                ));
            }
            HandoffDeadline::Rho(r)
        }
        (None, Some(t)) => HandoffDeadline::Ttft(t),
        (None, None) => HandoffDeadline::Rho(0.8),
    };
    let scheme = errs
        .ok(opt_str(obj, "scheme"))
        .flatten()
        .unwrap_or("priorityfec")
        .to_string();
    if !AGENT_SCHEMES.contains(&scheme.as_str()) {
        let why = if scheme == "tcp" || scheme == "quic" {
            " (smoltcp's TCP and QUIC run in `edgemu experiment priorityfec`; between agents, `tcp-kernel` is the kernel's TCP through attach points)"
        } else {
            ""
        };
        errs.push(ActionError::invalid(
            "scheme",
            format!(
                "expected one of {}, found {scheme:?}{why}",
                AGENT_SCHEMES.join(", ")
            ),
        ));
    }
    let rebuild = match errs
        .ok(opt_enum(obj, "rebuild", &["zero-fill", "mask"]))
        .flatten()
    {
        Some("mask") => RebuildMode::Mask,
        _ => RebuildMode::ZeroFill,
    };
    let decode_tokens = ranged(
        obj,
        "decode_tokens",
        1..=u64::from(MAX_DECODE_TOKENS),
        8,
        errs,
    ) as u32;
    let coding_window = ranged(
        obj,
        "coding_window",
        1..=u64::from(MAX_CODING_WINDOW),
        u64::from(DEFAULT_CODING_WINDOW),
        errs,
    ) as u16;
    let handoff = match (has_task, hand_to, via) {
        (true, Some(to), Some(via)) => Some(HandoffTask {
            to: ActorId(to as u32),
            via: LinkId(via as u32),
            contexts,
            context_tokens,
            context_count,
            context_seed,
            start_ns,
            every_ns,
            count,
            deadline,
            scheme,
            rebuild,
            decode_tokens,
            coding_window,
        }),
        _ => None,
    };
    // Without its server (an error already reported, so the file is
    // refused) there is no spec rather than one pointing at actor 0.
    let spec = server.map(|server| AgentSpec {
        server: ActorId(server as u32),
        model,
        kv_cache_bytes,
        policy,
        external,
        handoff,
    });
    (spec, AgentRefs { server, hand_to })
}
