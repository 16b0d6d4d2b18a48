//! `edgemu deploy k8s`: Kubernetes manifests for a cluster file.
//!
//! One YAML stream (`edgemu.yaml`), applied with `kubectl apply -f`:
//! - a Namespace;
//! - a ConfigMap `edgemu-cluster` holding the rewritten `cluster.toml`;
//! - a Secret `edgemu-token` with the cluster token (given, or drawn);
//! - a headless Service `edgemu-mesh` selecting the run's pods, publishing
//!   not-ready addresses (peers dial each other before any is ready);
//! - one Pod per `[[hosts]]` entry, `hostname` = its DNS label and
//!   `subdomain` = `edgemu-mesh`, so it is `LABEL.edgemu-mesh.NS.svc`;
//!   `restartPolicy: Never` (a run ends; a restarted host would be a new
//!   incarnation of a finished run); resource requests from `cpus` and
//!   `memory`; results on an emptyDir, or on a PersistentVolumeClaim;
//! - a ClusterIP Service `LABEL-control` for each host with a control
//!   socket (`kubectl port-forward svc/LABEL-control PORT` reaches
//!   `edgemu ctl` and the dashboard).

use super::{cpu_quantity, memory_quantity, DeployPlan, DeployedHost, MESH_SERVICE};
use serde_json::{json, Value};

/// Settings of the manifests.
#[derive(Debug, Clone)]
pub struct K8sOptions {
    pub namespace: String,
    pub image: String,
    /// The cluster token written into the Secret.
    pub token: String,
    /// A PersistentVolumeClaim for the results (one per host:
    /// `CLAIM-LABEL`), instead of an emptyDir.
    pub results_claim: Option<String>,
}

const APP: &str = "edgemu";

fn labels(plan: &DeployPlan, host: Option<&DeployedHost>) -> Value {
    let mut l = json!({
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": super::dns_label(&plan.run_name).unwrap_or_else(|_| "run".into()),
    });
    if let Some(h) = host {
        l["edgemu/host"] = json!(h.label);
    }
    l
}

/// The DNS name of `label` in `namespace`.
pub fn pod_dns(label: &str, namespace: &str) -> String {
    format!("{label}.{MESH_SERVICE}.{namespace}.svc")
}

fn pod(plan: &DeployPlan, h: &DeployedHost, o: &K8sOptions) -> Value {
    let mut ports = vec![json!({"name": "mesh", "containerPort": h.mesh_port, "protocol": "TCP"})];
    if let Some(c) = h.control_port {
        ports.push(json!({"name": "control", "containerPort": c, "protocol": "TCP"}));
    }
    let mut requests = serde_json::Map::new();
    if let Some(c) = h.cpus {
        requests.insert("cpu".into(), json!(cpu_quantity(c)));
    }
    if let Some(m) = h.memory_bytes {
        requests.insert("memory".into(), json!(memory_quantity(m)));
    }
    let results = match &o.results_claim {
        Some(claim) => json!({"name": "results",
            "persistentVolumeClaim": {"claimName": format!("{claim}-{}", h.label)}}),
        None => json!({"name": "results", "emptyDir": {}}),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("edgemu-{}", h.label),
            "namespace": o.namespace,
            "labels": labels(plan, Some(h)),
        },
        "spec": {
            "hostname": h.label,
            "subdomain": MESH_SERVICE,
            "restartPolicy": "Never",
            "containers": [{
                "name": "edgemu",
                "image": o.image,
                "imagePullPolicy": "IfNotPresent",
                "command": plan.command(h),
                "env": [
                    {"name": plan.token_env,
                     "valueFrom": {"secretKeyRef": {"name": "edgemu-token", "key": "token"}}},
                    {"name": "EDGEMU_CACHE_DIR", "value": super::CACHE_PATH},
                    {"name": "RUST_LOG", "value": "info"},
                    {"name": "NO_COLOR", "value": "1"},
                ],
                "ports": ports,
                "resources": {"requests": requests},
                "volumeMounts": [
                    {"name": "cluster", "mountPath": "/etc/edgemu", "readOnly": true},
                    {"name": "results", "mountPath": super::RESULTS_PATH},
                ],
            }],
            "volumes": [
                {"name": "cluster", "configMap": {"name": "edgemu-cluster"}},
                results,
            ],
        },
    })
}

