//! `edgemu bench virtual --quick` through the library: the JSON object has
//! the documented keys and sane values. No timing thresholds.

use edgemu_nodes::bench::{virtual_time, BenchArgs};

#[test]
fn bench_virtual_quick_reports_sane_figures() {
    let v = virtual_time::report(&BenchArgs {
        json: true,
        quick: true,
        in_process_only: true,
    })
    .expect("bench virtual runs");
    let num = |k: &str| -> f64 {
        v.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("key {k} missing or not a number in {v}"))
    };
    assert!(num("sim_speedup") > 0.0, "{v}");
    assert!(num("events_per_s") > 0.0, "{v}");
    assert_eq!(num("simulated_s"), 10.0, "{v}");
    // A saturated 100 Mb/s link for 10 s of 1400-byte packets.
    let delivered = num("delivered");
    assert!(delivered > 70_000.0 && delivered < 90_000.0, "{v}");
    assert!(num("offered") >= delivered, "{v}");
    // GE (0.001, 0.5, 0.02, 0.1): stationary loss 0.0842; bursty, so a
    // generous band over ~85 000 packets.
    let expected = num("loss_expected");
    assert!((expected - 0.084_166).abs() < 1e-3, "{v}");
    let loss = num("loss_measured");
    assert!(loss > 0.04 && loss < 0.13, "{v}");
    // Virtual time delivers exactly at the model's times and rate.
    let goodput = num("goodput_ratio");
    assert!((goodput - 1.0).abs() < 0.02, "{v}");
    assert!(num("delay_err_p99_ms") < 1.0, "{v}");
}

/// `edgemu bench handoff --quick --json` through the library, with the
/// shipped weights: the documented keys, finite non-negative figures.
#[test]
fn bench_handoff_quick_reports_table_two_keys() {
    use edgemu_nodes::bench::handoff::{report, HandoffBenchArgs};
    let v = report(&HandoffBenchArgs {
        json: true,
        quick: true,
        weights: edgemu_assets::Asset::BuiltIn(&edgemu_policies::shipped::REPAIR_DDQN),
        seeds: 1,
    })
    .expect("bench handoff runs with the shipped weights");
    for k in [
        "state_ms_per_1k",
        "rl_ms_per_1k",
        "enc_ms_per_1k",
        "dec_ms_per_1k",
        "decision_us_mean",
        "decision_us_p99",
    ] {
        let x = v
            .get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("key {k} missing or not a number in {v}"));
        assert!(x.is_finite() && x >= 0.0, "{k} = {x} in {v}");
    }
    assert!(v["packets"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(v["decisions"].as_u64().unwrap_or(0) > 0, "{v}");
}

/// `edgemu bench control --quick` through the library: swaps land while the
/// live LYREO system decides, every one comes into force, both policies
/// made decisions, and no request went undecided. No timing thresholds.
#[test]
fn bench_control_quick_swaps_without_losing_a_decision() {
    let f = edgemu_nodes::bench::control::measure(&BenchArgs {
        json: true,
        quick: true,
        in_process_only: true,
    })
    .expect("bench control runs");
    assert!(f.swaps >= 2, "{f:?}");
    assert!(f.swap_in_force_ms_p99.is_finite() && f.swap_ack_ms_p99.is_finite());
    assert!(f.requests > 0);
    assert_eq!(f.undecided, 0, "{f:?}");
    assert!(
        f.decisions_by_policy.get("random").copied().unwrap_or(0) > 0,
        "{f:?}"
    );
    assert!(
        f.decisions_by_policy
            .get("least-loaded")
            .copied()
            .unwrap_or(0)
            > 0,
        "{f:?}"
    );
}

/// `edgemu bench scale` at a tiny load through the library: every request
/// of the real-time step is answered, the host reported its load, the same
/// load over two network-namespace hosts (as root; otherwise the skip says
/// why) was answered with each host reporting its own load, and the
/// virtual-time episode ran (times are printed, never judged).
#[test]
fn bench_scale_at_a_small_load_reports_its_steps() {
    use edgemu_nodes::bench::scale::{measure, ScaleArgs};
    let r = measure(
        &ScaleArgs {
            json: true,
            seconds: 5,
            start_users: 20,
            max_users: 20,
            hosts: 2,
            node_exe: Some(env!("CARGO_BIN_EXE_edgemu").into()),
            virtual_users: 40,
            virtual_servers: 8,
            virtual_slots: 5,
        },
        true,
    )
    .expect("bench scale runs");
    assert_eq!(r.steps.len(), 1);
    let s = &r.steps[0];
    assert_eq!((s.users, s.servers), (20, 8));
    assert!(s.requests >= 20, "{s:?}");
    assert_eq!(s.not_served, 0, "{s:?}");
    assert!(
        s.timer_late_p99_ms.is_some(),
        "the host reported its load: {s:?}"
    );
    assert!(s.decision_late_p99_ms.is_some(), "{s:?}");
    let sp = &r.spread;
    match &sp.skipped {
        Some(why) => {
            // SAFETY: geteuid has no preconditions.
            assert_ne!(unsafe { libc::geteuid() }, 0, "skipped as root: {why}");
            assert!(why.contains("root") || why.contains("iproute2"), "{why}");
        }
        None => {
            let first = sp.steps.first().expect("a step across hosts");
            assert_eq!((first.hosts, first.users), (2, 20));
            assert!(first.requests >= 20, "{first:?}");
            assert_eq!(first.not_served, 0, "{first:?}");
            assert_eq!(first.per_host.len(), 2);
            for h in &first.per_host {
                assert!(h.timer_late_p99_ms.is_some(), "{h:?}");
                assert!(h.decision_late_p99_ms.is_some(), "{h:?}");
            }
        }
    }
    assert_eq!(r.virtual_episode.decisions, 40 * 5);
}

/// `edgemu bench mesh --quick --rounds 2` through the library: envelopes
/// cross the real mesh in both sizes, TCP is measured beside it, each
/// round gives its ratio, and no saturated session went down.
#[test]
fn bench_mesh_quick_moves_envelopes_and_keeps_the_session_up() {
    use edgemu_nodes::bench::mesh::{report, MeshArgs};
    let v = report(&MeshArgs {
        common: BenchArgs {
            json: true,
            quick: true,
            in_process_only: true,
        },
        rounds: 2,
    })
    .expect("bench mesh runs");
    let num = |k: &str| -> f64 {
        v.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("key {k} missing or not a number in {v}"))
    };
    assert!(num("envelopes_per_s_64") > 0.0, "{v}");
    assert!(num("envelopes_per_s_1400") > 0.0, "{v}");
    assert!(num("tcp_mbps_1400") > 0.0, "{v}");
    assert!(num("ratio_1400") > 0.0, "{v}");
    assert_eq!(num("rounds"), 2.0, "{v}");
    assert_eq!(num("sessions_down"), 0.0, "{v}");
    let ratios = v["ratios_1400"].as_array().expect("ratios_1400");
    assert_eq!(ratios.len(), 2, "{v}");
    // Every round moved envelopes: a saturated receiver pushes back on the
    // sender rather than decoding frames only to drop them while its
    // router starves (rounds with nothing delivered in the window, and
    // hundreds of thousands dropped, before the reader waited for room).
    for r in ratios {
        assert!(r.as_f64().is_some_and(|r| r > 0.0), "{v}");
    }
    assert!(num("receiver_dropped") >= 0.0, "{v}");
    // Every side's CPU per GB was measured (its own threads, in the window).
    for k in [
        "ws_sender_cpu_s_per_gb",
        "ws_receiver_cpu_s_per_gb",
        "tcp_sender_cpu_s_per_gb",
        "tcp_receiver_cpu_s_per_gb",
    ] {
        assert!(num(k).is_finite() && num(k) >= 0.0, "{k}: {v}");
    }
    assert!(num("ws_sender_cpu_s_per_gb") > 0.0, "{v}");
}

