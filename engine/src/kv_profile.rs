//! The KV-utility profile file (PriorityFEC §III): how much each layer
//! group and each relative-position bin of a context's KV cache matters to
//! the model, as `edgemu profile-kv` measures it (the profiler, which needs
//! the model, is `edgemu_gpu::kv_utility`).
//!
//! The utility of cell (g, b) is `cells[g][b]`, the product of the layer-group
//! and position-bin marginals, rescaled so the largest cell is 1. Layer
//! groups are contiguous equal splits of the layers (the last group takes the
//! remainder); position bins are equal splits of relative position over the
//! prefix. The file is JSON carrying the model's identity
//! ([`ModelIdentity`]); [`KvUtilityProfile::load`] refuses a file whose
//! identity differs from the model it is used with. The shipped profiles are
//! compiled in ([`crate::shipped_kv_profiles`]) and load through the same
//! checks.
//!
//! The format lives here, without candle, so that what only reads profiles
//! (the handoff's block utilities, the Python package's repair environment)
//! does not build the model.

use std::path::Path;

use edgemu_assets::Asset;
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::shipped_kv_profiles::read_profile;

/// How missing KV rows are rebuilt (zero-fill unless said otherwise): by a
/// handoff's receiver (`edgemu_gpu::kv_transfer::import`) and by the
/// profiler when it ablates a cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingRows {
    #[default]
    ZeroFill,
    Mask,
}

/// What a profile was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// A name for people (e.g. the GGUF file name).
    pub name: String,
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
}

impl ModelIdentity {
    /// SmolLM2-135M's shape: the model the shipped profiles were measured on
    /// and whose layout the handoff experiments and training use.
    pub fn smollm2_135m() -> Self {
        ModelIdentity {
            name: "SmolLM2-135M".into(),
            n_layers: 30,
            n_kv_heads: 3,
            head_dim: 64,
            vocab_size: 49_152,
        }
    }
}

/// Profiler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSettings {
    pub layer_groups: usize,
    pub position_bins: usize,
    /// Query window `w` (the last `w` tokens of each context).
    pub window: usize,
    /// How an ablated cell is removed: its K and V zeroed (the default, and
    /// what the handoff's zero-fill rebuild does) or its rows masked out of
    /// attention (what the mask rebuild does). Files without it are zero-fill.
    #[serde(default)]
    pub rebuild: MissingRows,
}

impl Default for ProfileSettings {
    fn default() -> Self {
        ProfileSettings {
            layer_groups: 6,
            position_bins: 8,
            window: 64,
            rebuild: MissingRows::default(),
        }
    }
}

/// A measured profile (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvUtilityProfile {
    pub format: String,
    pub model: ModelIdentity,
    pub settings: ProfileSettings,
    pub contexts: usize,
    pub context_tokens: usize,
    /// Mean total-variation distance per layer group (before normalizing).
    pub layer_distance: Vec<f64>,
    /// Mean total-variation distance per position bin (before normalizing).
    pub position_distance: Vec<f64>,
    /// `u_L`, sums to 1.
    pub layer_utility: Vec<f64>,
    /// `u_P`, sums to 1.
    pub position_utility: Vec<f64>,
    /// `cells[g][b]`, largest 1.
    pub cells: Vec<Vec<f64>>,
}

/// The `format` tag of profile files.
pub const PROFILE_FORMAT: &str = "edgemu-kv-utility/1";

/// Layer range of group `g` of `groups` over `n_layers`.
pub fn layer_group(g: usize, groups: usize, n_layers: usize) -> std::ops::Range<usize> {
    let size = n_layers / groups;
    let end = if g + 1 == groups {
        n_layers
    } else {
        (g + 1) * size
    };
    g * size..end
}

/// Token range of bin `b` of `bins` over a prefix of `n` tokens.
pub fn position_bin(b: usize, bins: usize, n: usize) -> std::ops::Range<usize> {
    (b * n / bins)..((b + 1) * n / bins)
}

impl KvUtilityProfile {
    /// The layers of each layer group, in group order (the rows of `cells`).
    pub fn layer_groups(&self) -> Vec<std::ops::Range<usize>> {
        let groups = self.settings.layer_groups;
        (0..groups)
            .map(|g| layer_group(g, groups, self.model.n_layers))
            .collect()
    }

    /// Writes the profile as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<()> {
        let err = |msg: String| EngineError::Profile {
            path: path.display().to_string(),
            msg,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| err(e.to_string()))
    }

    /// Reads a profile (a file, or a shipped one built in:
    /// [`crate::shipped_kv_profiles`]) and checks it belongs to a model with
    /// `expected` identity (the name is informative and not compared) and is
    /// well formed.
    pub fn load(profile: &Asset, expected: &ModelIdentity) -> Result<Self> {
        let err = |msg: String| EngineError::Profile {
            path: profile.label().display().to_string(),
            msg,
        };
        let bytes = read_profile(profile).map_err(|e| err(e.to_string()))?;
        let p: KvUtilityProfile = serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?;
        if p.format != PROFILE_FORMAT {
            return Err(err(format!(
                "format `{}`, expected `{PROFILE_FORMAT}`",
                p.format
            )));
        }
        let m = &p.model;
        if (m.n_layers, m.n_kv_heads, m.head_dim, m.vocab_size)
            != (
                expected.n_layers,
                expected.n_kv_heads,
                expected.head_dim,
                expected.vocab_size,
            )
        {
            return Err(err(format!(
                "profile is for model `{}` ({} layers, {} KV heads, head dim {}, vocab {}), \
                 not for `{}` ({} layers, {} KV heads, head dim {}, vocab {})",
                m.name,
                m.n_layers,
                m.n_kv_heads,
                m.head_dim,
                m.vocab_size,
                expected.name,
                expected.n_layers,
                expected.n_kv_heads,
                expected.head_dim,
                expected.vocab_size
            )));
        }
        let s = p.settings;
        let shape_ok = s.layer_groups >= 1
            && s.layer_groups <= m.n_layers
            && s.position_bins >= 1
            && p.cells.len() == s.layer_groups
            && p.cells.iter().all(|r| r.len() == s.position_bins)
            && p.cells.iter().flatten().all(|x| x.is_finite() && *x >= 0.0);
        if !shape_ok {
            return Err(err(format!(
                "cells must be {} × {} finite non-negative values",
                s.layer_groups, s.position_bins
            )));
        }
        Ok(p)
    }
}
