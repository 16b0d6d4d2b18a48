//! `edgemu experiment priorityfec`: the PriorityFEC paper's main experiment
//! (§V, Fig. 5/6/7) — every handoff scheme over the paper's link, recovered
//! utility and task quality of decoding from the rebuilt KV cache.
//!
//! **Setting.** 100 Mb/s, 20 ms RTT, Gilbert–Elliott (εG, εB, pGB, pBG) =
//! (0.001, 0.5, 0.02, 0.1) on the forward direction (or `--loss-trace`), the
//! deadline as ρ = (D − T_ow)/T_ser with T_ser the serialization time of the N
//! source frames (see `edgemu_handoff::harness`). Schemes: the FEC schemes of
//! `edgemu_handoff::SCHEMES` on the co-simulation harness, and `tcp` (smoltcp)
//! and `quic` (quinn-proto) from `edgemu_handoff::reliable`.
//!
//! **The kernel's TCP** (`tcp-kernel`, when this process can make attach
//! points: root, iproute2, /dev/net/tun). Linux's own TCP (CUBIC, SACK,
//! RACK-TLP) carries the stream between two network namespaces whose TUN
//! devices are joined by an attached link of the same parameters
//! (`crate::attach::kernel_tcp`), in real time, once per realization. The
//! forward link's draws are seeded with the realization's seed, as the
//! harness seeds its forward link, so the i-th packet offered to it meets
//! the same loss draw as in the virtual-time rows. Being real time, its
//! outcome is not reproducible bit for bit; `--resume` reuses the stored
//! outcome instead of running it again. Without attach points (not root)
//! the row is left out and the run says why; with `--loss-trace` too (a
//! trace is replayed by time, and a real-time link's clock starts before
//! the connection does).
//!
//! **Why the grid is cheap.** Block utilities come from the per-model profile,
//! not from the context, so a handoff's transport outcome (which byte ranges
//! of which blocks arrived by D) depends only on (scheme, ρ, realization). We
//! run each of those once on a stand-in payload and apply its present byte
//! ranges to every evaluation context's real KV: each context is prefilled
//! once with the real model and exported as BF16 transport blocks (one layer ×
//! 16 tokens). Identical outcomes (e.g. every block complete) are scored once
//! per context; a complete cache scores F1 = top-1 = 1 by definition.
//! Realization `r` seeds the forward link with `seed · 1 000 003 + r`: the
//! same channel draws for every scheme (paired).
//!
//! **Block utilities (the paper's α mapping).** A profile cell (layer group g
//! × position bin b) has utility `cells[g][b]`; the blocks whose layer is in g
//! and whose first token falls in bin b share it equally, so each cell keeps
//! its share of the total however many blocks it covers
//! (`edgemu_handoff::cell_utilities`). Without a profile
//! (the tiny test model, or no file) the transport's placeholder utilities are
//! used and the run says so.
//!
//! **Task quality.** `QualityEvaluator` from `edgemu_gpu::handoff_quality`:
//! agent B's prompt is the context plus the ChatML assistant cue; 32 tokens
//! are decoded greedily from the rebuilt cache (zero-fill or mask) and scored
//! against the full-cache continuation by token F1 and teacher-forced top-1.
//! The evaluator forces all positions in one pass and decodes free-running
//! only past the first disagreement (`QualityEvaluator::evaluate`);
//! `--stepwise` runs the direct computation instead, with the same figures bit
//! for bit. Contexts are scored in `--streams` side by side (`quality`: each
//! on its own share of the cores; the same bits in any number of streams).
//! The time of each quality phase (wall and CPU seconds, summed over the
//! contexts, the CPU counted on the threads of the stream that ran it) is in
//! `summary.json` (`quality_stats`) and on the last line of the table; with
//! two streams the phases' wall seconds add up to about twice the quality
//! section's wall time.
//!
//! Outputs in `results/<run>/`: `handoffs.csv` (one row per context ×
//! realization × ρ × scheme, appended as each context finishes),
//! `transport.csv` (one row per transport run), `settings.json` and
//! `contexts.jsonl` (what `--resume` checks and skips; see `pfec_run`),
//! `summary.csv`, `summary.json`, `summary.txt` (the printed table), and
//! `report/` (the plots of `edgemu report`: utility, F1 and top-1 vs ρ with
//! 95 % CI, the ablation bars at ρ = 0.8; PNG and SVG).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use edgemu_assets::Asset;
use edgemu_data::contexts::{build, ContextConfig};
use edgemu_gpu::handoff_quality::{chatml_cue, EvalStats};
use edgemu_gpu::kv_utility::{model_identity, KvUtilityProfile, ModelIdentity};
use edgemu_gpu::model::llama::Llama;
use edgemu_gpu::model::{load, load_tiny, parse_device, LoadedModel, WeightFormat, WeightLayout};
use edgemu_gpu::shipped_profiles::{parse_profile, read_profile};
use edgemu_gpu::{KvBlock, MissingRows};
use edgemu_handoff::reliable::{paper_link, run_quic, run_tcp, ReliableRun};
use edgemu_handoff::{
    cell_utilities, placeholder_utilities, run_handoff, scheme, synthetic_payload, BlockLayout,
    HandoffScenario, RunOptions, SchemeSpec, SCHEMES,
};
use edgemu_links::{LossSpec, LossTrace};
use edgemu_policies::repair::ddqn::{DdqnNet, DdqnScheduler};
use edgemu_policies::repair::RepairScheduler;
use edgemu_policies::shipped::{parse_weights, read_weights};
use edgemu_tokenizer::resolve_model_path;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::attach::kernel_tcp::{over_attached_link, KernelTcpOutcome};
use crate::experiment::pfec_run::{sha256_file, sha256_hex, tokens_sha256, ContextDone, RunDir};
use crate::report::csv::Table;
use crate::report::pfec::CellSamples;
use crate::results::{git_revision, render, run_id, write_file};

mod quality;

/// The default `--profile`: the shipped SmolLM2 KV-utility profile, built in.
pub const DEFAULT_PROFILE: &str = edgemu_gpu::shipped_profiles::DEFAULT_PROFILE_ARG;
/// The default `--weights`: the trained DDQN repair scheduler, built in.
pub const DEFAULT_WEIGHTS: &str = "built-in:repair-ddqn";

