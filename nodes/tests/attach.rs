//! Attach points (`kind = "attach"`, root only): two namespaces on two
//! hosts joined by an emulated link; the kernel's own UDP and TCP (from
//! Python's socket module) run through it. The link's delay shows in a
//! UDP round trip, its rate in a
//! TCP transfer's time (lower bounds only: the emulation can only make
//! things slower), `link.kill` cuts the path and `link.restore` brings it
//! back, and the namespaces are gone when the run ends. The example
//! `examples/attach.toml` loads.

mod common;

use common::*;
use edgemu_nodes::run::load;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True (skip the test) when not root; CI runs as root, so there the
/// test must run.
fn skip_unless_root() -> bool {
    if is_root() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI runs as root and must run the attach test"
    );
    eprintln!("skipped: attach points need root");
    true
}

/// `count` UDP round trips from namespace `from` to a Python echo
/// server in namespace `to_ns` at `to`: (answered, average RTT ms). A
/// round trip not answered within 1 s is lost.
fn udp_rtt(from: &str, to_ns: &str, to: &str, count: u32) -> (u32, f64) {
    let server = Command::new("ip")
        .args(["netns", "exec", to_ns, "python3", "-c", &format!(
            "import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{to}', 7007)); s.settimeout(3)\ntry:\n  while True:\n    d,a=s.recvfrom(2048); s.sendto(d,a)\nexcept socket.timeout: pass")])
        .spawn()
        .expect("UDP echo server");
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("ip")
        .args(["netns", "exec", from, "python3", "-c", &format!(
            "import socket, time\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)\nok=0; t=0.0\nfor i in range({count}):\n  t0=time.monotonic(); s.sendto(b'x'*64, ('{to}', 7007))\n  try:\n    s.recvfrom(2048); ok+=1; t+=time.monotonic()-t0\n  except socket.timeout: pass\nprint(ok, t/ok*1e3 if ok else 0)")])
        .output()
        .expect("UDP client");
    let mut server = server;
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut it = text.split_whitespace();
    let ok = it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let avg = it.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (ok, avg)
}

/// Removes the test's namespaces however the test ends (the run removes
/// them itself when it ends normally).
struct NamespaceCleanup(Vec<String>);

