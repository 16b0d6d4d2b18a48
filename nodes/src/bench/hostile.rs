//! `edgemu bench hostile`: the data path's release jitter while a hostile
//! client attacks the control socket of the host that owns the link, next
//! to the same run without it.
//!
//! Both runs are `bench link`'s 100 Mb/s case (20 ms RTT, GE loss, 1400-byte
//! packets at 1.05x the rate, real time over loopback websockets) with host
//! `a`'s control websocket enabled. The release jitter is the sink's
//! |receive − link-model arrival| (p50, p99). During the hostile run, from
//! the moment the control socket answers until the run ends, a client:
//! opens more idle connections than the socket admits, sends a 2 MiB
//! message (over the 1 MiB cap), a ~1 MiB JSON object of 90 000 keys,
//! `link.set` naming `/dev/zero`, `/etc/passwd` and `../../../etc/hostname`
//! as traces, malformed JSON, and bursts of pipelined requests beyond the
//! in-flight limit — in a loop.
//!
//! Aim: hostile p99 within 2x the quiet p99. Printed, never judged.

use super::common::{free_ports, print_json, run_case, within, LinkCase};
use super::BenchArgs;
use crate::results::render;
use anyhow::Result;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const AIM_RATIO: f64 = 2.0;

#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub delay_err_p50_ms: f64,
    pub delay_err_p99_ms: f64,
    pub goodput_mbps: f64,
    pub packets: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostileFigures {
    pub quiet: Phase,
    pub hostile: Phase,
    /// hostile p99 / quiet p99 (aim ≤ 2).
    pub p99_ratio: f64,
    /// Hostile messages sent, and connections the socket refused or closed.
    pub attacks_sent: u64,
    pub connections_closed: u64,
    pub duration_s: f64,
}

fn phase(case: &LinkCase, name: &str) -> Result<Phase> {
    let o = run_case(name, case)?;
    Ok(Phase {
        delay_err_p50_ms: o.flow.delay_err_p50_ns.unwrap_or(0) as f64 / 1e6,
        delay_err_p99_ms: o.flow.delay_err_p99_ns.unwrap_or(0) as f64 / 1e6,
        goodput_mbps: o.flow.throughput_bps / 1e6,
        packets: o.flow.packets,
    })
}

#[derive(Default)]
struct AttackCounts {
    sent: AtomicU64,
    closed: AtomicU64,
}

/// One round of hostile input (the idle connections stay open between rounds).
type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn attack_round(url: &str, counts: &AttackCounts, idle: &mut Vec<Client>) {
    let connect = || {
        within("connecting", async {
            Ok(tokio_tungstenite::connect_async(url).await?)
        })
    };
    // Idle connections up to near the limit (kept open until the run ends
    // or the socket closes them), then some beyond it (refused).
    while idle.len() < 60 {
        match connect().await {
            Ok((ws, _)) => idle.push(ws),
            Err(_) => {
                counts.closed.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
    let mut extra = Vec::new();
    for _ in 0..8 {
        match connect().await {
            Ok((ws, _)) => extra.push(ws),
            Err(_) => {
                counts.closed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    drop(extra);
    let Ok((mut ws, _)) = connect().await else {
        counts.closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let many_keys = {
        let mut s = String::from("{\"cmd\":\"status\"");
        let mut i = 0;
        while s.len() < 1_000_000 {
            s.push_str(&format!(",\"k{i}\":1"));
            i += 1;
        }
        s.push('}');
        s
    };
    let mut messages = vec![many_keys, "{not json".to_string()];
    for path in ["/dev/zero", "/etc/passwd", "../../../etc/hostname"] {
        for key in ["rate_trace", "rate_steps"] {
            messages.push(
                serde_json::json!({"cmd": "link.set", "link": "bench", key: path}).to_string(),
            );
        }
    }
    for i in 0..40 {
        messages.push(serde_json::json!({"id": i, "cmd": "status"}).to_string());
    }
    for m in messages {
        if within("sending", async { Ok(ws.send(Message::text(m)).await?) })
            .await
            .is_err()
        {
            counts.closed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        counts.sent.fetch_add(1, Ordering::Relaxed);
    }
    // Read what comes back for a moment, then the oversized message, which
    // closes this connection.
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        while ws.next().await.is_some() {}
    })
    .await;
    let huge = format!("{{\"cmd\":\"status\",\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    if within("sending", async { Ok(ws.send(Message::text(huge)).await?) })
        .await
        .is_ok()
    {
        counts.sent.fetch_add(1, Ordering::Relaxed);
    }
    if tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await
    .is_ok()
    {
        counts.closed.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn measure(args: &BenchArgs) -> Result<HostileFigures> {
    let secs = if args.quick { 3 } else { 8 };
    let mut case = LinkCase::saturated(100_000_000, secs * 1_000_000_000, false);
    case.control_port = Some(free_ports()?[0]);
    tracing::info!("bench hostile: quiet run");
    let quiet = phase(&case, "hostile-quiet")?;

    case.control_port = Some(free_ports()?[0]);
    let url = format!("ws://127.0.0.1:{}", case.control_port.unwrap_or(0));
    let counts = Arc::new(AttackCounts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let counts = counts.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("bench-hostile-client".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let mut idle: Vec<Client> = Vec::new();
                    while !stop.load(Ordering::Acquire) {
                        attack_round(&url, &counts, &mut idle).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                });
                anyhow::Ok(())
            })?
    };
    tracing::info!("bench hostile: run under attack");
    let hostile = phase(&case, "hostile-attacked");
    stop.store(true, Ordering::Release);
    let _ = attacker.join();
    let hostile = hostile?;
    Ok(HostileFigures {
        p99_ratio: if quiet.delay_err_p99_ms > 0.0 {
            hostile.delay_err_p99_ms / quiet.delay_err_p99_ms
        } else {
            f64::NAN
        },
        quiet,
        hostile,
        attacks_sent: counts.sent.load(Ordering::Relaxed),
        connections_closed: counts.closed.load(Ordering::Relaxed),
        duration_s: secs as f64,
    })
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let f = measure(args)?;
    if args.json {
        return print_json(&serde_json::to_value(&f)?);
    }
    println!(
        "bench hostile: 100 Mb/s link, 20 ms RTT, GE loss, 1400 B packets at 1.05x, {} s per run; \
         release jitter = |sink receive - model arrival|",
        f.duration_s
    );
    println!(
        "attack on host a's control socket: {} hostile messages, {} connections refused or closed\n",
        f.attacks_sent, f.connections_closed
    );
    let row = |name: &str, p: &Phase| {
        vec![
            name.to_string(),
            format!("{:.3}", p.delay_err_p50_ms),
            format!("{:.3}", p.delay_err_p99_ms),
            format!("{:.2}", p.goodput_mbps),
            format!("{}", p.packets),
        ]
    };
    print!(
        "{}",
        render(
            &[
                "run",
                "jitter p50 ms",
                "jitter p99 ms",
                "goodput Mb/s",
                "packets"
            ],
            &[row("quiet", &f.quiet), row("hostile", &f.hostile)]
        )
    );
    println!(
        "\nhostile p99 / quiet p99 = {:.2} (aim <= {AIM_RATIO})",
        f.p99_ratio
    );
    Ok(())
}
