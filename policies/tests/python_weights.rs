//! Weights written from Python (`scripts/write_policy_weights.py`, numpy and
//! the `edgemu` package's writer, no torch) load through the same validation
//! as edgemu's own, and the Rust forward pass gives the outputs numpy computed
//! on the same fixed inputs. The fixtures were written by the script; CI runs it
//! again into a temporary folder and points `EDGEMU_PY_WEIGHTS_DIR` there, so
//! a change to the script or to the format cannot pass unnoticed.

use std::path::{Path, PathBuf};

use edgemu_policies::lyreo::learned::{ACTOR_INPUT, CRITIC_INPUT};
use edgemu_policies::lyreo::{LearnedModel, Variant};
use edgemu_policies::repair::ddqn::DdqnNet;
use serde_json::Value;

fn fixtures() -> PathBuf {
    match std::env::var_os("EDGEMU_PY_WEIGHTS_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"),
    }
}

/// `(inputs, outputs)` of one net from the script's `--expect` JSON.
fn case(file: &str, net: &str) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let path = fixtures().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).expect("expect JSON");
    let rows = |key: &str| -> Vec<Vec<f32>> {
        v["nets"][net][key]
            .as_array()
            .expect("array")
            .iter()
            .map(|r| {
                r.as_array()
                    .expect("row")
                    .iter()
                    .map(|x| x.as_f64().expect("number") as f32)
                    .collect()
            })
            .collect()
    };
    (rows("inputs"), rows("outputs"))
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: width");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // float32 on both sides; only summation order differs.
        let tol = 1e-5 * (1.0 + w.abs());
        assert!((g - w).abs() <= tol, "{what}[{i}]: rust {g} vs numpy {w}");
    }
}

#[test]
fn repair_ddqn_written_by_python_matches_numpy() {
    let mut net = DdqnNet::load(&fixtures().join("python-repair-ddqn.safetensors"))
        .expect("python-written repair-ddqn loads");
    let (inputs, outputs) = case("python-repair-ddqn.json", "q");
    assert!(!inputs.is_empty());
    for (k, (x, y)) in inputs.iter().zip(&outputs).enumerate() {
        let x: [f32; 15] = x.as_slice().try_into().expect("15 features");
        let q = net.q_values(&x);
        assert_close(&q, y, &format!("q case {k}"));
    }
}

#[test]
fn lyreo_actor_critic_written_by_python_matches_numpy() {
    let model = LearnedModel::load(&fixtures().join("python-lyreo.safetensors"), Variant::Lyreo)
        .expect("python-written lyreo-actor-critic loads");
    let mut scratch = model.actor.scratch();
    let (inputs, outputs) = case("python-lyreo.json", "actor");
    for (k, (x, y)) in inputs.iter().zip(&outputs).enumerate() {
        assert_eq!(x.len(), ACTOR_INPUT);
        let mut row = x.clone();
        let logit = model.actor_logit(&mut row, &mut scratch);
        assert_close(&[logit], y, &format!("actor case {k}"));
    }
    let mut cscratch = model.critic.scratch();
    let (inputs, outputs) = case("python-lyreo.json", "critic");
    for (k, (x, y)) in inputs.iter().zip(&outputs).enumerate() {
        assert_eq!(x.len(), CRITIC_INPUT);
        let mut v = [0.0f32];
        model.critic.forward(x, &mut v, &mut cscratch);
        assert_close(&v, y, &format!("critic case {k}"));
    }
}
