//! `edgemu deploy compose`: a Docker Compose project for a cluster file.
//!
//! `compose.yaml` next to the rewritten `cluster.toml`: one service per
//! `[[hosts]]` entry, named by its DNS label (Compose's network resolves
//! service names, so that is the name peers dial), the cluster file mounted
//! read-only, results in `./results/LABEL`, the token from the environment
//! variable the file names (Compose refuses to start without it), the
//! control port published on loopback, and `cpus` / `memory` as resource
//! reservations. `restart: "no"`: a run ends.

use super::{DeployPlan, CACHE_PATH, CONFIG_PATH, RESULTS_PATH};
use serde_json::{json, Value};

/// The Compose document for `plan` with `image`.
pub fn compose(plan: &DeployPlan, image: &str) -> Value {
    let mut services = serde_json::Map::new();
    let token = &plan.token_env;
    for h in &plan.hosts {
        let mut service = json!({
            "image": image,
            "hostname": h.label,
            "command": plan.command(h),
            "environment": {
                token.as_str(): format!("${{{token}:?set {token} to the cluster token}}"),
                "EDGEMU_CACHE_DIR": CACHE_PATH,
                "RUST_LOG": "info",
                "NO_COLOR": "1",
            },
            "volumes": [
                format!("./cluster.toml:{CONFIG_PATH}:ro"),
                format!("./results/{}:{RESULTS_PATH}", h.label),
            ],
            "restart": "no",
        });
        if let Some(c) = h.control_port {
            service["ports"] = json!([format!("127.0.0.1:{c}:{c}")]);
        }
        let mut reservations = serde_json::Map::new();
        if let Some(c) = h.cpus {
            reservations.insert("cpus".into(), json!(c.to_string()));
        }
        if let Some(m) = h.memory_bytes {
            reservations.insert("memory".into(), json!(format!("{m}b")));
        }
        if !reservations.is_empty() {
            service["deploy"] = json!({"resources": {"reservations": reservations}});
        }
        services.insert(h.label.clone(), service);
    }
    json!({
        "name": super::dns_label(&plan.run_name).unwrap_or_else(|_| "edgemu".into()),
        "services": services,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_config::Cluster;
    use std::path::Path;

    #[test]
    fn one_service_per_host_dialed_by_its_name() {
        let text = "[run]\nname = \"m\"\nduration = \"5s\"\n\
                    [[hosts]]\nname = \"edge1\"\nlisten = \"127.0.0.1:7101\"\ncontrol = \"127.0.0.1:7201\"\nmemory = \"1GiB\"\n\
                    [[hosts]]\nname = \"phones\"\nlisten = \"127.0.0.1:7102\"\n";
        let c = Cluster::from_str(text, Path::new("c.toml")).unwrap();
        let plan = DeployPlan::new(&c, text, &|l| l.to_string()).unwrap();
        let doc = compose(&plan, "edgemu:test");
        let s = &doc["services"]["edge1"];
        assert_eq!(s["hostname"], "edge1");
        assert_eq!(s["ports"][0], "127.0.0.1:7201:7201");
        assert_eq!(
            s["environment"]["EDGEMU_TOKEN"],
            "${EDGEMU_TOKEN:?set EDGEMU_TOKEN to the cluster token}"
        );
        assert_eq!(
            s["deploy"]["resources"]["reservations"]["memory"],
            "1073741824b"
        );
        assert!(doc["services"]["phones"].get("ports").is_none());
        assert!(plan.cluster_toml.contains("advertise = \"phones:7102\""));
    }
}
