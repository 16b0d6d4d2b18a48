//! The native module `edgemu._core` of the Python package `edgemu`
//! (python/edgemu/): thin bindings over the Rust cores. Nothing here models
//! anything; the environments, the wire format and the weights format are
//! the cores' own, so Python sees exactly what the experiments and a live
//! run compute.

use pyo3::prelude::*;

mod errors;
mod weights;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("REPAIR_DDQN_SIZES", weights::ddqn_sizes())?;
    m.add_function(wrap_pyfunction!(weights::write_weights, m)?)?;
    m.add_function(wrap_pyfunction!(weights::save_repair_ddqn, m)?)?;
    m.add_function(wrap_pyfunction!(weights::load_repair_ddqn, m)?)?;
    m.add_function(wrap_pyfunction!(weights::repair_ddqn_q_values, m)?)?;
    Ok(())
}
