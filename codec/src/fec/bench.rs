//! The FEC benchmark behind `edgemu bench fec [--json]`.
//!
//! Two parts, measured with `std::time::Instant` in one run:
//!
//! 1. **Region kernels**: `mul_add` GB/s of every kernel this CPU runs, on
//!    1400-byte (one frame, L1-resident) and 64 KiB buffers, next to `memcpy`
//!    (`copy_from_slice`) GB/s on the same buffers. Each figure is the best of
//!    several timed batches, which filters out interference from other
//!    processes.
//! 2. **Codec**: encode and decode time per 1000 *transmitted* packets at the
//!    paper's operating point — 1400-byte frames (1368-byte payloads), 100 Mbps
//!    and 20 ms RTT, i.e. ACKs that reach the sender 180 transmissions after the
//!    packet they answer, Gilbert–Elliott loss (εG, εB, pGB, pBG) =
//!    (0.001, 0.5, 0.02, 0.1), one repair after every 10 source packets, K = 16
//!    and K = 64. A first, untimed pass runs sender, channel and receiver
//!    together and records the frames, the losses and when each ACK arrives; the
//!    timed passes then replay the sender alone (`send_source`, `repair`,
//!    `on_ack`) and the receiver alone (`insert_frame` = parse + insert, then
//!    `feedback`), so neither includes the other's work or the simulation. Both
//!    reserve their symbol buffers before the clock starts (`reserve`), so the
//!    figures are codec work, not page faults of a growing heap. The
//!    paper's native C codec needs 10.31 ms (encode) and 7.19 ms (decode) per
//!    1000 packets (Table II).
//!
//! [`FecBenchReport`] serialises to
//! `{"kernel":…,"mul_add_gbps":…,"memcpy_gbps":…,"encode_ms_per_1k":{"16":…,"64":…},
//! "decode_ms_per_1k":{"16":…,"64":…}, …}` where `mul_add_gbps` and
//! `memcpy_gbps` are the active kernel and memcpy on 1400-byte buffers; the extra
//! keys hold the per-kernel and 64 KiB figures, the paper's figures and the
//! simulation counters.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::decoder::{DecoderConfig, RlcDecoder};
use super::encoder::{EncoderConfig, RlcEncoder};
use super::gf::{active_kernel, dispatch_mul_add, Kernel};
use super::packet::MAX_PAYLOAD;
use super::tinymt32::TinyMt32;

/// Paper, Table II: native C codec, encode ms per 1000 transmitted packets.
pub const PAPER_ENCODE_MS_PER_1K: f64 = 10.31;
/// Paper, Table II: native C codec, decode ms per 1000 transmitted packets.
pub const PAPER_DECODE_MS_PER_1K: f64 = 7.19;
/// Source packets per repair at the benchmark's operating point.
pub const SOURCES_PER_REPAIR: usize = 10;
/// Transmissions between a packet and the ACK it triggers reaching the sender
/// (100 Mbps × 20 ms / 1400 B ≈ 178).
pub const ACK_DELAY_PACKETS: usize = 180;

/// Benchmark options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FecBenchOptions {
    /// Small iteration counts (for tests; figures are then meaningless).
    pub quick: bool,
}

/// Region-kernel figures of one kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelFigures {
    pub name: String,
    pub gbps_1400: f64,
    pub gbps_64k: f64,
}

/// A figure for K = 16 and K = 64.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerK {
    #[serde(rename = "16")]
    pub k16: f64,
    #[serde(rename = "64")]
    pub k64: f64,
}

/// Counters of the simulated transfer for one K.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodecRun {
    pub k: u16,
    pub transmitted: u64,
    pub sources: u64,
    pub repairs: u64,
    pub lost: u64,
    /// Source packets lost on the channel.
    pub sources_lost: u64,
    /// Source packets the decoder rebuilt from repairs.
    pub recovered: u64,
    /// Innovative repairs received.
    pub innovative: u64,
    /// Cumulative decoded prefix at the end, over `sources`.
    pub decoded_prefix: u64,
    /// Largest encoder window seen.
    pub max_window: u64,
    pub encode_ms_per_1k: f64,
    pub decode_ms_per_1k: f64,
}

