//! Control commands: which host owns what a command touches, and applying
//! the local part of it. `[[chaos]]` entries and control requests share one
//! typed vocabulary (`edgemu_config::command::Command`) and, once resolved,
//! one execution path on the host (`Supervisor::handle_request`).

use super::spawn::HostActors;
use edgemu_actors::link_overrides::TooManyLayers;
use edgemu_actors::messages::ActorFault;
use edgemu_actors::messages::{LinkControl, PeerControl};
use edgemu_actors::router::RouterCounters;
use edgemu_codec::ids::{ActorId, Direction, HostId, LinkId};
use edgemu_config::command::{Command, RouterStatus};
use edgemu_config::{Cluster, ControlError, NetAction};

/// One thing a command acts on, on the host that owns it.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A link direction (its actor lives on the sending host).
    Link { link: LinkId, dir: Direction },
    /// This host's side of a partition with `peer`.
    Peer { peer: HostId },
    /// An actor (`actor.kill` / `actor.restart`), on its host.
    Actor { actor: ActorId },
}

/// Why a command did not take effect on one target (the reply's
/// per-target `error`).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Link(#[from] TooManyLayers),
    #[error("link direction is not on this host")]
    LinkNotHere,
    #[error("this actor cannot be killed or restarted (no fault handler on its host)")]
    NotFaultable,
    #[error("the actor did not answer: {0}")]
    ActorGone(actix::MailboxError),
    /// The link actor or the router is gone (the run is ending).
    #[error("{0}")]
    Gone(actix::MailboxError),
    /// The command is not one for this kind of target (a routing bug).
    #[error("{0}")]
    Mismatch(&'static str),
}

/// The effect of a command on one target.
#[derive(Debug, Clone)]
pub struct Applied {
    pub host: String,
    pub target: String,
    pub at_ns: u64,
    /// What it did, when the target says (an actor's fault reply).
    pub detail: Option<String>,
    pub error: Option<String>,
}

impl Applied {
    /// As an element of the typed reply.
    pub fn typed(&self) -> edgemu_config::command::AppliedTarget {
        edgemu_config::command::AppliedTarget {
            host: self.host.clone(),
            target: self.target.clone(),
            effective_ns: self.at_ns,
            detail: self.detail.clone(),
            error: self.error.clone(),
        }
    }

    pub fn detail(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "host": self.host, "target": self.target, "effective_ns": self.at_ns });
        if let Some(d) = &self.detail {
            v["detail"] = d.clone().into();
        }
        if let Some(e) = &self.error {
            v["error"] = e.clone().into();
        }
        v
    }
}

fn dirs(dir: Option<Direction>) -> Vec<Direction> {
    match dir {
        Some(d) => vec![d],
        None => vec![Direction::AtoB, Direction::BtoA],
    }
}

/// The host whose link actor carries `dir` of `link` (None for an unknown link).
pub fn link_owner(cluster: &Cluster, link: LinkId, dir: Direction) -> Option<HostId> {
    cluster
        .get_link(link)
        .map(|_| cluster.link_endpoint_host(link, dir))
}

/// Every target of an action, with its owning host.
pub fn all_targets(cluster: &Cluster, action: &NetAction) -> Vec<(HostId, Target)> {
    let mut out = Vec::new();
    match action {
        NetAction::LinkKill { link, dir }
        | NetAction::LinkRestore { link, dir }
        | NetAction::LinkSet { link, dir, .. } => {
            for d in dirs(*dir) {
                if let Some(h) = link_owner(cluster, *link, d) {
                    out.push((
                        h,
                        Target::Link {
                            link: *link,
                            dir: d,
                        },
                    ));
                }
            }
        }
        NetAction::LinkFlap { link, .. } => {
            for d in dirs(None) {
                if let Some(h) = link_owner(cluster, *link, d) {
                    out.push((
                        h,
                        Target::Link {
                            link: *link,
                            dir: d,
                        },
                    ));
                }
            }
        }
        NetAction::HostPartition { a, b } | NetAction::HostHeal { a, b } => {
            out.push((*a, Target::Peer { peer: *b }));
            out.push((*b, Target::Peer { peer: *a }));
        }
        NetAction::ActorKill { actor } | NetAction::ActorRestart { actor } => {
            if let Some(a) = cluster.get_actor(*actor) {
                out.push((a.host, Target::Actor { actor: *actor }));
            }
        }
    }
    out
}