#[derive(Args, Debug, Clone)]
pub struct PriorityFecArgs {
    /// A small grid for CI and checking by hand: 2 contexts of 256 tokens
    /// (32 with --tiny), 1 realization, ρ = 0.8 and 1.0.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Evaluation contexts (default 48).
    #[arg(long)]
    pub contexts: Option<usize>,
    /// Context length in tokens, a multiple of 16 (default 1536).
    #[arg(long)]
    pub context_tokens: Option<usize>,
    /// Paired loss realizations (default 5).
    #[arg(long)]
    pub realizations: Option<u64>,
    /// Deadlines ρ, comma-separated (default 0.6,0.8,1.0,1.2).
    #[arg(long, value_delimiter = ',')]
    pub rho: Option<Vec<f64>>,
    /// Schemes, comma-separated (default: every scheme, then tcp, quic and,
    /// where this process can make attach points, tcp-kernel).
    #[arg(long, value_delimiter = ',')]
    pub schemes: Option<Vec<String>>,
    /// KV-utility profile (JSON from `edgemu profile-kv`): a file, or a
    /// shipped one built in (`built-in:smollm2-135m-kvu`, measured by
    /// zero-filling; `built-in:smollm2-135m-kvu-mask`, by masking).
    #[arg(long, default_value = DEFAULT_PROFILE, value_parser = parse_profile)]
    pub profile: Asset,
    /// DDQN weights for `priorityfec` and `rl-fec-only`: a file, or the
    /// shipped ones built in (`built-in:repair-ddqn`).
    #[arg(long, default_value = DEFAULT_WEIGHTS, value_parser = parse_weights)]
    pub weights: Asset,
    /// Replay a per-time loss-state trace instead of the GE channel.
    #[arg(long)]
    pub loss_trace: Option<PathBuf>,
    /// Rebuild mode: zero-fill or mask.
    #[arg(long, default_value = "zero-fill")]
    pub mode: String,
    /// Seed of the loss realizations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Coding window K of every FEC scheme: the most source packets one
    /// repair combines (paper §IV-A), 1 to 4096. docs/experiments/priorityfec.md
    /// compares 256 and 1 024.
    #[arg(long, default_value_t = edgemu_handoff::scenario::DEFAULT_K)]
    pub k: u16,
    /// Seed of the profiling/evaluation context split (the profile's).
    #[arg(long, default_value_t = 0)]
    pub context_seed: u64,
    /// The GGUF model (default: the fetched SmolLM2-135M).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The tiny random model and built-in texts (tests; no download).
    #[arg(long)]
    pub tiny: bool,
    /// Tokens decoded per handoff.
    #[arg(long, default_value_t = 32)]
    pub decode_len: usize,
    /// Handoffs decoded together (per stream); any size gives the same
    /// figures. 32 is the fastest measured on 2 cores.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Weight format of the decode-path matmuls (cue, teacher-forced and
    /// free-running rows): q8_int (the default: int8 weights against
    /// int8-quantized activations, exact integer dot products with AVX-512
    /// VNNI, else AVX2, else scalar code, the same bits everywhere) or q8_cpu
    /// (int8 weights against F32 activations: ≈ 1.25× the grid's time on a
    /// 2-core machine, quality figures within their noise but not q8_int's
    /// bits — docs/experiments/priorityfec.md). Recorded in settings.json.
    #[arg(long)]
    pub decode_weights: Option<String>,
    /// Score task quality with the direct computation (free-running decode of
    /// every token, then one decode step per teacher-forced position) instead
    /// of the shared one; the same figures, slower (for checking).
    #[arg(long)]
    pub stepwise: bool,
    /// Contexts scored side by side, each on its share of the cores (default:
    /// 2 where there are 2 or more cores, else 1). Many short forward passes
    /// keep two cores busier as two streams than as one (≈ 1.2× on this
    /// project's 2-core machine); the figures are the same bits.
    #[arg(long)]
    pub streams: Option<usize>,
    /// Results root.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
    /// Name of the results folder (default priorityfec-<UTC time>).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Continue the stopped run in this results folder: the command's settings
    /// must be the run's (checked, including the profile's and the DDQN
    /// weights' SHA-256); finished contexts are kept, --contexts may grow.
    #[arg(long)]
    pub resume: Option<PathBuf>,
}

/// The grid after defaults.
#[derive(Debug, Clone, Serialize)]
struct Grid {
    contexts: usize,
    context_tokens: usize,
    realizations: u64,
    rho: Vec<f64>,
    schemes: Vec<String>,
    mode: String,
    seed: u64,
    /// Coding window K (absent from runs written before it was a setting:
    /// those ran with 256).
    k: u16,
}

fn grid(a: &PriorityFecArgs) -> Result<Grid> {
    let quick = a.quick;
    let g = Grid {
        contexts: a.contexts.unwrap_or(if quick { 2 } else { 48 }),
        context_tokens: a.context_tokens.unwrap_or(match (quick, a.tiny) {
            (_, true) => 32,
            (true, false) => 256,
            _ => 1536,
        }),
        realizations: a.realizations.unwrap_or(if quick { 1 } else { 5 }),
        rho: a.rho.clone().unwrap_or(if quick {
            vec![0.8, 1.0]
        } else {
            vec![0.6, 0.8, 1.0, 1.2]
        }),
        schemes: a.schemes.clone().unwrap_or_else(|| {
            SCHEMES
                .iter()
                .map(|s| s.name.to_string())
                .chain(RELIABLE.iter().map(|r| r.name().to_string()))
                .collect()
        }),
        mode: a.mode.clone(),
        seed: a.seed,
        k: a.k,
    };
    if !(1..=4096).contains(&g.k) {
        bail!("--k must be from 1 to 4096, not {}", g.k);
    }
    for (empty, what) in [
        (
            g.contexts == 0,
            "--contexts 0: the grid needs at least one context",
        ),
        (
            g.realizations == 0,
            "--realizations 0: the grid needs at least one loss realization",
        ),
        (
            g.rho.is_empty(),
            "--rho: the grid needs at least one deadline",
        ),
        (
            g.schemes.is_empty(),
            "--schemes: the grid needs at least one scheme",
        ),
    ] {
        if empty {
            bail!("{what}");
        }
    }
    if a.decode_len == 0 {
        bail!("--decode-len 0: task quality needs at least one decoded token");
    }
    if a.batch == 0 {
        bail!("--batch 0: at least one handoff must be decoded at a time");
    }
    if a.streams == Some(0) {
        bail!("--streams 0: at least one stream must score the contexts");
    }
    if g.context_tokens == 0 || !g.context_tokens.is_multiple_of(16) {
        bail!(
            "--context-tokens {} must be a positive multiple of 16 (tokens per block)",
            g.context_tokens
        );
    }
    if let Some(r) = g.rho.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        bail!("--rho {r} must be positive");
    }
    for s in &g.schemes {
        GridRow::resolve(s)?;
    }
    Ok(g)
}

