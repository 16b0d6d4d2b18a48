//! `edgemu bench virtual`: how fast virtual time runs a saturated link.
//!
//! One 100 Mb/s link (10 ms one-way, GE loss) between two hosts under
//! `time = "virtual"`, a constant sender offering 1.05× its rate of
//! 1400-byte packets, for 60 simulated seconds (10 with `quick`), through
//! the real `run_all` path (paused tokio clock, in-process routers).
//!
//! - `sim_speedup`: simulated seconds (the run's duration) per wall second
//!   of the whole `run_all` call (setup, run, drain, summaries, files);
//! - `events_per_s`: packet events per wall second, where an event is a
//!   packet offered to the link or delivered by it.

use super::common::{print_json, run_case, LinkCase};
use super::BenchArgs;
use crate::results::render;
use anyhow::Result;

pub fn report(args: &BenchArgs) -> Result<serde_json::Value> {
    let secs: u64 = if args.quick { 10 } else { 60 };
    let case = LinkCase::saturated(100_000_000, secs * 1_000_000_000, true);
    let o = run_case("virtual", &case)?;
    let wall = o.wall.as_secs_f64().max(1e-9);
    let s = &o.link.stats;
    let events = s.offered + s.delivered;
    let net = case.rate_bps as f64 * (1.0 - o.link.loss_measured);
    Ok(serde_json::json!({
        "sim_speedup": secs as f64 / wall,
        "events_per_s": events as f64 / wall,
        "simulated_s": secs,
        "wall_s": wall,
        "offered": s.offered,
        "delivered": s.delivered,
        "lost": s.lost,
        "queue_dropped": s.queue_dropped,
        "loss_measured": o.link.loss_measured,
        "loss_expected": o.link.loss_expected,
        "goodput_ratio": if net > 0.0 { o.flow.throughput_bps / net } else { 0.0 },
        "sink_packets": o.flow.packets,
        "delay_err_p99_ms": o.flow.delay_err_p99_ns.unwrap_or(0) as f64 / 1e6,
    }))
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let v = report(args)?;
    if args.json {
        return print_json(&v);
    }
    let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
    println!(
        "bench virtual: saturated 100 Mb/s link (1400 B packets offered at 1.05x, GE loss), {} simulated s",
        f("simulated_s")
    );
    println!("events = packets offered to + delivered by the link\n");
    let rows = vec![vec![
        format!("{:.0}", f("simulated_s")),
        format!("{:.3}", f("wall_s")),
        format!("{:.1}", f("sim_speedup")),
        format!("{:.0}", f("events_per_s")),
        format!("{:.4}", f("goodput_ratio")),
        format!("{:.4}", f("loss_measured")),
        format!("{:.4}", f("loss_expected")),
    ]];
    print!(
        "{}",
        render(
            &[
                "simulated s",
                "wall s",
                "sim s / wall s",
                "events/s",
                "goodput ratio",
                "loss",
                "loss expected"
            ],
            &rows
        )
    );
    Ok(())
}
