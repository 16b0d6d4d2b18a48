//! Linux network namespaces as edgemu makes and uses them: attach points,
//! their kernel-TCP streams and `bench attach`, and `bench scale`'s hosts.
//!
//! Namespaces are made and removed with `ip` (iproute2), so they are the
//! named ones under `/run/netns` that `ip netns exec` also reaches. A
//! [`Netns`] is removed when dropped. A thread's network namespace is its
//! own: [`spawn_in`] and [`run_in`] run work on a new thread that entered
//! one, and the calling thread stays where it is. Root is needed.

use anyhow::{bail, Context as _, Result};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Runs `ip ARGS…`; an error carries `ip`'s own message.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A namespace edgemu made, with its loopback up; removed on drop.
#[derive(Debug)]
pub struct Netns(String);

impl Netns {
    /// Makes namespace `name`; one that already exists is an error (it
    /// belongs to someone else, or to a run that did not clean up), never
    /// reused.
    pub fn create(name: &str) -> Result<Netns> {
        if path(name).exists() {
            bail!("network namespace {name:?} already exists (from another run?); remove it with `ip netns del {name}`");
        }
        ip(&["netns", "add", name])?;
        let ns = Netns(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

fn path(name: &str) -> PathBuf {
    std::path::Path::new("/run/netns").join(name)
}

/// Moves the calling thread into namespace `name`.
pub fn enter(name: &str) -> Result<()> {
    let path = path(name);
    let ns = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: setns on a valid namespace file descriptor (open for the call)
    // changes only this thread's network namespace.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("entering {} (root is needed)", path.display()));
    }
    Ok(())
}

/// Runs `f` on a new thread that has entered namespace `name`; `on_error`
/// sees a failure to enter before it is returned.
pub fn spawn_in<T: Send + 'static>(
    name: &str,
    on_error: impl FnOnce(&anyhow::Error) + Send + 'static,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    let name = name.to_string();
    std::thread::spawn(move || {
        if let Err(e) = enter(&name) {
            on_error(&e);
            return Err(e);
        }
        f()
    })
}

/// [`spawn_in`], waited for.
pub fn run_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    joined(spawn_in(name, |_| {}, f), "namespace")
}

/// A thread's result; a panic is an error naming `what`.
pub fn joined<T>(h: std::thread::JoinHandle<Result<T>>, what: &str) -> Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("the {what} thread panicked"))?
}
