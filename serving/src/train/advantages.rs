//! Advantages: GAE over a truncated episode, and the optional per-request
//! and per-(slot, server) credits added to every decision's slot advantage,
//! each standardized over the update's decisions.

use std::collections::HashMap;

use edgemu_policies::lyreo::learned::Decision;
use edgemu_policies::lyreo::Rollout;
use edgemu_policies::rl::gae;

use crate::EpisodeOutcome;

/// Per-(slot, server) credit of every decision: `G_{t,s} = Σ_k (γλ)^k
/// r_{t+k,s}` is server `s`'s discounted share of the reward from slot `t`
/// on (what the requests on `s` cost, the decision's own and the wait it
/// imposes on the others there); a decision of slot `t` sent to `a` gets
/// `G_{t,a}` minus the mean of `G_{t,a_j}` over its slot's decisions (only
/// which server, not which slot, is credited).
pub fn server_advantages(ro: &Rollout, terms: &[f64], s_n: usize, discount: f64) -> Vec<f32> {
    let t_len = terms.len() / s_n.max(1);
    let mut g = vec![0.0f64; terms.len()];
    for t in (0..t_len).rev() {
        for s in 0..s_n {
            let next = if t + 1 < t_len {
                g[(t + 1) * s_n + s]
            } else {
                0.0
            };
            g[t * s_n + s] = terms[t * s_n + s] + discount * next;
        }
    }
    let credit = |d: &Decision| -> Option<f64> {
        let t = d.slot as usize;
        (t < t_len && d.action < s_n).then(|| g[t * s_n + d.action])
    };
    let mut slot_sum: HashMap<u64, (f64, usize)> = HashMap::new();
    for d in &ro.decisions {
        if let Some(x) = credit(d) {
            let e = slot_sum.entry(d.slot).or_insert((0.0, 0));
            e.0 += x;
            e.1 += 1;
        }
    }
    ro.decisions
        .iter()
        .map(|d| match (credit(d), slot_sum.get(&d.slot)) {
            (Some(x), Some(&(sum, n))) => (x - sum / n as f64) as f32,
            _ => 0.0,
        })
        .collect()
}

/// GAE over a *truncated* episode: no step ends it, the step after the
/// last is valued `last_value` (`V(s_T)`, bootstrapped). Returns
/// (advantages, value targets).
pub fn truncated_gae(
    rewards: &[f32],
    values: &[f32],
    last_value: f32,
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    gae(
        rewards,
        values,
        &vec![false; rewards.len()],
        last_value,
        gamma,
        lambda,
    )
}

/// Per-request advantage `−(D_i − mean D of its slot)` (seconds) for every
/// decision, 0 for a rejected or unknown request.
pub fn request_advantages(ro: &Rollout, o: &EpisodeOutcome) -> Vec<f32> {
    let e2e: HashMap<u64, f64> = o
        .requests
        .iter()
        .filter(|r| !r.rejected)
        .map(|r| (r.id, r.e2e_ns as f64 / 1e9))
        .collect();
    let mut slot_sum: HashMap<u64, (f64, usize)> = HashMap::new();
    for d in &ro.decisions {
        if let Some(&x) = e2e.get(&d.request) {
            let e = slot_sum.entry(d.slot).or_insert((0.0, 0));
            e.0 += x;
            e.1 += 1;
        }
    }
    ro.decisions
        .iter()
        .map(|d| match (e2e.get(&d.request), slot_sum.get(&d.slot)) {
            (Some(&x), Some(&(sum, n))) => -(x - sum / n as f64) as f32,
            _ => 0.0,
        })
        .collect()
}

/// Shifts and scales `v` to mean 0 and standard deviation 1.
pub fn standardize(v: &mut [f32]) {
    let n = v.len().max(1) as f32;
    let mean = v.iter().sum::<f32>() / n;
    let std = (v.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n).sqrt();
    v.iter_mut().for_each(|a| *a = (*a - mean) / (std + 1e-8));
}
