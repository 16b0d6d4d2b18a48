//! Rust errors as Python exceptions: every error of the cores is a
//! `ValueError` carrying the core's message (bad options, files or actions
//! are input errors from Python's point of view).

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

pub fn policy_err(e: edgemu_policies::nn::PolicyError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
