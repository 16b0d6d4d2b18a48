//! The resolved topology: what the runtime builds actors and links from.
//! All durations are nanoseconds, rates bits per second, sizes bytes.

pub use crate::agent::{AgentSpec, ContextSource, HandoffDeadline, HandoffTask, RebuildMode};
use crate::command::{Command, Resolved};
use crate::error::ConfigError;
pub use crate::lyreo::{
    parse_http_url, GatewayHttpThread, GatewayModel, GatewaySpec, GpuClass, MobilityKind,
    OpenAiBackend, RealModel, SchedulerSpec, ServerBackend, ServerSpec, UserSpec, WorkloadKind,
};
use edgemu_codec::ids::{ActorId, Direction, HostId, LinkId};
use edgemu_links::LinkParams;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Cluster {
    /// The file it was read from.
    pub source: PathBuf,
    /// SHA-256 of the normalized config (see crate docs).
    pub digest: [u8; 32],
    pub run: RunSpec,
    pub hosts: Vec<HostSpec>,
    pub actors: Vec<ActorSpec>,
    pub links: Vec<LinkSpec>,
    pub chaos: Vec<ChaosSpec>,
    /// The replicated entries the actors and links came from
    /// ([`crate::replicate`]); not part of the digest (the expansion is).
    pub replicas: Vec<crate::replicate::ReplicaGroup>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeMode {
    Real,
    Virtual,
}

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub name: String,
    pub duration_ns: u64,
    pub seed: u64,
    pub time: TimeMode,
    /// Folder under which `<run-id>/` is written.
    pub results_dir: PathBuf,
    /// Name of the environment variable holding the cluster token.
    pub token_env: String,
    /// Counters are sampled into the per-link CSV at this period (default 1 s).
    pub sample_ns: u64,
}

/// Where peers dial a host: an address, or a DNS name and port resolved
/// at every dial (a Kubernetes pod's stable name, which resolves only once
/// the pod runs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerAddr {
    Ip(SocketAddr),
    Name { host: String, port: u16 },
}

impl PeerAddr {
    /// The address, when it is one.
    pub fn ip(&self) -> Option<std::net::IpAddr> {
        match self {
            PeerAddr::Ip(a) => Some(a.ip()),
            PeerAddr::Name { .. } => None,
        }
    }

