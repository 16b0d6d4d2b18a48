//! `edgemu bench attach` (root, iperf3): unmodified programs through an
//! attached link. Two attach points (namespaces with TUN devices) on one
//! host in this process, joined by a link of rate R with 10 ms each way;
//! for R = 10, 100 and 1000 Mb/s:
//!
//! - UDP (`iperf3 -u`, 1400-byte datagrams) offered at 1.05 × R on the
//!   wire, lossless link: the receiver's steady goodput (its one-second
//!   reports but the first and the last) at the IP layer (what the link
//!   charges: the datagrams with their 28-byte headers) over R;
//! - the same with the paper's Gilbert–Elliott loss (0.001, 0.5, 0.02,
//!   0.1), offered at 0.9 × R so that the queue drops nothing: measured loss
//!   against the stationary 8.42 %;
//! - TCP (`iperf3`, the kernel's CUBIC), lossless: goodput over R;
//! - at 100 Mb/s only, 300 UDP probes each way on the idle link, each
//!   stamped with its send time on the monotonic clock both namespaces'
//!   threads share: the added one-way delay, delay − (10 ms +
//!   serialization), p50/p99/max per direction.
//!
//! and the process's CPU seconds per Gb carried during the lossless UDP
//! run. Then the PriorityFEC handoff's reliable baseline on the kernel's
//! own TCP (CUBIC, SACK, RACK): the 35.4-MB SmolLM2 KV stream in FIFO
//! order over the paper's channel (100 Mb/s, 20 ms RTT, GE loss on the
//! data direction, a one-BDP queue), the share read in order by each
//! deadline `D = T_ow + ρ·T_ser`, for the first loss realizations of
//! `edgemu experiment priorityfec` (seed 1): the forward link's draws are
//! seeded as that experiment's, whose `tcp-kernel` row is this transfer
//! scored by recovered utility. Aims (issue 31): UDP goodput within 2 % of
//! R, loss within 2σ of the stationary loss, added delay p99 ≤ 0.5 ms at
//! 100 Mb/s. Printed, never judged.

use super::common::print_json;
use super::BenchArgs;
use crate::attach::kernel_tcp::over_attached_link;
use crate::attach::pair::{with_attached_pair, PairSpec, A_ADDR, B_ADDR};
use crate::experiment::priorityfec::realization_seed;
use crate::results::render;
use anyhow::{bail, Context as _, Result};
use edgemu_handoff::reliable::paper_link;
use edgemu_stats::percentile;
use serde::Serialize;
use std::process::Command;
use std::time::Duration;

