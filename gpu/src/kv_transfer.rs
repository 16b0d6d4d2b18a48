//! KV-cache export and import for handoffs between servers.
//!
//! **Export** turns any layer range × token range of a [`SeqKv`] into
//! [`KvBlock`]s, one per layer, holding K and V as little-endian bytes in BF16,
//! F16 or F32, laid out `[kv_head][token][head_dim]` (so a (head, token) row is
//! `head_dim` contiguous elements). PriorityFEC's transport blocks (one layer ×
//! 16 tokens) are `export(kv, l..l+1, t..t+16, Bf16)`.
//!
//! **Import** rebuilds a cache of `n_tokens` tokens from whatever blocks arrived
//! plus a per-(layer, head, token) [`PresenceMask`]. A row is present when a
//! block covered it and the mask (if any) says so. Missing rows are either
//! * [`MissingRows::ZeroFill`]: K and V rows of zeros (attention still sees
//!   them, with score 0 against every query), or
//! * [`MissingRows::Mask`]: an additive −∞ attention bias for that (head, token),
//!   so the row is excluded from the softmax while every other token keeps its
//!   position (RoPE was applied at the original positions before export).
//!
//! Decoding continues from the imported cache at position `n_tokens`.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{CandleContext, GpuError, Result};
use crate::model::config::{KvDtype, LlamaConfig};
use crate::model::kv::{Bf16Prefix, KvBase, LayerKv, SeqKv, SharedRows};

/// K and V of one layer over a token range, as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvBlock {
    pub layer: usize,
    /// First token.
    pub start: usize,
    /// Number of tokens.
    pub len: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub dtype: KvDtype,
    /// `[head][token][dim]` little-endian elements.
    pub k: Vec<u8>,
    pub v: Vec<u8>,
}

impl KvBlock {
    /// Expected byte length of `k` (and of `v`).
    pub fn expected_bytes(&self) -> usize {
        self.n_kv_heads * self.len * self.head_dim * self.dtype.size()
    }

    /// Bytes of K and V together.
    pub fn payload_bytes(&self) -> usize {
        self.k.len() + self.v.len()
    }
}

/// How missing rows are rebuilt (zero-fill unless said otherwise; the enum
/// is the profile format's, `edgemu_engine::kv_profile`).
pub use edgemu_engine::kv_profile::MissingRows;

/// Which (layer, head, token) rows arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceMask {
    n_layers: usize,
    n_kv_heads: usize,
    n_tokens: usize,
    present: Vec<bool>,
}

impl PresenceMask {
    /// All rows present.
    pub fn all(n_layers: usize, n_kv_heads: usize, n_tokens: usize) -> Self {
        Self::filled(n_layers, n_kv_heads, n_tokens, true)
    }

    /// No row present.
    pub fn none(n_layers: usize, n_kv_heads: usize, n_tokens: usize) -> Self {
        Self::filled(n_layers, n_kv_heads, n_tokens, false)
    }

    fn filled(n_layers: usize, n_kv_heads: usize, n_tokens: usize, present: bool) -> Self {
        PresenceMask {
            n_layers,
            n_kv_heads,
            n_tokens,
            present: vec![present; n_layers * n_kv_heads * n_tokens],
        }
    }

    fn idx(&self, layer: usize, head: usize, token: usize) -> Option<usize> {
        (layer < self.n_layers && head < self.n_kv_heads && token < self.n_tokens)
            .then(|| (layer * self.n_kv_heads + head) * self.n_tokens + token)
    }

    /// Marks a row; out-of-range indices are ignored and return false.
    pub fn set(&mut self, layer: usize, head: usize, token: usize, present: bool) -> bool {
        match self.idx(layer, head, token) {
            Some(i) => {
                self.present[i] = present;
                true
            }
            None => false,
        }
    }

    /// Whether a row is present (out of range: false).
    pub fn is_present(&self, layer: usize, head: usize, token: usize) -> bool {
        self.idx(layer, head, token)
            .is_some_and(|i| self.present[i])
    }

