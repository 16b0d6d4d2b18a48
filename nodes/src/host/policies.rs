//! The policy slots of one host: actor → [`ControlledPolicy`], and the
//! `policy.get` / `policy.swap` / `policy.rollback` commands applied to them.
//!
//! An actor that decides with a swappable policy (a request scheduler, a
//! handoff sender's repair scheduler) creates an
//! [`edgemu_policies::slot::PolicySlot`], keeps an `Arc` of it to read at
//! each decision, and registers it here under its id. The control plane
//! routes a policy command to the host that owns the actor (like every
//! command) and applies it through this registry. Reading a weights file
//! and validating weights happen on the blocking pool, never on the thread
//! of the host's actors.

use super::registry::ActorRegistry;
use edgemu_codec::ids::ActorId;
use edgemu_config::command::{PolicyOp, PolicyReply, Weights, MAX_WEIGHTS_FILE_BYTES};
use edgemu_config::external::{DEFAULT_REPAIR_DEADLINE_NS, DEFAULT_SLOT_DEADLINE_NS};
use edgemu_config::{Cluster, ControlError};
use edgemu_policies::slot::{ControlledPolicy, ExternalOptions, PolicyInfo};
use std::path::PathBuf;
use std::sync::Arc;

/// The policy slots on one host, by actor. Cheap to clone (shared).
pub type PolicyRegistry = ActorRegistry<Arc<dyn ControlledPolicy>>;

fn reply(host: &str, actor: &str, i: PolicyInfo) -> PolicyReply {
    PolicyReply {
        host: host.to_string(),
        actor: actor.to_string(),
        problem: i.problem.to_string(),
        policy: i.name,
        version: i.version,
        loaded_at_ns: i.loaded_at_ns,
        requested_by: i.requested_by,
        previous: i.previous,
    }
}

/// Applies a policy command to `actor`'s slot on this host. Blocking (it may
/// read and validate a weights file): run it with [`apply_off_thread`].
pub fn apply(
    registry: &PolicyRegistry,
    cluster: &Cluster,
    host: &str,
    actor: ActorId,
    op: &PolicyOp,
    now_ns: u64,
    requested_by: &str,
) -> Result<PolicyReply, ControlError> {
    let name = cluster
        .get_actor(actor)
        .map(|a| a.name.clone())
        .unwrap_or_else(|| format!("actor#{}", actor.0));
    let Some(slot) = registry.get(actor) else {
        return Err(ControlError::NoPolicySlot {
            actor: name,
            host: host.to_string(),
        });
    };
    let info = match op {
        PolicyOp::Get => Ok(slot.info()),
        PolicyOp::Rollback => slot
            .rollback(now_ns, requested_by)
            .map_err(|e| e.to_string()),
        PolicyOp::Swap {
            policy,
            weights,
            external,
        } => {
            let bytes = match weights {
                None => Ok(None),
                Some(Weights::Inline(b)) => Ok(Some(b.to_vec())),
                Some(Weights::File(f)) => {
                    edgemu_config::read_run_file(cluster, "weights", f, MAX_WEIGHTS_FILE_BYTES)
                        .map(Some)
                        .map_err(|e| e.to_string())
                }
            };
            let label = match weights {
                None => PathBuf::from("<none>"),
                Some(Weights::Inline(_)) => PathBuf::from("<inline weights>"),
                Some(Weights::File(f)) => PathBuf::from(f),
            };
            bytes.and_then(|bytes| match external {
                Some(e) => {
                    if cluster.run.time == edgemu_config::TimeMode::Virtual {
                        return Err("an external policy needs a real-time run".to_string());
                    }
                    let default_deadline = if slot.info().problem == "repair" {
                        DEFAULT_REPAIR_DEADLINE_NS
                    } else {
                        DEFAULT_SLOT_DEADLINE_NS
                    };
                    let opts = ExternalOptions {
                        url: e.url.clone(),
                        deadline_ns: e.deadline_ns.unwrap_or(default_deadline),
                        fallback: e.fallback.clone(),
                    };
                    slot.swap_external(&opts, bytes.as_deref(), &label, now_ns, requested_by)
                        .map_err(|e| e.to_string())
                }
                None => slot
                    .swap(
                        policy.as_deref(),
                        bytes.as_deref(),
                        &label,
                        now_ns,
                        requested_by,
                    )
                    .map_err(|e| e.to_string()),
            })
        }
    }
    .map_err(|reason| ControlError::PolicyRefused {
        actor: name.clone(),
        reason,
    })?;
    Ok(reply(host, &name, info))
}

