//! Policy weights files from Python, written and read by the Rust code that
//! `edgemu train` and `policy.swap` use ([`WeightsFile`], [`DdqnNet`]): one
//! implementation of the format, so a file written here is a file edgemu
//! loads (or refuses with the same message).

use std::collections::BTreeMap;
use std::path::PathBuf;

use edgemu_policies::nn::WeightsFile;
use edgemu_policies::repair::ddqn::{DdqnNet, DDQN_KIND, DDQN_SIZES, DDQN_VERSION};
use edgemu_policies::repair::{N_ACTIONS, N_FEATURES};
use edgemu_policies::shipped::parse_weights;
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{policy_err, value_err};

/// A float32 tensor from Python: its shape and row-major values.
fn tensor(name: &str, a: &PyReadonlyArrayDyn<'_, f32>) -> PyResult<(Vec<usize>, Vec<f32>)> {
    let shape = a.shape().to_vec();
    let data: Vec<f32> = a.as_array().iter().copied().collect();
    if let Some(v) = data.iter().find(|v| !v.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "tensor {name}: non-finite value {v}"
        )));
    }
    Ok((shape, data))
}

/// Builds a weights file; `tensors` maps names to float32 arrays.
fn build(
    kind: &str,
    version: u32,
    tensors: BTreeMap<String, PyReadonlyArrayDyn<'_, f32>>,
    obs_mean: Vec<f32>,
    obs_std: Vec<f32>,
    notes: &str,
) -> PyResult<WeightsFile> {
    if obs_mean.len() != obs_std.len() {
        return Err(PyValueError::new_err(format!(
            "obs_mean has {} values and obs_std {}",
            obs_mean.len(),
            obs_std.len()
        )));
    }
    let mut w = WeightsFile::new(kind, version);
    for (name, a) in &tensors {
        let (shape, data) = tensor(name, a)?;
        w.insert(name, shape, data);
    }
    w.obs_mean = obs_mean;
    w.obs_std = obs_std;
    w.notes = notes.to_string();
    Ok(w)
}

/// `write_weights(path, kind, version, tensors, obs_mean, obs_std, notes)`:
/// writes any edgemu policy file (the generic format of
/// `policies/README.md`; the loader of `kind` checks names and shapes).
#[pyfunction]
#[pyo3(signature = (path, kind, version, tensors, obs_mean, obs_std, notes))]
pub fn write_weights(
    path: PathBuf,
    kind: &str,
    version: u32,
    tensors: BTreeMap<String, PyReadonlyArrayDyn<'_, f32>>,
    obs_mean: Vec<f32>,
    obs_std: Vec<f32>,
    notes: &str,
) -> PyResult<()> {
    build(kind, version, tensors, obs_mean, obs_std, notes)?
        .save(&path)
        .map_err(policy_err)
}

/// `save_repair_ddqn(path, tensors, obs_mean, obs_std, notes)`: a
/// `repair-ddqn` file, validated by the loader `policy.swap` uses before it
/// is written (names, shapes, finite values, normalization).
#[pyfunction]
#[pyo3(signature = (path, tensors, obs_mean, obs_std, notes))]
pub fn save_repair_ddqn(
    path: PathBuf,
    tensors: BTreeMap<String, PyReadonlyArrayDyn<'_, f32>>,
    obs_mean: Vec<f32>,
    obs_std: Vec<f32>,
    notes: &str,
) -> PyResult<()> {
    let w = build(DDQN_KIND, DDQN_VERSION, tensors, obs_mean, obs_std, notes)?;
    let bytes = w.to_bytes().map_err(policy_err)?;
    // The same validation as a file edgemu reads: a file it would refuse is
    // never written.
    DdqnNet::from_bytes(&bytes, &path).map_err(policy_err)?;
    w.save(&path).map_err(policy_err)
}

/// A repair DDQN from a file or the shipped weights (`built-in:repair-ddqn`),
/// through the loader a live `policy.swap` uses.
pub fn load_ddqn(weights: &str) -> PyResult<DdqnNet> {
    let asset = parse_weights(weights).map_err(value_err)?;
    DdqnNet::from_source(&asset).map_err(policy_err)
}

/// `load_repair_ddqn(weights) -> (tensors, obs_mean, obs_std, notes)` through
/// edgemu's loader (a file it refuses raises `ValueError` with its reason).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn load_repair_ddqn<'py>(
    py: Python<'py>,
    weights: &str,
) -> PyResult<(
    BTreeMap<String, Bound<'py, PyAny>>,
    Vec<f32>,
    Vec<f32>,
    String,
)> {
    let w = load_ddqn(weights)?.to_weights();
    let mut out = BTreeMap::new();
    for name in w.tensor_names() {
        if let Some((shape, data)) = w.tensor(name) {
            let a = numpy::PyArray1::from_slice(py, data).reshape(shape.to_vec())?;
            out.insert(name.to_string(), a.into_any());
        }
    }
    let (mean, std) = if w.obs_mean.is_empty() {
        (vec![0.0; N_FEATURES], vec![1.0; N_FEATURES])
    } else {
        (w.obs_mean.clone(), w.obs_std.clone())
    };
    Ok((out, mean, std, w.notes.clone()))
}

/// `repair_ddqn_q_values(path, features) -> (n, 4)`: the Q-values edgemu's
/// forward pass gives for each row of `features` (n × 15, raw features:
/// the file's normalization is applied as in a live run).
#[pyfunction]
pub fn repair_ddqn_q_values<'py>(
    py: Python<'py>,
    weights: &str,
    features: numpy::PyReadonlyArray2<'py, f32>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let mut net = load_ddqn(weights)?;
    let x = features.as_array();
    if x.ncols() != N_FEATURES {
        return Err(PyValueError::new_err(format!(
            "features must be n × {N_FEATURES}, got {:?}",
            x.shape()
        )));
    }
    let mut out = Vec::with_capacity(x.nrows() * N_ACTIONS);
    for row in x.rows() {
        let mut f = [0.0f32; N_FEATURES];
        for (d, s) in f.iter_mut().zip(row.iter()) {
            *d = *s;
        }
        out.extend_from_slice(&net.q_values(&f));
    }
    numpy::PyArray1::from_vec(py, out).reshape([x.nrows(), N_ACTIONS])
}

/// The layer widths of the repair DDQN, for the Python writer's checks.
pub fn ddqn_sizes() -> Vec<usize> {
    DDQN_SIZES.to_vec()
}