/// The kernel's TCP through attached devices (real time).
pub const KERNEL_TCP: &str = "tcp-kernel";
/// The reliable baselines, after the FEC schemes.
const RELIABLE: [Reliable; 3] = [Reliable::Tcp, Reliable::Quic, Reliable::KernelTcp];

/// A reliable baseline: a byte stream delivered in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reliable {
    /// smoltcp over the link model, in virtual time.
    Tcp,
    /// quinn-proto over the link model, in virtual time.
    Quic,
    /// Linux's TCP through attached devices, in real time.
    KernelTcp,
}

impl Reliable {
    fn name(self) -> &'static str {
        match self {
            Reliable::Tcp => "tcp",
            Reliable::Quic => "quic",
            Reliable::KernelTcp => KERNEL_TCP,
        }
    }
}

/// A row of the transport grid, resolved once from its name.
#[derive(Debug, Clone, Copy)]
enum GridRow {
    /// A FEC scheme of `edgemu-handoff`, one run per ρ.
    Fec(&'static SchemeSpec),
    /// A reliable baseline, one run for every ρ (each reads its prefix at D).
    Reliable(Reliable),
}

impl GridRow {
    fn resolve(name: &str) -> Result<GridRow> {
        if let Some(r) = RELIABLE.iter().find(|r| r.name() == name) {
            return Ok(GridRow::Reliable(*r));
        }
        Ok(GridRow::Fec(
            scheme(name).with_context(|| format!("--schemes: `{name}`"))?,
        ))
    }

    fn name(self) -> &'static str {
        match self {
            GridRow::Fec(spec) => spec.name,
            GridRow::Reliable(r) => r.name(),
        }
    }
}

pub(crate) fn missing_rows(mode: &str) -> Result<MissingRows> {
    match mode {
        "zero-fill" => Ok(MissingRows::ZeroFill),
        "mask" => Ok(MissingRows::Mask),
        m => bail!("--mode `{m}`: expected zero-fill or mask"),
    }
}

/// Realization `r`'s forward-link seed.
pub fn realization_seed(seed: u64, r: u64) -> u64 {
    seed.wrapping_mul(1_000_003).wrapping_add(r)
}

/// What arrived of one handoff by D, independent of the context.
#[derive(Debug, Clone)]
struct Transport {
    scheme: String,
    rho: f64,
    realization: u64,
    utility: f64,
    source_sent: u64,
    repair_sent: u64,
    innovative: u64,
    decoded_prefix: u64,
    /// Per block: byte ranges of `k‖v` that arrived.
    present: Vec<Vec<Range<usize>>>,
    complete: bool,
    /// Identifies equal outcomes.
    key: u64,
}

fn outcome_key(present: &[Vec<Range<usize>>]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for p in present {
        p.len().hash(&mut h);
        for r in p {
            (r.start, r.end).hash(&mut h);
        }
    }
    h.finish()
}

fn finish_transport(mut t: Transport, block_bytes: usize) -> Transport {
    t.complete = t
        .present
        .iter()
        .all(|p| p.len() == 1 && p[0] == (0..block_bytes));
    t.key = outcome_key(&t.present);
    t
}

/// The loss spec of the forward direction.
fn forward_loss(trace: Option<&Path>) -> Result<LossSpec> {
    match trace {
        None => Ok(edgemu_links::paper_channel::ge_loss()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let t = LossTrace::parse(&text)
                .with_context(|| format!("parsing the loss trace {}", p.display()))?;
            Ok(LossSpec::Trace(Arc::new(t)))
        }
    }
}

struct TransportGrid<'a> {
    layout: BlockLayout,
    utilities: Arc<[f64]>,
    payload: Arc<[u8]>,
    loss: LossSpec,
    weights: &'a Asset,
    k: u16,
}

