//! From one recorded handoff to the paper's transitions
//! `e_t = (x_t, u_t, r_t, x_{t+1}, A_{t+1}, z_t)` with the potential-shaped
//! reward `r_t = J_{t+1} − J_t + F̃(x_{t+1}) − F̃(x_t)` (paper §IV-C3), or
//! their `n`-step form.
//!
//! `J_t` is the receiver's recovered utility when epoch `t` was decided (the
//! harness records it, [`HandoffRun::decision_utility`]); after the last
//! epoch it is the utility at the deadline. `F̃` is
//! [`shaping_potential`] with the default weights; the terminal potential is
//! 0, so along an episode the shaping terms sum to `−F̃(x_0)`, the same for
//! every policy, and the return is the recovered utility at D (up to that
//! constant): shaping densifies the signal without changing what is optimal.
//!
//! **n-step.** With `n > 1` transition `t` carries the sum of the rewards of
//! epochs `t .. t+n−1` and the state (and mask) of epoch `t+n` (fewer at the
//! end of the handoff, then `done`), so the learner's target
//! `r_t + Q(x_{t+n}, ·)` bootstraps `n` epochs ahead. Only with γ = 1 (the
//! paper's; the sum is not discounted — the trainer refuses other γ). Why:
//! a repair's effect reaches the sender only with the feedback an RTT later
//! (≈ 25 epochs at the paper setting), so the one-step target credits it
//! through 25 bootstraps of a Q-function whose errors are far larger than
//! the advantages (docs/experiments/priorityfec.md, "The DDQN against the
//! deficit heuristic").
//! Because the shaped rewards telescope, the n-step reward is
//! `J_{t+n} − J_t + F̃(x_{t+n}) − F̃(x_t)`.

use edgemu_policies::rl::Transition;

use crate::harness::HandoffRun;
use crate::sender::{shaping_potential, PotentialWeights};

/// The one-step shaped rewards `r_t` of a run recorded with
/// `record_decisions`, one per decision epoch (module docs). `w` weighs the
/// shaping potential (all zero: the plain `J_{t+1} − J_t`).
pub fn one_step_rewards(run: &HandoffRun, w: &PotentialWeights) -> Vec<f64> {
    let d = &run.decisions;
    let j_end = run.report.recovered_utility;
    let j = |i: usize| run.decision_utility.get(i).copied().unwrap_or(j_end);
    (0..d.len())
        .map(|i| {
            let (j_next, f_next) = if i + 1 == d.len() {
                (j_end, 0.0)
            } else {
                (j(i + 1), shaping_potential(&d[i + 1].obs, w))
            };
            j_next - j(i) + f_next - shaping_potential(&d[i].obs, w)
        })
        .collect()
}

/// The `n_step`-step transitions of a run recorded with `record_decisions`
/// (module docs; 1 and 0: the paper's one-step ones), in order; those whose
/// window reaches the end of the handoff (the last one, or the last `n`)
/// have `done` set. `w` weighs the shaping potential.
pub fn transitions(run: &HandoffRun, w: &PotentialWeights, n_step: usize) -> Vec<Transition> {
    n_step_transitions(run, &one_step_rewards(run, w), n_step)
}

/// [`transitions`] from the run's [`one_step_rewards`] `one` (one per
/// decision), for a caller that needs those rewards too.
pub fn n_step_transitions(run: &HandoffRun, one: &[f64], n_step: usize) -> Vec<Transition> {
    let d = &run.decisions;
    // The n-step reward sums the one-step ones in epoch order.
    let n = n_step.max(1);
    let one = &one[..one.len().min(d.len())];
    (0..one.len())
        .map(|i| {
            let end = i.saturating_add(n).min(one.len());
            let done = end == one.len();
            let next = if done { &d[end - 1] } else { &d[end] };
            let reward: f64 = one[i..end].iter().sum();
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
            let t = transitions(&run, &w, 1);
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

    /// An n-step transition carries the one-step rewards of its window and
    /// the state n epochs on; at the end of the handoff it is `done` with a
    /// shorter window. Its reward is `J_{t+n} − J_t + F(x_{t+n}) − F(x_t)`.
    #[test]
    fn n_step_transitions_sum_the_window_and_bootstrap_n_epochs_on() {
        let sc = TrainConfig::quick(1, 0).unwrap().eval_scenario;
        let spec = scheme("priorityfec").unwrap();
        let w = PotentialWeights::default();
        let sched: Box<dyn RepairScheduler> = Box::new(DeficitHeuristic);
        let run = run_handoff(
            &sc,
            spec,
            spec.scheduler(Some(sched)).unwrap(),
            1,
            RunOptions {
                record_decisions: true,
                ..RunOptions::default()
            },
        )
        .unwrap();
        let one = transitions(&run, &w, 1);
        let n = 5;
        let many = transitions(&run, &w, n);
        assert_eq!(many.len(), one.len());
        assert!(one.len() > 2 * n, "too few decisions: {}", one.len());
        for (i, t) in many.iter().enumerate() {
            let end = (i + n).min(one.len());
            let sum: f64 = one[i..end].iter().map(|t| f64::from(t.reward)).sum();
            assert!((f64::from(t.reward) - sum).abs() < 1e-5, "epoch {i}");
            assert_eq!(t.obs, one[i].obs);
            assert_eq!(t.action, one[i].action);
            assert_eq!(t.done, end == one.len(), "epoch {i}");
            // The bootstrap state: epoch i + n's, read off the recorded run
            // (not off the one-step transitions, which share the code).
            if end < one.len() {
                assert_eq!(
                    t.next_obs,
                    run.decisions[i + n].obs.features.to_vec(),
                    "epoch {i}"
                );
                assert_eq!(
                    t.next_mask,
                    run.decisions[i + n].mask.0.to_vec(),
                    "epoch {i}"
                );
                let f = |k: usize| shaping_potential(&run.decisions[k].obs, &w);
                let expected = run.decision_utility[end] - run.decision_utility[i] + f(end) - f(i);
                assert!((f64::from(t.reward) - expected).abs() < 1e-5, "epoch {i}");
            }
        }
        // n = 1 and n = 0 are the paper's one-step transitions, whose
        // rewards are `one_step_rewards`; an absurd n is the whole handoff.
        assert_eq!(transitions(&run, &w, 0), one);
        let r = one_step_rewards(&run, &w);
        assert_eq!(r.len(), one.len());
        assert!(one.iter().zip(&r).all(|(t, r)| t.reward == *r as f32));
        let whole = transitions(&run, &w, usize::MAX);
        assert!(whole.iter().all(|t| t.done));
        let total: f64 = r.iter().sum();
        assert!((f64::from(whole[0].reward) - total).abs() < 1e-5);
    }
}
