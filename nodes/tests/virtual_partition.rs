//! A partition in virtual time drops exactly the packets whose model
//! arrival falls inside its window, none at its edges.

mod common;

use common::*;
use edgemu_nodes::run::{load, run_all};

#[test]
fn a_virtual_partition_has_exact_edges() {
    let dir = temp_dir("virtual-partition");
    let text = format!(
        r#"
[run]
name = "part"
duration = "4s"
seed = 5
time = "virtual"
results = "{}"

[[hosts]]
name = "alpha"
listen = "127.0.0.1:1"

[[hosts]]
name = "beta"
listen = "127.0.0.1:2"

[[actors]]
name = "cbr"
host = "alpha"
kind = "constant"
to = "sink"
via = "wan"
rate = "9.7Mbps"
size = "1013B"

[[actors]]
name = "sink"
host = "beta"
kind = "sink"

[[links]]
name = "wan"
a = "cbr"
b = "sink"
rate = "100Mbps"
delay = "3.3ms"

[[chaos]]
at = "1s"
command = "host.partition"
hosts = ["alpha", "beta"]
for = "1.5s"
"#,
        dir.join("results").display()
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let out = run_all(load(&cfg).expect("load"), Some("p".into()), false).expect("run");
    let rows = probes(&out.dir.join("beta/probes.csv"));
    let inside: Vec<u64> = rows
        .iter()
        .map(|r| r.recv_ns)
        .filter(|&t| (1_000_000_000..2_500_000_000).contains(&t))
        .collect();
    assert!(
        inside.is_empty(),
        "arrivals inside the partition: {inside:?}"
    );
    assert!(rows.iter().any(|r| r.recv_ns < 1_000_000_000));
    assert!(rows.iter().any(|r| r.recv_ns >= 2_500_000_000));
}
