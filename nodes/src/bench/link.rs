//! `edgemu bench link`: how faithfully a link behaves in real time over
//! loopback websockets between two hosts in this process.
//!
//! For 1, 10, 100 and 1000 Mb/s at 20 ms RTT with Gilbert–Elliott loss
//! (0.001, 0.5, 0.02, 0.1), a constant sender on host `a` offers 1.05× the
//! link rate of 1400-byte packets through the link to a sink on host `b`
//! (the real `edgemu run` path: router, link actor, precise timer, mesh
//! websocket, router, sink). Per rate it reports:
//!
//! - `goodput_ratio`: the sink's throughput (bytes between its first and
//!   last arrival over that span) divided by rate·(1 − measured loss), i.e.
//!   achieved over configured rate with the packets the loss model erased
//!   excluded (a lost packet still occupies the link for its serialization);
//! - `delay_err_p50_ms`, `delay_err_p99_ms`: |receive time at the sink's
//!   router − the link model's arrival time|;
//! - `loss_measured` (lost / (delivered + lost) on the link) next to
//!   `loss_expected` (the chain's stationary loss).
//!
//! Rows `declared` carry only a declared size (~30 bytes cross the mesh per
//! "1400-byte" packet, so the 1 Gb/s row measures envelope rate); rows
//! `bytes` at 100 Mb/s and 1 Gb/s carry 1400 real bytes per packet
//! (`payload = "bytes"`); rows `bytes, 2 proc` run the two hosts as two
//! real `edgemu node` processes instead of two threads of this one.
//!
//! Aims: goodput ratio within 1 % of 1 and delay error p99 ≤ 0.5 ms. The
//! figures are printed, never judged.

use super::common::{print_json, run_case, run_case_processes, LinkCase};
use super::BenchArgs;
use crate::results::render;
use anyhow::Result;
use serde::Serialize;

pub const RATES_MBPS: [u64; 4] = [1, 10, 100, 1000];
/// Rates also run with 1400 real bytes per packet.
pub const REAL_BYTES_MBPS: [u64; 2] = [100, 1000];
const AIM_DELAY_ERR_P99_MS: f64 = 0.5;

#[derive(Debug, Clone, Serialize)]
pub struct LinkFigures {
    pub rate_mbps: u64,
    /// `declared`, `bytes`, or `bytes, 2 proc`.
    pub payload: String,
    pub goodput_ratio: f64,
    pub delay_err_p50_ms: f64,
    pub delay_err_p99_ms: f64,
    pub loss_measured: f64,
    pub loss_expected: f64,
    /// Packets the sink received.
    pub packets: u64,
    pub throughput_mbps: f64,
    /// Envelopes the routers dropped on the way (should be 0).
    pub router_dropped: u64,
    pub duration_s: f64,
}

