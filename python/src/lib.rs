//! The native module `edgemu._core` of the Python package `edgemu`
//! (python/edgemu/): thin bindings over the Rust cores. Nothing here models
//! anything; the environments ([`edgemu_handoff::RepairStepper`],
//! [`edgemu_serving::SlotStepper`]), the wire format
//! ([`edgemu_policies::external`]) and the weights format
//! ([`edgemu_policies::nn::WeightsFile`]) are the cores' own, so Python sees
//! exactly what the experiments and a live run compute.

use pyo3::prelude::*;

mod errors;
mod lyreo;
mod options;
mod profile;
mod repair;
mod weights;
mod wire;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("REPAIR_DDQN_SIZES", weights::ddqn_sizes())?;
    m.add(
        "EXTERNAL_PROTOCOL",
        edgemu_policies::external::EXTERNAL_PROTOCOL,
    )?;
    m.add("PAIR_FEATURES", edgemu_policies::lyreo::PAIR_FEATURES)?;
    m.add(
        "SERVER_FEATURES",
        edgemu_policies::external::SERVER_FEATURES,
    )?;
    m.add("REPAIR_FEATURES", edgemu_policies::repair::N_FEATURES)?;
    m.add("REPAIR_ACTIONS", edgemu_policies::repair::N_ACTIONS)?;
    m.add("MAX_REQUEST_TOKENS", edgemu_serving::workload::MAX_LEN)?;
    m.add_class::<repair::RepairCore>()?;
    m.add_class::<repair::RepairVecCore>()?;
    m.add_class::<lyreo::LyreoCore>()?;
    m.add_class::<lyreo::LyreoVecCore>()?;
    m.add_function(wrap_pyfunction!(weights::write_weights, m)?)?;
    m.add_function(wrap_pyfunction!(weights::save_repair_ddqn, m)?)?;
    m.add_function(wrap_pyfunction!(weights::load_repair_ddqn, m)?)?;
    m.add_function(wrap_pyfunction!(weights::repair_ddqn_q_values, m)?)?;
    m.add_function(wrap_pyfunction!(wire::decode_request, m)?)?;
    m.add_function(wrap_pyfunction!(wire::request_id, m)?)?;
    m.add_function(wrap_pyfunction!(wire::encode_reply, m)?)?;
    Ok(())
}