    /// Loopback only (`localhost` counts): no network reaches it.
    pub fn is_loopback(&self) -> bool {
        match self {
            PeerAddr::Ip(a) => a.ip().is_loopback(),
            PeerAddr::Name { host, .. } => host == "localhost",
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            PeerAddr::Ip(a) => a.port(),
            PeerAddr::Name { port, .. } => *port,
        }
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Ip(a) => write!(f, "{a}"),
            PeerAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HostSpec {
    pub id: HostId,
    pub name: String,
    /// Mesh websocket listen address.
    pub listen: SocketAddr,
    /// Address peers dial (defaults to `listen`).
    pub advertise: PeerAddr,
    /// Control websocket listen address, if any.
    pub control: Option<SocketAddr>,
    /// What the host's process needs (`edgemu deploy` writes these as
    /// resource requests); edgemu itself does not enforce them.
    pub resources: HostResources,
}

/// A host's `cpus` and `memory`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostResources {
    /// CPU cores (fractions allowed).
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct ActorSpec {
    pub id: ActorId,
    pub name: String,
    pub host: HostId,
    pub kind: ActorKind,
}

/// Where a sender's packets go: the destination actor and the link they cross.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub to: ActorId,
    pub via: Option<LinkId>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ActorKind {
    /// Constant bit rate sender: `size`-byte packets at `rate_bps`.
    ConstantSender {
        route: Route,
        rate_bps: u64,
        size: u32,
        /// `payload = "bytes"`: each packet carries `size` real bytes
        /// (default `"declared"`: only the size).
        real_bytes: bool,
        start_ns: u64,
        stop_ns: Option<u64>,
    },
    /// On/off sender: `burst` packets back to back every `interval_ns`.
    BurstySender {
        route: Route,
        burst: u32,
        size: u32,
        interval_ns: u64,
        start_ns: u64,
        stop_ns: Option<u64>,
    },
    /// Request/response prober: a ping every `interval_ns`, answered by the
    /// destination (a sink) over `reply_via`.
    Pinger {
        route: Route,
        reply_via: Option<LinkId>,
        size: u32,
        interval_ns: u64,
        start_ns: u64,
        stop_ns: Option<u64>,
    },
    /// Records every packet's send and receive time; answers pings.
    Sink,
    /// LYREO mobile user (see [`crate::lyreo`]).
    User(UserSpec),
    /// LYREO edge server.
    Server(ServerSpec),
    /// OpenAI-compatible HTTP endpoint whose requests are a LYREO user's.
    Gateway(GatewaySpec),
    /// A TUN device in a network namespace whose IP packets cross a link.
    Attach(crate::attach::AttachSpec),
    /// LYREO request scheduler.
    Scheduler(SchedulerSpec),
    /// An LLM agent bound to a server, handing off KV (see [`crate::agent`]).
    Agent(AgentSpec),
}

#[derive(Clone, Debug)]
pub struct LinkSpec {
    pub id: LinkId,
    pub name: String,
    pub a: ActorId,
    pub b: ActorId,
    /// Parameters from `a` to `b`.
    pub ab: LinkParams,
    /// Parameters from `b` to `a`.
    pub ba: LinkParams,
    /// The seed of each direction's random draws (loss, jitter), `[ab, ba]`,
    /// where the file gives one; otherwise the host derives it from the
    /// run's seed and the link.
    pub seeds: [Option<u64>; 2],
}

/// One `[[chaos]]` entry: a typed control [`Command`] at a time offset.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaosSpec {
    /// 1-based index in the file, for the event log.
    pub index: usize,
    pub at_ns: u64,
    /// The command as written (with the entry's `for`).
    pub command: Command,
    /// The command resolved against the cluster: what hosts act on (the
    /// same value a control request with these keys resolves to).
    pub request: Resolved,
    /// Repeat with this period (`every = "10s"`).
    pub every_ns: Option<u64>,
}

impl ChaosSpec {
    /// The link or host action, if the command is one.
    pub fn action(&self) -> Option<&NetAction> {
        match &self.request {
            Resolved::Action { action, .. } => Some(action),
            _ => None,
        }
    }

    /// Heal automatically after this long (`for = "5s"`).
    pub fn for_ns(&self) -> Option<u64> {
        match &self.request {
            Resolved::Action { for_ns, .. } => *for_ns,
            _ => None,
        }
    }
}

/// A link or host command with names resolved to ids (see
/// [`crate::command::Resolved::Action`]).
#[derive(Clone, Debug, PartialEq)]
pub enum NetAction {
    LinkKill {
        link: LinkId,
        dir: Option<Direction>,
    },
    LinkRestore {
        link: LinkId,
        dir: Option<Direction>,
    },
    LinkSet {
        link: LinkId,
        dir: Option<Direction>,
        patch: LinkPatch,
    },
    HostPartition {
        a: HostId,
        b: HostId,
    },
    HostHeal {
        a: HostId,
        b: HostId,
    },
    /// Random flapping: up for Exp(mtbf), down for Exp(mttr), seeded.
    LinkFlap {
        link: LinkId,
        mtbf_ns: u64,
        mttr_ns: u64,
        seed: u64,
        until_ns: Option<u64>,
    },
    /// `actor.kill` (its `for` is the command's heal delay).
    ActorKill {
        actor: ActorId,
    },
    ActorRestart {
        actor: ActorId,
    },
}

/// A partial change of a link direction (`link.set`); `None` keeps the value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkPatch {
    pub rate: Option<edgemu_links::RateSpec>,
    pub delay_ns: Option<u64>,
    pub jitter_ns: Option<u64>,
    pub queue_bytes: Option<Option<u64>>,
    pub loss: Option<edgemu_links::LossSpec>,
}