/// [`apply`] on the blocking pool.
pub async fn apply_off_thread(
    registry: PolicyRegistry,
    cluster: Arc<Cluster>,
    host: String,
    actor: ActorId,
    op: PolicyOp,
    now_ns: u64,
    requested_by: String,
) -> Result<PolicyReply, ControlError> {
    tokio::task::spawn_blocking(move || {
        apply(
            &registry,
            &cluster,
            &host,
            actor,
            &op,
            now_ns,
            &requested_by,
        )
    })
    .await
    .map_err(|e| ControlError::TaskFailed {
        task: "policy command".into(),
        reason: e.to_string(),
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_policies::repair::ddqn::DdqnNet;
    use edgemu_policies::slot::{PolicySlot, RepairPolicies};
    use std::path::Path;

    fn cluster(dir: &Path) -> Cluster {
        let text = "[run]\nduration = \"1s\"\n[[hosts]]\nname = \"alpha\"\nlisten = \"127.0.0.1:1\"\n[[actors]]\nname = \"sched\"\nhost = \"alpha\"\nkind = \"sink\"\n";
        Cluster::from_str(text, &dir.join("cluster.toml")).unwrap()
    }

    #[test]
    fn swaps_read_confined_files_and_keep_the_old_policy_on_error() {
        let dir = std::env::temp_dir().join(format!("edgemu-policies-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("w")).unwrap();
        let good = DdqnNet::random(1).to_weights().to_bytes().unwrap();
        std::fs::write(dir.join("w/good.safetensors"), &good).unwrap();
        std::fs::write(dir.join("w/bad.safetensors"), b"root:x:0:0").unwrap();
        let c = cluster(&dir);
        let reg = PolicyRegistry::default();
        let actor = ActorId(0);
        let op = |policy: Option<&str>, file: Option<&str>| PolicyOp::Swap {
            policy: policy.map(str::to_string),
            weights: file.map(|f| Weights::File(f.to_string())),
            external: None,
        };
        let e = apply(&reg, &c, "alpha", actor, &PolicyOp::Get, 0, "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no policy slot"), "{e}");
        let slot = PolicySlot::new(
            RepairPolicies,
            "no-repair",
            None,
            Path::new("-"),
            0,
            "config",
        )
        .unwrap();
        reg.register(actor, Arc::new(slot));
        let first = apply(&reg, &c, "alpha", actor, &PolicyOp::Get, 5, "t").unwrap();
        assert_eq!(
            (first.policy.as_str(), first.actor.as_str()),
            ("no-repair", "sched")
        );

        let r = apply(
            &reg,
            &c,
            "alpha",
            actor,
            &op(Some("priorityfec-ddqn"), Some("w/good.safetensors")),
            7,
            "control",
        )
        .unwrap();
        assert_eq!(
            r.version,
            edgemu_policies::slot::version_hash("priorityfec-ddqn", &good)
        );
        assert_eq!(r.previous.as_deref(), Some(first.version.as_str()));
        for (file, want) in [
            ("w/bad.safetensors", "safetensors"),
            ("../etc/passwd", "relative to the config file's folder"),
            ("w/missing", "cannot open"),
        ] {
            let e = apply(&reg, &c, "alpha", actor, &op(None, Some(file)), 9, "c")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("unchanged"), "{file}: {e}");
            assert!(!e.contains("root:"), "{e}");
        }
        let now = apply(&reg, &c, "alpha", actor, &PolicyOp::Get, 9, "t").unwrap();
        assert_eq!(now.version, r.version);
        let back = apply(&reg, &c, "alpha", actor, &PolicyOp::Rollback, 11, "chaos#1").unwrap();
        assert_eq!(back.version, first.version);
        assert_eq!(back.requested_by, "chaos#1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
