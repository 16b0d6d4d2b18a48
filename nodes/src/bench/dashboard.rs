//! `edgemu bench dashboard`: the data path with and without someone
//! watching it — issue 10's aim that the dashboard and `/metrics` never
//! slow the link.
//!
//! Both runs are `bench link`'s 100 Mb/s case (20 ms RTT, GE loss, 1400-byte
//! packets at 1.05x the rate, real time over loopback websockets) with host
//! `a`'s control address enabled (it owns the link direction). During the
//! watched run a client does what an open dashboard page and a Prometheus
//! server do, every second: `GET /api/snapshot` and `GET /metrics`
//! (OpenMetrics). Per run it reports the goodput ratio (sink throughput over
//! rate·(1 − measured loss), as `bench link`) and the release jitter
//! (|sink receive − link-model arrival|, p50 and p99).
//!
//! Aim: watched goodput ratio and jitter p99 equal to the quiet run's within
//! noise. Printed, never judged.

use super::common::{free_ports, http_get, print_json, run_case, LinkCase};
use super::BenchArgs;
use crate::results::render;
use anyhow::Result;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub goodput_ratio: f64,
    pub delay_err_p50_ms: f64,
    pub delay_err_p99_ms: f64,
    pub packets: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DashboardFigures {
    pub quiet: Phase,
    pub watched: Phase,
    /// Successful `/metrics` and `/api/snapshot` requests during the watched run.
    pub scrapes: u64,
    pub snapshots: u64,
    /// Slowest answer to either, ms (wall time of the whole request).
    pub slowest_answer_ms: f64,
    pub duration_s: f64,
}

fn phase(case: &LinkCase, name: &str) -> Result<Phase> {
    let o = run_case(name, case)?;
    let net = case.rate_bps as f64 * (1.0 - o.link.loss_measured);
    Ok(Phase {
        goodput_ratio: if net > 0.0 {
            o.flow.throughput_bps / net
        } else {
            0.0
        },
        delay_err_p50_ms: o.flow.delay_err_p50_ns.unwrap_or(0) as f64 / 1e6,
        delay_err_p99_ms: o.flow.delay_err_p99_ns.unwrap_or(0) as f64 / 1e6,
        packets: o.flow.packets,
    })
}

/// One GET; true when the answer was `200`.
fn get(port: u16, path: &str, accept: &str) -> bool {
    http_get(port, path, accept).is_some_and(|(head, _)| head.starts_with("HTTP/1.1 200"))
}

#[derive(Default)]
struct Watch {
    scrapes: AtomicU64,
    snapshots: AtomicU64,
    slowest_us: AtomicU64,
}

pub fn measure(args: &BenchArgs) -> Result<DashboardFigures> {
    let secs = if args.quick { 3 } else { 8 };
    let mut case = LinkCase::saturated(100_000_000, secs * 1_000_000_000, false);
    case.control_port = Some(free_ports()?[0]);
    tracing::info!("bench dashboard: quiet run");
    let quiet = phase(&case, "dashboard-quiet")?;

    let port = free_ports()?[0];
    case.control_port = Some(port);
    let watch = Arc::new(Watch::default());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (watch, stop) = (watch.clone(), stop.clone());
        std::thread::Builder::new()
            .name("bench-dashboard-client".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let t0 = Instant::now();
                    for (path, accept, n) in [
                        ("/api/snapshot", "application/json", &watch.snapshots),
                        (
                            "/metrics",
                            "application/openmetrics-text;version=1.0.0",
                            &watch.scrapes,
                        ),
                    ] {
                        let t = Instant::now();
                        if get(port, path, accept) {
                            n.fetch_add(1, Ordering::Relaxed);
                            watch
                                .slowest_us
                                .fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                        }
                    }
                    // Once a second, like the page and a 1 s scrape interval.
                    let rest = Duration::from_secs(1).saturating_sub(t0.elapsed());
                    let until = Instant::now() + rest;
                    while Instant::now() < until && !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })?
    };
    tracing::info!("bench dashboard: watched run");
    let watched = phase(&case, "dashboard-watched");
    stop.store(true, Ordering::Release);
    let _ = watcher.join();
    Ok(DashboardFigures {
        quiet,
        watched: watched?,
        scrapes: watch.scrapes.load(Ordering::Relaxed),
        snapshots: watch.snapshots.load(Ordering::Relaxed),
        slowest_answer_ms: watch.slowest_us.load(Ordering::Relaxed) as f64 / 1e3,
        duration_s: secs as f64,
    })
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let f = measure(args)?;
    if args.json {
        return print_json(&serde_json::to_value(&f)?);
    }
    println!(
        "bench dashboard: 100 Mb/s link, 20 ms RTT, GE loss, 1400 B packets at 1.05x, {} s per run; \
         watched = GET /api/snapshot + GET /metrics every second on host a's control address",
        f.duration_s
    );
    println!(
        "watched run: {} scrapes, {} snapshots answered; slowest answer {:.1} ms\n",
        f.scrapes, f.snapshots, f.slowest_answer_ms
    );
    let row = |name: &str, p: &Phase| {
        vec![
            name.to_string(),
            format!("{:.4}", p.goodput_ratio),
            format!("{:.3}", p.delay_err_p50_ms),
            format!("{:.3}", p.delay_err_p99_ms),
            format!("{}", p.packets),
        ]
    };
    print!(
        "{}",
        render(
            &[
                "run",
                "goodput ratio",
                "jitter p50 ms",
                "jitter p99 ms",
                "packets"
            ],
            &[row("quiet", &f.quiet), row("watched", &f.watched)]
        )
    );
    Ok(())
}
