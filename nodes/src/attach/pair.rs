//! Two attach points joined by one link, in this process: the lab in
//! which `edgemu bench attach` runs `iperf3`, and the PriorityFEC
//! experiment runs the kernel's own TCP ([`super::kernel_tcp`]), through
//! the link model.
//!
//! [`with_attached_pair`] writes a one-host cluster — attach point `a`
//! (198.18.0.1) in namespace `<prefix>-a`, attach point `b` (198.18.0.2)
//! in `<prefix>-b`, link `ab` between them — lets the caller set the
//! link's parameters and seeds on the parsed cluster (so any
//! [`edgemu_links::LinkParams`], a loss trace included, can be replayed
//! without a TOML spelling of it), starts the host on a thread of its own,
//! waits until its control port answers (it listens once the attach
//! points' devices are up), runs the caller's closure with the two
//! namespace names, and stops the run over the control port, every wait
//! bounded (namespaces and devices are removed when the run ends). Root
//! is needed.

use anyhow::{bail, Context as _, Result};
use edgemu_config::Cluster;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Attach point `a`'s address.
pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Attach point `b`'s address.
pub const B_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// How long the attach points may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The two namespaces of a running pair.
#[derive(Debug, Clone)]
pub struct Pair {
    pub a: String,
    pub b: String,
}

/// What the pair's cluster is made of.
#[derive(Debug, Clone)]
pub struct PairSpec {
    /// Keys of the `[[links]]` table (and any `[links.ab]` / `[links.ba]`
    /// tables after it), e.g. `rate = "100Mbps"\ndelay = "10ms"`.
    pub link_toml: String,
    /// The run's seed.
    pub seed: u64,
    /// The TUN devices' MTU (None: the attach point's default).
    pub mtu: Option<u16>,
}

/// Whether this process can make attach points: root, `ip` (iproute2)
/// and `/dev/net/tun`. `Err` says what is missing.
pub fn available() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("needs root (network namespaces and TUN devices)");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        bail!("needs /dev/net/tun");
    }
    match std::process::Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => bail!("needs `ip` (iproute2)"),
    }
}

/// `run.stop` to the pair's host, answered within the bench client's
/// timeout.
fn stop_run(control: u16) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(crate::bench::common::within(
            "the attach pair's run.stop",
            crate::control::client::request(
                &format!("ws://127.0.0.1:{control}"),
                serde_json::json!({"cmd": "run.stop"}),
                None,
            ),
        ))
        .map(|_| ())
}

/// Runs `f` while a pair described by `spec` is up; `adjust` may change
/// the parsed cluster first (the link's parameters, its seeds).
pub fn with_attached_pair<T>(
    spec: &PairSpec,
    adjust: impl FnOnce(&mut Cluster),
    f: impl FnOnce(&Pair) -> Result<T>,
) -> Result<T> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = crate::bench::common::ScratchDir::new("attach")?;
    let prefix = format!("emu-p{}-{n}", std::process::id());
    let pair = Pair {
        a: format!("{prefix}-a"),
        b: format!("{prefix}-b"),
    };
    let [listen, control] = crate::bench::common::free_ports()?;
    let mtu = spec.mtu.map(|m| format!("mtu = {m}\n")).unwrap_or_default();
    let text = format!(
        r#"[run]
name = "attach-pair"
seed = {seed}
duration = "3600s"
time = "real"
results = "results"
token_env = "EDGEMU_ATTACH_PAIR_TOKEN_UNSET"

[[hosts]]
name = "lab"
listen = "127.0.0.1:{listen}"
control = "127.0.0.1:{control}"

[[actors]]
name = "a"
host = "lab"
kind = "attach"
to = "b"
via = "ab"
netns = "{na}"
address = "{A_ADDR}/24"
{mtu}
[[actors]]
name = "b"
host = "lab"
kind = "attach"
to = "a"
via = "ab"
netns = "{nb}"
address = "{B_ADDR}/24"
{mtu}
[[links]]
name = "ab"
a = "a"
b = "b"
{link}
"#,
        seed = spec.seed,
        na = pair.a,
        nb = pair.b,
        link = spec.link_toml,
    );
    let cfg = dir.path().join("cluster.toml");
    std::fs::write(&cfg, text).with_context(|| format!("writing {}", cfg.display()))?;
    let mut cluster = (*crate::run::load(&cfg)?).clone();
    adjust(&mut cluster);
    let cluster = std::sync::Arc::new(cluster);
    let h = cluster.hosts[0].id;
    let host = std::thread::spawn(move || {
        let run = || {
            actix::System::new().block_on(crate::host::run_host_real(
                cluster,
                h,
                crate::host::HostOptions {
                    run_id: Some("attach-pair".into()),
                    ..Default::default()
                },
            ))
        };
        // The pair is a tool of its caller: its host's start and end are
        // not news (warnings and errors still show); RUST_LOG shows all.
        if std::env::var_os("RUST_LOG").is_some() {
            return run();
        }
        let quiet = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(std::io::stderr)
            .finish();
        tracing::subscriber::with_default(quiet, run)
    });
    // The host listens on its control port only after its actors are up,
    // the attach points' devices configured in their namespaces included.
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", control)).is_err() {
        if host.is_finished() {
            let why = match host.join() {
                Ok(Err(e)) => format!(": {e:#}"),
                _ => String::new(),
            };
            bail!("the attach points did not come up{why}");
        }
        if t0.elapsed() > START_TIMEOUT {
            // Still starting: ask it to stop, but never wait on it unbounded.
            let _ = stop_run(control);
            bail!("the attach points did not come up within {START_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = f(&pair);
    stop_run(control).context("stopping the attach pair's run")?;
    // The run has been told to stop: it ends its actors and removes the
    // namespaces, then the thread returns.
    let _ = host.join();
    out
}
