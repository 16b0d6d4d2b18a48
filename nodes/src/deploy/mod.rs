//! `edgemu deploy k8s|compose FILE`: the same testbed on a cluster engine.
//!
//! Each `[[hosts]]` entry becomes one container running `edgemu node
//! --host NAME` on the image (`Dockerfile`: the binary, the model and the
//! data, no network needed at run time). The cluster file is rewritten for
//! the engine ([`DeployPlan::cluster_toml`]) and given to every container
//! unchanged, so the mesh's config digest agrees everywhere:
//! - every host listens on all addresses at its file's port
//!   (`listen = "0.0.0.0:PORT"`, control likewise);
//! - peers dial it by its stable DNS name (`advertise = "NAME:PORT"`): on
//!   Kubernetes `LABEL.edgemu-mesh.NAMESPACE.svc` (a pod with `hostname` and
//!   `subdomain` under a headless Service), on Compose the service name;
//! - results go to `/var/lib/edgemu/results` (a volume).
//!
//! The cluster token comes from the environment variable the file names
//! (`run.token_env`), filled from a Kubernetes Secret or the Compose
//! environment. Resource requests come from the hosts' `cpus` and `memory`.

pub mod compose;
pub mod k8s;
pub mod yaml;

use anyhow::{bail, Context as _, Result};
use edgemu_config::Cluster;
use std::path::{Path, PathBuf};

/// Where the rewritten cluster file sits in every container.
pub const CONFIG_PATH: &str = "/etc/edgemu/cluster.toml";
/// The results volume's mount point.
pub const RESULTS_PATH: &str = "/var/lib/edgemu/results";
/// The image's cache folder (model, data, profiles; `EDGEMU_CACHE_DIR`).
pub const CACHE_PATH: &str = "/opt/edgemu/cache";
/// The headless Service that gives Kubernetes pods their DNS names.
pub const MESH_SERVICE: &str = "edgemu-mesh";

/// One host as deployed.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployedHost {
    /// The `[[hosts]]` name (`edgemu node --host`).
    pub name: String,
    /// A DNS label made from it (pod hostname, Compose service name).
    pub label: String,
    /// The name peers dial.
    pub dns: String,
    pub mesh_port: u16,
    pub control_port: Option<u16>,
    pub cpus: Option<f64>,
    pub memory_bytes: Option<u64>,
}

/// Everything both writers need.
#[derive(Debug, Clone)]
pub struct DeployPlan {
    pub run_name: String,
    pub token_env: String,
    pub hosts: Vec<DeployedHost>,
    /// The rewritten cluster file.
    pub cluster_toml: String,
}

/// A DNS-1123 label for host `name`: lower case, `_` and `.` as `-`.
pub fn dns_label(name: &str) -> Result<String> {
    let label: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if matches!(c, '_' | '.') { '-' } else { c })
        .collect();
    let ok = !label.is_empty()
        && label.len() <= 63
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-');
    if !ok {
        bail!(
            "host {name:?} cannot be a DNS name (letters, digits, '-', '_' and '.', at most 63, not starting or ending with '-'): rename it in the file"
        );
    }
    Ok(label)
}

impl DeployPlan {
    /// The plan for `cluster` (read from `text`), with `dns(label)` the
    /// name peers dial a host by.
    pub fn new(cluster: &Cluster, text: &str, dns: &dyn Fn(&str) -> String) -> Result<Self> {
        let mut hosts = Vec::new();
        for h in &cluster.hosts {
            let label = dns_label(&h.name)?;
            if let Some(other) = hosts.iter().find(|o: &&DeployedHost| o.label == label) {
                bail!(
                    "hosts {:?} and {:?} both become the DNS name {label:?}: rename one",
                    other.name,
                    h.name
                );
            }
            hosts.push(DeployedHost {
                dns: dns(&label),
                name: h.name.clone(),
                label,
                mesh_port: h.listen.port(),
                control_port: h.control.map(|c| c.port()),
                cpus: h.resources.cpus,
                memory_bytes: h.resources.memory_bytes,
            });
        }
        let cluster_toml = rewrite(text, &hosts)?;
        Ok(DeployPlan {
            run_name: cluster.run.name.clone(),
            token_env: cluster.run.token_env.clone(),
            hosts,
            cluster_toml,
        })
    }

