//! Routing a control command, as a plain function: given the resolved
//! command, this host and whether the command was forwarded to it, which
//! targets to act on here and which hosts to forward the same command to.
//! The supervisor only executes the [`Plan`] (send to local actors, forward
//! over the mesh, merge replies); this is the one place that decides.
//!
//! A command is routed once: the host that received it from a client plans
//! local targets plus the owners of the others; an owner receiving the
//! forwarded command acts on its own targets only and never forwards again.
//!
//! Policy commands (`policy.get`, `policy.swap`, `policy.rollback`) have one
//! target, the policy slot of an actor, owned by the actor's host: that host
//! applies it ([`Plan::Policy`] with no `forward_to`), any other forwards the
//! same command there once.
//!
//! Chaos entries take the same path: each host's supervisor executes the
//! plan of its own timeline entries as a forwarded command (act on local
//! targets, never forward), so a chaos `link.kill` or `policy.swap` does
//! exactly what the control request with the same keys does.
//!
//! # Adding a command
//!
//! - Same target kinds (links, host pairs, policy slots): one variant of
//!   [`edgemu_config::command::Command`] (its keys; the JSON Schema follows)
//!   and its case in `Command::resolve`, and its arm in
//!   [`super::commands::apply`] (or [`super::policies::apply`]).
//! - A new target kind (an actor for `actor.kill`/`actor.restart`):
//!   additionally one variant of [`super::commands::Target`] (e.g.
//!   `Actor { actor: ActorId }`), whose owner is the actor's host
//!   (`cluster.actors[id].host`) in [`super::commands::all_targets`], and
//!   one handler: the arm of `commands::apply` that sends the typed message
//!   to that actor. Routing here, forwarding, logging and replies need no
//!   change.

use super::commands::{self, Request, Target};
use edgemu_codec::ids::{ActorId, HostId};
use edgemu_config::{Cluster, ControlError};

/// What the supervisor does with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Answer with this host's counters, plus those of `peers`.
    Status { peers: Vec<HostId> },
    /// End the run here and tell `peers` to end it.
    Stop { peers: Vec<HostId> },
    /// Act on `local` targets; forward the command to `remote` owners.
    Apply {
        local: Vec<Target>,
        remote: Vec<HostId>,
    },
    /// Act on `actor`'s policy slot here, or forward to its owner.
    Policy {
        actor: ActorId,
        forward_to: Option<HostId>,
    },
    /// Answer with this error.
    Refuse(ControlError),
}

