//! The resolved topology: what the runtime builds actors and links from.
//! All durations are nanoseconds, rates bits per second, sizes bytes.

use edgemu_codec::ids::{ActorId, HostId, LinkId};
use edgemu_links::LinkParams;
use std::net::SocketAddr;
use std::path::PathBuf;

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

#[derive(Clone, Debug)]
pub struct HostSpec {
    pub id: HostId,
    pub name: String,
    /// Mesh websocket listen address.
    pub listen: SocketAddr,
    /// Address peers dial (defaults to `listen`).
    pub advertise: SocketAddr,
    /// Control websocket listen address, if any.
    pub control: Option<SocketAddr>,
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
}

/// One `[[chaos]]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ChaosSpec {
    /// 1-based index in the file, for the event log.
    pub index: usize,
    pub at_ns: u64,
    pub action: ChaosAction,
    /// Heal automatically after this long (`for = "5s"`).
    pub for_ns: Option<u64>,
    /// Repeat with this period (`every = "10s"`).
    pub every_ns: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ChaosAction {
    LinkKill { link: LinkId, dir: Option<edgemu_codec::ids::Direction> },
    LinkRestore { link: LinkId, dir: Option<edgemu_codec::ids::Direction> },
    LinkSet { link: LinkId, dir: Option<edgemu_codec::ids::Direction>, patch: LinkPatch },
    HostPartition { a: HostId, b: HostId },
    HostHeal { a: HostId, b: HostId },
    /// Random flapping: up for Exp(mtbf), down for Exp(mttr), seeded.
    LinkFlap { link: LinkId, mtbf_ns: u64, mttr_ns: u64, seed: u64, until_ns: Option<u64> },
    RunStop,
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

impl Cluster {
    pub fn host(&self, id: HostId) -> &HostSpec {
        &self.hosts[id.0 as usize]
    }
    pub fn actor(&self, id: ActorId) -> &ActorSpec {
        &self.actors[id.0 as usize]
    }
    pub fn link(&self, id: LinkId) -> &LinkSpec {
        &self.links[id.0 as usize]
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
}
