//! Rust errors as Python exceptions: every error of the cores is a
//! `ValueError` carrying the core's message (bad options, files, actions or
//! frames are input errors from Python's point of view).

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

/// Any core error, by its message.
pub fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub fn policy_err(e: edgemu_policies::nn::PolicyError) -> PyErr {
    value_err(e)
}