/// Plans `request` on `host`. `forwarded`: it came from another host (act
/// locally only); `has_mesh`: this host can reach others.
pub fn plan(
    cluster: &Cluster,
    host: HostId,
    request: &Request,
    forwarded: bool,
    has_mesh: bool,
) -> Plan {
    let peers = || -> Vec<HostId> {
        if forwarded || !has_mesh {
            return Vec::new();
        }
        cluster
            .hosts
            .iter()
            .map(|h| h.id)
            .filter(|h| *h != host)
            .collect()
    };
    match request {
        Request::Status => Plan::Status { peers: peers() },
        Request::RunStop => Plan::Stop { peers: peers() },
        Request::Subscribe { .. } => Plan::Refuse(ControlError::SubscribeElsewhere),
        Request::Action { action, .. } => {
            let local = commands::local_targets(cluster, action, host);
            let remote: Vec<HostId> = if forwarded {
                Vec::new()
            } else {
                commands::owner_hosts(cluster, action)
                    .into_iter()
                    .filter(|h| *h != host)
                    .collect()
            };
            if !remote.is_empty() && !has_mesh {
                return Plan::Refuse(ControlError::TargetNeedsMesh);
            }
            if local.is_empty() && remote.is_empty() {
                return Plan::Refuse(ControlError::NoTarget);
            }
            Plan::Apply { local, remote }
        }
        Request::Policy { actor, .. } => match commands::policy_owner(cluster, *actor) {
            None => Plan::Refuse(ControlError::NoSuchActor(actor.0)),
            Some(owner) if owner == host => Plan::Policy {
                actor: *actor,
                forward_to: None,
            },
            Some(_) if forwarded => Plan::Refuse(ControlError::NotForwardedAgain),
            Some(_) if !has_mesh => Plan::Refuse(ControlError::ActorNeedsMesh),
            Some(owner) => Plan::Policy {
                actor: *actor,
                forward_to: Some(owner),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_codec::ids::{Direction, LinkId};
    use edgemu_config::command::PolicyOp;
    use edgemu_config::NetAction;

    fn cluster() -> Cluster {
        let text = r#"
[run]
duration = "10s"
[[hosts]]
name = "alpha"
listen = "127.0.0.1:1"
[[hosts]]
name = "beta"
listen = "127.0.0.1:2"
[[actors]]
name = "cbr"
host = "beta"
kind = "constant"
to = "sink"
via = "wan"
rate = "1Mbps"
[[actors]]
name = "sink"
host = "alpha"
kind = "sink"
[[links]]
name = "wan"
a = "cbr"
b = "sink"
"#;
        Cluster::from_str(text, std::path::Path::new("t.toml")).unwrap()
    }

    fn kill(dir: Option<Direction>) -> Request {
        Request::Action {
            action: NetAction::LinkKill {
                link: LinkId(0),
                dir,
            },
            for_ns: None,
        }
    }

    #[test]
    fn a_link_direction_is_applied_by_the_sending_host_only() {
        let c = cluster();
        let (alpha, beta) = (HostId(0), HostId(1));
        // wan a→b is sent by cbr on beta: alpha forwards, beta applies.
        let ab = kill(Some(Direction::AtoB));
        assert_eq!(
            plan(&c, alpha, &ab, false, true),
            Plan::Apply {
                local: vec![],
                remote: vec![beta]
            }
        );
        let at_beta = Plan::Apply {
            local: vec![Target::Link {
                link: LinkId(0),
                dir: Direction::AtoB,
            }],
            remote: vec![],
        };
        assert_eq!(plan(&c, beta, &ab, false, true), at_beta);
        // Forwarded: never forwarded again.
        assert_eq!(plan(&c, beta, &ab, true, true), at_beta);
        // Both directions: one local, one remote.
        let Plan::Apply { local, remote } = plan(&c, alpha, &kill(None), false, true) else {
            panic!()
        };
        assert_eq!((local.len(), remote), (1, vec![beta]));
        // No mesh: refused rather than half applied.
        assert!(matches!(
            plan(&c, alpha, &ab, false, false),
            Plan::Refuse(_)
        ));
        // A forwarded command for a target this host does not own.
        assert!(matches!(plan(&c, alpha, &ab, true, true), Plan::Refuse(_)));
    }

    #[test]
    fn status_and_stop_reach_every_peer_once() {
        let c = cluster();
        assert_eq!(
            plan(&c, HostId(0), &Request::Status, false, true),
            Plan::Status {
                peers: vec![HostId(1)]
            }
        );
        assert_eq!(
            plan(&c, HostId(1), &Request::Status, true, true),
            Plan::Status { peers: vec![] }
        );
        assert_eq!(
            plan(&c, HostId(0), &Request::RunStop, false, true),
            Plan::Stop {
                peers: vec![HostId(1)]
            }
        );
        let p = plan(
            &c,
            HostId(0),
            &Request::Action {
                action: NetAction::HostPartition {
                    a: HostId(0),
                    b: HostId(1),
                },
                for_ns: Some(1),
            },
            false,
            true,
        );
        assert_eq!(
            p,
            Plan::Apply {
                local: vec![Target::Peer { peer: HostId(1) }],
                remote: vec![HostId(1)]
            }
        );
    }

    #[test]
    fn an_actor_fault_goes_to_the_actor_host_once() {
        let c = cluster();
        let (alpha, beta) = (HostId(0), HostId(1));
        // cbr (actor 0) lives on beta.
        let kill = Request::Action {
            action: NetAction::ActorKill { actor: ActorId(0) },
            for_ns: Some(5),
        };
        assert_eq!(
            plan(&c, alpha, &kill, false, true),
            Plan::Apply {
                local: vec![],
                remote: vec![beta]
            }
        );
        let here = Plan::Apply {
            local: vec![Target::Actor { actor: ActorId(0) }],
            remote: vec![],
        };
        assert_eq!(plan(&c, beta, &kill, false, true), here);
        assert_eq!(plan(&c, beta, &kill, true, true), here);
        assert!(matches!(
            plan(&c, alpha, &kill, true, true),
            Plan::Refuse(_)
        ));
        assert!(commands::concerns_host(&c, &kill, beta));
        assert!(!commands::concerns_host(&c, &kill, alpha));
    }

    #[test]
    fn a_policy_command_goes_to_the_actor_host_once() {
        let c = cluster();
        let (alpha, beta) = (HostId(0), HostId(1));
        // cbr (actor 0) lives on beta.
        let get = Request::Policy {
            actor: ActorId(0),
            op: PolicyOp::Get,
        };
        assert_eq!(
            plan(&c, alpha, &get, false, true),
            Plan::Policy {
                actor: ActorId(0),
                forward_to: Some(beta)
            }
        );
        let here = Plan::Policy {
            actor: ActorId(0),
            forward_to: None,
        };
        assert_eq!(plan(&c, beta, &get, false, true), here);
        assert_eq!(plan(&c, beta, &get, true, true), here);
        assert!(matches!(plan(&c, alpha, &get, true, true), Plan::Refuse(_)));
        assert!(matches!(
            plan(&c, alpha, &get, false, false),
            Plan::Refuse(_)
        ));
        let none = Request::Policy {
            actor: ActorId(9),
            op: PolicyOp::Rollback,
        };
        assert!(matches!(
            plan(&c, beta, &none, false, true),
            Plan::Refuse(_)
        ));
        // The chaos timeline of a host holds the entries it acts on.
        assert!(commands::concerns_host(&c, &get, beta));
        assert!(!commands::concerns_host(&c, &get, alpha));
    }
}
