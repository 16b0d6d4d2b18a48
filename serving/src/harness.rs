//! The slotted co-simulation harness: users → radio → scheduler → servers,
//! one slot at a time on an exact nanosecond clock, no runtime, no I/O.
//!
//! Slot `t` (length Δ) starts at `t·Δ`: every user moves, issues one request
//! (lengths from the workload), the scheduler observes the requests (with
//! each user's channel to each server), the servers' last reports and the
//! virtual queues, and assigns every request. Uploads share each server's
//! band equally among the slot's requests assigned to it (Shannon); a request
//! arrives at its server at `t·Δ + upload`. Servers run until `(t+1)·Δ` and
//! report; the scheduler updates `Z`. After `T` slots the servers drain (the
//! paper lets unfinished requests complete); load-balance figures cover the
//! `T` slots.
//!
//! Everything random comes from `ChaCha8Rng` streams derived from the seed
//! (topology, mobility, workload, policy), so a run is reproducible bit for
//! bit, and the streams do not shift when a policy draws more or fewer
//! numbers.

use edgemu_policies::lyreo::{PolicySpec, SchedulingPolicy};
use edgemu_stats::percentile;

use crate::mobility::{Area, Mobility};
use crate::server::{RequestRecord, ServerReport};
use crate::stepper::SlotStepper;
use crate::workload::Workload;
use crate::{ServingError, NS_PER_S};

/// The paper's GPU mixes (§V-D): for 8 servers Homogeneous = 8×3090,
/// Moderate = 3×3080 + 3×3090 + 2×4090, Heterogeneous = 4×3080 + 1×3090 +
/// 3×4090. For `S ≠ 8` server `i` takes the class of position `⌊i·8/S⌋` of
/// the 8-server pattern, keeping the proportions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMix {
    Hom,
    Mod,
    Het,
}

impl GpuMix {
    pub fn parse(name: &str) -> Result<Self, ServingError> {
        match name.to_ascii_lowercase().as_str() {
            "hom" | "homogeneous" => Ok(GpuMix::Hom),
            "mod" | "moderate" => Ok(GpuMix::Mod),
            "het" | "heterogeneous" => Ok(GpuMix::Het),
            _ => Err(ServingError::UnknownMix {
                name: name.to_string(),
            }),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            GpuMix::Hom => "hom",
            GpuMix::Mod => "mod",
            GpuMix::Het => "het",
        }
    }

    fn pattern(&self) -> [&'static str; 8] {
        const A: &str = "rtx3080";
        const B: &str = "rtx3090";
        const C: &str = "rtx4090";
        match self {
            GpuMix::Hom => [B; 8],
            GpuMix::Mod => [A, A, A, B, B, B, C, C],
            GpuMix::Het => [A, A, A, A, B, C, C, C],
        }
    }

    /// GPU class names of `servers` servers.
    pub fn classes(&self, servers: usize) -> Vec<&'static str> {
        let p = self.pattern();
        (0..servers).map(|i| p[i * 8 / servers.max(1)]).collect()
    }
}

/// One episode's settings (defaults: the paper's §V-A).
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub seed: u64,
    pub users: usize,
    pub servers: usize,
    pub mix: GpuMix,
    /// `T`.
    pub slots: u64,
    /// `Δ`, ns.
    pub slot_ns: u64,
    /// `ε`.
    pub epsilon: f64,
    /// `ν` (seen by policies; the heuristics ignore it).
    pub nu: f64,
    pub area: Area,
    pub mobility: Mobility,
    pub workload: Workload,
    /// Uplink bandwidth range per server `B_s`, Hz (uniform draw per server).
    pub bandwidth_hz: (f64, f64),
    /// Transmit power range per user, dBm (uniform draw per user).
    pub power_dbm: (f64, f64),
    /// Share of each GPU's `M_s` that is the KV budget (capacity, `η_s`
    /// normalization and the 90 % high-KV mark all use `M_s · share`).
    /// 1.0 (default) is the paper's literal 10/20/24 GB.
    pub kv_budget_share: f64,
}

impl Scenario {
    /// The paper's default setting with a seed: S = 8 (Moderate), U = 40,
    /// T = 800, Δ = 1 s, ε = 0.01, ν = 0.5, 200 m × 200 m, LMSYS-like.
    pub fn paper_default(seed: u64) -> Self {
        Scenario {
            seed,
            users: 40,
            servers: 8,
            mix: GpuMix::Mod,
            slots: 800,
            slot_ns: NS_PER_S,
            epsilon: 0.01,
            nu: 0.5,
            area: Area {
                width_m: 200.0,
                height_m: 200.0,
            },
            mobility: Mobility::RandomWalk { speed_m_s: 1.5 },
            workload: Workload::LogNormal {
                mean_in: 70.0,
                sigma_in: 1.0,
                mean_out: 215.0,
                sigma_out: 0.8,
            },
            bandwidth_hz: (6e6, 14e6),
            power_dbm: (15.0, 25.0),
            kv_budget_share: 1.0,
        }
    }

