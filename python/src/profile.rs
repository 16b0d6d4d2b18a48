//! Per-block utilities of the repair episodes from a measured KV-utility
//! profile, loaded and mapped to blocks as `edgemu train repair --profile`
//! does ([`KvUtilityProfile::load`] with SmolLM2-135M's identity, then
//! [`cell_utilities`] over SmolLM2's 1 536-token layout). The profile format
//! is the engine crate's, so the package does not build candle.

use std::sync::Arc;

use edgemu_engine::kv_profile::{KvUtilityProfile, ModelIdentity};
use edgemu_engine::shipped_kv_profiles::parse_profile;
use edgemu_handoff::{cell_utilities, BlockLayout};
use pyo3::prelude::*;

use crate::errors::value_err;

/// The profile value that asks for the trainer's synthetic utilities.
pub const SYNTHETIC: &str = "synthetic";

/// Context length of the evaluation handoff, tokens.
const CONTEXT_TOKENS: u32 = 1536;

/// The utilities of every block of the full layout (layer-major) and the
/// blocks per layer; `None` for [`SYNTHETIC`].
pub fn profile_utilities(spec: &str) -> PyResult<Option<(Arc<[f64]>, u32)>> {
    if spec == SYNTHETIC {
        return Ok(None);
    }
    let asset = parse_profile(spec).map_err(value_err)?;
    let prof = KvUtilityProfile::load(&asset, &ModelIdentity::smollm2_135m()).map_err(value_err)?;
    let layout = BlockLayout::smollm2(CONTEXT_TOKENS).map_err(value_err)?;
    let u = cell_utilities(&prof.cells, &prof.layer_groups(), &layout).map_err(value_err)?;
    Ok(Some((u.into(), layout.blocks_per_layer())))
}
