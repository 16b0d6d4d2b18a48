//! What a training writes: the weights (with the command, the update count
//! and the final checkpoint in their `notes`), `curve.csv` and `eval.csv`
//! (columns in `edgemu train repair`'s docs).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Evaluation, TrainOutcome};
use crate::error::HandoffError;

/// One line on a checkpoint.
pub fn summary(e: &Evaluation) -> String {
    let (w, l) = e.wins_losses();
    format!(
        "recovered utility at rho = 0.8: ddqn {:.4} vs deficit heuristic {:.4} ({:+.2} points; ddqn better on {w}, worse on {l} of {} paired seeds)",
        e.ddqn_mean(),
        e.heuristic_mean(),
        100.0 * (e.ddqn_mean() - e.heuristic_mean()),
        e.ddqn.len()
    )
}

/// Writes `repair-ddqn.safetensors`, `curve.csv` and `eval.csv` into `dir`
/// (which must exist); returns the weights path.
pub fn write_outputs(
    dir: &Path,
    command: &str,
    out: &mut TrainOutcome,
) -> Result<PathBuf, HandoffError> {
    let io = |p: &Path, e: std::io::Error| HandoffError::Config(format!("{}: {e}", p.display()));
    out.net.set_notes(&format!(
        "{command}; {} updates; final checkpoint: {}",
        out.updates,
        out.evaluations.last().map_or("none".into(), summary),
    ));
    let weights = dir.join("repair-ddqn.safetensors");
    out.net
        .save(&weights)
        .map_err(|e| HandoffError::Config(format!("{}: {e}", weights.display())))?;
    let mut curve =
        String::from("episode,epsilon,mean_reward,recovered_utility,loss,transitions,updates\n");
    for r in &out.curve {
        let _ = writeln!(
            curve,
            "{},{:.4},{:.6e},{:.6},{:.6e},{},{}",
            r.episode,
            r.epsilon,
            r.mean_reward,
            r.recovered_utility,
            r.loss,
            r.transitions,
            r.updates
        );
    }
    let mut eval = String::from("episode,seeds,ddqn_utility,heuristic_utility\n");
    for e in &out.evaluations {
        let _ = writeln!(
            eval,
            "{},{},{:.6},{:.6}",
            e.episode,
            e.ddqn.len(),
            e.ddqn_mean(),
            e.heuristic_mean()
        );
    }
    for (name, text) in [("curve.csv", curve), ("eval.csv", eval)] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
    }
    Ok(weights)
}