/// The benchmark result; serialises to the JSON shape in the module docs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FecBenchReport {
    /// Active kernel (the one the codec uses).
    pub kernel: String,
    /// Active kernel, `mul_add` on 1400-byte buffers.
    pub mul_add_gbps: f64,
    /// memcpy on 1400-byte buffers.
    pub memcpy_gbps: f64,
    pub encode_ms_per_1k: PerK,
    pub decode_ms_per_1k: PerK,
    /// Active kernel, `mul_add` on 64 KiB buffers.
    pub mul_add_gbps_64k: f64,
    /// memcpy on 64 KiB buffers.
    pub memcpy_gbps_64k: f64,
    /// Inline vector copy loop (no libc call) on 1400-byte buffers.
    pub copy_loop_gbps: f64,
    /// Inline vector copy loop on 64 KiB buffers.
    pub copy_loop_gbps_64k: f64,
    /// Every kernel this CPU runs.
    pub kernels: Vec<KernelFigures>,
    /// Kernels compiled in but not supported by this CPU.
    pub kernels_unavailable: Vec<String>,
    pub paper_encode_ms_per_1k: f64,
    pub paper_decode_ms_per_1k: f64,
    pub runs: Vec<CodecRun>,
    pub quick: bool,
}

/// Best GB/s of `f` (which processes `bytes` per call) over `trials` batches of
/// at least `min_time` each.
fn best_gbps(bytes: usize, trials: usize, min_time: Duration, mut f: impl FnMut()) -> f64 {
    // Warm up (tables, caches, frequency).
    for _ in 0..16 {
        f();
    }
    let mut best = 0.0f64;
    for _ in 0..trials {
        let start = Instant::now();
        let mut iters = 0u64;
        loop {
            for _ in 0..32 {
                f();
            }
            iters += 32;
            let el = start.elapsed();
            if el >= min_time {
                let gbps = (bytes as f64 * iters as f64) / el.as_secs_f64() / 1e9;
                best = best.max(gbps);
                break;
            }
        }
    }
    best
}

fn random_bytes(rng: &mut TinyMt32, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.rand256()).collect()
}

fn region_figures(kernel: Kernel, size: usize, quick: bool) -> f64 {
    let mut rng = TinyMt32::new(size as u32);
    let src = random_bytes(&mut rng, size);
    let mut dst = random_bytes(&mut rng, size);
    let (trials, t) = if quick {
        (1, Duration::from_millis(2))
    } else {
        (5, Duration::from_millis(60))
    };
    let mut c = 2u8;
    best_gbps(size, trials, t, || {
        c = if c == 255 { 2 } else { c + 1 };
        dispatch_mul_add(kernel, black_box(&mut dst), black_box(&src), c);
    })
}

fn memcpy_figures(size: usize, quick: bool) -> f64 {
    let mut rng = TinyMt32::new(size as u32 + 1);
    let src = random_bytes(&mut rng, size);
    let mut dst = vec![0u8; size];
    let (trials, t) = if quick {
        (1, Duration::from_millis(2))
    } else {
        (5, Duration::from_millis(60))
    };
    best_gbps(size, trials, t, || {
        black_box(&mut dst).copy_from_slice(black_box(&src));
    })
}