    /// `(layers, KV heads, tokens)`.
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.n_layers, self.n_kv_heads, self.n_tokens)
    }

    /// Number of missing rows.
    pub fn missing(&self) -> usize {
        self.present.iter().filter(|p| !**p).count()
    }
}

fn encode(values: &[f32], dtype: KvDtype) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * dtype.size());
    match dtype {
        KvDtype::F32 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        KvDtype::Bf16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes())),
        KvDtype::F16 => values
            .iter()
            .for_each(|v| out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
    }
    out
}

#[cfg(test)]
fn decode(bytes: &[u8], dtype: KvDtype) -> Vec<f32> {
    bytes
        .chunks_exact(dtype.size())
        .map(|c| element(c, dtype))
        .collect()
}

/// Exports `layers × tokens` of a cache, one block per layer.
pub fn export(
    kv: &SeqKv,
    layers: Range<usize>,
    tokens: Range<usize>,
    dtype: KvDtype,
) -> Result<Vec<KvBlock>> {
    if layers.end > kv.n_layers() || layers.start > layers.end {
        return Err(GpuError::KvTransfer(format!(
            "layers {layers:?} outside 0..{}",
            kv.n_layers()
        )));
    }
    if tokens.end > kv.len() || tokens.start > tokens.end {
        return Err(GpuError::KvTransfer(format!(
            "tokens {tokens:?} outside 0..{}",
            kv.len()
        )));
    }
    if kv.f32_start > 0 {
        // Its F32 storage lacks the rows a lazy rebuild kept elsewhere.
        let mut full = kv.clone();
        full.materialize_f32()?;
        return export(&full, layers, tokens, dtype);
    }
    let len = tokens.end - tokens.start;
    let mut out = Vec::with_capacity(layers.len());
    for layer in layers {
        let l = &kv.layers[layer];
        let read = |t: &Tensor| -> Result<Vec<f32>> {
            t.narrow(1, tokens.start, len)
                .and_then(|x| x.to_dtype(DType::F32))
                .and_then(|x| x.flatten_all())
                .and_then(|x| x.to_vec1::<f32>())
                .ctx("kv export")
        };
        out.push(KvBlock {
            layer,
            start: tokens.start,
            len,
            n_kv_heads: kv.n_kv_heads,
            head_dim: kv.head_dim,
            dtype,
            k: encode(&read(&l.k)?, dtype),
            v: encode(&read(&l.v)?, dtype),
        });
    }
    Ok(out)
}

/// One block's bytes as [`assemble`] reads them.
pub(crate) struct BlockBytes<'a> {
    pub layer: usize,
    pub start: usize,
    pub len: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub dtype: KvDtype,
    pub k: &'a [u8],
    pub v: &'a [u8],
    /// For a partly arrived block, the byte ranges of `k‖v` that arrived,
    /// sorted and merged (no two touch). `ZeroFill` keeps an element only if
    /// all of its bytes lie in one of them (else 0); `Mask` keeps a (head,
    /// token) row only if all of its K and V bytes do (else the row is missing).
    /// `None`: every byte arrived.
    pub arrived: Option<&'a [Range<usize>]>,
}

impl<'a> BlockBytes<'a> {
    fn whole(b: &'a KvBlock) -> Self {
        BlockBytes {
            layer: b.layer,
            start: b.start,
            len: b.len,
            n_kv_heads: b.n_kv_heads,
            head_dim: b.head_dim,
            dtype: b.dtype,
            k: &b.k,
            v: &b.v,
            arrived: None,
        }
    }
}

/// One little-endian element as F32, exactly as [`decode`] converts it.
#[inline]
fn element(c: &[u8], dtype: KvDtype) -> f32 {
    match dtype {
        KvDtype::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        KvDtype::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f32(),
        KvDtype::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
    }
}