impl TransportGrid<'_> {
    fn scenario(&self, rho: f64) -> HandoffScenario {
        let mut s = HandoffScenario::paper(
            self.layout,
            Arc::clone(&self.utilities),
            Arc::clone(&self.payload),
            rho,
        );
        s.forward.loss = self.loss.clone();
        s.k = self.k;
        s
    }

    fn scheduler(&self, spec: &SchemeSpec) -> Result<Box<dyn RepairScheduler>> {
        let external: Option<Box<dyn RepairScheduler>> = if spec.needs_external() {
            let net = DdqnNet::from_source(self.weights).with_context(|| {
                format!("loading DDQN weights {}", self.weights.label().display())
            })?;
            Some(Box::new(DdqnScheduler::new(net)))
        } else {
            None
        };
        Ok(spec.scheduler(external)?)
    }

    fn fec(&self, spec: &SchemeSpec, rho: f64, r: u64, seed: u64) -> Result<Transport> {
        let run = run_handoff(
            &self.scenario(rho),
            spec,
            self.scheduler(spec)?,
            seed,
            RunOptions {
                keep_received: true,
                record_decisions: false,
            },
        )
        .with_context(|| format!("{} at ρ = {rho}, realization {r}", spec.name))?;
        let received = run.received.context("the harness kept no received KV")?;
        Ok(finish_transport(
            Transport {
                scheme: spec.name.to_string(),
                rho,
                realization: r,
                utility: run.report.recovered_utility,
                source_sent: u64::from(run.sender.source_sent),
                repair_sent: u64::from(run.sender.repair_sent),
                innovative: u64::from(run.report.innovative_repairs),
                decoded_prefix: u64::from(run.report.decoded_prefix),
                present: received.blocks.into_iter().map(|b| b.present).collect(),
                complete: false,
                key: 0,
            },
            self.layout.block_bytes as usize,
        ))
    }

    /// One reliable run per realization answers every ρ (the protocols do not
    /// know the deadline): the in-order prefix read by each D, cut into FIFO
    /// blocks.
    fn reliable(&self, which: Reliable, rhos: &[f64], r: u64, seed: u64) -> Result<Vec<Transport>> {
        let name = which.name();
        let deadlines: Vec<u64> = rhos
            .iter()
            .map(|&rho| self.scenario(rho).deadline_ns())
            .collect();
        let horizon = deadlines.iter().copied().max().unwrap_or(0);
        let total = self.layout.total_bytes() as u64;
        let (forward, reverse) = (paper_link(self.loss.clone()), paper_link(LossSpec::None));
        let (delivery, packets, retransmissions) = if which == Reliable::KernelTcp {
            // A little past the last deadline: what arrives later is not read.
            let horizon = std::time::Duration::from_nanos(horizon + 50_000_000);
            let out: KernelTcpOutcome =
                over_attached_link(&forward, &reverse, seed, Arc::clone(&self.payload), horizon)
                    .with_context(|| format!("{name}, realization {r}"))?;
            (out.delivery, out.segments_out, out.retransmissions)
        } else {
            let run = ReliableRun::new(total, forward, reverse, seed, horizon);
            let out = match which {
                Reliable::Tcp => run_tcp(&run),
                _ => run_quic(&run),
            }
            .with_context(|| format!("{name}, realization {r}"))?;
            (out.delivery, out.packets_sent, out.retransmissions)
        };
        Ok(rhos
            .iter()
            .zip(&deadlines)
            .map(|(&rho, &d)| {
                let got = delivery.delivered_at(d);
                self.prefix_transport(name, rho, r, got, packets, retransmissions)
            })
            .collect())
    }

    /// The outcome of a reliable transfer that had read the first `got`
    /// bytes of the stream by D: the complete FIFO blocks and the part of
    /// the next one.
    fn prefix_transport(
        &self,
        name: &str,
        rho: f64,
        r: u64,
        got: u64,
        packets: u64,
        retransmissions: u64,
    ) -> Transport {
        let got = got.min(self.layout.total_bytes() as u64);
        let bb = self.layout.block_bytes as usize;
        let present = self.layout.prefix_present(got as usize);
        let complete = present.iter().map(|p| p.first() == Some(&(0..bb)));
        let utility = edgemu_handoff::utility_of_complete(complete, &self.utilities);
        finish_transport(
            Transport {
                scheme: name.to_string(),
                rho,
                realization: r,
                utility,
                source_sent: packets,
                repair_sent: retransmissions,
                innovative: 0,
                decoded_prefix: got,
                present,
                complete: false,
                key: 0,
            },
            bb,
        )
    }

    /// The kernel-TCP outcomes a stopped run stored in `transport.csv`
    /// (it ran in real time: running it again would give other ones).
    fn stored_kernel_tcp(&self, dir: &Path) -> Result<BTreeMap<u64, Vec<Transport>>> {
        let path = dir.join("transport.csv");
        let mut out: BTreeMap<u64, Vec<Transport>> = BTreeMap::new();
        if !path.exists() {
            return Ok(out);
        }
        let t = Table::read(&path)?;
        // A damaged row would drop one ρ of a realization unseen.
        if let Some(bad) = t.skipped.first() {
            bail!("{bad}");
        }
        let cols = [
            "scheme",
            "rho",
            "realization",
            "decoded_prefix",
            "source_packets",
            "repair_packets",
        ]
        .map(|k| t.col(k));
        let [scheme, rho, real, prefix, src, rep] = cols;
        let (scheme, rho, real, prefix, src, rep) = (scheme?, rho?, real?, prefix?, src?, rep?);
        for row in &t.rows {
            let get = |i: usize| row.get(i).map_or("", String::as_str);
            if get(scheme) != KERNEL_TCP {
                continue;
            }
            let bad = |k: &str| format!("{}: `{k}` of a {KERNEL_TCP} row", path.display());
            let num = |i: usize, k: &str| -> Result<u64> { get(i).parse().with_context(|| bad(k)) };
            let r = num(real, "realization")?;
            let t = self.prefix_transport(
                KERNEL_TCP,
                get(rho).parse().with_context(|| bad("rho"))?,
                r,
                num(prefix, "decoded_prefix")?,
                num(src, "source_packets")?,
                num(rep, "repair_packets")?,
            );
            out.entry(r).or_default().push(t);
        }
        Ok(out)
    }
}

fn bar(len: u64, what: &str, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})",
    ) {
        b.set_style(style);
    }
    b.set_message(what.to_string());
    b
}

/// One row of `handoffs.csv`.
#[derive(Debug, Clone, Default, Serialize)]
struct HandoffRow {
    context: usize,
    realization: u64,
    rho: f64,
    scheme: String,
    utility: f64,
    source_packets: u64,
    repair_packets: u64,
    innovative_repairs: u64,
    decoded_prefix: u64,
    f1: f64,
    top1: f64,
}

/// Mean and 95 % confidence half-width: the Student-t interval of
/// `edgemu_stats::mean_ci95` (the one the report's plots draw); NaN when empty.
fn mean_ci(xs: &[f64]) -> (f64, f64) {
    match edgemu_stats::mean_ci95(xs) {
        Some((m, _, hi)) => (m, hi - m),
        None => (f64::NAN, f64::NAN),
    }
}

#[derive(Debug, Clone, Serialize)]
struct Cell {
    rho: f64,
    scheme: String,
    /// Handoffs in the cell, and the units its intervals are over (`CellSamples`): the
    /// realizations' utility means and the contexts' F1 / top-1 means (finite ones).
    n: usize,
    contexts: usize,
    realizations: usize,
    utility: f64,
    utility_ci: f64,
    f1: f64,
    f1_ci: f64,
    top1: f64,
    top1_ci: f64,
    source_packets: f64,
    repair_packets: f64,
    innovative_repairs: f64,
}

fn summarize(rows: &[HandoffRow], rhos: &[f64], schemes: &[String]) -> Vec<Cell> {
    let mut out = Vec::new();
    for &rho in rhos {
        for s in schemes {
            let sel: Vec<&HandoffRow> = rows
                .iter()
                .filter(|r| r.rho == rho && &r.scheme == s)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let col = |f: fn(&HandoffRow) -> f64| sel.iter().map(|r| f(r)).collect::<Vec<_>>();
            // The same samples as `edgemu report` (one implementation of the units).
            let units: Vec<(u64, usize, [f64; 3])> = sel
                .iter()
                .map(|r| (r.realization, r.context, [r.utility, r.f1, r.top1]))
                .collect();
            let samples = CellSamples::of(&units);
            let (u, uc) = mean_ci(&samples.utility);
            let (f, fc) = mean_ci(&samples.f1);
            let (t, tc) = mean_ci(&samples.top1);
            let avg = |f: fn(&HandoffRow) -> f64| mean_ci(&col(f)).0;
            out.push(Cell {
                rho,
                scheme: s.clone(),
                n: samples.n,
                contexts: samples.f1.len(),
                realizations: samples.utility.len(),
                utility: u,
                utility_ci: uc,
                f1: f,
                f1_ci: fc,
                top1: t,
                top1_ci: tc,
                source_packets: avg(|r| r.source_packets as f64),
                repair_packets: avg(|r| r.repair_packets as f64),
                innovative_repairs: avg(|r| r.innovative_repairs as f64),
            });
        }
    }
    out
}

