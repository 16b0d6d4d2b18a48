//! The policy process's side of the external-policy wire format
//! ([`edgemu_policies::external`]): a request frame decoded into the numpy
//! observation the Gymnasium environment gives, and a reply frame encoded.
//! The serde types are the ones edgemu's client uses, so the two sides
//! cannot drift apart.

use edgemu_policies::external::{
    DecisionReply, DecisionRequest, LyreoArrays, WireObs, EXTERNAL_PROTOCOL, SERVER_FEATURES,
};
use edgemu_policies::lyreo::PAIR_FEATURES;
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::value_err;
use crate::lyreo::obs_tuple;

/// The array lengths a LYREO observation of `requests × servers` must have.
fn check_lyreo(a: &LyreoArrays) -> Result<(), String> {
    let (r, s) = (a.requests, a.servers);
    let want = [
        (
            "pairs",
            a.pairs.len(),
            r.checked_mul(s).and_then(|x| x.checked_mul(PAIR_FEATURES)),
        ),
        ("lengths", a.lengths.len(), r.checked_mul(2)),
        (
            "server_features",
            a.server_features.len(),
            s.checked_mul(SERVER_FEATURES),
        ),
        ("queues", a.queues.len(), Some(s)),
    ];
    for (name, got, expected) in want {
        if Some(got) != expected {
            return Err(format!(
                "{name} has {got} values, not the {expected:?} of {r} requests × {s} servers"
            ));
        }
    }
    Ok(())
}

/// `decode_request(text) -> (id, problem, obs, action_mask)`: `obs` is a
/// dict of `pairs`, `lengths`, `servers`, `queues` (lyreo) or the features
/// array (repair), `action_mask` a bool array (repair) or `None`. A frame
/// that is not a request raises `ValueError`; `request_id(text)` recovers
/// the id to answer with, where there is one.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn decode_request<'py>(
    py: Python<'py>,
    text: &str,
) -> PyResult<(
    u64,
    &'static str,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyArray1<bool>>>,
)> {
    let req: DecisionRequest = serde_json::from_str(text)
        .map_err(|e| PyValueError::new_err(format!("not a decision request: {e}")))?;
    if req.protocol != EXTERNAL_PROTOCOL {
        return Err(PyValueError::new_err(format!(
            "protocol {}: this server speaks {EXTERNAL_PROTOCOL}",
            req.protocol
        )));
    }
    match &req.obs {
        WireObs::Lyreo(a) => {
            check_lyreo(a).map_err(PyValueError::new_err)?;
            let (pairs, lengths, servers, queues) = obs_tuple(py, a)?;
            let d = PyDict::new(py);
            d.set_item("pairs", pairs)?;
            d.set_item("lengths", lengths)?;
            d.set_item("servers", servers)?;
            d.set_item("queues", queues)?;
            Ok((req.id, req.problem.name(), d.into_any(), None))
        }
        WireObs::Repair(a) => Ok((
            req.id,
            req.problem.name(),
            PyArray1::from_slice(py, &a.features).into_any(),
            Some(PyArray1::from_slice(py, &a.mask)),
        )),
    }
}

/// The `id` of a frame that is JSON with an integer `id`, else `None` (to
/// answer a malformed request with an error carrying its id).
#[pyfunction]
pub fn request_id(text: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()?
        .get("id")?
        .as_u64()
}

/// `encode_reply(id, action_json, error) -> str`: a reply frame; the action
/// is given as JSON text (a list of server indices or one integer).
#[pyfunction]
#[pyo3(signature = (id, action_json=None, error=None))]
pub fn encode_reply(id: u64, action_json: Option<&str>, error: Option<String>) -> PyResult<String> {
    let action = action_json
        .map(serde_json::from_str::<serde_json::Value>)
        .transpose()
        .map_err(|e| PyValueError::new_err(format!("the action is not JSON: {e}")))?;
    serde_json::to_string(&DecisionReply { id, action, error }).map_err(value_err)
}