/// A copy loop of fixed 32-byte moves, which the compiler inlines as vector
/// loads and stores instead of calling libc `memcpy` (whose mid-size
/// `rep movsb` path can be far slower than the vector path on some CPUs and VMs).
fn copy_loop_figures(size: usize, quick: bool) -> f64 {
    let mut rng = TinyMt32::new(size as u32 + 2);
    let src = random_bytes(&mut rng, size);
    let mut dst = vec![0u8; size];
    let (trials, t) = if quick {
        (1, Duration::from_millis(2))
    } else {
        (5, Duration::from_millis(60))
    };
    best_gbps(size, trials, t, || {
        let d = black_box(&mut dst);
        let s = black_box(&src);
        for (dc, sc) in d.chunks_exact_mut(32).zip(s.chunks_exact(32)) {
            if let Ok(block) = <[u8; 32]>::try_from(sc) {
                dc.copy_from_slice(&block);
            }
        }
    })
}

/// One planned transmission of the co-simulation.
struct Recorded {
    /// Frames in transmission order.
    frames: Vec<Vec<u8>>,
    lost: Vec<bool>,
    /// Per slot: the cumulative ACK applied before transmitting, if any.
    acks: Vec<Option<u32>>,
    run: CodecRun,
}

const PAYLOAD_POOL: usize = 64;

/// Encoder window bound in the benchmark: larger than any window the run
/// reaches, so every slot follows the 10-sources-then-1-repair pattern.
const ENCODER_WINDOW: u32 = 1 << 16;

fn payload_pool() -> Vec<Vec<u8>> {
    let mut rng = TinyMt32::new(2024);
    (0..PAYLOAD_POOL)
        .map(|_| random_bytes(&mut rng, MAX_PAYLOAD))
        .collect()
}

fn encoder_for(k: u16) -> RlcEncoder {
    RlcEncoder::new(EncoderConfig {
        k,
        max_window: ENCODER_WINDOW,
        ..Default::default()
    })
    .unwrap_or_else(|_| unreachable!("static configuration is valid"))
}

fn decoder() -> RlcDecoder {
    RlcDecoder::new(DecoderConfig {
        max_window: 2 * ENCODER_WINDOW,
        max_count: 1024,
        session: None,
    })
    .unwrap_or_else(|_| unreachable!("static configuration is valid"))
}

/// Whether slot `t` carries a repair (always when the window is full, which
/// the benchmark's window bound avoids).
fn is_repair_slot(t: usize, enc: &RlcEncoder) -> bool {
    t % (SOURCES_PER_REPAIR + 1) == SOURCES_PER_REPAIR
        || enc.window_len() >= enc.config().max_window
}

fn co_simulate(
    k: u16,
    transmissions: usize,
    pool: &[Vec<u8>],
    channel: &mut dyn FnMut() -> bool,
) -> Recorded {
    let mut enc = encoder_for(k);
    let mut dec = decoder();
    let mut pending: VecDeque<(usize, u32)> = VecDeque::new();
    let mut rec = Recorded {
        frames: Vec::with_capacity(transmissions),
        lost: Vec::with_capacity(transmissions),
        acks: Vec::with_capacity(transmissions),
        run: CodecRun {
            k,
            transmitted: 0,
            sources: 0,
            repairs: 0,
            lost: 0,
            sources_lost: 0,
            recovered: 0,
            innovative: 0,
            decoded_prefix: 0,
            max_window: 0,
            encode_ms_per_1k: 0.0,
            decode_ms_per_1k: 0.0,
        },
    };
    for t in 0..transmissions {
        let mut ack = None;
        while pending.front().is_some_and(|(at, _)| *at <= t) {
            ack = pending.pop_front().map(|(_, c)| c);
        }
        if let Some(c) = ack {
            let _ = enc.on_cumulative_ack(c);
        }
        rec.acks.push(ack);
        let frame = if is_repair_slot(t, &enc) {
            rec.run.repairs += 1;
            enc.repair(usize::from(k))
        } else {
            let id = enc.next_id() as usize;
            rec.run.sources += 1;
            enc.send_source((id / 16) as u32, (id % 16) as u16, &pool[id % PAYLOAD_POOL])
                .ok()
        };
        rec.run.max_window = rec.run.max_window.max(u64::from(enc.window_len()));
        let Some(frame) = frame else {
            rec.frames.push(Vec::new());
            rec.lost.push(true);
            continue;
        };
        let lost = channel();
        rec.run.transmitted += 1;
        if lost {
            rec.run.lost += 1;
            if frame.kind == super::packet::PacketKind::Source {
                rec.run.sources_lost += 1;
            }
        } else if let Ok(p) = dec.insert_frame(&frame.bytes) {
            for id in p.decoded {
                // Verify what comes out (outside any timing).
                let ok = dec
                    .get(id)
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.payload == &pool[id as usize % PAYLOAD_POOL][..]);
                assert!(ok, "benchmark decoder returned wrong data for id {id}");
            }
            pending.push_back((t + ACK_DELAY_PACKETS, dec.feedback().cumulative));
        }
        rec.frames.push(frame.bytes);
        rec.lost.push(lost);
    }
    rec.run.recovered = dec.stats().recovered;
    rec.run.innovative = dec.stats().innovative;
    rec.run.decoded_prefix = u64::from(dec.prefix());
    rec
}