impl LinkPatch {
    pub fn apply(&self, params: &mut LinkParams) {
        if let Some(r) = &self.rate {
            params.rate = r.clone();
        }
        if let Some(d) = self.delay_ns {
            params.delay_ns = d;
        }
        if let Some(j) = self.jitter_ns {
            params.jitter_ns = j;
        }
        if let Some(q) = self.queue_bytes {
            params.queue_bytes = q;
        }
        if let Some(l) = &self.loss {
            params.loss = l.clone();
        }
    }
}

impl ActorKind {
    /// The `kind = "…"` name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ActorKind::ConstantSender { .. } => "constant",
            ActorKind::BurstySender { .. } => "bursty",
            ActorKind::Pinger { .. } => "pinger",
            ActorKind::Sink => "sink",
            ActorKind::User(_) => "user",
            ActorKind::Server(_) => "server",
            ActorKind::Scheduler(_) => "scheduler",
            ActorKind::Agent(_) => "agent",
            ActorKind::Gateway(_) => "gateway",
            ActorKind::Attach(_) => "attach",
        }
    }

    /// A link probe (`constant`, `bursty`, `pinger`, `sink`): it measures
    /// links and cannot be killed (`actor.kill` refuses it).
    pub fn is_link_probe(&self) -> bool {
        matches!(
            self,
            ActorKind::ConstantSender { .. }
                | ActorKind::BurstySender { .. }
                | ActorKind::Pinger { .. }
                | ActorKind::Sink
        )
    }

    /// Where a sender's packets go; `None` for actors that only receive.
    pub fn route(&self) -> Option<&Route> {
        match self {
            ActorKind::ConstantSender { route, .. }
            | ActorKind::BurstySender { route, .. }
            | ActorKind::Pinger { route, .. } => Some(route),
            ActorKind::Sink
            | ActorKind::User(_)
            | ActorKind::Server(_)
            | ActorKind::Scheduler(_)
            | ActorKind::Gateway(_)
            | ActorKind::Attach(_)
            | ActorKind::Agent(_) => None,
        }
    }

    /// Whether other actors may name this one as their `to`.
    pub fn receives(&self) -> bool {
        matches!(self, ActorKind::Sink | ActorKind::Attach(_))
    }

    /// When a sender starts and stops (ns from the run's start); `None` for receivers.
    pub fn active(&self) -> Option<(u64, Option<u64>)> {
        match self {
            ActorKind::ConstantSender {
                start_ns, stop_ns, ..
            }
            | ActorKind::BurstySender {
                start_ns, stop_ns, ..
            }
            | ActorKind::Pinger {
                start_ns, stop_ns, ..
            } => Some((*start_ns, *stop_ns)),
            ActorKind::Sink
            | ActorKind::User(_)
            | ActorKind::Server(_)
            | ActorKind::Scheduler(_)
            | ActorKind::Gateway(_)
            | ActorKind::Attach(_)
            | ActorKind::Agent(_) => None,
        }
    }
}

impl LinkSpec {
    /// The parameters of one direction.
    pub fn params(&self, dir: Direction) -> &LinkParams {
        match dir {
            Direction::AtoB => &self.ab,
            Direction::BtoA => &self.ba,
        }
    }

    pub fn params_mut(&mut self, dir: Direction) -> &mut LinkParams {
        match dir {
            Direction::AtoB => &mut self.ab,
            Direction::BtoA => &mut self.ba,
        }
    }

    /// The direction a packet sent by `src` takes: `AtoB` from `a`, `BtoA`
    /// from `b`, `None` if `src` is not an endpoint.
    pub fn direction_from(&self, src: ActorId) -> Option<Direction> {
        if src == self.a {
            Some(Direction::AtoB)
        } else if src == self.b {
            Some(Direction::BtoA)
        } else {
            None
        }
    }

    /// The seed the file gives a direction, if any.
    pub fn seed(&self, dir: Direction) -> Option<u64> {
        match dir {
            Direction::AtoB => self.seeds[0],
            Direction::BtoA => self.seeds[1],
        }
    }