    pub(crate) fn check(&self) -> Result<(), ServingError> {
        if !(self.kv_budget_share > 0.0 && self.kv_budget_share <= 1.0) {
            return Err(ServingError::Invalid(format!(
                "the KV budget share must be in (0, 1], not {}",
                self.kv_budget_share
            )));
        }
        if self.users == 0 || self.servers == 0 || self.slots == 0 || self.slot_ns == 0 {
            return Err(ServingError::Invalid(
                "users, servers, slots and the slot length must be > 0".into(),
            ));
        }
        Ok(())
    }
}

/// One server-slot row (the per-server-slot table).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSlotRow {
    pub report: ServerReport,
    pub class: &'static str,
    pub capacity_bytes: u64,
    /// Requests assigned in this slot.
    pub assigned: usize,
    /// `Y_s` of the slot.
    pub y: f64,
    /// `Z_s` after the slot.
    pub z: f64,
}

/// Episode figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub policy: String,
    pub seed: u64,
    pub requests: usize,
    pub completed: usize,
    pub rejected: usize,
    pub lat_mean_s: f64,
    pub lat_p50_s: f64,
    pub lat_p99_s: f64,
    pub upload_mean_s: f64,
    pub wait_mean_s: f64,
    pub prefill_mean_s: f64,
    pub decode_mean_s: f64,
    /// Mean over slots and servers of `(η_s − η̄)²`.
    pub lb_dev: f64,
    /// Share of server-slots whose peak KV exceeded 90 % of `M_s`.
    pub high_kv: f64,
    /// Mean `Z_s` over slots and servers.
    pub z_mean: f64,
    pub eta_mean: f64,
    pub decisions: u64,
}

/// Everything one episode produced.
#[derive(Debug, Clone)]
pub struct EpisodeOutcome {
    pub requests: Vec<RequestRecord>,
    pub server_slots: Vec<ServerSlotRow>,
    pub summary: Summary,
    /// Requests a learned policy's guard placed with Least-Loaded.
    pub fallbacks: u64,
}

/// Runs one episode of `scenario` under the policy `spec`.
pub fn run_episode(scenario: &Scenario, spec: &PolicySpec) -> Result<EpisodeOutcome, ServingError> {
    run_episode_with(scenario, spec, spec.build(scenario.seed ^ 0x5eed))
}

/// Runs one episode with the servers' batching of `spec` and a caller-built
/// assignment `policy` — the training hook: a sampling policy that records
/// its decisions (the per-slot reward terms come from the outcome's
/// per-server-slot rows and per-request records). The episode is a
/// [`SlotStepper`] stepped with `policy` deciding every slot.
pub fn run_episode_with(
    scenario: &Scenario,
    spec: &PolicySpec,
    policy: Box<dyn SchedulingPolicy>,
) -> Result<EpisodeOutcome, ServingError> {
    let mut stepper = SlotStepper::new(scenario, spec.batching, policy, &spec.name)?;
    while !stepper.is_done() {
        stepper.step(None)?;
    }
    Ok(stepper.finish())
}

/// The mean of `xs`, 0 when there are none (an empty cell prints 0).
fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    edgemu_stats::mean(&xs.collect::<Vec<_>>()).unwrap_or(0.0)
}

pub(crate) fn summarize(
    policy: &str,
    seed: u64,
    records: &[RequestRecord],
    rows: &[ServerSlotRow],
    decisions: u64,
) -> Summary {
    let done: Vec<&RequestRecord> = records.iter().filter(|r| !r.rejected).collect();
    let s = |ns: u64| ns as f64 / NS_PER_S as f64;
    let mut lat: Vec<f64> = done.iter().map(|r| s(r.e2e_ns)).collect();
    lat.sort_by(f64::total_cmp);
    Summary {
        policy: policy.to_string(),
        seed,
        requests: records.len(),
        completed: done.len(),
        rejected: records.len() - done.len(),
        lat_mean_s: mean(lat.iter().copied()),
        lat_p50_s: percentile(&lat, 50.0).unwrap_or(0.0),
        lat_p99_s: percentile(&lat, 99.0).unwrap_or(0.0),
        upload_mean_s: mean(done.iter().map(|r| s(r.upload_ns))),
        wait_mean_s: mean(done.iter().map(|r| s(r.wait_ns))),
        prefill_mean_s: mean(done.iter().map(|r| s(r.prefill_ns))),
        decode_mean_s: mean(done.iter().map(|r| s(r.decode_ns))),
        lb_dev: mean(rows.iter().map(|r| r.y)),
        high_kv: mean(
            rows.iter()
                .map(|r| if r.report.load.high_kv { 1.0 } else { 0.0 }),
        ),
        z_mean: mean(rows.iter().map(|r| r.z)),
        eta_mean: mean(rows.iter().map(|r| r.report.load.eta)),
        decisions,
    }
}

