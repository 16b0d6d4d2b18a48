//! The reliable baselines on the paper's channel (§V-A): a 35.4-MB KV
//! stream (SmolLM2-135M, 1536 tokens, BF16: 30 layers × 96 blocks of
//! 12 288 B, FIFO) over 100 Mb/s, 20 ms RTT, GE (0.001, 0.5, 0.02, 0.1),
//! five seeds. Prints, per protocol and seed, the completion time and the
//! delivered fraction (bytes, and complete blocks) at the deadlines of
//! ρ ∈ {0.6, 0.8, 1.0, 1.2}, ρ = (D − T_ow)/T_ser, T_ser = S_KV/C,
//! T_ow = 10 ms, and the wall time of each run.
//!
//! `cargo run --release -p edgemu-handoff --example reliable_grid [-- SEEDS HORIZON_S [clean]]`
//! (`clean`: the same link without loss, for reference.)

use edgemu_handoff::reliable::{
    complete_blocks, paper_link, run_quic, run_tcp, ReliableError, ReliableOutcome, ReliableRun,
};
use edgemu_links::paper_channel::{ONE_WAY_NS, RATE_BPS};
use edgemu_links::LossSpec;
use std::time::Instant;

const LAYERS: u64 = 30;
const BLOCKS_PER_LAYER: u64 = 96;
const BLOCK_BYTES: u64 = 12_288;
const RHOS: [f64; 4] = [0.6, 0.8, 1.0, 1.2];

type Runner = fn(&ReliableRun) -> Result<ReliableOutcome, ReliableError>;

fn main() -> Result<(), ReliableError> {
    let mut args = std::env::args().skip(1);
    let seeds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let horizon_s: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(600);
    let clean = args.next().is_some_and(|a| a == "clean");
    let blocks = vec![BLOCK_BYTES; (LAYERS * BLOCKS_PER_LAYER) as usize];
    let s_kv: u64 = blocks.iter().sum();
    let t_ser_ns = s_kv as f64 * 8.0 / RATE_BPS as f64 * 1e9;
    let deadline = |rho: f64| ONE_WAY_NS + (rho * t_ser_ns).round() as u64;
    println!(
        "S_KV = {s_kv} B ({} blocks), T_ser = {:.3} s, deadlines: {}",
        blocks.len(),
        t_ser_ns / 1e9,
        RHOS.iter()
            .map(|&r| format!("ρ={r}: {:.3} s", deadline(r) as f64 / 1e9))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "channel: {}; horizon {horizon_s} s of simulated time per run\n",
        if clean {
            "no loss"
        } else {
            "GE (0.001, 0.5, 0.02, 0.1)"
        }
    );
    println!(
        "{:<5} {:>4} {:>10} {:>8} {:>7} {:>7} | {:>15} {:>15} {:>15} {:>15} | {:>8}",
        "proto",
        "seed",
        "done_s",
        "pkts",
        "lost",
        "retx",
        "ρ=0.6 byte/blk",
        "ρ=0.8",
        "ρ=1.0",
        "ρ=1.2",
        "wall_s"
    );
    let protocols: [(&str, Runner); 2] = [("QUIC", run_quic), ("TCP", run_tcp)];
    for (name, run_fn) in protocols {
        let mut sum_bytes = [0.0; 4];
        let mut sum_blocks = [0.0; 4];
        let mut walls = Vec::new();
        for seed in 0..seeds {
            let mut run = ReliableRun::paper(s_kv, seed, deadline(1.2))
                .with_horizon(horizon_s * 1_000_000_000);
            if clean {
                run.forward = paper_link(LossSpec::None);
            }
            let t0 = Instant::now();
            let out = run_fn(&run)?;
            let wall = t0.elapsed().as_secs_f64();
            walls.push(wall);
            let mut cells = Vec::new();
            for (i, &rho) in RHOS.iter().enumerate() {
                let d = deadline(rho);
                let fb = out.delivered_fraction_at(d);
                let fk = complete_blocks(&blocks, out.delivered_at(d)) as f64 / blocks.len() as f64;
                sum_bytes[i] += fb;
                sum_blocks[i] += fk;
                cells.push(format!("{:>6.1}%/{:>6.1}%", 100.0 * fb, 100.0 * fk));
            }
            let done = out.completion_ns.map_or(format!(">{horizon_s}"), |t| {
                format!("{:.3}", t as f64 / 1e9)
            });
            println!(
                "{:<5} {:>4} {:>10} {:>8} {:>7} {:>7} | {} | {:>8.2}",
                name,
                seed,
                done,
                out.packets_sent,
                out.forward_lost,
                out.retransmissions,
                cells
                    .iter()
                    .map(|c| format!("{c:>15}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                wall
            );
        }
        let n = seeds.max(1) as f64;
        println!(
            "{:<5} {:>4} {:>10} {:>8} {:>7} {:>7} | {} | {:>8.2}\n",
            name,
            "mean",
            "",
            "",
            "",
            "",
            (0..4)
                .map(|i| format!(
                    "{:>15}",
                    format!(
                        "{:>6.1}%/{:>6.1}%",
                        100.0 * sum_bytes[i] / n,
                        100.0 * sum_blocks[i] / n
                    )
                ))
                .collect::<Vec<_>>()
                .join(" "),
            walls.iter().sum::<f64>() / n
        );
    }
    Ok(())
}