#[derive(Debug, Clone, Serialize)]
pub struct RateFigures {
    pub rate_mbps: u64,
    /// UDP, lossless: IP-layer goodput over the rate.
    pub udp_ratio: f64,
    pub udp_mbps: f64,
    /// UDP with GE loss: measured and stationary loss, datagrams sent.
    pub ge_loss: f64,
    pub ge_loss_expected: f64,
    pub ge_packets: u64,
    /// Standard deviation of the loss rate over `ge_packets` datagrams of
    /// the GE channel ([`ge_loss_sigma`]).
    pub ge_loss_sigma: f64,
    /// TCP, lossless: payload goodput.
    pub tcp_mbps: f64,
    /// CPU seconds of this process per Gb during the lossless UDP run.
    pub cpu_s_per_gb: f64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ge_sigma_shrinks_with_the_square_root_of_the_count() {
        let s = super::ge_loss_sigma(10_000);
        // (0.0771 + 0.5075) / 10 000 → σ ≈ 0.00765.
        assert!((s - 0.007646).abs() < 1e-5, "{s}");
        assert!((super::ge_loss_sigma(40_000) - s / 2.0).abs() < 1e-12);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AttachFigures {
    pub rates: Vec<RateFigures>,
    /// The KV stream over the kernel's TCP on the paper's channel, per seed.
    pub kernel_tcp: Vec<KernelTcpFigures>,
    /// At 100 Mb/s, the one-way delay the attach path adds to the link's
    /// (10 ms + serialization): a→b, then b→a.
    pub added_delay: [AddedDelay; 2],
    pub seconds: f64,
}

/// One direction's added one-way delay, ms.
#[derive(Debug, Clone, Serialize)]
pub struct AddedDelay {
    pub probes: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

const GE: &str = "{ model = \"ge\", eps_g = 0.001, eps_b = 0.5, p_gb = 0.02, p_bg = 0.1 }";
/// (0.001·0.1 + 0.5·0.02) / 0.12.
const GE_STATIONARY: f64 = (0.001 * 0.1 + 0.5 * 0.02) / 0.12;

/// The standard deviation of the loss rate measured over `n` datagrams of
/// the GE channel: its loss process is a two-state Markov chain, so
/// losses are correlated and the variance is the Bernoulli one plus
/// `2·π_G·π_B·(ε_B − ε_G)²·λ/(1 − λ)`, with λ = 1 − p_GB − p_BG the
/// chain's correlation per step (asymptotic in `n`).
pub fn ge_loss_sigma(n: u64) -> f64 {
    let (eg, eb, pgb, pbg) = (0.001f64, 0.5f64, 0.02f64, 0.1f64);
    let (pi_g, pi_b) = (pbg / (pgb + pbg), pgb / (pgb + pbg));
    let p = GE_STATIONARY;
    let lambda = 1.0 - pgb - pbg;
    let var1 = p * (1.0 - p) + 2.0 * pi_g * pi_b * (eb - eg).powi(2) * lambda / (1.0 - lambda);
    (var1 / n.max(1) as f64).sqrt()
}

/// One in-process run of two attach points over a link of `rate_mbps`
/// with 10 ms each way (with GE loss when `lossy`), during which `f` runs.
fn with_link<T>(rate_mbps: u64, lossy: bool, f: impl FnOnce(&str, &str) -> Result<T>) -> Result<T> {
    let loss = if lossy {
        format!("loss = {GE}\n")
    } else {
        String::new()
    };
    let spec = PairSpec {
        link_toml: format!("rate = \"{rate_mbps}Mbps\"\ndelay = \"10ms\"\n{loss}"),
        seed: 1,
        mtu: None,
    };
    with_attached_pair(&spec, |_| {}, |p| f(&p.a, &p.b))
}

/// `iperf3 --json` from namespace `a` to the server in `b`: the client's
/// and the server's reports. iperf3 opens a UDP test with one datagram
/// each way and does not retry it, so on a lossy link the test may fail to
/// start; it is then run again (at most three times): the measurement is
/// the data of a test that started.
fn iperf(
    a: &str,
    b: &str,
    args: &[&str],
    secs: u64,
) -> Result<(serde_json::Value, serde_json::Value)> {
    let mut last = None;
    for _ in 0..3 {
        match iperf_once(a, b, args, secs) {
            Ok(r) => return Ok(r),
            Err(e) => {
                tracing::warn!(error = %e, "iperf3 did not start; once more");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("iperf3 did not run")))
}

/// How long past its test time an iperf3 client may take before it is taken
/// for one whose start was lost. iperf3 3.12 waits 30 s for the answer to its
/// UDP start datagram; a test that started ends within a second of `-t`.
const IPERF_GRACE: Duration = Duration::from_secs(5);

fn iperf_once(
    a: &str,
    b: &str,
    args: &[&str],
    secs: u64,
) -> Result<(serde_json::Value, serde_json::Value)> {
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            b,
            "iperf3",
            "-s",
            "-1",
            "-B",
            &B_ADDR.to_string(),
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting iperf3 -s (install iperf3)")?;
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new("ip")
        .args([
            "netns",
            "exec",
            a,
            "iperf3",
            "-c",
            &B_ADDR.to_string(),
            "--json",
        ])
        .args(args)
        .args(["-t", &secs.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting iperf3 -c");
    let out = client.and_then(|c| {
        output_within(c, Duration::from_secs(secs) + IPERF_GRACE).context("running iperf3 -c")
    });
    if !out.as_ref().is_ok_and(|o| o.status.success()) {
        // A client that never reached it: the server would wait forever.
        let _ = server.kill();
    }
    let out = out?;
    let served = server.wait_with_output().context("iperf3 -s")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("iperf3's JSON")?;
    if let Some(e) = v.get("error") {
        bail!("iperf3 {}: {e}", args.join(" "));
    }
    let s: serde_json::Value =
        serde_json::from_slice(&served.stdout).context("iperf3 -s's JSON")?;
    Ok((v, s))
}

/// The child's output once it exits, or an error (the child killed) if it
/// is still running after `limit`. Its stdout is read on its own thread so a
/// long report cannot block it on a full pipe.
fn output_within(mut child: std::process::Child, limit: Duration) -> Result<std::process::Output> {
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = std::io::Read::read_to_end(s, &mut buf);
        }
        buf
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            bail!("still running after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().unwrap_or_default();
    Ok(std::process::Output {
        status,
        stdout,
        stderr: Vec::new(),
    })
}

/// The receiver's steady rate: the mean of its one-second intervals but
/// the first (the queue filling) and the last (the queue draining after
/// the sender stopped), bits/s.
fn steady_rate(server: &serde_json::Value) -> f64 {
    let v: Vec<f64> = server["intervals"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["sum"]["bits_per_second"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    let mid = if v.len() > 2 {
        &v[1..v.len() - 1]
    } else {
        &v[..]
    };
    if mid.is_empty() {
        0.0
    } else {
        mid.iter().sum::<f64>() / mid.len() as f64
    }
}

/// One-way delays of `n` small UDP datagrams from namespace `from` to
/// `to_addr` in namespace `to`, 10 ms apart, less `fixed_ms`: each
/// datagram carries its send time on the process's monotonic clock, which
/// both namespaces' threads read, so the delay of each direction is
/// measured on its own, ms.
fn one_way(
    from: &str,
    to: &str,
    to_addr: std::net::Ipv4Addr,
    n: u32,
    fixed_ms: f64,
) -> Result<Vec<f64>> {
    use crate::attach::kernel_tcp::{in_netns, joined};
    use std::net::{SocketAddrV4, UdpSocket};
    let epoch = std::time::Instant::now();
    let addr = SocketAddrV4::new(to_addr, 7007);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = in_netns(to, move || -> Result<Vec<f64>> {
        let s = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let _ = ready_tx.send(());
        let mut out = Vec::new();
        let mut buf = [0u8; 128];
        while let Ok(len) = s.recv(&mut buf) {
            let now = epoch.elapsed().as_nanos() as u64;
            if let Some(sent) = buf.get(..8).filter(|_| len >= 8) {
                let mut b8 = [0u8; 8];
                b8.copy_from_slice(sent);
                out.push(now.saturating_sub(u64::from_le_bytes(b8)) as f64 * 1e-6 - fixed_ms);
            }
        }
        Ok(out)
    });
    if ready_rx.recv_timeout(Duration::from_secs(5)).is_err() {
        return joined(receiver, "UDP receiver");
    }
    let sender = in_netns(from, move || -> Result<()> {
        let s = UdpSocket::bind("0.0.0.0:0")?;
        let mut msg = [0u8; 64];
        for _ in 0..n {
            let t = epoch.elapsed().as_nanos() as u64;
            msg[..8].copy_from_slice(&t.to_le_bytes());
            s.send_to(&msg, addr).context("sending a probe")?;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    });
    joined(sender, "UDP sender")?;
    joined(receiver, "UDP receiver")
}

/// The paper's SmolLM2 KV stream: 30 layers × 1536 tokens × (K, V) ×
/// 3 heads × 64 × 2 bytes (BF16).
pub const KV_BYTES: u64 = 30 * 1536 * 2 * 3 * 64 * 2;
/// `T_ser = S_KV / C` at 100 Mb/s, ns.
const T_SER_NS: u64 = KV_BYTES * 8 * 10;
/// The deadlines read: `D = T_ow + ρ·T_ser`.
pub const RHOS: [f64; 5] = [0.5, 0.8, 1.0, 1.5, 2.0];

/// The KV stream over the kernel's TCP through the paper's channel.
#[derive(Debug, Clone, Serialize)]
pub struct KernelTcpFigures {
    /// The experiment's realization (seed 1) whose loss draws it met.
    pub realization: u64,
    /// Fraction of the stream read in order by each deadline of [`RHOS`].
    pub delivered: Vec<f64>,
}

/// The KV stream (FIFO) sent over the kernel's TCP (its default: CUBIC,
/// SACK, RACK) through the paper's channel for `2.2·T_ser`, the forward
/// link's draws seeded by `seed`; the share read in order by each
/// deadline.
fn kv_over_kernel_tcp(seed: u64) -> Result<Vec<f64>> {
    let horizon = Duration::from_nanos((2.2 * T_SER_NS as f64) as u64 + 500_000_000);
    let payload: std::sync::Arc<[u8]> = vec![0x6b; KV_BYTES as usize].into();
    let out = over_attached_link(
        &paper_link(edgemu_links::paper_channel::ge_loss()),
        &paper_link(edgemu_links::LossSpec::None),
        seed,
        payload,
        horizon,
    )?;
    Ok(RHOS
        .iter()
        .map(|rho| {
            let d = 10_000_000 + (rho * T_SER_NS as f64) as u64;
            out.delivery.delivered_at(d) as f64 / KV_BYTES as f64
        })
        .collect())
}

pub fn measure(args: &BenchArgs) -> Result<AttachFigures> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench attach needs root (network namespaces and TUN devices)");
    }
    if Command::new("iperf3").arg("--version").output().is_err() {
        bail!("bench attach needs iperf3 (apt-get install iperf3)");
    }
    let secs: u64 = if args.quick { 2 } else { 6 };
    let mut rates = Vec::new();
    // Added one-way delay samples, a→b and b→a.
    let mut delays: [Vec<f64>; 2] = Default::default();
    for rate in [10u64, 100, 1000] {
        // 1400-byte datagrams are 1428 bytes on the link.
        let offer = |f: f64| format!("{:.0}", rate as f64 * 1e6 * f * 1400.0 / 1428.0);
        let (udp, cpu, tcp, one_way_delays) = with_link(rate, false, |a, b| {
            let c0 = edgemu_stats::cpu::process_cpu_s();
            let (_, udp) = iperf(a, b, &["-u", "-l", "1400", "-b", &offer(1.05)], secs)?;
            let cpu = edgemu_stats::cpu::process_cpu_s() - c0;
            let (_, tcp) = iperf(a, b, &[], secs)?;
            let delays = if rate == 100 {
                // 10 ms and the serialization of a 92-byte IP packet at 100 Mb/s.
                let fixed = 10.0 + 92.0 * 8.0 / 100e6 * 1e3;
                let n = if args.quick { 50 } else { 300 };
                [
                    one_way(a, b, B_ADDR, n, fixed)?,
                    one_way(b, a, A_ADDR, n, fixed)?,
                ]
            } else {
                Default::default()
            };
            Ok((udp, cpu, tcp, delays))
        })?;
        for (all, d) in delays.iter_mut().zip(one_way_delays) {
            all.extend(d);
        }
        let ge = with_link(rate, true, |a, b| {
            iperf(a, b, &["-u", "-l", "1400", "-b", &offer(0.9)], secs).map(|(_, s)| s)
        })?;
        let recv_bps = steady_rate(&udp);
        let ip_bps = recv_bps * 1428.0 / 1400.0;
        let gb = ip_bps * secs as f64 / 1e9;
        rates.push(RateFigures {
            rate_mbps: rate,
            udp_ratio: ip_bps / (rate as f64 * 1e6),
            udp_mbps: recv_bps / 1e6,
            ge_loss: ge["end"]["sum"]["lost_percent"]
                .as_f64()
                .unwrap_or(f64::NAN)
                / 100.0,
            ge_loss_expected: GE_STATIONARY,
            ge_packets: ge["end"]["sum"]["packets"].as_u64().unwrap_or(0),
            ge_loss_sigma: ge_loss_sigma(ge["end"]["sum"]["packets"].as_u64().unwrap_or(0)),
            tcp_mbps: steady_rate(&tcp) / 1e6,
            cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { f64::NAN },
        });
    }
    // The paper's channel: 100 Mb/s, 10 ms each way, GE loss on the data
    // direction, a one-BDP (250 kB) queue.
    let mut kernel_tcp = Vec::new();
    for realization in 0..if args.quick { 1 } else { 3 } {
        let delivered = kv_over_kernel_tcp(realization_seed(1, realization))?;
        kernel_tcp.push(KernelTcpFigures {
            realization,
            delivered,
        });
    }
    let added_delay = delays.map(|d| {
        let d = edgemu_stats::sorted_finite(&d);
        AddedDelay {
            probes: d.len(),
            p50_ms: percentile(&d, 50.0).unwrap_or(f64::NAN),
            p99_ms: percentile(&d, 99.0).unwrap_or(f64::NAN),
            max_ms: d.last().copied().unwrap_or(f64::NAN),
        }
    });
    Ok(AttachFigures {
        kernel_tcp,
        added_delay,
        rates,
        seconds: secs as f64,
    })
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let f = measure(args)?;
    if args.json {
        return print_json(&serde_json::to_value(&f)?);
    }
    println!(
        "bench attach: iperf3 between two namespaces through an attached link (10 ms each way), {} s per run",
        f.seconds
    );
    let rows: Vec<Vec<String>> = f
        .rates
        .iter()
        .map(|r| {
            vec![
                r.rate_mbps.to_string(),
                format!("{:.2}", r.udp_mbps),
                format!("{:.4}", r.udp_ratio),
                format!("{:.4}", r.ge_loss),
                format!("{:.4}", r.ge_loss_expected),
                format!(
                    "{:+.2}",
                    (r.ge_loss - r.ge_loss_expected) / r.ge_loss_sigma.max(f64::MIN_POSITIVE)
                ),
                r.ge_packets.to_string(),
                format!("{:.2}", r.tcp_mbps),
                format!("{:.2}", r.cpu_s_per_gb),
            ]
        })
        .collect();
    print!(
        "{}",
        render(
            &[
                "rate Mb/s",
                "UDP Mb/s",
                "UDP IP/rate",
                "GE loss",
                "expected",
                "(m-e)/σ",
                "datagrams",
                "TCP Mb/s",
                "CPU s/Gb",
            ],
            &rows
        )
    );
    for (dir, d) in ["a -> b", "b -> a"].iter().zip(&f.added_delay) {
        println!(
            "added one-way delay at 100 Mb/s, {dir} ({} UDP probes; delay - (10 ms + serialization)): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (aim: p99 <= 0.5 ms)",
            d.probes, d.p50_ms, d.p99_ms, d.max_ms
        );
    }
    println!(
        "\nthe {:.1}-MB KV stream (FIFO) over the kernel's TCP, paper channel (100 Mb/s, 20 ms RTT, GE on the data direction, 250 kB queue): share read in order by D = T_ow + rho x T_ser",
        KV_BYTES as f64 / 1e6
    );
    let mut head = vec!["realization".to_string()];
    head.extend(RHOS.iter().map(|r| format!("rho {r}")));
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    let rows: Vec<Vec<String>> = f
        .kernel_tcp
        .iter()
        .map(|k| {
            let mut r = vec![k.realization.to_string()];
            r.extend(k.delivered.iter().map(|d| format!("{:.2} %", d * 100.0)));
            r
        })
        .collect();
    print!("{}", render(&head, &rows));
    Ok(())
}
