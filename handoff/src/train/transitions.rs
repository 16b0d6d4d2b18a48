//! From one recorded handoff to the paper's transitions
//! `e_t = (x_t, u_t, r_t, x_{t+1}, A_{t+1}, z_t)` with the potential-shaped
//! reward `r_t = J_{t+1} − J_t + F̃(x_{t+1}) − F̃(x_t)` (paper §IV-C3).
//!
//! `J_t` is the receiver's recovered utility when epoch `t` was decided (the
//! harness records it, [`HandoffRun::decision_utility`]); after the last
//! epoch it is the utility at the deadline. `F̃` is
//! [`shaping_potential`] with the default weights; the terminal potential is
//! 0, so along an episode the shaping terms sum to `−F̃(x_0)`, the same for
//! every policy, and the return is the recovered utility at D (up to that
//! constant): shaping densifies the signal without changing what is optimal.

use edgemu_policies::rl::Transition;

use crate::harness::HandoffRun;
use crate::sender::{shaping_potential, PotentialWeights};

/// The transitions of a run recorded with `record_decisions`, in order; the
/// last has `done` set.
pub fn transitions(run: &HandoffRun) -> Vec<Transition> {
    let w = PotentialWeights::default();
    let d = &run.decisions;
    let j_end = run.report.recovered_utility;
    let j = |i: usize| run.decision_utility.get(i).copied().unwrap_or(j_end);
    (0..d.len())
        .map(|i| {
            let done = i + 1 == d.len();
            let (j_next, f_next, next) = if done {
                (j_end, 0.0, &d[i])
            } else {
                (j(i + 1), shaping_potential(&d[i + 1].obs, &w), &d[i + 1])
            };
            let reward = j_next - j(i) + f_next - shaping_potential(&d[i].obs, &w);
            Transition {
                obs: d[i].obs.features.to_vec(),
                action: d[i].action.index(),
                reward: reward as f32,
                next_obs: next.obs.features.to_vec(),
                next_mask: next.mask.0.to_vec(),
                done,
            }
        })
        .collect()
}
