//! What a training writes: the weights (with the command, the update count
//! and the final checkpoint in their `notes`), `curve.csv`, `eval.csv` and,
//! with a final evaluation, `final.csv` (per held-out seed; columns in
//! `edgemu train repair`'s docs).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{Evaluation, TrainOutcome};
use crate::error::HandoffError;

/// One line on a checkpoint; with several deadlines, the means over all of
/// them and then the difference at each.
pub fn summary(e: &Evaluation) -> String {
    let rhos = e.rhos();
    let mut s = one_line(e);
    if rhos.len() > 1 {
        let per: Vec<String> = rhos
            .iter()
            .map(|&r| {
                let at = e.at_rho(r);
                format!("{r} {:+.2}", 100.0 * (at.ddqn_mean() - at.heuristic_mean()))
            })
            .collect();
        let _ = write!(s, "; ddqn - heuristic by rho: {} points", per.join(", "));
    }
    s
}

fn one_line(e: &Evaluation) -> String {
    let (w, l) = e.wins_losses();
    let rhos: Vec<String> = e.rhos().iter().map(|r| r.to_string()).collect();
    format!(
        "recovered utility at rho = {}: ddqn {:.4} vs deficit heuristic {:.4} ({:+.2} points; ddqn better on {w}, worse on {l} of {} paired runs: {} seeds × {} rho); repairs sent {:.0} vs {:.0}, redundant {:.0} vs {:.0}",
        rhos.join("/"),
        e.ddqn_mean(),
        e.heuristic_mean(),
        100.0 * (e.ddqn_mean() - e.heuristic_mean()),
        e.ddqn.len(),
        e.seeds(),
        rhos.len(),
        mean_u32(&e.ddqn_repairs),
        mean_u32(&e.heuristic_repairs),
        mean_u32(&e.ddqn_redundant),
        mean_u32(&e.heuristic_redundant),
    )
}

fn mean_u32(v: &[u32]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64
    }
}

/// Per seed of one evaluation: deadline, seed index, both utilities, their
/// difference, repairs sent and redundant repairs of both.
pub fn per_seed_csv(e: &Evaluation) -> String {
    let mut s = String::from(
        "rho,seed,ddqn_utility,heuristic_utility,difference,ddqn_repairs,heuristic_repairs,ddqn_redundant,heuristic_redundant\n",
    );
    for i in 0..e.ddqn.len() {
        let at = |v: &[u32]| v.get(i).copied().unwrap_or(0);
        let rho = e.rho.get(i).copied().unwrap_or(f64::NAN);
        let seed = e.seed.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "{rho},{seed},{:.6},{:.6},{:+.6},{},{},{},{}",
            e.ddqn[i],
            e.heuristic[i],
            e.ddqn[i] - e.heuristic[i],
            at(&e.ddqn_repairs),
            at(&e.heuristic_repairs),
            at(&e.ddqn_redundant),
            at(&e.heuristic_redundant),
        );
    }
    s
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
        "{command}; {} updates; {}",
        out.updates,
        match (&out.final_evaluation, out.evaluations.last()) {
            (Some(f), _) => format!("final held-out evaluation: {}", summary(f)),
            (None, Some(e)) => format!("final checkpoint: {}", summary(e)),
            (None, None) => "no evaluation".into(),
        },
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
    let mut eval = String::from(
        "episode,seeds,ddqn_utility,heuristic_utility,ddqn_repairs,heuristic_repairs,ddqn_redundant,heuristic_redundant\n",
    );
    for e in &out.evaluations {
        let _ = writeln!(
            eval,
            "{},{},{:.6},{:.6},{:.1},{:.1},{:.1},{:.1}",
            e.episode,
            e.seeds(),
            e.ddqn_mean(),
            e.heuristic_mean(),
            mean_u32(&e.ddqn_repairs),
            mean_u32(&e.heuristic_repairs),
            mean_u32(&e.ddqn_redundant),
            mean_u32(&e.heuristic_redundant),
        );
    }
    let mut files = vec![("curve.csv", curve), ("eval.csv", eval)];
    if let Some(f) = &out.final_evaluation {
        files.push(("final.csv", per_seed_csv(f)));
    }
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
    }
    Ok(weights)
}