    /// (sender, receiver) of a direction.
    pub fn endpoints(&self, dir: Direction) -> (ActorId, ActorId) {
        match dir {
            Direction::AtoB => (self.a, self.b),
            Direction::BtoA => (self.b, self.a),
        }
    }

    /// Whether the link joins `x` and `y` (in either order).
    pub fn joins(&self, x: ActorId, y: ActorId) -> bool {
        (self.a == x && self.b == y) || (self.a == y && self.b == x)
    }
}

impl NetAction {
    /// The control command this action is (`"link.kill"`, …).
    pub fn command(&self) -> &'static str {
        match self {
            NetAction::LinkKill { .. } => "link.kill",
            NetAction::LinkRestore { .. } => "link.restore",
            NetAction::LinkSet { .. } => "link.set",
            NetAction::HostPartition { .. } => "host.partition",
            NetAction::HostHeal { .. } => "host.heal",
            NetAction::LinkFlap { .. } => "link.flap",
            NetAction::ActorKill { .. } => "actor.kill",
            NetAction::ActorRestart { .. } => "actor.restart",
        }
    }
}

impl Cluster {
    /// Reads and validates a `cluster.toml` (see the crate docs for the format).
    pub fn load(path: &Path) -> Result<Cluster, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Cluster::from_str(&text, path)
    }

    /// Parses and validates `text`; `source` names it in errors and anchors
    /// relative paths (results folder, trace files).
    pub fn from_str(text: &str, source: &Path) -> Result<Cluster, ConfigError> {
        crate::load::load(text, source)
    }

    /// The digest as lowercase hex.
    pub fn digest_hex(&self) -> String {
        self.digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// For ids from the config itself (panics on an id out of range); use
    /// [`Cluster::get_host`] for ids from the wire.
    pub fn host(&self, id: HostId) -> &HostSpec {
        &self.hosts[id.0 as usize]
    }
    /// For ids from the config itself; see [`Cluster::get_actor`].
    pub fn actor(&self, id: ActorId) -> &ActorSpec {
        &self.actors[id.0 as usize]
    }
    /// For ids from the config itself; see [`Cluster::get_link`].
    pub fn link(&self, id: LinkId) -> &LinkSpec {
        &self.links[id.0 as usize]
    }
    pub fn get_host(&self, id: HostId) -> Option<&HostSpec> {
        self.hosts.get(id.0 as usize)
    }
    pub fn get_actor(&self, id: ActorId) -> Option<&ActorSpec> {
        self.actors.get(id.0 as usize)
    }
    pub fn get_link(&self, id: LinkId) -> Option<&LinkSpec> {
        self.links.get(id.0 as usize)
    }
    pub fn host_by_name(&self, name: &str) -> Option<&HostSpec> {
        self.hosts.iter().find(|h| h.name == name)
    }
    pub fn link_by_name(&self, name: &str) -> Option<&LinkSpec> {
        self.links.iter().find(|l| l.name == name)
    }
    pub fn actor_by_name(&self, name: &str) -> Option<&ActorSpec> {
        self.actors.iter().find(|a| a.name == name)
    }

    /// The actors placed on `host`, in id order.
    pub fn actors_on(&self, host: HostId) -> impl Iterator<Item = &ActorSpec> + '_ {
        self.actors.iter().filter(move |a| a.host == host)
    }

    /// The host that sends in direction `dir` of `link` (the host of `a` for
    /// `AtoB`): the link's actor for that direction lives there.
    pub fn link_endpoint_host(&self, link: LinkId, dir: Direction) -> HostId {
        let (src, _) = self.link(link).endpoints(dir);
        self.actor(src).host
    }

    /// Whether some host's mesh or control socket is on (or advertised at)
    /// a non-loopback address: then the cluster token is required.
    pub fn requires_token(&self) -> bool {
        self.hosts.iter().any(|h| {
            !h.advertise.is_loopback()
                || [Some(h.listen), h.control]
                    .into_iter()
                    .flatten()
                    .any(|a| !a.ip().is_loopback())
        })
    }
}