/// Replays the sender side of `rec`; returns the elapsed time. Slots are timed
/// in batches of 64; between batches (untimed) the frames are compared with the
/// recorded run and dropped, so the allocator recycles them as a real sender's
/// would.
fn time_encoder(k: u16, rec: &Recorded, pool: &[Vec<u8>]) -> Duration {
    const BATCH: usize = 64;
    let mut enc = encoder_for(k);
    enc.reserve(rec.frames.len() as u32);
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    let mut total = Duration::ZERO;
    for (b, acks) in rec.acks.chunks(BATCH).enumerate() {
        let start = Instant::now();
        for (j, ack) in acks.iter().enumerate() {
            let t = b * BATCH + j;
            if let Some(c) = *ack {
                let _ = enc.on_cumulative_ack(c);
            }
            let frame = if is_repair_slot(t, &enc) {
                enc.repair(usize::from(k))
            } else {
                let id = enc.next_id() as usize;
                enc.send_source((id / 16) as u32, (id % 16) as u16, &pool[id % PAYLOAD_POOL])
                    .ok()
            };
            out.push(frame.map(|f| f.bytes).unwrap_or_default());
        }
        total += start.elapsed();
        assert!(
            out[..] == rec.frames[b * BATCH..b * BATCH + out.len()],
            "encoder replay diverged from the recorded run"
        );
        out.clear();
    }
    total
}

/// Replays the receiver side of `rec`; returns the elapsed time.
fn time_decoder(rec: &Recorded) -> Duration {
    let mut dec = decoder();
    dec.reserve(rec.frames.len() as u32);
    let received: Vec<&[u8]> = rec
        .frames
        .iter()
        .zip(&rec.lost)
        .filter(|(_, lost)| !**lost)
        .map(|(f, _)| &f[..])
        .collect();
    let start = Instant::now();
    for f in received {
        let _ = black_box(dec.insert_frame(f));
        black_box(dec.feedback());
    }
    start.elapsed()
}

fn codec_figures(
    k: u16,
    quick: bool,
    pool: &[Vec<u8>],
    channel: &mut dyn FnMut() -> bool,
) -> CodecRun {
    let (transmissions, reps) = if quick { (1_100, 1) } else { (22_000, 5) };
    let rec = co_simulate(k, transmissions, pool, channel);
    let per_1k = |d: Duration| d.as_secs_f64() * 1e3 / (rec.run.transmitted as f64 / 1e3);
    let enc = (0..reps)
        .map(|_| time_encoder(k, &rec, pool))
        .min()
        .unwrap_or_default();
    let dec = (0..reps)
        .map(|_| time_decoder(&rec))
        .min()
        .unwrap_or_default();
    CodecRun {
        encode_ms_per_1k: per_1k(enc),
        decode_ms_per_1k: per_1k(dec),
        ..rec.run
    }
}