fn table(cells: &[Cell]) -> String {
    let pm = |m: f64, c: f64| format!("{:.1} ± {:.1}", 100.0 * m, 100.0 * c);
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            vec![
                format!("{:.1}", c.rho),
                c.scheme.clone(),
                pm(c.utility, c.utility_ci),
                pm(c.f1, c.f1_ci),
                pm(c.top1, c.top1_ci),
                format!("{:.0}", c.source_packets),
                format!("{:.0}", c.repair_packets),
                format!("{:.0}", c.innovative_repairs),
                format!("{} ({}×{})", c.n, c.contexts, c.realizations),
            ]
        })
        .collect();
    render(
        &[
            "ρ",
            "scheme",
            "utility %",
            "F1 %",
            "top-1 %",
            "src pkts",
            "rep pkts",
            "innov",
            "n (ctx×real)",
        ],
        &rows,
    )
}

fn csv_of<T: Serialize>(rows: &[T]) -> Result<String> {
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let v = serde_json::to_value(r)?;
        let obj = v.as_object().context("csv row is not an object")?;
        if i == 0 {
            out.push_str(&obj.keys().cloned().collect::<Vec<_>>().join(","));
            out.push('\n');
        }
        let line: Vec<String> = obj
            .values()
            .map(|x| match x {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    Ok(out)
}

/// The plots of the run, drawn by `edgemu report`'s PriorityFEC view from
/// `handoffs.csv` (one implementation for both): recovered utility vs ρ per
/// scheme with 95 % CI, F1 and top-1 vs ρ, and the ablation bars
/// (priorityfec, priority-fixed-fec, priority-only, rl-fec-only) at ρ = 0.8,
/// PNG and SVG, with `report.md` and the cell table, in `<run>/report/`.
/// Returns the files written; a plot that fails is reported, not fatal (the
/// CSVs are the results).
fn plot_hook(dir: &Path, say: &dyn Fn(String)) -> Vec<PathBuf> {
    let out = dir.join("report");
    match crate::report::build(&[dir.to_path_buf()], &out, crate::plots::Formats::default()) {
        Ok((_, _, skipped)) => {
            for s in skipped {
                say(format!("plots: skipped {s}"));
            }
            let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
                .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            files.sort();
            files
        }
        Err(e) => {
            say(format!("plots: {e:#}"));
            Vec::new()
        }
    }
}

/// Where the evaluation contexts and the model come from.
struct Workload {
    model: Llama,
    name: String,
    identity: ModelIdentity,
    contexts: Vec<Vec<u32>>,
    cue: Vec<u32>,
    tiny: bool,
}

/// The decode-path weight format when `--decode-weights` is not given.
const DEFAULT_DECODE_WEIGHTS: &str = "q8_int";

fn load_model(a: &PriorityFecArgs) -> Result<(LoadedModel, String)> {
    let device = parse_device("cpu")?;
    if a.tiny {
        return Ok((
            load_tiny(7, &device, Some(decode_layout(a)?)).context("building the tiny model")?,
            "tiny-random-llama".to_string(),
        ));
    }
    let path = resolve_model_path(a.model.as_deref()).context("finding the model")?;
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((
        load(&path, &device, Some(decode_layout(a)?)).context("loading the model")?,
        name,
    ))
}

/// The weight layout `--decode-weights` asks for (default q8_int).
fn decode_layout(a: &PriorityFecArgs) -> Result<WeightLayout> {
    let name = a
        .decode_weights
        .as_deref()
        .unwrap_or(DEFAULT_DECODE_WEIGHTS);
    match WeightFormat::parse(name) {
        Some(f @ (WeightFormat::Q8Cpu | WeightFormat::Q8Int)) => Ok(WeightLayout {
            prefill: WeightFormat::F32,
            decode: f,
        }),
        _ => bail!("--decode-weights {name:?}: expected q8_cpu or q8_int"),
    }
}

fn workload(a: &PriorityFecArgs, g: &Grid, profile_contexts: usize) -> Result<Workload> {
    let (lm, name) = load_model(a)?;
    let tiny = a.tiny;
    let chat = lm
        .chat
        .as_ref()
        .context("the model has no ChatML chat template")?;
    let cue = chatml_cue(&lm.tokenizer);
    if cue.is_empty() {
        bail!("the ChatML cue has no tokens");
    }
    // Agent B's sequence is the context, the cue and the decoded tokens; the
    // model cannot attend past its context length.
    // Saturating: both lengths come from the command line.
    let needed = g
        .context_tokens
        .saturating_add(cue.len())
        .saturating_add(a.decode_len);
    let max = lm.model.config().max_seq_len;
    if needed > max {
        bail!(
            "--context-tokens {} + {} cue tokens + --decode-len {} = {needed} positions; {name} has {max}",
            g.context_tokens,
            cue.len(),
            a.decode_len
        );
    }
    let convs = if tiny {
        edgemu_data::builtin::conversations()
    } else {
        let data = edgemu_data::locate().context("finding the ShareGPT data")?;
        edgemu_data::sharegpt::load(&data).context("reading ShareGPT")?
    };
    // The profiling set comes first in the split, so asking for it keeps the
    // evaluation contexts disjoint from the ones the profile was measured on.
    let sets = build(
        &convs,
        &lm.tokenizer,
        chat,
        &ContextConfig {
            tokens: g.context_tokens,
            profiling: if tiny { 0 } else { profile_contexts },
            evaluation: g.contexts,
            seed: a.context_seed,
        },
    )
    .context("building evaluation contexts")?;
    Ok(Workload {
        identity: model_identity(&name, lm.model.config()),
        model: lm.model,
        name,
        contexts: sets.evaluation.into_iter().map(|c| c.tokens).collect(),
        cue,
        tiny,
    })
}

/// BF16 transport blocks of a prefilled context, in block-id order.
fn context_blocks(model: &Llama, tokens: &[u32]) -> Result<Vec<KvBlock>> {
    Ok(edgemu_gpu::kv_cache::export_context_blocks(model, tokens)?)
}

/// `handoffs.csv` rows of context `ci`: one per transport run, with the
/// context's scores (a complete cache scores 1 by definition).
fn context_rows(
    ci: usize,
    transports: &[Transport],
    scores: &HashMap<u64, (f64, f64)>,
) -> Result<Vec<HandoffRow>> {
    transports
        .iter()
        .map(|t| {
            let (f1, top1) = if t.complete {
                (1.0, 1.0)
            } else {
                scores
                    .get(&t.key)
                    .copied()
                    .context("an outcome was not scored")?
            };
            Ok(HandoffRow {
                context: ci,
                realization: t.realization,
                rho: t.rho,
                scheme: t.scheme.clone(),
                utility: t.utility,
                source_packets: t.source_sent,
                repair_packets: t.repair_sent,
                innovative_repairs: t.innovative,
                decoded_prefix: t.decoded_prefix,
                f1,
                top1,
            })
        })
        .collect()
}

/// A `handoffs.csv` record back as a row (Rust's float parsing round-trips
/// the shortest representation the file holds exactly).
fn row_of(t: &Table, r: &[String]) -> Result<HandoffRow> {
    fn get<T: std::str::FromStr>(t: &Table, r: &[String], k: &str) -> Result<T> {
        let v = &r[t.col(k)?];
        v.parse::<T>()
            .map_err(|_| anyhow::anyhow!("column {k}: cannot read {v:?}"))
    }
    Ok(HandoffRow {
        context: get(t, r, "context")?,
        realization: get(t, r, "realization")?,
        rho: get(t, r, "rho")?,
        scheme: get(t, r, "scheme")?,
        utility: get(t, r, "utility")?,
        source_packets: get(t, r, "source_packets")?,
        repair_packets: get(t, r, "repair_packets")?,
        innovative_repairs: get(t, r, "innovative_repairs")?,
        decoded_prefix: get(t, r, "decoded_prefix")?,
        f1: get(t, r, "f1")?,
        top1: get(t, r, "top1")?,
    })
}

/// What decides a run's figures, compared by `--resume` (see `pfec_run`):
/// the grid but its context count, the model's identity and file size, and
/// the SHA-256 of the profile, the DDQN weights and the loss trace.
fn run_settings(
    a: &PriorityFecArgs,
    g: &Grid,
    w: &Workload,
    schemes_run: &[String],
    profile_contexts: usize,
) -> Result<serde_json::Value> {
    let digest = |p: &Path| -> Result<serde_json::Value> {
        Ok(if p.is_file() {
            sha256_file(p)?.into()
        } else {
            serde_json::Value::Null
        })
    };
    let mut grid = serde_json::to_value(g)?;
    if let Some(o) = grid.as_object_mut() {
        o.remove("contexts");
    }
    let model_bytes = if a.tiny {
        serde_json::Value::Null
    } else {
        resolve_model_path(a.model.as_deref())
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len().into())
            .unwrap_or(serde_json::Value::Null)
    };
    let mut settings = serde_json::json!({
        "grid": grid,
        "schemes_run": schemes_run,
        "context_seed": a.context_seed,
        "profile_contexts": profile_contexts,
        "decode_len": a.decode_len,
        "tiny": a.tiny,
        "model": w.identity,
        "model_file_bytes": model_bytes,
        "profile_sha256": if a.tiny || !a.profile.is_available() {
            serde_json::Value::Null
        } else {
            sha256_hex(&read_profile(&a.profile)?).into()
        },
        "weights_sha256": if a.weights.is_available() {
            sha256_hex(&read_weights(&a.weights)?).into()
        } else {
            serde_json::Value::Null
        },
        "loss_trace_sha256": match &a.loss_trace {
            Some(p) => digest(p)?,
            None => serde_json::Value::Null,
        },
    });
    // Always recorded, with the arithmetic of the quality path: runs from
    // before the cue ran as decode rows (and q8_int became the default) had
    // other bits, and must not be resumed by this code.
    let layout = decode_layout(a)?;
    if let Some(o) = settings.as_object_mut() {
        o.insert("decode_weights".into(), layout.decode.name().into());
        o.insert("cue".into(), "decode-rows".into());
    }
    Ok(settings)
}

#[derive(Serialize)]
struct Skipped {
    scheme: String,
    reason: String,
}

/// Runs the grid, writes the results folder and prints the table (unless
/// `--json`); returns the `--json` object.
pub fn report(a: &PriorityFecArgs) -> Result<serde_json::Value> {
    let started = Instant::now();
    let g = grid(a)?;
    let mode = missing_rows(&g.mode)?;
    let loss = forward_loss(a.loss_trace.as_deref())?;
    let quiet = a.json;
    let say = |s: String| {
        if !quiet {
            eprintln!("{s}");
        }
    };

    // The profile is read before the contexts: its context count fixes the split.
    let profile_file = if a.tiny {
        None
    } else if a.profile.is_available() {
        Some(&a.profile)
    } else {
        say(format!(
            "no KV-utility profile at {} (make one with `edgemu profile-kv`); using the placeholder utilities",
            a.profile.label().display()
        ));
        None
    };
    let profile_contexts = match profile_file {
        Some(p) => {
            let label = p.label();
            let bytes = read_profile(p).with_context(|| format!("reading {}", label.display()))?;
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("parsing {}", label.display()))?;
            v.get("contexts").and_then(|c| c.as_u64()).unwrap_or(0) as usize
        }
        None => 0,
    };

    let t_ctx = Instant::now();
    let w = workload(a, &g, profile_contexts)?;
    let cfg = w.model.config().clone();
    let layout = BlockLayout::for_model(
        cfg.n_layers as u32,
        cfg.n_kv_heads as u32,
        cfg.head_dim as u32,
        2,
        g.context_tokens as u32,
    )?;
    let (utilities, utilities_from) = match profile_file {
        Some(p) => {
            let prof = KvUtilityProfile::load(p, &w.identity)
                .with_context(|| format!("loading the profile for {}", w.name))?;
            let u = cell_utilities(&prof.cells, &prof.layer_groups(), &layout)
                .with_context(|| format!("the profile {}", p.label().display()))?;
            (u, p.label().display().to_string())
        }
        None => (placeholder_utilities(&layout), "placeholder".to_string()),
    };
    say(format!(
        "{} evaluation contexts × {} tokens on {}{}; {} blocks, {} source packets; utilities: {utilities_from}",
        w.contexts.len(),
        g.context_tokens,
        w.name,
        if w.tiny { " (tiny test model)" } else { "" },
        layout.n_blocks(),
        layout.n_source_packets()
    ));

    // Transport: (scheme, ρ, realization).
    let t_transport = Instant::now();
    let tg = TransportGrid {
        layout,
        utilities: utilities.into(),
        payload: synthetic_payload(&layout, 0),
        loss,
        weights: &a.weights,
        k: g.k,
    };
    // A stopped run's kernel outcomes are reused (real time is not
    // reproducible), so resuming it needs no attach points.
    let mut stored_kernel = match &a.resume {
        Some(d) if g.schemes.iter().any(|s| s == KERNEL_TCP) => tg.stored_kernel_tcp(d)?,
        _ => BTreeMap::new(),
    };
    let kernel_stored = (0..g.realizations).all(|r| stored_kernel.contains_key(&r));
    let mut skipped = Vec::new();
    let mut schemes: Vec<GridRow> = Vec::new();
    for s in &g.schemes {
        let row = GridRow::resolve(s)?;
        if matches!(row, GridRow::Reliable(Reliable::KernelTcp)) && !kernel_stored {
            let why = crate::attach::pair::available()
                .err()
                .map(|e| format!("the kernel's TCP through attached devices {e}"))
                .or_else(|| {
                    a.loss_trace.is_some().then(|| {
                        "a loss trace is replayed by time, and the attached link's clock starts before the connection".to_string()
                    })
                });
            if let Some(reason) = why {
                if a.schemes.is_some() {
                    bail!("--schemes {KERNEL_TCP}: {reason}");
                }
                say(format!("{s}: {reason}; not run"));
                skipped.push(Skipped {
                    scheme: s.clone(),
                    reason,
                });
                continue;
            }
        }
        let needs_weights = matches!(row, GridRow::Fec(spec) if spec.needs_external());
        if needs_weights && !a.weights.is_available() {
            let reason = format!(
                "no weights at {} (train with `edgemu train repair` or pass --weights)",
                a.weights.label().display()
            );
            say(format!("{s}: {reason}; not run"));
            skipped.push(Skipped {
                scheme: s.clone(),
                reason,
            });
        } else {
            schemes.push(row);
        }
    }
    let n_runs = schemes
        .iter()
        .map(|row| match row {
            GridRow::Reliable(_) => 1,
            GridRow::Fec(_) => g.rho.len() as u64,
        })
        .sum::<u64>()
        * g.realizations;
    let scheme_names: Vec<String> = schemes.iter().map(|r| r.name().to_string()).collect();
    let pb = bar(n_runs, "transport", quiet);
    let mut transports: Vec<Transport> = Vec::new();
    for &row in &schemes {
        for r in 0..g.realizations {
            let seed = realization_seed(g.seed, r);
            let stored = matches!(row, GridRow::Reliable(Reliable::KernelTcp))
                .then(|| stored_kernel.remove(&r))
                .flatten();
            if let Some(stored) = stored {
                transports.extend(stored);
                pb.inc(1);
            } else if let GridRow::Reliable(which) = row {
                transports.extend(tg.reliable(which, &g.rho, r, seed)?);
                pb.inc(1);
            } else if let GridRow::Fec(spec) = row {
                for &rho in &g.rho {
                    transports.push(tg.fec(spec, rho, r, seed)?);
                    pb.inc(1);
                }
            }
        }
    }
    pb.finish_and_clear();
    let transport_s = t_transport.elapsed().as_secs_f64();
    let transport_rows: Vec<serde_json::Value> = transports
        .iter()
        .map(|t| {
            serde_json::json!({
                "scheme": t.scheme, "rho": t.rho, "realization": t.realization,
                "utility": t.utility, "source_packets": t.source_sent,
                "repair_packets": t.repair_sent, "innovative_repairs": t.innovative,
                "decoded_prefix": t.decoded_prefix, "complete": t.complete,
            })
        })
        .collect();
    let transport_csv = csv_of(&transport_rows)?;

    // The results folder: a new one, or the stopped run to continue.
    let settings = run_settings(a, &g, &w, &scheme_names, profile_contexts)?;
    let (run_dir, done) = match &a.resume {
        Some(d) => RunDir::resume(d, &settings, &transport_csv)?,
        None => {
            let id = a.run_id.clone().unwrap_or_else(|| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                run_id("priorityfec", now)
            });
            let header = csv_of(&[HandoffRow::default()])?;
            let header = header.lines().next().unwrap_or_default().to_string();
            (
                RunDir::start(&a.results.join(&id), &settings, &transport_csv, &header)?,
                BTreeMap::new(),
            )
        }
    };
    let dir = run_dir.dir.clone();
    let id = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    for (ci, d) in &done {
        match w.contexts.get(*ci) {
            None => bail!(
                "{}: context {ci} is finished but --contexts is {}; ask for at least {}",
                dir.display(),
                w.contexts.len(),
                ci + 1
            ),
            Some(ctx) if tokens_sha256(ctx) != d.tokens_sha256 => bail!(
                "{}: context {ci}'s tokens differ from the finished run's (another data set?)",
                dir.display()
            ),
            Some(_) => {}
        }
    }
    if !done.is_empty() {
        say(format!(
            "resuming {}: {} of {} contexts finished",
            dir.display(),
            done.len(),
            w.contexts.len()
        ));
    }

    // Task quality: prefill each context once, score each distinct incomplete
    // outcome against each context; each finished context is appended to the
    // results folder at once.
    let t_quality = Instant::now();
    let todo: Vec<usize> = (0..w.contexts.len())
        .filter(|ci| !done.contains_key(ci))
        .collect();
    let mut distinct: Vec<&Transport> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for t in &transports {
        if !t.complete && seen.insert(t.key) {
            distinct.push(t);
        }
    }
    // Prefilling the contexts and decoding their references (wall, CPU).
    let (mut ctx_wall, mut ctx_cpu) = (0.0, 0.0);
    let mut qstats = EvalStats::default();
    // Streams that scored this invocation's contexts (none to score: 1).
    let mut streams = 1;
    if !todo.is_empty() {
        let decode = load_model(a)?.0.model;
        let job = quality::QualityJob {
            prefill: &w.model,
            decode: &decode,
            contexts: &w.contexts,
            cue: &w.cue,
            transports: &transports,
            distinct: &distinct,
            mode,
            decode_len: a.decode_len,
            batch: a.batch,
            stepwise: a.stepwise,
        };
        let pb = bar((todo.len() * (1 + distinct.len())) as u64, "quality", quiet);
        streams = quality::score_contexts(&job, &todo, a.streams, &pb, |c| {
            ctx_wall += c.prefill_s;
            ctx_cpu += c.prefill_cpu_s;
            qstats.add(&c.stats);
            run_dir.append_context(&c.lines, &c.done)
        })?;
        pb.finish_and_clear();
    }
    let quality_s = t_quality.elapsed().as_secs_f64();

    // Everything in the folder: this invocation's contexts and those resumed.
    let finished = run_dir.contexts_done()?;
    let handoffs = Table::read(&run_dir.handoffs_path())?;
    if let Some(bad) = handoffs.skipped.first() {
        bail!("{bad}");
    }
    let rows: Vec<HandoffRow> = handoffs
        .rows
        .iter()
        .map(|r| row_of(&handoffs, r))
        .collect::<Result<_>>()
        .with_context(|| format!("reading {}", run_dir.handoffs_path().display()))?;
    let cells = summarize(&rows, &g.rho, &scheme_names);
    let text = table(&cells);
    let wall_s = started.elapsed().as_secs_f64();
    write_file(&dir.join("summary.csv"), csv_of(&cells)?.as_bytes())?;
    let plots = plot_hook(&dir, &say);
    let mut by_rho = serde_json::Map::new();
    for c in &cells {
        let e = by_rho
            .entry(format!("{}", c.rho))
            .or_insert_with(|| serde_json::json!({}));
        e[&c.scheme] = serde_json::json!({"utility": c.utility, "f1": c.f1, "top1": c.top1});
    }
    let brief = serde_json::json!({
        "rho": by_rho,
        "handoffs": rows.len(),
        "wall_s": wall_s,
    });
    let summary = serde_json::json!({
        "run_id": id,
        "git": git_revision(),
        "grid": g,
        "model": w.name,
        "utilities": utilities_from,
        "weights": a.weights.label().display().to_string(),
        "skipped": skipped,
        "transport_runs": transports.len(),
        "distinct_incomplete_outcomes": distinct.len(),
        "transport_s": transport_s,
        "quality_s": quality_s,
        "quality_stats": qstats,
        "context_prefill_s": ctx_wall,
        "context_prefill_cpu_s": ctx_cpu,
        "quality_path": if a.stepwise { "stepwise" } else { "shared" },
        "quality_streams": streams,
        // As the loaded model holds its matrices (`--decode-weights`).
        "weight_layout": w.model.layout().label(),
        "contexts_finished": finished.len(),
        "contexts_this_invocation": todo.len(),
        "contexts_resumed": done.len(),
        "context_wall_s_all": finished.values().map(|d| d.wall_s).sum::<f64>(),
        "context_cpu_s_all": finished.values().map(|d| d.cpu_s).sum::<f64>(),
        "contexts_s": t_transport.duration_since(t_ctx).as_secs_f64(),
        "wall_s": wall_s,
        "cells": cells,
        "plots": plots,
        "rho": brief["rho"],
        "handoffs": rows.len(),
    });
    write_file(
        &dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)?.as_bytes(),
    )?;
    let mut report = text.clone();
    for s in &skipped {
        report.push_str(&format!("not run: {} — {}\n", s.scheme, s.reason));
    }
    report.push_str(&format!(
        "{} handoffs ({} transport runs, {} distinct incomplete outcomes scored); transport {:.1} s, quality {:.1} s, wall {:.1} s\n",
        rows.len(),
        transports.len(),
        distinct.len(),
        transport_s,
        quality_s,
        wall_s
    ));
    report.push_str(&format!(
        "quality ({} path, {} stream{}), wall / CPU s summed over contexts: contexts (prefill + reference) {:.1} / {:.1}; handoffs: rebuild {:.1} / {:.1}, cue {:.1} / {:.1}, teacher-forced {:.1} / {:.1} ({} rows, the shared path's with the cue's), free-running {:.1} / {:.1} ({} tokens); {} forwards, mean {:.1} rows each\n",
        if a.stepwise { "stepwise" } else { "shared" },
        streams,
        if streams == 1 { "" } else { "s" },
        ctx_wall,
        ctx_cpu,
        qstats.rebuild_s,
        qstats.rebuild_cpu_s,
        qstats.cue_s,
        qstats.cue_cpu_s,
        qstats.forced_s,
        qstats.forced_cpu_s,
        qstats.forced_rows,
        qstats.free_s,
        qstats.free_cpu_s,
        qstats.free_tokens,
        qstats.forward_calls,
        qstats.forward_rows as f64 / qstats.forward_calls.max(1) as f64
    ));
    let this: Vec<&ContextDone> = todo.iter().filter_map(|ci| finished.get(ci)).collect();
    let n_this = this.len().max(1) as f64;
    // `fold` from +0.0: a float `sum` of nothing is −0.0 (a resume with nothing left).
    let per_context = |f: fn(&ContextDone) -> f64| this.iter().fold(0.0, |a, d| a + f(d)) / n_this;
    let all = |f: fn(&ContextDone) -> f64| finished.values().fold(0.0, |a, d| a + f(d));
    report.push_str(&format!(
        "contexts: {} of {} finished ({} by this invocation, {} from before); this invocation per context: wall {:.1} s, CPU {:.1} s; all contexts: wall {:.1} s, CPU {:.1} s\n",
        finished.len(),
        w.contexts.len(),
        this.len(),
        done.len(),
        per_context(|d| d.wall_s),
        per_context(|d| d.cpu_s),
        all(|d| d.wall_s),
        all(|d| d.cpu_s),
    ));
    write_file(&dir.join("summary.txt"), report.as_bytes())?;
    if !a.json {
        print!("{report}");
        println!("wrote {}", dir.display());
    }
    Ok(brief)
}

pub fn run(a: &PriorityFecArgs) -> Result<()> {
    let brief = report(a)?;
    if a.json {
        println!("{}", serde_json::to_string(&brief)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_of_constant_is_zero() {
        assert_eq!(mean_ci(&[0.5, 0.5, 0.5]), (0.5, 0.0));
        let (m, c) = mean_ci(&[0.0, 1.0]);
        assert_eq!(m, 0.5);
        assert!(c > 0.0);
    }

    #[test]
    fn ci_is_student_t() {
        // sd 1.5811, se 0.7071, t(4) = 2.776 (the normal 1.96 would give 1.386).
        let (m, c) = mean_ci(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(m, 3.0);
        assert!((c - 1.963).abs() < 1e-3, "{c}");
        assert!(mean_ci(&[]).0.is_nan());
    }

    #[test]
    fn realization_seeds_differ() {
        assert_ne!(realization_seed(1, 0), realization_seed(1, 1));
        assert_ne!(realization_seed(1, 0), realization_seed(2, 0));
    }
}
