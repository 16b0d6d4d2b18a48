//! The reward of paper eq. 30, per slot and split by server.
//!
//! `r_{t+1} = −(ν Σ_{i completed in t} D_i^tot + Σ_s Z_s(t) Y_s(t) + ϱ Υ(t)) / U`:
//! a request's latency is credited in the slot in which it completes
//! (`slot + ⌊D^tot/Δ⌋`); `Z_s(t)` is the queue before slot `t`'s update and
//! `Y_s(t)` its deviation; `Υ(t)` counts the servers over 90 % KV in the slot
//! and the slot's requests rejected as never fitting. PPO replaces `Σ Z Y` by
//! `κ Σ_s Y_s`, LYREO-NoLB drops it, LYREO-Count computes `Y`, `Z` from active
//! requests.

use edgemu_policies::lyreo::learned::count_workload;
use edgemu_policies::lyreo::Variant;

use crate::train::TrainConfig;
use crate::{EpisodeOutcome, LyapunovQueues, Scenario};

/// Per-slot reward of eq. 30 (divided by U) for `variant`, latency of
/// requests finishing after `T` lumped on the last slot (the curves').
pub fn slot_rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome) -> Vec<f32> {
    rewards(cfg, sc, o, true)
}

/// The reward the learner sees: [`slot_rewards`] without the drain lump
/// (latency of requests finishing after `T` falls outside the truncated
/// episode; the bootstrap value stands for it).
pub fn learning_rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome) -> Vec<f32> {
    rewards(cfg, sc, o, false)
}

fn rewards(cfg: &TrainConfig, sc: &Scenario, o: &EpisodeOutcome, lump_drain: bool) -> Vec<f32> {
    let s_n = sc.servers;
    reward_terms(cfg, sc, o, lump_drain)
        .chunks(s_n.max(1))
        .map(|row| row.iter().sum::<f64>() as f32)
        .collect()
}

/// Eq. 30's reward split by server, `[T, S]` row-major (f64): server `s`'s
/// part of slot `t` is `−(ν Σ_{i on s completed in t} D_i + Z_s Y_s + ϱ Υ_s)
/// / U` (the variant's load-balancing term; `Υ_s`: `s` over 90 % KV in the
/// slot plus its rejected requests of the slot). Each slot's row sums to
/// the slot's reward.
pub fn reward_terms(
    cfg: &TrainConfig,
    sc: &Scenario,
    o: &EpisodeOutcome,
    lump_drain: bool,
) -> Vec<f64> {
    let t_len = sc.slots as usize;
    let s_n = sc.servers;
    let slot_s = sc.slot_ns as f64 / 1e9;
    let mut lat = vec![0.0f64; t_len * s_n];
    let mut upsilon = vec![0.0f64; t_len * s_n];
    for r in &o.requests {
        let s = r.server.min(s_n.saturating_sub(1));
        if r.rejected {
            upsilon[(r.slot as usize).min(t_len - 1) * s_n + s] += 1.0;
            continue;
        }
        let e2e = r.e2e_ns as f64 / 1e9;
        let done = r.slot as usize + (e2e / slot_s) as usize;
        if done < t_len {
            lat[done * s_n + s] += e2e;
        } else if lump_drain {
            lat[(t_len - 1) * s_n + s] += e2e;
        }
    }
    let mut lb = vec![0.0f64; t_len * s_n];
    let mut count_q = LyapunovQueues::new(s_n, sc.epsilon);
    for t in 0..t_len {
        let rows = &o.server_slots[t * s_n..(t + 1) * s_n];
        for (s, row) in rows.iter().enumerate() {
            if row.report.load.high_kv {
                upsilon[t * s_n + s] += 1.0;
            }
        }
        let out = &mut lb[t * s_n..(t + 1) * s_n];
        match cfg.variant {
            Variant::LyreoNolb => {}
            Variant::Ppo => {
                for (l, r) in out.iter_mut().zip(rows) {
                    *l = cfg.ppo_penalty * r.y;
                }
            }
            Variant::LyreoCount => {
                let w: Vec<f64> = rows
                    .iter()
                    .map(|r| count_workload(r.report.load.backlog))
                    .collect();
                let z_before = count_q.z().to_vec();
                let y = count_q.update(&w);
                for ((l, z), y) in out.iter_mut().zip(&z_before).zip(&y) {
                    *l = z * y;
                }
            }
            _ => {
                for (s, (l, r)) in out.iter_mut().zip(rows).enumerate() {
                    let z_prev = if t == 0 {
                        0.0
                    } else {
                        o.server_slots[(t - 1) * s_n + s].z
                    };
                    *l = z_prev * r.y;
                }
            }
        }
    }
    (0..t_len * s_n)
        .map(|k| (-sc.nu * lat[k] - lb[k] - cfg.rho * upsilon[k]) / sc.users as f64)
        .collect()
}
