//! Explicit per-sequence KV cache.
//!
//! A [`SeqKv`] holds, for each layer, a K and a V tensor of shape
//! `(n_kv_heads, capacity, head_dim)` (head-major, so a head's rows are contiguous
//! and attention reads `k[h, ..len, :]` without copying). `len` tokens are valid;
//! capacity doubles when full. Each sequence has its own cache and its own
//! position (`len`), which is what lets sequences of different lengths share a
//! decode batch.
//!
//! A cache built from an imported, incomplete handoff may carry a per-layer
//! additive attention bias of shape `(n_kv_heads, 1, capacity)`: 0 for a present
//! (head, token) row, −∞ for a missing one. Rows appended later are present.

use candle_core::{DType, Device, Tensor};

use crate::error::{CandleContext, Result};
use crate::model::config::LlamaConfig;

/// One layer's K and V storage (and optional presence bias).
#[derive(Debug, Clone)]
pub struct LayerKv {
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) bias: Option<Tensor>,
}

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct SeqKv {
    pub(crate) layers: Vec<LayerKv>,
    pub(crate) len: usize,
    pub(crate) capacity: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) device: Device,
}

const MIN_CAPACITY: usize = 64;

impl SeqKv {
    /// An empty cache with room for `capacity` tokens before it grows.
    pub fn new(config: &LlamaConfig, capacity: usize, device: &Device) -> Result<Self> {
        let capacity = capacity.max(MIN_CAPACITY);
        let shape = (config.n_kv_heads, capacity, config.head_dim);
        let mut layers = Vec::with_capacity(config.n_layers);
        for _ in 0..config.n_layers {
            layers.push(LayerKv {
                k: Tensor::zeros(shape, DType::F32, device).ctx("kv alloc")?,
                v: Tensor::zeros(shape, DType::F32, device).ctx("kv alloc")?,
                bias: None,
            });
        }
        Ok(SeqKv {
            layers,
            len: 0,
            capacity,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            device: device.clone(),
        })
    }

    /// Number of cached tokens (= the position of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Whether any row is masked out of attention.
    pub fn has_mask(&self) -> bool {
        self.layers.iter().any(|l| l.bias.is_some())
    }

    /// Makes room for `needed` tokens in total.
    pub(crate) fn reserve(&mut self, needed: usize) -> Result<()> {
        if needed <= self.capacity {
            return Ok(());
        }
        let mut cap = self.capacity.max(MIN_CAPACITY);
        while cap < needed {
            cap *= 2;
        }
        let shape = (self.n_kv_heads, cap, self.head_dim);
        for l in &mut self.layers {
            let k = Tensor::zeros(shape, DType::F32, &self.device).ctx("kv grow")?;
            let v = Tensor::zeros(shape, DType::F32, &self.device).ctx("kv grow")?;
            if self.len > 0 {
                k.slice_set(
                    &l.k.narrow(1, 0, self.len)
                        .ctx("kv grow")?
                        .contiguous()
                        .ctx("kv grow")?,
                    1,
                    0,
                )
                .ctx("kv grow")?;
                v.slice_set(
                    &l.v.narrow(1, 0, self.len)
                        .ctx("kv grow")?
                        .contiguous()
                        .ctx("kv grow")?,
                    1,
                    0,
                )
                .ctx("kv grow")?;
            }
            if let Some(b) = &l.bias {
                let nb = Tensor::zeros((self.n_kv_heads, 1, cap), DType::F32, &self.device)
                    .ctx("kv grow")?;
                nb.slice_set(b, 2, 0).ctx("kv grow")?;
                l.bias = Some(nb);
            }
            l.k = k;
            l.v = v;
        }
        self.capacity = cap;
        Ok(())
    }

    /// Writes `k`, `v` of shape `(n_kv_heads, t, head_dim)` for `layer` at the end
    /// (does not advance `len`; see [`SeqKv::advance`]).
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let l = &mut self.layers[layer];
        l.k.slice_set(k, 1, self.len).ctx("kv append k")?;
        l.v.slice_set(v, 1, self.len).ctx("kv append v")?;
        Ok(())
    }

    /// Advances the length by `t` after all layers were appended.
    pub(crate) fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Valid K, V views `(n_kv_heads, len, head_dim)` and the bias `(n_kv_heads, 1, len)`
    /// of `layer`, with `extra` freshly appended tokens included.
    pub(crate) fn view(
        &self,
        layer: usize,
        extra: usize,
    ) -> Result<(Tensor, Tensor, Option<Tensor>)> {
        let l = &self.layers[layer];
        let n = self.len + extra;
        let k = l.k.narrow(1, 0, n).ctx("kv view")?;
        let v = l.v.narrow(1, 0, n).ctx("kv view")?;
        let b = match &l.bias {
            Some(b) => Some(b.narrow(2, 0, n).ctx("kv view")?),
            None => None,
        };
        Ok((k, v, b))
    }

    /// Bytes this cache's valid tokens take as F32.
    pub fn bytes_f32(&self) -> u64 {
        (2 * self.layers.len() * self.n_kv_heads * self.head_dim * 4 * self.len) as u64
    }
}