/// The manifests, in the order `kubectl apply` should create them.
pub fn manifests(plan: &DeployPlan, o: &K8sOptions) -> Vec<Value> {
    let mut docs = vec![
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": o.namespace, "labels": labels(plan, None)},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "edgemu-cluster", "namespace": o.namespace,
                         "labels": labels(plan, None)},
            "data": {"cluster.toml": plan.cluster_toml},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "edgemu-token", "namespace": o.namespace,
                         "labels": labels(plan, None)},
            "type": "Opaque",
            "stringData": {"token": o.token},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": MESH_SERVICE, "namespace": o.namespace,
                         "labels": labels(plan, None)},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": true,
                "selector": labels(plan, None),
                "ports": [{"name": "mesh", "port": plan.hosts.first().map_or(7101, |h| h.mesh_port),
                           "protocol": "TCP"}],
            },
        }),
    ];
    for h in &plan.hosts {
        docs.push(pod(plan, h, o));
        if let Some(c) = h.control_port {
            docs.push(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": format!("{}-control", h.label), "namespace": o.namespace,
                             "labels": labels(plan, Some(h))},
                "spec": {
                    "type": "ClusterIP",
                    "selector": labels(plan, Some(h)),
                    "ports": [{"name": "control", "port": c, "targetPort": c, "protocol": "TCP"}],
                },
            }));
        }
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_config::Cluster;
    use std::path::Path;

    #[test]
    fn one_pod_per_host_with_its_dns_name_command_and_requests() {
        let text = "[run]\nname = \"Mission\"\nduration = \"5s\"\n\
                    [[hosts]]\nname = \"edge1\"\nlisten = \"127.0.0.1:7101\"\ncontrol = \"127.0.0.1:7201\"\ncpus = 2\nmemory = \"4GiB\"\n\
                    [[hosts]]\nname = \"phones\"\nlisten = \"127.0.0.1:7102\"\n";
        let c = Cluster::from_str(text, Path::new("c.toml")).unwrap();
        let plan = DeployPlan::new(&c, text, &|l| pod_dns(l, "emu")).unwrap();
        let o = K8sOptions {
            namespace: "emu".into(),
            image: "edgemu:test".into(),
            token: "secret".into(),
            results_claim: None,
        };
        let docs = manifests(&plan, &o);
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ConfigMap",
                "Secret",
                "Service",
                "Pod",
                "Service",
                "Pod"
            ]
        );
        let pod = &docs[4];
        assert_eq!(pod["spec"]["hostname"], "edge1");
        assert_eq!(pod["spec"]["subdomain"], MESH_SERVICE);
        let cmd = &pod["spec"]["containers"][0]["command"];
        assert_eq!(cmd[5], "edge1");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "2"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["memory"],
            "4Gi"
        );
        assert_eq!(
            docs[3]["spec"]["selector"],
            docs[6]["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    let mut m = m.clone();
                    m.remove("edgemu/host");
                    Value::Object(m)
                })
                .unwrap()
        );
        let toml = docs[1]["data"]["cluster.toml"].as_str().unwrap();
        assert!(
            toml.contains("advertise = \"edge1.edgemu-mesh.emu.svc:7101\""),
            "{toml}"
        );
        assert_eq!(docs[5]["metadata"]["name"], "edge1-control");
        assert_eq!(
            docs[0]["metadata"]["labels"]["app.kubernetes.io/instance"],
            "mission"
        );
    }
}
