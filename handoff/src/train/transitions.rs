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
/// last has `done` set. `w` weighs the shaping potential (all zero: the
/// plain `J_{t+1} − J_t`).
pub fn transitions(run: &HandoffRun, w: &PotentialWeights) -> Vec<Transition> {
    let d = &run.decisions;
    let j_end = run.report.recovered_utility;
    let j = |i: usize| run.decision_utility.get(i).copied().unwrap_or(j_end);
    (0..d.len())
        .map(|i| {
            let done = i + 1 == d.len();
            let (j_next, f_next, next) = if done {
                (j_end, 0.0, &d[i])
            } else {
                (j(i + 1), shaping_potential(&d[i + 1].obs, w), &d[i + 1])
            };
            let reward = j_next - j(i) + f_next - shaping_potential(&d[i].obs, w);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{run_handoff, RunOptions};
    use crate::scheme::scheme;
    use crate::train::TrainConfig;
    use edgemu_policies::repair::{DeficitHeuristic, RepairScheduler};

    /// The shaped return of an episode telescopes to J at D − J_0 − F(x_0)
    /// (the terminal potential is 0), so returns rank two policies on the
    /// same handoff exactly as their recovered utilities do, whatever the
    /// shaping weights.
    #[test]
    fn shaped_return_telescopes_to_the_recovered_utility() {
        let sc = TrainConfig::quick(1, 0).unwrap().eval_scenario;
        let spec = scheme("priorityfec").unwrap();
        let w = PotentialWeights::default();
        let mut utilities = Vec::new();
        for seed in 0..3 {
            let sched: Box<dyn RepairScheduler> = Box::new(DeficitHeuristic);
            let run = run_handoff(
                &sc,
                spec,
                spec.scheduler(Some(sched)).unwrap(),
                seed,
                RunOptions {
                    record_decisions: true,
                    ..RunOptions::default()
                },
            )
            .unwrap();
            let t = transitions(&run, &w);
            assert_eq!(t.len(), run.decisions.len());
            assert!(t.len() > 10, "too few decisions: {}", t.len());
            assert_eq!(t.iter().filter(|t| t.done).count(), 1);
            assert!(t.last().is_some_and(|t| t.done));
            let ret: f64 = t.iter().map(|t| f64::from(t.reward)).sum();
            let f0 = shaping_potential(&run.decisions[0].obs, &w);
            let expected = run.report.recovered_utility - run.decision_utility[0] - f0;
            assert!(
                (ret - expected).abs() < 1e-4,
                "return {ret} vs J_D - J_0 - F(x_0) = {expected}"
            );
            utilities.push(run.report.recovered_utility);
        }
        // Not a lossless run: the channel draws differ by seed.
        assert!(utilities.iter().any(|&u| u < 1.0), "{utilities:?}");
    }
}
