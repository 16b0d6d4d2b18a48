//! The held-out checks: mean latency of the greedy policy, and of
//! Least-Loaded, over the evaluation seeds' scenarios.

use std::sync::Arc;

use edgemu_policies::lyreo::{LearnedModel, LearnedPolicy, PolicySpec};

use crate::train::{during, TrainConfig};
use crate::{run_episode, run_episode_with, ServingError};

/// Mean over `seeds` of the greedy mean latency of `model`: the network
/// alone (unguarded), since model selection judges the network.
pub fn evaluate(cfg: &TrainConfig, model: &LearnedModel) -> Result<f64, ServingError> {
    let spec = PolicySpec::parse("least-loaded").map_err(|e| during("batching spec", e))?;
    let mut acc = 0.0;
    for &seed in &cfg.eval_seeds {
        let sc = cfg.eval_scenario(seed);
        let policy = LearnedPolicy::unguarded(Arc::new(model.clone()));
        let o = run_episode_with(&sc, &spec, Box::new(policy))
            .map_err(|e| during("evaluation episode", e))?;
        acc += o.summary.lat_mean_s;
    }
    Ok(acc / cfg.eval_seeds.len().max(1) as f64)
}

/// Least-Loaded's mean latency on the held-out seeds.
pub fn evaluate_ll(cfg: &TrainConfig) -> Result<f64, ServingError> {
    let spec = PolicySpec::parse("least-loaded").map_err(|e| during("least-loaded", e))?;
    let mut acc = 0.0;
    for &seed in &cfg.eval_seeds {
        acc += run_episode(&cfg.eval_scenario(seed), &spec)
            .map_err(|e| during("least-loaded evaluation", e))?
            .summary
            .lat_mean_s;
    }
    Ok(acc / cfg.eval_seeds.len().max(1) as f64)
}