pub fn local_targets(cluster: &Cluster, action: &NetAction, host: HostId) -> Vec<Target> {
    all_targets(cluster, action)
        .into_iter()
        .filter(|(h, _)| *h == host)
        .map(|(_, t)| t)
        .collect()
}

pub fn owner_hosts(cluster: &Cluster, action: &NetAction) -> Vec<HostId> {
    let mut v: Vec<HostId> = all_targets(cluster, action)
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Whether `host` has a part in `request` (the chaos timeline of a host
/// holds only the entries it acts on).
pub fn concerns_host(cluster: &Cluster, request: &Request, host: HostId) -> bool {
    match request {
        Request::RunStop => true,
        Request::Action { action, .. } => !local_targets(cluster, action, host).is_empty(),
        Request::Policy { actor, .. } => policy_owner(cluster, *actor) == Some(host),
        Request::Status | Request::Subscribe { .. } => false,
    }
}

/// The host that owns `actor`'s policy slot (the actor's host).
pub fn policy_owner(cluster: &Cluster, actor: edgemu_codec::ids::ActorId) -> Option<HostId> {
    cluster.get_actor(actor).map(|a| a.host)
}

/// The router's counters as `status` reports them.
pub fn router_status(c: &RouterCounters) -> RouterStatus {
    RouterStatus {
        delivered_local: c.delivered_local,
        sent_remote: c.sent_remote,
        received_remote: c.received_remote,
        dropped_unknown: c.dropped_unknown,
        dropped_queue_full: c.dropped_queue_full,
        dropped_peer_down: c.dropped_peer_down,
        dropped_partition: c.dropped_partition,
        dropped_bad_route: c.dropped_bad_route,
        dropped_inbound_full: c.dropped_inbound_full,
    }
}

/// A control request after parsing and resolving: what the supervisor acts on.
pub use edgemu_config::command::Resolved as Request;

/// Turns a control request (`{"cmd": "link.kill", "link": "wan", "for": "3s"}`)
/// into the typed [`Command`] and its [`Request`]. The control socket's
/// one parse of a client's JSON. May read trace files: call it through
/// [`parse_off_thread`] from an actor's thread.
pub fn parse_command(
    cluster: &Cluster,
    request: &serde_json::Value,
) -> Result<(Command, Request), ControlError> {
    let command = Command::from_request(request)?;
    let resolved = command.resolve(cluster)?;
    Ok((command, resolved))
}

/// The [`Request`] of a JSON control request (see [`parse_command`]).
pub fn parse_request(
    cluster: &Cluster,
    request: &serde_json::Value,
) -> Result<Request, ControlError> {
    parse_command(cluster, request).map(|(_, r)| r)
}

/// [`parse_command`] on the blocking pool, so that reading a trace file
/// never stalls the actors of the host (its data path).
pub async fn parse_off_thread(
    cluster: std::sync::Arc<Cluster>,
    request: serde_json::Value,
) -> Result<(Command, Request), ControlError> {
    tokio::task::spawn_blocking(move || parse_command(&cluster, &request))
        .await
        .map_err(|e| ControlError::TaskFailed {
            task: "parsing the request".into(),
            reason: e.to_string(),
        })?
}

/// Resolves a command another host forwarded (already typed: no parse) on
/// the blocking pool, as [`parse_off_thread`] does.
pub async fn resolve_off_thread(
    cluster: std::sync::Arc<Cluster>,
    command: Command,
) -> Result<(Command, Request), ControlError> {
    tokio::task::spawn_blocking(move || {
        let resolved = command.resolve(&cluster)?;
        Ok((command, resolved))
    })
    .await
    .map_err(|e| ControlError::TaskFailed {
        task: "resolving the command".into(),
        reason: e.to_string(),
    })?
}

fn target_name(cluster: &Cluster, t: &Target) -> String {
    match t {
        Target::Link { link, dir } => {
            let name = cluster
                .links
                .get(link.0 as usize)
                .map(|l| l.name.as_str())
                .unwrap_or("?");
            format!("link {name} {dir}")
        }
        Target::Peer { peer } => {
            let name = cluster
                .hosts
                .get(peer.0 as usize)
                .map(|h| h.name.as_str())
                .unwrap_or("?");
            format!("peer {name}")
        }
        Target::Actor { actor } => {
            let name = cluster
                .get_actor(*actor)
                .map(|a| a.name.as_str())
                .unwrap_or("?");
            format!("actor {name}")
        }
    }
}

/// Applies `action` to the local `targets`; returns what took effect when.
/// `now_ns`: the run time the command is applied at (an actor killed `for`
/// D restarts at `now_ns + D`); `source`: who asked, for the actor's log.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    actors: HostActors,
    cluster: std::sync::Arc<Cluster>,
    host_name: String,
    targets: Vec<Target>,
    action: NetAction,
    for_ns: Option<u64>,
    now_ns: u64,
    source: String,
) -> Vec<Applied> {
    let mut out = Vec::new();
    for t in targets {
        let name = target_name(&cluster, &t);
        let mut detail = None;
        let result: Result<u64, TargetError> = match (&t, &action) {
            (Target::Link { link, dir }, a) => {
                let msg = match a {
                    NetAction::LinkKill { .. } => Some(LinkControl::Kill {
                        heal_after_ns: for_ns,
                    }),
                    NetAction::LinkRestore { .. } => Some(LinkControl::Restore),
                    NetAction::LinkSet { patch, .. } => Some(LinkControl::Set {
                        patch: patch.clone(),
                        heal_after_ns: for_ns,
                    }),
                    NetAction::LinkFlap {
                        mtbf_ns,
                        mttr_ns,
                        seed,
                        until_ns,
                        ..
                    } => Some(LinkControl::Flap {
                        mtbf_ns: *mtbf_ns,
                        mttr_ns: *mttr_ns,
                        seed: seed.wrapping_add(u64::from(*dir == Direction::BtoA)),
                        until_ns: *until_ns,
                    }),
                    _ => None,
                };
                match (msg, actors.links.get(&(*link, *dir))) {
                    (Some(m), Some(addr)) => match addr.send(m).await {
                        Ok(r) => r.map_err(TargetError::from),
                        Err(e) => Err(TargetError::Gone(e)),
                    },
                    (None, _) => Err(TargetError::Mismatch("not a link command")),
                    (_, None) => Err(TargetError::LinkNotHere),
                }
            }
            (Target::Peer { peer }, NetAction::HostPartition { .. }) => actors
                .router
                .send(PeerControl::Partition {
                    peer: *peer,
                    heal_after_ns: for_ns,
                })
                .await
                .map_err(TargetError::Gone),
            (Target::Peer { peer }, NetAction::HostHeal { .. }) => actors
                .router
                .send(PeerControl::Heal { peer: *peer })
                .await
                .map_err(TargetError::Gone),
            (Target::Peer { .. }, _) => Err(TargetError::Mismatch("not a host command")),
            (Target::Actor { actor }, a) => {
                let msg = match a {
                    NetAction::ActorKill { .. } => Some(ActorFault::Kill {
                        until_ns: for_ns.map(|d| now_ns.saturating_add(d)),
                        by: source.clone(),
                    }),
                    NetAction::ActorRestart { .. } => {
                        Some(ActorFault::Restart { by: source.clone() })
                    }
                    _ => None,
                };
                match (msg, actors.faults.get(*actor)) {
                    (Some(m), Some(r)) => match r.send(m).await {
                        Ok(reply) => {
                            detail = Some(reply.detail);
                            Ok(reply.at_ns)
                        }
                        Err(e) => Err(TargetError::ActorGone(e)),
                    },
                    (None, _) => Err(TargetError::Mismatch("not an actor command")),
                    (_, None) => Err(TargetError::NotFaultable),
                }
            }
        };
        out.push(match result {
            Ok(at_ns) => Applied {
                host: host_name.clone(),
                target: name,
                at_ns,
                detail,
                error: None,
            },
            Err(e) => Applied {
                host: host_name.clone(),
                target: name,
                at_ns: 0,
                detail,
                error: Some(e.to_string()),
            },
        });
    }
    out
}