/// Runs the whole benchmark. `channel` answers, once per transmission of the
/// untimed co-simulation pass, whether that frame is lost: the caller passes
/// the workspace's one loss model (`edgemu_links::GilbertElliott` with the
/// paper's parameters and a seeded RNG); the codec crate sits below the links
/// crate and has no loss model of its own.
pub fn run_fec_bench(opts: &FecBenchOptions, channel: &mut dyn FnMut() -> bool) -> FecBenchReport {
    let quick = opts.quick;
    let active = active_kernel();
    let kernels: Vec<KernelFigures> = Kernel::available()
        .into_iter()
        .map(|k| KernelFigures {
            name: k.name().to_string(),
            gbps_1400: region_figures(k, 1400, quick),
            gbps_64k: region_figures(k, 64 * 1024, quick),
        })
        .collect();
    let memcpy_gbps = memcpy_figures(1400, quick);
    let memcpy_gbps_64k = memcpy_figures(64 * 1024, quick);
    let copy_loop_gbps = copy_loop_figures(1400, quick);
    let copy_loop_gbps_64k = copy_loop_figures(64 * 1024, quick);
    let act = kernels
        .iter()
        .find(|f| f.name == active.name())
        .cloned()
        .unwrap_or(KernelFigures {
            name: active.name().into(),
            gbps_1400: 0.0,
            gbps_64k: 0.0,
        });
    let pool = payload_pool();
    let runs: Vec<CodecRun> = [16u16, 64]
        .into_iter()
        .map(|k| codec_figures(k, quick, &pool, channel))
        .collect();
    FecBenchReport {
        kernel: active.name().to_string(),
        mul_add_gbps: act.gbps_1400,
        memcpy_gbps,
        encode_ms_per_1k: PerK {
            k16: runs[0].encode_ms_per_1k,
            k64: runs[1].encode_ms_per_1k,
        },
        decode_ms_per_1k: PerK {
            k16: runs[0].decode_ms_per_1k,
            k64: runs[1].decode_ms_per_1k,
        },
        mul_add_gbps_64k: act.gbps_64k,
        memcpy_gbps_64k,
        copy_loop_gbps,
        copy_loop_gbps_64k,
        kernels,
        kernels_unavailable: Kernel::ALL
            .into_iter()
            .filter(|k| !k.is_available())
            .map(|k| k.name().to_string())
            .collect(),
        paper_encode_ms_per_1k: PAPER_ENCODE_MS_PER_1K,
        paper_decode_ms_per_1k: PAPER_DECODE_MS_PER_1K,
        runs,
        quick,
    }
}

