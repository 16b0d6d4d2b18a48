//! A host that never hears the coordinator's start gives up with an error
//! naming the coordinator, instead of waiting forever.

mod common;

use common::*;
use edgemu_nodes::run::{load, run_node};
use std::time::Duration;

#[test]
fn a_host_without_its_coordinator_times_out_with_a_clear_error() {
    let dir = temp_dir("start-timeout");
    let (p0, p1) = (free_port(), free_port());
    let cfg = write(
        &dir,
        "cluster.toml",
        &format!(
            "[run]\nduration = \"5s\"\nresults = \"{}\"\n[[hosts]]\nname = \"alpha\"\nlisten = \"127.0.0.1:{p0}\"\n[[hosts]]\nname = \"beta\"\nlisten = \"127.0.0.1:{p1}\"\n",
            dir.join("results").display()
        ),
    );
    let cluster = load(&cfg).expect("load");
    // beta is not the coordinator (alpha sorts first), and alpha never starts.
    let e =
        run_node(cluster, "beta", None, Duration::from_secs(1), false).expect_err("must time out");
    let e = format!("{e:#}");
    assert!(e.contains("no start from the coordinator \"alpha\""), "{e}");
}