    /// `edgemu node`'s command line for host `h` in a container.
    pub fn command(&self, h: &DeployedHost) -> Vec<String> {
        [
            "edgemu",
            "node",
            "--config",
            CONFIG_PATH,
            "--host",
            &h.name,
            "--quiet",
        ]
        .into_iter()
        .map(str::to_string)
        .collect()
    }
}

/// `text` with every host listening on all addresses and advertised at its
/// DNS name, and results in the volume (comments are not kept: the file is
/// re-serialized).
fn rewrite(text: &str, hosts: &[DeployedHost]) -> Result<String> {
    let mut doc: toml::Table = toml::from_str(text).context("reading the cluster file")?;
    let list = doc
        .get_mut("hosts")
        .and_then(toml::Value::as_array_mut)
        .context("the file has no [[hosts]]")?;
    for (entry, h) in list.iter_mut().zip(hosts) {
        let t = entry
            .as_table_mut()
            .context("a [[hosts]] entry is not a table")?;
        t.insert("listen".into(), format!("0.0.0.0:{}", h.mesh_port).into());
        t.insert(
            "advertise".into(),
            format!("{}:{}", h.dns, h.mesh_port).into(),
        );
        if let Some(c) = h.control_port {
            t.insert("control".into(), format!("0.0.0.0:{c}").into());
        }
    }
    let run = doc
        .entry("run")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(r) = run.as_table_mut() {
        r.insert("results".into(), RESULTS_PATH.into());
    }
    let body = toml::to_string(&doc).context("writing the cluster file")?;
    Ok(format!(
        "# Written by `edgemu deploy` from the cluster file: hosts listen on all addresses\n\
         # and are dialed by DNS name; results go to {RESULTS_PATH}.\n{body}"
    ))
}

/// What both `edgemu deploy` commands take.
#[derive(clap::Args, Debug, Clone)]
pub struct DeployArgs {
    /// The cluster file.
    #[arg(default_value = "cluster.toml")]
    pub file: PathBuf,
    /// The folder to write into (default: deploy-k8s or deploy-compose).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The container image (built from the repository's Dockerfile).
    #[arg(long, default_value = "edgemu:latest")]
    pub image: String,
}

/// `edgemu deploy k8s`.
#[derive(clap::Args, Debug, Clone)]
pub struct K8sArgs {
    #[command(flatten)]
    pub common: DeployArgs,
    /// The Kubernetes namespace (default: edgemu-<run name>).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The cluster token for the Secret (default: the environment variable
    /// the file names, else a random one).
    #[arg(long)]
    pub token: Option<String>,
    /// Keep results on PersistentVolumeClaims CLAIM-<host> (created by you)
    /// instead of an emptyDir that goes with the pod.
    #[arg(long)]
    pub results_claim: Option<String>,
}

fn read(file: &Path) -> Result<(Cluster, String)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let cluster = crate::run::load(file)?;
    Ok(((*cluster).clone(), text))
}

/// Writes the Kubernetes manifests; returns the files written.
pub fn deploy_k8s(a: &K8sArgs) -> Result<Vec<PathBuf>> {
    let (cluster, text) = read(&a.common.file)?;
    let namespace = match &a.namespace {
        Some(n) => dns_label(n).context("--namespace")?,
        None => format!("edgemu-{}", dns_label(&cluster.run.name)?),
    };
    let plan = DeployPlan::new(&cluster, &text, &|l| k8s::pod_dns(l, &namespace))?;
    let token = match &a.token {
        Some(t) if !t.is_empty() => t.clone(),
        Some(_) => bail!("--token is empty"),
        None => std::env::var(&cluster.run.token_env)
            .ok()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| {
                rand::random::<[u8; 16]>()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            }),
    };
    let o = k8s::K8sOptions {
        namespace,
        image: a.common.image.clone(),
        token,
        results_claim: a.results_claim.clone(),
    };
    let out = a.common.out.clone().unwrap_or_else(|| "deploy-k8s".into());
    write_files(
        &out,
        &[
            ("edgemu.yaml", yaml::stream(&k8s::manifests(&plan, &o))),
            ("cluster.toml", plan.cluster_toml.clone()),
        ],
    )
}