/// `edgemu bench gateway --quick` through the library: OpenAI's Python
/// client against the in-process cluster; every request the client sent
/// finished at the gateway (no chaos in this run), and the overhead
/// histogram has a value per finished request. No timing thresholds.
#[test]
fn bench_gateway_quick_serves_the_openai_client_without_errors() {
    let has_openai = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_openai {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI installs the openai package (.ci/run)"
        );
        eprintln!("skipped: python3 has no openai package");
        return;
    }
    let f =
        edgemu_nodes::bench::gateway::measure(&edgemu_nodes::bench::gateway::GatewayBenchArgs {
            common: BenchArgs {
                json: true,
                quick: true,
                in_process_only: true,
            },
            concurrency: 16,
            seconds: 5.0,
            max_tokens: 16,
            http_thread: edgemu_config::GatewayHttpThread::Host,
            python: "python3".into(),
        })
        .expect("bench gateway runs");
    let c = &f.client;
    assert_eq!(c["errors"], serde_json::json!({}), "{c}");
    let completed = c["completed"].as_u64().expect("completed");
    assert!(completed > 0, "{c}");
    assert_eq!(c["requests"].as_u64(), Some(completed), "{c}");
    assert_eq!(
        f.finished, completed,
        "the gateway finished what the client completed"
    );
    assert!(f.failed.is_empty(), "{:?}", f.failed);
    assert_eq!(f.overhead_count, completed);
    assert!(f.overhead_p99_ms.is_some_and(|v| v > 0.0));
    // One content chunk per token: a modeled server makes one per iteration.
    assert_eq!(c["chunks"].as_u64(), Some(16 * completed), "{c}");
}

/// `sudo edgemu bench attach --quick` through the library (root and
/// iperf3; CI installs iperf3): every rate has its UDP, GE and TCP
/// figures, both directions' one-way probes arrived, and the KV stream
/// over the kernel's TCP has a share per deadline that never falls as the
/// deadline grows. No timing thresholds.
#[test]
fn bench_attach_quick_reports_every_figure() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let iperf = std::process::Command::new("iperf3")
        .arg("--version")
        .output()
        .is_ok();
    if !(root && iperf) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI runs as root and installs iperf3 (.ci/run)"
        );
        eprintln!("skipped: bench attach needs root and iperf3");
        return;
    }
    let f = edgemu_nodes::bench::attach::measure(&BenchArgs {
        json: true,
        quick: true,
        in_process_only: true,
    })
    .expect("bench attach runs");
    let rates: Vec<u64> = f.rates.iter().map(|r| r.rate_mbps).collect();
    assert_eq!(rates, [10, 100, 1000]);
    for r in &f.rates {
        assert!(r.udp_mbps > 0.0 && r.tcp_mbps > 0.0, "{r:?}");
        assert!(r.ge_packets > 0 && r.ge_loss > 0.0, "{r:?}");
    }
    for d in &f.added_delay {
        assert!(d.probes > 0 && d.p50_ms.is_finite(), "{d:?}");
    }
    assert_eq!(f.kernel_tcp.len(), 1);
    let shares = &f.kernel_tcp[0].delivered;
    assert_eq!(shares.len(), 5);
    assert!(
        shares.windows(2).all(|w| w[0] <= w[1]) && shares.iter().all(|s| (0.0..=1.0).contains(s)),
        "{shares:?}"
    );
}