impl FecBenchReport {
    /// Human-readable table with ratios to memcpy and to the paper's C codec.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
        let _ = writeln!(
            s,
            "FEC benchmark — active kernel: {}{}",
            self.kernel,
            if self.quick {
                " (quick run: figures not meaningful)"
            } else {
                ""
            }
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "GF(2^8) region mul_add, GB/s      1400 B          64 KiB"
        );
        for k in &self.kernels {
            let mark = if k.name == self.kernel { " *" } else { "" };
            let _ = writeln!(
                s,
                "  {:<18} {:>8.2} ({:>3.0} %)  {:>8.2} ({:>3.0} %)",
                format!("{}{}", k.name, mark),
                k.gbps_1400,
                pct(k.gbps_1400, self.memcpy_gbps),
                k.gbps_64k,
                pct(k.gbps_64k, self.memcpy_gbps_64k),
            );
        }
        let _ = writeln!(
            s,
            "  {:<18} {:>8.2} (100 %)  {:>8.2} (100 %)",
            "memcpy (libc)", self.memcpy_gbps, self.memcpy_gbps_64k
        );
        let _ = writeln!(
            s,
            "  {:<18} {:>8.2} ({:>3.0} %)  {:>8.2} ({:>3.0} %)",
            "copy loop (inline)",
            self.copy_loop_gbps,
            pct(self.copy_loop_gbps, self.memcpy_gbps),
            self.copy_loop_gbps_64k,
            pct(self.copy_loop_gbps_64k, self.memcpy_gbps_64k),
        );
        if !self.kernels_unavailable.is_empty() {
            let _ = writeln!(
                s,
                "  not supported by this CPU: {}",
                self.kernels_unavailable.join(", ")
            );
        }
        let _ = writeln!(s, "  (% = of memcpy on the same buffer size; * = active)");
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Codec, ms per 1000 transmitted packets (1400-B frames, GE (0.001, 0.5, 0.02, 0.1),"
        );
        let _ = writeln!(
            s,
            "1 repair per {SOURCES_PER_REPAIR} sources, ACK after {ACK_DELAY_PACKETS} packets ≈ 20 ms RTT at 100 Mbps)"
        );
        let _ = writeln!(s, "                 this codec   paper (C)   paper / this");
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  encode K={:<3}   {:>9.3}   {:>9.2}   {:>10.1}x",
                r.k,
                r.encode_ms_per_1k,
                self.paper_encode_ms_per_1k,
                self.paper_encode_ms_per_1k / r.encode_ms_per_1k.max(1e-9)
            );
        }
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  decode K={:<3}   {:>9.3}   {:>9.2}   {:>10.1}x",
                r.k,
                r.decode_ms_per_1k,
                self.paper_decode_ms_per_1k,
                self.paper_decode_ms_per_1k / r.decode_ms_per_1k.max(1e-9)
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "Simulated transfer (untimed pass)");
        for r in &self.runs {
            let _ = writeln!(
                s,
                "  K={:<3} sent {} ({} src, {} rep), lost {} ({} src), recovered {}, innovative repairs {}, decoded prefix {}/{}, max window {}",
                r.k,
                r.transmitted,
                r.sources,
                r.repairs,
                r.lost,
                r.sources_lost,
                r.recovered,
                r.innovative,
                r.decoded_prefix,
                r.sources,
                r.max_window
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// The paper's channel from the links crate (the workspace's one loss model).
    fn paper_channel() -> impl FnMut() -> bool {
        let mut ge = edgemu_links::paper_channel::GE;
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
        move || ge.lose(&mut rng)
    }

    #[test]
    fn quick_report_has_the_documented_shape() {
        let r = run_fec_bench(&FecBenchOptions { quick: true }, &mut paper_channel());
        let json = serde_json::to_value(&r).unwrap();
        let obj = json.as_object().unwrap();
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        for k in [
            "kernel",
            "mul_add_gbps",
            "memcpy_gbps",
            "encode_ms_per_1k",
            "decode_ms_per_1k",
        ] {
            assert!(keys.contains(&k), "missing {k}");
        }
        assert!(obj["kernel"].is_string());
        assert!(obj["mul_add_gbps"].is_number() && obj["memcpy_gbps"].is_number());
        for k in ["encode_ms_per_1k", "decode_ms_per_1k"] {
            let per = obj[k].as_object().unwrap();
            assert!(per["16"].is_number() && per["64"].is_number());
            assert_eq!(per.len(), 2);
        }
        assert!(!r.kernels.is_empty());
        assert_eq!(r.runs.len(), 2);
        assert!(r.runs.iter().all(|x| x.transmitted > 1000));
        let t = r.table();
        assert!(t.contains("memcpy") && t.contains("encode K=16") && t.contains("decode K=64"));
    }

    /// Full benchmark in a release build:
    /// `cargo test --release -p edgemu-codec fec_bench_report -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn fec_bench_report() {
        let r = run_fec_bench(&FecBenchOptions { quick: false }, &mut paper_channel());
        println!("{}", r.table());
        println!("{}", serde_json::to_string(&r).unwrap());
    }
}