/// Header of `requests.csv` after the caller's key columns (`key_cols`,
/// comma-separated, may be empty).
pub fn requests_csv_header(key_cols: &str) -> String {
    let sep = if key_cols.is_empty() { "" } else { "," };
    format!(
        "{key_cols}{sep}id,user,slot,server,input_len,output_len,upload_s,wait_s,prefill_s,decode_s,e2e_s,rejected\n"
    )
}

/// `requests.csv` rows, one per request (times in seconds), each starting
/// with `key` (the caller's key values, e.g. policy and seed).
pub fn requests_csv_rows(key: &str, records: &[RequestRecord], out: &mut String) {
    let key = if key.is_empty() {
        String::new()
    } else {
        format!("{key},")
    };
    let s = |ns: u64| ns as f64 / NS_PER_S as f64;
    for r in records {
        out.push_str(&format!(
            "{key}{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.id,
            r.user,
            r.slot,
            r.server,
            r.input_len,
            r.output_len,
            s(r.upload_ns),
            s(r.wait_ns),
            s(r.prefill_ns),
            s(r.decode_ns),
            s(r.e2e_ns),
            r.rejected as u8
        ));
    }
}

/// Header of `server_slots.csv` after the caller's key columns.
pub fn server_slots_csv_header(key_cols: &str) -> String {
    let sep = if key_cols.is_empty() { "" } else { "," };
    format!(
        "{key_cols}{sep}slot,server,class,assigned,eta,y,z,peak_bytes,peak_frac,high_kv,occupancy_bytes,reserved_bytes,backlog,iterations,busy_s\n"
    )
}

/// `server_slots.csv` rows, one per server and slot, each starting with `key`.
pub fn server_slots_csv_rows(key: &str, rows: &[ServerSlotRow], out: &mut String) {
    let key = if key.is_empty() {
        String::new()
    } else {
        format!("{key},")
    };
    for row in rows {
        let (r, l) = (&row.report, &row.report.load);
        out.push_str(&format!(
            "{key}{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.slot,
            r.server,
            row.class,
            row.assigned,
            l.eta,
            row.y,
            row.z,
            l.peak_bytes,
            l.peak_bytes as f64 / row.capacity_bytes.max(1) as f64,
            l.high_kv as u8,
            l.occupancy_bytes,
            l.reserved_bytes,
            l.backlog,
            r.iterations,
            r.busy_ns as f64 / NS_PER_S as f64
        ));
    }
}

/// Both tables of one episode as strings (header included), for tests and
/// single-episode callers.
pub fn episode_csvs(o: &EpisodeOutcome) -> (String, String) {
    let key = format!("{},{}", o.summary.policy, o.summary.seed);
    let mut a = requests_csv_header("policy,seed");
    requests_csv_rows(&key, &o.requests, &mut a);
    let mut b = server_slots_csv_header("policy,seed");
    server_slots_csv_rows(&key, &o.server_slots, &mut b);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> Scenario {
        let mut s = Scenario::paper_default(seed);
        s.users = 12;
        s.servers = 4;
        s.slots = 30;
        s
    }

    #[test]
    fn same_seed_same_bytes() {
        for name in ["least-loaded", "random", "static"] {
            let spec = PolicySpec::parse(name).unwrap();
            let a = episode_csvs(&run_episode(&small(5), &spec).unwrap());
            let b = episode_csvs(&run_episode(&small(5), &spec).unwrap());
            assert_eq!(a, b, "{name}: byte-identical by seed");
            let c = episode_csvs(&run_episode(&small(6), &spec).unwrap());
            assert_ne!(a.0, c.0);
        }
    }

    #[test]
    fn every_request_is_accounted_for() {
        let spec = PolicySpec::parse("random").unwrap();
        let o = run_episode(&small(1), &spec).unwrap();
        assert_eq!(o.requests.len(), 12 * 30);
        assert_eq!(o.summary.completed + o.summary.rejected, 12 * 30);
        for r in o.requests.iter().filter(|r| !r.rejected) {
            assert_eq!(
                r.e2e_ns,
                r.upload_ns + r.wait_ns + r.prefill_ns + r.decode_ns
            );
        }
        assert_eq!(o.server_slots.len(), 4 * 30);
        assert!(o.summary.lat_p99_s >= o.summary.lat_mean_s);
    }

    #[test]
    fn mixes() {
        assert_eq!(
            GpuMix::Mod.classes(8),
            [
                "rtx3080", "rtx3080", "rtx3080", "rtx3090", "rtx3090", "rtx3090", "rtx4090",
                "rtx4090"
            ]
        );
        assert_eq!(
            GpuMix::Het.classes(4),
            ["rtx3080", "rtx3080", "rtx3090", "rtx4090"]
        );
        assert!(GpuMix::parse("mixed").is_err());
    }
}