/// Writes the Compose project; returns the files written.
pub fn deploy_compose(a: &DeployArgs) -> Result<Vec<PathBuf>> {
    let (cluster, text) = read(&a.file)?;
    let plan = DeployPlan::new(&cluster, &text, &|l| l.to_string())?;
    let out = a.out.clone().unwrap_or_else(|| "deploy-compose".into());
    write_files(
        &out,
        &[
            (
                "compose.yaml",
                yaml::stream(&[compose::compose(&plan, &a.image)]),
            ),
            ("cluster.toml", plan.cluster_toml.clone()),
        ],
    )
}

/// Writes `files` (name, text) into `out` (created), returning the paths.
pub fn write_files(out: &Path, files: &[(&str, String)]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    files
        .iter()
        .map(|(name, text)| {
            let p = out.join(name);
            std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
            Ok(p)
        })
        .collect()
}

/// Kubernetes quantity of `bytes` (binary units when exact).
pub fn memory_quantity(bytes: u64) -> String {
    for (unit, size) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// Kubernetes quantity of `cpus` cores (millicores when fractional).
pub fn cpu_quantity(cpus: f64) -> String {
    let milli = (cpus * 1000.0).round() as u64;
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# a comment
[run]
name = "t"
duration = "5s"

[[hosts]]
name = "Edge_1"
listen = "127.0.0.1:7101"
control = "127.0.0.1:7201"
cpus = 1.5
memory = "3GiB"

[[hosts]]
name = "phones"
listen = "127.0.0.1:7102"
"#;

    fn plan() -> DeployPlan {
        let c = Cluster::from_str(TEXT, Path::new("t.toml")).unwrap();
        DeployPlan::new(&c, TEXT, &|l| format!("{l}.mesh")).unwrap()
    }

    #[test]
    fn hosts_listen_everywhere_and_are_dialed_by_name() {
        let p = plan();
        assert_eq!(p.hosts[0].label, "edge-1");
        assert_eq!(p.hosts[0].dns, "edge-1.mesh");
        assert_eq!(
            (p.hosts[0].mesh_port, p.hosts[0].control_port),
            (7101, Some(7201))
        );
        let c = Cluster::from_str(&p.cluster_toml, Path::new("deployed.toml"))
            .expect("the rewritten file is valid");
        let h = &c.hosts[0];
        assert_eq!(h.listen.to_string(), "0.0.0.0:7101");
        assert_eq!(h.advertise.to_string(), "edge-1.mesh:7101");
        assert_eq!(h.control.unwrap().to_string(), "0.0.0.0:7201");
        assert_eq!(h.resources.cpus, Some(1.5));
        assert_eq!(c.run.results_dir, PathBuf::from(RESULTS_PATH));
        assert!(c.requires_token(), "a deployed run needs the token");
        assert_eq!(p.command(&p.hosts[1])[5], "phones");
    }

    #[test]
    fn names_that_cannot_be_dns_labels_are_refused() {
        assert!(dns_label("a b").is_err());
        assert!(dns_label("-a").is_err());
        assert!(dns_label(&"x".repeat(64)).is_err());
        let text = TEXT.replace("name = \"phones\"", "name = \"edge.1\"");
        let c = Cluster::from_str(&text, Path::new("t.toml")).unwrap();
        let e = DeployPlan::new(&c, &text, &|l| l.to_string()).unwrap_err();
        assert!(e.to_string().contains("both become"), "{e}");
    }

    #[test]
    fn quantities() {
        assert_eq!(memory_quantity(3 << 30), "3Gi");
        assert_eq!(memory_quantity(1536 << 20), "1536Mi");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(cpu_quantity(2.0), "2");
        assert_eq!(cpu_quantity(0.5), "500m");
    }
}