/// Rebuilds a cache of `n_tokens` tokens from `blocks` (see the module doc).
pub fn import(
    config: &LlamaConfig,
    device: &candle_core::Device,
    n_tokens: usize,
    blocks: &[KvBlock],
    presence: Option<&PresenceMask>,
    mode: MissingRows,
) -> Result<SeqKv> {
    assemble(
        config,
        device,
        n_tokens,
        blocks.iter().map(BlockBytes::whole),
        presence,
        mode,
        None,
    )
}

/// [`import`] from borrowed, possibly partly arrived, blocks: every element is
/// decoded once, straight into the cache's own per-layer storage (laid out with
/// the cache's capacity), so rebuilding a handed-off cache is one pass over its
/// bytes — no intermediate copies, which on a 1 536-token SmolLM2 cache are
/// 70 MB each.
///
/// With a `base` of the same shape (the full cache of the same context), every
/// BF16 row that comes out bit for bit equal to the base's is marked to be read
/// from it ([`crate::model::kv::SharedRows`]); a base of another shape is
/// ignored.
pub(crate) fn assemble<'a>(
    config: &LlamaConfig,
    device: &candle_core::Device,
    n_tokens: usize,
    blocks: impl Iterator<Item = BlockBytes<'a>>,
    presence: Option<&PresenceMask>,
    mode: MissingRows,
    base: Option<&KvBase>,
) -> Result<SeqKv> {
    let (nl, nh, hd) = (config.n_layers, config.n_kv_heads, config.head_dim);
    let row_len = nh * n_tokens * hd;
    let base = base.filter(|b| {
        device.is_cpu()
            && b.tokens == n_tokens
            && b.k.len() == nl
            && b.v.len() == nl
            && b.k16.len() == nl
            && b.v16.len() == nl
            && b.k.iter().chain(&b.v).all(|x| x.len() == row_len)
            && b.k16.iter().chain(&b.v16).all(|x| x.len() == row_len)
    });
    // Rows equal to the base's (K, V), only with a base.
    let mut same = base.map(|_| {
        (
            PresenceMask::none(nl, nh, n_tokens),
            PresenceMask::none(nl, nh, n_tokens),
        )
    });
    // With a base, where the CPU row kernels do all the reading (AVX2+FMA,
    // head dim 64), the rebuild is lazy: the imported rows do not go into the
    // F32 storage at all, which then starts at token `n_tokens`
    // (`SeqKv::f32_start`); the kernels read them from the BF16 copy or the
    // base, and only rows that differ from the base are written into the
    // copy, a layer's copy allocated only when one does. Rebuilding a handoff
    // of a 1 536-token SmolLM2 context then allocates and writes about what
    // was lost instead of 130 MB.
    let lazy = base.is_some() && hd == 64 && crate::model::kv::has_avx2_fma();
    let cap = SeqKv::capacity_for(n_tokens + 64);
    let f32_start = if lazy { n_tokens } else { 0 };
    // One zeroed allocation per layer (`vec![v; n]` would copy the first one's
    // zeros into every clone; fresh ones are zero pages until written).
    let zeros = |n: usize| (0..nl).map(|_| vec![0f32; n]).collect::<Vec<_>>();
    let rows = cap - f32_start;
    let (mut k, mut v) = (zeros(nh * rows * hd), zeros(nh * rows * hd));
    let copy_len = nh * n_tokens * hd;
    // Per (layer, head, token): a block covered it / a block covered it but
    // not all of its K and V bytes arrived.
    let mut covered = vec![false; nl * nh * n_tokens];
    let mut torn = vec![false; nl * nh * n_tokens];
    // While every block is BF16, the same values also go into a BF16 copy
    // (see `SeqKv`; zero-filled elements are BF16 numbers too).
    let copy = || {
        device.is_cpu().then(|| {
            (0..nl)
                .map(|_| {
                    if lazy {
                        Vec::new()
                    } else {
                        vec![0u16; copy_len]
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let (mut mk, mut mv) = (copy(), copy());
    for (bi, b) in blocks.enumerate() {
        if b.layer >= nl || b.n_kv_heads != nh || b.head_dim != hd {
            return Err(GpuError::KvTransfer(format!(
                "block {bi}: layer {} / {} heads / head dim {} do not match the model ({nl} layers, {nh} heads, {hd})",
                b.layer, b.n_kv_heads, b.head_dim
            )));
        }
        if b.start.checked_add(b.len).is_none_or(|end| end > n_tokens) {
            return Err(GpuError::KvTransfer(format!(
                "block {bi}: tokens {}..{} beyond {n_tokens}",
                b.start,
                b.start.saturating_add(b.len)
            )));
        }
        if b.dtype != KvDtype::Bf16 {
            if lazy {
                return Err(GpuError::KvTransfer(format!(
                    "block {bi}: a rebuild on a base takes BF16 blocks, not {:?}",
                    b.dtype
                )));
            }
            (mk, mv) = (None, None);
        }
        let esz = b.dtype.size();
        let expected = nh * b.len * hd * esz;
        if b.k.len() != expected || b.v.len() != expected {
            return Err(GpuError::KvTransfer(format!(
                "block {bi}: {} / {} bytes of K / V, expected {expected}",
                b.k.len(),
                b.v.len()
            )));
        }
        // Byte offsets over `k‖v` only grow (K, then V, each in order), so one
        // cursor walks the arrived ranges: `kept(a, e)` is whether bytes
        // `a..e` all arrived.
        let mut cursor = 0usize;
        let mut kept = |a: usize, e: usize| -> bool {
            let Some(ranges) = b.arrived else {
                return true;
            };
            while cursor < ranges.len() && ranges[cursor].end <= a {
                cursor += 1;
            }
            ranges
                .get(cursor)
                .is_some_and(|r| r.start <= a && e <= r.end)
        };
        let (same_k, same_v) = match same.as_mut() {
            Some((k, v)) => (Some(k), Some(v)),
            None => (None, None),
        };
        let sides = [
            (
                0,
                b.k,
                &mut k[b.layer],
                mk.as_mut().map(|m| &mut m[b.layer]),
                base.map(|x| x.k16[b.layer].as_slice()),
                same_k,
            ),
            (
                expected,
                b.v,
                &mut v[b.layer],
                mv.as_mut().map(|m| &mut m[b.layer]),
                base.map(|x| x.v16[b.layer].as_slice()),
                same_v,
            ),
        ];
        for (half, src, dst, mut mirror, base_rows, mut same) in sides {
            for h in 0..nh {
                for t in 0..b.len {
                    let s = (h * b.len + t) * hd;
                    let d = (h * cap + b.start + t) * hd;
                    let (a, e) = (s * esz, (s + hd) * esz);
                    let m = (h * n_tokens + b.start + t) * hd;
                    if lazy {
                        // `lazy` implies BF16 blocks, a copy and a base.
                        let (Some(mr), Some(br), Some(same)) =
                            (mirror.as_mut(), base_rows, same.as_mut())
                        else {
                            return Err(GpuError::KvTransfer("lazy rebuild without a base".into()));
                        };
                        let mut row = [0u16; 64];
                        let whole = kept(half + a, half + e);
                        if whole {
                            for (o, c) in row.iter_mut().zip(src[a..e].chunks_exact(2)) {
                                *o = u16::from_le_bytes([c[0], c[1]]);
                            }
                        } else {
                            torn[(b.layer * nh + h) * n_tokens + b.start + t] = true;
                            for (i, o) in row.iter_mut().enumerate() {
                                let at = a + i * 2;
                                if kept(half + at, half + at + 2) {
                                    *o = u16::from_le_bytes([src[at], src[at + 1]]);
                                }
                            }
                        }
                        if row[..] == br[m..m + hd] {
                            same.set(b.layer, h, b.start + t, true);
                        } else if !mr.is_empty() || row.iter().any(|&x| x != 0) {
                            // An all-zero row is what an empty (or fresh)
                            // copy already reads as: a layer whose own rows
                            // are all lost is never allocated.
                            if mr.is_empty() {
                                mr.resize(copy_len, 0);
                            }
                            mr[m..m + hd].copy_from_slice(&row);
                        }
                        continue;
                    }
                    let out = &mut dst[d..d + hd];
                    if kept(half + a, half + e) {
                        // The common case, a whole row: one tight loop.
                        for (o, c) in out.iter_mut().zip(src[a..e].chunks_exact(esz)) {
                            *o = element(c, b.dtype);
                        }
                    } else {
                        torn[(b.layer * nh + h) * n_tokens + b.start + t] = true;
                        for (i, o) in out.iter_mut().enumerate() {
                            let at = a + i * esz;
                            *o = if kept(half + at, half + at + esz) {
                                element(&src[at..at + esz], b.dtype)
                            } else {
                                0.0
                            };
                        }
                    }
                    if let Some(mr) = mirror.as_mut() {
                        // Exact: a BF16 value widened to F32 has 16 zero low bits.
                        for (c, o) in mr[m..m + hd].iter_mut().zip(out.iter()) {
                            *c = (o.to_bits() >> 16) as u16;
                        }
                        if let (Some(br), Some(same)) = (base_rows, same.as_mut()) {
                            same.set(b.layer, h, b.start + t, mr[m..m + hd] == br[m..m + hd]);
                        }
                    }
                }
            }
        }
        for h in 0..nh {
            let row = (b.layer * nh + h) * n_tokens + b.start;
            covered[row..row + b.len].iter_mut().for_each(|c| *c = true);
        }
    }
    let mut layers = Vec::with_capacity(nl);
    for (l, (kl, vl)) in k.iter_mut().zip(v.iter_mut()).enumerate() {
        let mut bias = vec![0f32; nh * cap];
        let mut any_missing = false;
        for h in 0..nh {
            for t in 0..n_tokens {
                let i = (l * nh + h) * n_tokens + t;
                let present = covered[i]
                    && !(mode == MissingRows::Mask && torn[i])
                    && presence.is_none_or(|p| p.is_present(l, h, t));
                if !present {
                    any_missing = true;
                    if !lazy {
                        let r = (h * cap + t) * hd;
                        kl[r..r + hd].iter_mut().for_each(|x| *x = 0.0);
                        vl[r..r + hd].iter_mut().for_each(|x| *x = 0.0);
                    }
                    let m = (h * n_tokens + t) * hd;
                    for mirror in [&mut mk, &mut mv].into_iter().flatten() {
                        if let Some(row) = mirror[l].get_mut(m..m + hd) {
                            row.iter_mut().for_each(|x| *x = 0);
                        }
                    }
                    if let Some((sk, sv)) = same.as_mut() {
                        sk.set(l, h, t, false);
                        sv.set(l, h, t, false);
                    }
                    bias[h * cap + t] = f32::NEG_INFINITY;
                }
            }
        }
        let bias = if any_missing && mode == MissingRows::Mask {
            Some(Tensor::from_vec(bias, (nh, 1, cap), device).ctx("kv mask")?)
        } else {
            None
        };
        layers.push(bias);
    }
    let bf16 = match (mk, mv) {
        (Some(k), Some(v)) => Some(Bf16Prefix {
            shared: base.zip(same).map(|(b, (same_k, same_v))| {
                SharedRows::new(b.clone(), same_k, same_v, &k, &v, hd)
            }),
            tokens: n_tokens,
            valid: n_tokens,
            sparse: lazy,
            k: k.into_iter().map(Arc::new).collect(),
            v: v.into_iter().map(Arc::new).collect(),
        }),
        _ => None,
    };
    let mut out = Vec::with_capacity(nl);
    for ((kl, vl), bias) in k.into_iter().zip(v).zip(layers) {
        out.push(LayerKv {
            k: Tensor::from_vec(kl, (nh, rows, hd), device).ctx("kv import")?,
            v: Tensor::from_vec(vl, (nh, rows, hd), device).ctx("kv import")?,
            bias,
        });
    }
    Ok(SeqKv::from_layers(
        config, out, bf16, n_tokens, cap, device, f32_start,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{load_tiny, Llama, Phase, SeqInput, WeightLayout};
    use candle_core::Device;

    fn model() -> Llama {
        load_tiny(
            11,
            &Device::Cpu,
            Some(WeightLayout::for_device(&Device::Cpu)),
        )
        .unwrap()
        .model
    }

    fn prefill(m: &Llama, prompt: &[u32]) -> (SeqKv, u32) {
        let mut kv = m.new_kv(0).unwrap();
        let t = m
            .greedy(
                &mut [SeqInput {
                    tokens: prompt,
                    kv: &mut kv,
                }],
                Phase::Prefill,
            )
            .unwrap()[0];
        (kv, t)
    }

    fn decode_n(m: &Llama, kv: &mut SeqKv, mut tok: u32, n: usize) -> Vec<u32> {
        let mut out = vec![];
        for _ in 0..n {
            tok = m
                .greedy(&mut [SeqInput { tokens: &[tok], kv }], Phase::Decode)
                .unwrap()[0];
            out.push(tok);
        }
        out
    }

    fn logits(m: &Llama, kv: &mut SeqKv, tok: u32) -> Vec<f32> {
        m.forward(&mut [SeqInput { tokens: &[tok], kv }], Phase::Decode)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    const PROMPT: [u32; 24] = [
        5, 80, 81, 9, 200, 31, 7, 77, 150, 151, 3, 44, 90, 12, 13, 250, 66, 67, 8, 99, 100, 101, 4,
        60,
    ];

    #[test]
    fn export_import_roundtrip_decodes_the_same() {
        let m = model();
        let c = m.config().clone();
        let (kv, t) = prefill(&m, &PROMPT);
        let mut reference = kv.clone();
        let want = decode_n(&m, &mut reference, t, 8);
        // Export in two token ranges and all layers, F32 (exact).
        let mut blocks = export(&kv, 0..c.n_layers, 0..10, KvDtype::F32).unwrap();
        blocks.extend(export(&kv, 0..c.n_layers, 10..24, KvDtype::F32).unwrap());
        assert_eq!(blocks[0].k.len(), c.n_kv_heads * 10 * c.head_dim * 4);
        let mut imported = import(&c, &Device::Cpu, 24, &blocks, None, MissingRows::Mask).unwrap();
        assert!(!imported.has_mask());
        assert_eq!(decode_n(&m, &mut imported, t, 8), want);
        // BF16 halves the bytes and stays within BF16 precision.
        let b16 = export(&kv, 0..c.n_layers, 0..24, KvDtype::Bf16).unwrap();
        assert_eq!(b16[0].k.len() * 2, c.n_kv_heads * 24 * c.head_dim * 4);
        let back = import(&c, &Device::Cpu, 24, &b16, None, MissingRows::ZeroFill).unwrap();
        let a = export(&kv, 1..2, 0..24, KvDtype::F32).unwrap();
        let b = export(&back, 1..2, 0..24, KvDtype::F32).unwrap();
        let (a, b) = (decode(&a[0].k, KvDtype::F32), decode(&b[0].k, KvDtype::F32));
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= x.abs() / 128.0 + 1e-6, "{x} vs {y}");
        }
    }

    #[test]
    fn missing_rows_mask_and_zero_fill_differ_from_full() {
        let m = model();
        let c = m.config().clone();
        let (kv, t) = prefill(&m, &PROMPT);
        let blocks = export(&kv, 0..c.n_layers, 0..24, KvDtype::Bf16).unwrap();
        let mut presence = PresenceMask::all(c.n_layers, c.n_kv_heads, 24);
        for tok in 4..12 {
            presence.set(0, 0, tok, false);
            presence.set(1, 1, tok, false);
        }
        assert_eq!(presence.missing(), 16);
        let mut full = import(&c, &Device::Cpu, 24, &blocks, None, MissingRows::Mask).unwrap();
        let mut masked = import(
            &c,
            &Device::Cpu,
            24,
            &blocks,
            Some(&presence),
            MissingRows::Mask,
        )
        .unwrap();
        let mut zeroed = import(
            &c,
            &Device::Cpu,
            24,
            &blocks,
            Some(&presence),
            MissingRows::ZeroFill,
        )
        .unwrap();
        assert!(masked.has_mask() && !zeroed.has_mask());
        let lf = logits(&m, &mut full, t);
        let lm = logits(&m, &mut masked, t);
        let lz = logits(&m, &mut zeroed, t);
        let diff = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        assert!(lm.iter().chain(&lz).all(|x| x.is_finite()));
        assert!(diff(&lf, &lm) > 1e-4, "mask mode must change the output");
        assert!(diff(&lf, &lz) > 1e-4, "zero-fill must change the output");
        assert!(diff(&lm, &lz) > 1e-4, "the two modes differ");
        // Both keep decoding (the mask grows with the cache).
        assert_eq!(decode_n(&m, &mut masked, t, 70).len(), 70);
        assert_eq!(decode_n(&m, &mut zeroed, t, 3).len(), 3);
        // Blocks missing entirely are missing rows too.
        let partial: Vec<KvBlock> = blocks.iter().filter(|b| b.layer != 1).cloned().collect();
        let mut p = import(&c, &Device::Cpu, 24, &partial, None, MissingRows::Mask).unwrap();
        assert!(diff(&lf, &logits(&m, &mut p, t)) > 1e-4);
    }

    /// Import widens every one of the 65 536 BF16 patterns (NaNs included)
    /// exactly as `element` does, and the BF16 copy holds the widened values'
    /// upper halves.
    #[test]
    fn bf16_rows_widen_every_pattern_as_element_does() {
        let mut c = LlamaConfig::tiny(100);
        (c.n_layers, c.n_kv_heads, c.head_dim) = (1, 2, 64);
        let (nh, hd, len) = (2, 64, 256);
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|x| x.to_le_bytes()).collect();
        let (k, v) = src.split_at(src.len() / 2);
        let block = KvBlock {
            layer: 0,
            start: 0,
            len,
            n_kv_heads: nh,
            head_dim: hd,
            dtype: KvDtype::Bf16,
            k: k.to_vec(),
            v: v.to_vec(),
        };
        let kv = import(&c, &Device::Cpu, len, &[block], None, MissingRows::ZeroFill).unwrap();
        let copy = kv.bf16.as_ref().unwrap();
        let cap = kv.capacity;
        for (side, (bytes, t, m)) in [
            (k, &kv.layers[0].k, &copy.k[0]),
            (v, &kv.layers[0].v, &copy.v[0]),
        ]
        .into_iter()
        .enumerate()
        {
            let stored: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            for (i, c) in bytes.chunks_exact(2).enumerate() {
                let (h, tok, d) = (i / (len * hd), i / hd % len, i % hd);
                let want = element(c, KvDtype::Bf16).to_bits();
                let got = stored[(h * cap + tok) * hd + d].to_bits();
                assert_eq!(got, want, "side {side}, pattern {i:#06x}");
                assert_eq!(u32::from(m[i]) << 16, want, "copy of {i:#06x}");
            }
        }
    }

    #[test]
    fn bad_ranges_are_errors() {
        let m = model();
        let c = m.config().clone();
        let (kv, _) = prefill(&m, &PROMPT);
        assert!(export(&kv, 0..9, 0..4, KvDtype::F32).is_err());
        assert!(export(&kv, 0..1, 0..40, KvDtype::F32).is_err());
        let mut b = export(&kv, 0..1, 0..4, KvDtype::F32).unwrap();
        b[0].k.pop();
        let e = import(&c, &Device::Cpu, 24, &b, None, MissingRows::Mask).unwrap_err();
        assert!(e.to_string().contains("bytes"), "{e}");
        assert!(import(
            &c,
            &Device::Cpu,
            2,
            &export(&kv, 0..1, 0..4, KvDtype::F32).unwrap(),
            None,
            MissingRows::Mask
        )
        .is_err());
    }
}
