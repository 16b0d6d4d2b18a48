//! Environment options from Python keyword arguments: a number or a
//! `(low, high)` pair for a drawn range, names for the models' variants.
//! Every check is the core's own where the core has one; here only what
//! Python can get wrong in the shape of an argument.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A fixed value `x` (the range `(x, x)`) or a `(low, high)` range.
pub fn range(name: &str, v: &Bound<'_, PyAny>) -> PyResult<(f64, f64)> {
    let (lo, hi) = if let Ok(x) = v.extract::<f64>() {
        (x, x)
    } else if let Ok(p) = v.extract::<(f64, f64)>() {
        p
    } else {
        return Err(PyValueError::new_err(format!(
            "{name}: a number or a (low, high) pair expected, got {v}"
        )));
    };
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Err(PyValueError::new_err(format!(
            "{name}: ({lo}, {hi}) is not a finite range with low <= high"
        )));
    }
    Ok((lo, hi))
}

/// A fixed integer or an inclusive `(low, high)` range of integers.
pub fn int_range(name: &str, v: &Bound<'_, PyAny>) -> PyResult<(u32, u32)> {
    let (lo, hi) = if let Ok(x) = v.extract::<u32>() {
        (x, x)
    } else if let Ok(p) = v.extract::<(u32, u32)>() {
        p
    } else {
        return Err(PyValueError::new_err(format!(
            "{name}: a non-negative integer or a (low, high) pair expected, got {v}"
        )));
    };
    if lo == 0 || lo > hi {
        return Err(PyValueError::new_err(format!(
            "{name}: ({lo}, {hi}) must satisfy 1 <= low <= high"
        )));
    }
    Ok((lo, hi))
}

/// One number or a list of numbers.
pub fn values(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let xs = if let Ok(x) = v.extract::<f64>() {
        vec![x]
    } else if let Ok(xs) = v.extract::<Vec<f64>>() {
        xs
    } else {
        return Err(PyValueError::new_err(format!(
            "{name}: a number or a list of numbers expected, got {v}"
        )));
    };
    if xs.is_empty() || xs.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return Err(PyValueError::new_err(format!(
            "{name}: {xs:?} must be one or more positive numbers"
        )));
    }
    Ok(xs)
}