/// Runs every rate; seconds per rate: 5 (2 with `quick`).
pub fn measure(args: &BenchArgs) -> Result<Vec<LinkFigures>> {
    let secs = if args.quick { 2 } else { 5 };
    let mut out = Vec::new();
    for mbps in RATES_MBPS {
        let case = LinkCase::saturated(mbps * 1_000_000, secs * 1_000_000_000, false);
        tracing::info!(rate_mbps = mbps, secs, "bench link: running");
        let o = run_case(&format!("link-{mbps}"), &case)?;
        let loss = o.link.loss_measured;
        let rate = case.rate_bps as f64;
        let net = rate * (1.0 - loss);
        out.push(LinkFigures {
            rate_mbps: mbps,
            goodput_ratio: if net > 0.0 {
                o.flow.throughput_bps / net
            } else {
                0.0
            },
            delay_err_p50_ms: o.flow.delay_err_p50_ns.unwrap_or(0) as f64 / 1e6,
            delay_err_p99_ms: o.flow.delay_err_p99_ns.unwrap_or(0) as f64 / 1e6,
            loss_measured: loss,
            loss_expected: o.link.loss_expected.unwrap_or(f64::NAN),
            packets: o.flow.packets,
            throughput_mbps: o.flow.throughput_bps / 1e6,
            router_dropped: o.router_dropped(),
            duration_s: secs as f64,
            payload: "declared".into(),
        });
    }
    for mbps in REAL_BYTES_MBPS {
        let mut case = LinkCase::saturated(mbps * 1_000_000, secs * 1_000_000_000, false);
        case.real_bytes = true;
        tracing::info!(rate_mbps = mbps, secs, "bench link: real bytes");
        let o = run_case(&format!("link-bytes-{mbps}"), &case)?;
        let net = case.rate_bps as f64 * (1.0 - o.link.loss_measured);
        out.push(LinkFigures {
            rate_mbps: mbps,
            payload: "bytes".into(),
            goodput_ratio: if net > 0.0 {
                o.flow.throughput_bps / net
            } else {
                0.0
            },
            delay_err_p50_ms: o.flow.delay_err_p50_ns.unwrap_or(0) as f64 / 1e6,
            delay_err_p99_ms: o.flow.delay_err_p99_ns.unwrap_or(0) as f64 / 1e6,
            loss_measured: o.link.loss_measured,
            loss_expected: o.link.loss_expected.unwrap_or(f64::NAN),
            packets: o.flow.packets,
            throughput_mbps: o.flow.throughput_bps / 1e6,
            router_dropped: o.router_dropped(),
            duration_s: secs as f64,
        });
        if !args.in_process_only {
            tracing::info!(
                rate_mbps = mbps,
                secs,
                "bench link: real bytes, two processes"
            );
            let p = run_case_processes(&format!("link-proc-{mbps}"), &case)?;
            let net = case.rate_bps as f64 * (1.0 - p.loss_measured);
            out.push(LinkFigures {
                rate_mbps: mbps,
                payload: "bytes, 2 proc".into(),
                goodput_ratio: if net > 0.0 {
                    p.throughput_bps / net
                } else {
                    0.0
                },
                delay_err_p50_ms: p.delay_err_p50_ns as f64 / 1e6,
                delay_err_p99_ms: p.delay_err_p99_ns as f64 / 1e6,
                loss_measured: p.loss_measured,
                loss_expected: p.loss_expected,
                packets: p.packets,
                throughput_mbps: p.throughput_bps / 1e6,
                router_dropped: 0,
                duration_s: secs as f64,
            });
        }
    }
    Ok(out)
}

pub fn report(args: &BenchArgs) -> Result<serde_json::Value> {
    let links = measure(args)?;
    Ok(serde_json::json!({ "links": links }))
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let links = measure(args)?;
    if args.json {
        return print_json(&serde_json::json!({ "links": links }));
    }
    let rows: Vec<Vec<String>> = links
        .iter()
        .map(|l| {
            vec![
                format!("{}", l.rate_mbps),
                l.payload.clone(),
                format!("{:.2}", l.throughput_mbps),
                format!("{:.4}", l.goodput_ratio),
                format!("{:+.2} %", (l.goodput_ratio - 1.0) * 100.0),
                format!("{:.3}", l.delay_err_p50_ms),
                format!("{:.3}", l.delay_err_p99_ms),
                format!("{:.2}", l.delay_err_p99_ms / AIM_DELAY_ERR_P99_MS),
                format!("{:.4}", l.loss_measured),
                format!("{:.4}", l.loss_expected),
                format!("{}", l.packets),
                format!("{}", l.router_dropped),
            ]
        })
        .collect();
    println!(
        "bench link: real time, loopback websockets, 20 ms RTT, GE loss (0.001, 0.5, 0.02, 0.1), \
         1400 B packets offered at 1.05x the rate, {} s per rate",
        links.first().map_or(0.0, |l| l.duration_s)
    );
    println!(
        "goodput ratio = sink throughput / (rate x (1 - measured loss)); aim: within 1 % of 1"
    );
    println!(
        "delay error = |sink receive - model arrival|; aim: p99 <= {AIM_DELAY_ERR_P99_MS} ms\n"
    );
    print!(
        "{}",
        render(
            &[
                "rate Mb/s",
                "payload",
                "goodput Mb/s",
                "goodput ratio",
                "vs aim",
                "err p50 ms",
                "err p99 ms",
                "p99/aim",
                "loss",
                "loss expected",
                "packets",
                "router drops",
            ],
            &rows
        )
    );
    Ok(())
}