impl Drop for NamespaceCleanup {
    fn drop(&mut self) {
        for ns in &self.0 {
            if Path::new("/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
    }
}

#[test]
fn the_kernels_udp_and_tcp_cross_an_emulated_link_between_namespaces() {
    if skip_unless_root() {
        return;
    }
    let dir = temp_dir("attach");
    let pid = std::process::id();
    let (nsa, nsb) = (format!("emu-t{pid}-a"), format!("emu-t{pid}-b"));
    let _cleanup = NamespaceCleanup(vec![nsa.clone(), nsb.clone()]);
    let p: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let text = format!(
        r#"
[run]
name = "attach"
duration = "60s"
results = "results"
token_env = "EDGEMU_TEST_ATTACH_TOKEN_UNSET"

[[hosts]]
name = "h1"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "h2"
listen = "127.0.0.1:{}"

[[actors]]
name = "a"
host = "h1"
kind = "attach"
to = "b"
via = "ab"
netns = "{nsa}"
address = "198.18.0.1/24"

[[actors]]
name = "b"
host = "h2"
kind = "attach"
to = "a"
via = "ab"
netns = "{nsb}"
address = "198.18.0.2/24"

[[links]]
name = "ab"
a = "a"
b = "b"
rate = "20Mbps"
delay = "20ms"
"#,
        p[0], p[1], p[2]
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    assert!(cluster
        .describe()
        .contains("TUN attach point 198.18.0.1/24"));
    let run = LiveRun::start(&cluster, "at", p[1]);

    // The round trip includes both directions' 20 ms.
    let (received, avg) = udp_rtt(&nsa, &nsb, "198.18.0.2", 5);
    assert_eq!(received, 5, "every datagram answered");
    assert!(avg >= 40.0, "RTT {avg} ms includes 2 × 20 ms");

    // TCP: 1 MB from a to b at 20 Mb/s takes at least 0.4 s.
    let server = Command::new("ip")
        .args(["netns", "exec", &nsb, "python3", "-c",
            "import socket\ns=socket.socket(); s.bind(('198.18.0.2', 5201)); s.listen(1)\nc,_=s.accept(); n=0\nwhile True:\n  d=c.recv(65536)\n  if not d: break\n  n+=len(d)\nprint(n)"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("TCP server");
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let client_ok = Command::new("ip")
        .args(["netns", "exec", &nsa, "python3", "-c",
            "import socket\ns=socket.create_connection(('198.18.0.2', 5201), timeout=30)\ns.sendall(b'x'*1000000); s.close()"])
        .status()
        .expect("TCP client");
    let out = server.wait_with_output().expect("server output");
    let took = t0.elapsed();
    assert!(client_ok.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1000000",
        "every byte arrived"
    );
    assert!(
        took >= Duration::from_millis(400),
        "1 MB at 20 Mb/s took {took:?}"
    );

    // A killed link cuts the path; restored, it carries again.
    let r = run.ask(json!({"cmd": "link.kill", "link": "ab"}));
    assert_eq!(r["errors"], json!([]), "{r}");
    assert_eq!(
        udp_rtt(&nsa, &nsb, "198.18.0.2", 3).0,
        0,
        "nothing crosses a killed link"
    );
    let r = run.ask(json!({"cmd": "link.restore", "link": "ab"}));
    assert_eq!(r["errors"], json!([]), "{r}");
    assert_eq!(udp_rtt(&nsa, &nsb, "198.18.0.2", 3).0, 3, "restored");

    run.stop();
    for ns in [&nsa, &nsb] {
        assert!(
            !Path::new("/run/netns").join(ns).exists(),
            "{ns} removed at the end"
        );
    }
}

/// The kernel's TCP between the two namespaces of an attached pair
/// (`edgemu_nodes::attach::kernel_tcp`, the experiment's `tcp-kernel`
/// row): every byte arrives, no sooner than the link's rate allows, in
/// segments no larger than the devices' MTU; on a lossy forward direction
/// the kernel retransmits, and the namespaces are gone afterwards.
#[test]
fn the_kernels_tcp_carries_a_stream_through_an_attached_pair() {
    use edgemu_links::{LinkParams, LossSpec, RateSpec};
    use edgemu_nodes::attach::kernel_tcp::{over_attached_link, KERNEL_TCP_MTU};
    if skip_unless_root() {
        return;
    }
    let bytes = 2_000_000usize;
    let link = |loss: LossSpec| LinkParams {
        rate: RateSpec::Fixed { bps: 20_000_000 },
        delay_ns: 5_000_000,
        queue_bytes: Some(100_000),
        loss,
        ..Default::default()
    };
    let payload: std::sync::Arc<[u8]> = (0..bytes).map(|i| (i % 251) as u8).collect();
    for loss in [LossSpec::None, LossSpec::Bernoulli { p: 0.02 }] {
        let lossy = loss != LossSpec::None;
        let out = over_attached_link(
            &link(loss),
            &link(LossSpec::None),
            7,
            payload.clone(),
            Duration::from_secs(60),
        )
        .expect("the kernel's TCP through the pair");
        let done = out.completion_ns.expect("every byte read within 60 s");
        // 2 MB at 20 Mb/s is at least 0.8 s on the wire.
        assert!(done >= 800_000_000, "done in {done} ns");
        assert_eq!(out.delivery.delivered_at(u64::MAX), bytes as u64);
        let max_payload = usize::from(KERNEL_TCP_MTU) - 40;
        assert!(
            out.segments_out >= (bytes / max_payload) as u64,
            "{} segments for {bytes} B",
            out.segments_out
        );
        assert_eq!(out.retransmissions > 0, lossy, "{out:?}");
    }
    let left = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let left = String::from_utf8_lossy(&left.stdout);
    let pid = format!("emu-p{}-", std::process::id());
    assert!(!left.contains(&pid), "namespaces left: {left}");
}

/// Scheme `tcp-kernel` in a live run: agent `a` (host h1) hands its real
/// KV (tiny model) to agent `b` (host h2) over the kernel's TCP, from
/// attach point `pa` to `pb` through link `kv`; with a deadline it can
/// meet, the whole KV arrives and B decodes exactly as from the full
/// cache; the row names the scheme and the kernel's segment counts. Agent
/// `c`'s deadline is too short for anything to arrive: its row is an empty
/// prefix, decoded.
#[test]
fn agents_hand_off_kv_over_the_kernels_tcp_between_attach_points() {
    if skip_unless_root() {
        return;
    }
    let dir = temp_dir("attach-tcp-kernel");
    let pid = std::process::id();
    let (na, nb) = (format!("emu-tk{pid}-a"), format!("emu-tk{pid}-b"));
    let _cleanup = NamespaceCleanup(vec![na.clone(), nb.clone()]);
    let (p1, p2) = (free_port(), free_port());
    let text = format!(
        r#"
[run]
name = "tcp-kernel"
duration = "4s"
time = "real"
results = "{results}"

[[hosts]]
name = "h1"
listen = "127.0.0.1:{p1}"

[[hosts]]
name = "h2"
listen = "127.0.0.1:{p2}"

[[actors]]
name = "sched"
host = "h1"
kind = "scheduler"
servers = ["e1", "e2"]

[[actors]]
name = "e1"
host = "h1"
kind = "server"
backend = "real"
model = "tiny"

[[actors]]
name = "e2"
host = "h2"
kind = "server"
backend = "real"
model = "tiny"

[[actors]]
name = "pa"
host = "h1"
kind = "attach"
to = "pb"
via = "kv"
netns = "{na}"
address = "198.18.0.1/24"

[[actors]]
name = "pb"
host = "h2"
kind = "attach"
to = "pa"
via = "kv"
netns = "{nb}"
address = "198.18.0.2/24"

[[actors]]
name = "a"
host = "h1"
kind = "agent"
server = "e1"
hand_to = "b"
via = "kv"
scheme = "tcp-kernel"
context_tokens = 64
start = "1s"
ttft = "500ms"
decode_tokens = 4

[[actors]]
name = "c"
host = "h1"
kind = "agent"
server = "e1"
hand_to = "b"
via = "kv"
scheme = "tcp-kernel"
context_tokens = 64
start = "2s"
rho = 0.8
decode_tokens = 4

[[actors]]
name = "b"
host = "h2"
kind = "agent"
server = "e2"

[[links]]
name = "kv"
a = "pa"
b = "pb"
rate = "100Mbps"
delay = "10ms"
"#,
        results = dir.join("results").display()
    );
    let run_dir = run_file(&text, &dir, "tcp-kernel");
    let csv = std::fs::read_to_string(run_dir.join("h2/handoffs.csv")).expect("handoffs.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    // The context and text columns come last: the split is safe before them.
    let at = |row: &Vec<&str>, k: &str| -> String {
        row[header.iter().position(|h| *h == k).expect(k)]
            .trim_matches('"')
            .to_string()
    };
    let from = |name: &str| {
        rows.iter()
            .find(|r| at(r, "from") == name)
            .unwrap_or_else(|| panic!("no handoff from {name}: {csv}"))
    };
    // c's deadline (ρ = 0.8 of a 16-kB KV: about 11 ms) comes before TCP's
    // handshake has made its round trip: nothing arrives, B decodes from
    // an empty cache, and the row says so.
    let c = from("c");
    assert_eq!(at(c, "scheme"), "tcp-kernel", "{csv}");
    assert_eq!(at(c, "outcome"), "ok", "{csv}");
    assert_eq!(at(c, "recovered_utility"), "0", "{csv}");
    assert_eq!(
        (at(c, "blocks_complete"), at(c, "decoded_prefix")),
        ("0".into(), "0".into()),
        "{csv}"
    );
    // Its sender's counts come after the receiver closed at D; the row
    // waits for them.
    assert!(
        at(c, "source_sent").parse::<u64>().is_ok(),
        "the sender's counts of a deadline-bound stream: {csv}"
    );
    let row = from("a");
    let col = |k: &str| at(row, k);
    let num = |k: &str| -> f64 { col(k).parse().unwrap_or_else(|_| panic!("{k}: {csv}")) };
    assert_eq!(col("scheme"), "tcp-kernel", "{csv}");
    assert_eq!(col("outcome"), "ok", "{csv}");
    assert_eq!(num("recovered_utility"), 1.0, "{csv}");
    assert_eq!(col("blocks_complete"), col("n_blocks"), "{csv}");
    assert_eq!(num("decoded_prefix"), num("source_packets"), "{csv}");
    assert_eq!(
        num("agreement"),
        1.0,
        "decoded as from the full cache: {csv}"
    );
    // A stream that completed ends before the deadline: its counters came.
    assert!(num("source_sent") > 0.0, "the sender's segments: {csv}");
    let ttft: f64 = col("ttft_ms").parse().expect("ttft");
    assert!(ttft >= 500.0, "decoding starts at the deadline: {csv}");
    for ns in [&na, &nb] {
        assert!(!Path::new("/run/netns").join(ns).exists(), "{ns} left");
    }
}

#[test]
fn the_attach_example_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/attach.toml");
    let cluster = load(&path).expect("examples/attach.toml loads");
    let kinds: Vec<&str> = cluster.actors.iter().map(|a| a.kind.kind_name()).collect();
    assert_eq!(kinds, ["attach", "attach"]);
}
