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
//!
//! A cache imported from BF16 blocks also keeps a [`Bf16Prefix`]: the same
//! imported values, two bytes each. They are exactly BF16 numbers, so the CPU
//! attention kernels read the copy (converting a tile at a time into F32) and
//! get the same bits at half the memory traffic — what a one-token decode step
//! on a 1 536-token cache is bound by.
//!
//! Caches rebuilt from one context's handoffs differ from the full cache only
//! where something was lost, so each may also point at a [`KvBase`] (the full
//! cache's imported rows, F32) with one bit per (layer, head, token) row whose
//! K (or V) is bit for bit the base's ([`SharedRows`]). The tiled kernel reads
//! those rows from the base — a 64-row tile of them where it lies, without
//! widening or copying — and so a batch of such caches reads one context's
//! rows, mostly from the CPU's caches, instead of each its own copy from
//! memory. The same values, so the same bits. Such a rebuild can be lazy: its
//! F32 storage then starts at the end of the context ([`SeqKv::f32_start`]),
//! its copy holds only the rows that differ from the base, and the few paths
//! that read F32 rows inside the context materialize them first.

use std::sync::Arc;

use candle_core::{DType, Device, Layout, Storage, Tensor};

use crate::error::{CandleContext, GpuError, Result};
use crate::kv_transfer::PresenceMask;
use crate::model::config::LlamaConfig;

/// One layer's K and V storage (and optional presence bias).
#[derive(Debug, Clone)]
pub struct LayerKv {
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) bias: Option<Tensor>,
}

/// BF16 copies of the first `valid` tokens of every layer's K and V, each
/// `(n_kv_heads, tokens, head_dim)`, bit for bit the upper halves of the F32
/// storage (module docs). Tokens are overwritten only by an append at a
/// position below `valid`, which shortens it.
#[derive(Debug, Clone)]
pub(crate) struct Bf16Prefix {
    pub(crate) tokens: usize,
    pub(crate) valid: usize,
    /// The copy holds only the rows that differ from the base ([`SharedRows`]):
    /// zeros where a row is shared, and a layer of which no row differs, or
    /// every row that differs is zero, may be empty (all zeros).
    pub(crate) sparse: bool,
    pub(crate) k: Vec<Arc<Vec<u16>>>,
    pub(crate) v: Vec<Arc<Vec<u16>>>,
    /// Rows equal to a base's, read from it (module docs).
    pub(crate) shared: Option<SharedRows>,
}

/// The first `tokens` tokens of a full (every block complete) cache, shared by
/// the caches rebuilt from its handoffs (module docs): per layer K and V as
/// F32 `(n_kv_heads, tokens, head_dim)`, so a tile of shared rows is used where
/// it lies, without a conversion or a copy (and as BF16, to compare with).
#[derive(Debug, Clone)]
pub struct KvBase {
    pub(crate) tokens: usize,
    pub(crate) k: Vec<Arc<Vec<f32>>>,
    pub(crate) v: Vec<Arc<Vec<f32>>>,
    /// The same as BF16, what a rebuild compares its rows with.
    pub(crate) k16: Vec<Arc<Vec<u16>>>,
    pub(crate) v16: Vec<Arc<Vec<u16>>>,
}

impl KvBase {
    /// Tokens the base covers.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

/// A [`KvBase`] and which of this cache's (layer, head, token) rows equal it,
/// for K and for V ("present" = read from the base).
#[derive(Debug, Clone)]
pub(crate) struct SharedRows {
    pub(crate) base: KvBase,
    pub(crate) same_k: PresenceMask,
    pub(crate) same_v: PresenceMask,
    /// Per (layer, head), at `layer · n_kv_heads + head`: the runs of tokens
    /// whose K (V) is *not* the base's, in order — what the row kernels walk
    /// instead of asking the masks row by row.
    pub(crate) own_k: Vec<Vec<OwnRun>>,
    pub(crate) own_v: Vec<Vec<OwnRun>>,
}

/// Consecutive tokens of one (layer, head) whose K (or V) rows are not the
/// base's ([`SharedRows`]). `zero`: every element of these rows is +0 (all
/// bits 0) — what a zero-fill rebuild leaves where a row was lost — so the row
/// kernel knows them without reading them (`attend_rows`: a +0 key's score
/// and a +0 value's share of the weighted sum are known exactly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnRun {
    pub(crate) rows: std::ops::Range<u32>,
    pub(crate) zero: bool,
}

impl SharedRows {
    /// Shares `base`'s rows marked in `same_k` / `same_v`; `copy_k` /
    /// `copy_v` are the cache's own BF16 rows per layer
    /// (`(n_kv_heads, tokens, head_dim)`, or empty: all zeros), which tell
    /// the zero runs.
    pub(crate) fn new(
        base: KvBase,
        same_k: PresenceMask,
        same_v: PresenceMask,
        copy_k: &[Vec<u16>],
        copy_v: &[Vec<u16>],
        head_dim: usize,
    ) -> Self {
        let runs = |same: &PresenceMask, copy: &[Vec<u16>]| -> Vec<Vec<OwnRun>> {
            let (nl, nh, nt) = same.shape();
            let mut out = Vec::with_capacity(nl * nh);
            for l in 0..nl {
                let rows = copy.get(l).map_or(&[][..], |c| c.as_slice());
                for h in 0..nh {
                    let mut runs: Vec<OwnRun> = Vec::new();
                    for t in 0..nt {
                        if same.is_present(l, h, t) {
                            continue;
                        }
                        let zero = rows
                            .get((h * nt + t) * head_dim..(h * nt + t + 1) * head_dim)
                            .is_none_or(|r| r.iter().all(|&x| x == 0));
                        let t = t as u32;
                        match runs.last_mut() {
                            Some(r) if r.rows.end == t && r.zero == zero => r.rows.end = t + 1,
                            _ => runs.push(OwnRun {
                                rows: t..t + 1,
                                zero,
                            }),
                        }
                    }
                    out.push(runs);
                }
            }
            out
        };
        SharedRows {
            own_k: runs(&same_k, copy_k),
            own_v: runs(&same_v, copy_v),
            base,
            same_k,
            same_v,
        }
    }
}

/// The KV cache of one sequence.
#[derive(Debug, Clone)]
pub struct SeqKv {
    pub(crate) layers: Vec<LayerKv>,
    /// See [`Bf16Prefix`]; CPU only.
    pub(crate) bf16: Option<Bf16Prefix>,
    pub(crate) len: usize,
    pub(crate) capacity: usize,
    pub(crate) n_kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) device: Device,
    /// The F32 storage starts at this token: its row `r` holds token
    /// `f32_start + r`, and the tokens below live only in the BF16 copy and
    /// its base (a lazy rebuild, see [`crate::kv_transfer`]), where the row
    /// kernels read them. Paths that need every F32 row call
    /// [`SeqKv::materialize_f32`] first. 0 for every other cache.
    pub(crate) f32_start: usize,
}

const MIN_CAPACITY: usize = 64;

impl SeqKv {
    /// An empty cache with room for `capacity` tokens before it grows.
    pub fn new(config: &LlamaConfig, capacity: usize, device: &Device) -> Result<Self> {
        let capacity = Self::capacity_for(capacity);
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
            bf16: None,
            len: 0,
            capacity,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            device: device.clone(),
            f32_start: 0,
        })
    }

    /// The capacity [`SeqKv::new`] gives a cache asked for room for `tokens`.
    pub(crate) fn capacity_for(tokens: usize) -> usize {
        tokens.max(MIN_CAPACITY)
    }

    /// A cache of `len` valid tokens over layers already laid out
    /// `(n_kv_heads, capacity − f32_start, head_dim)` (see
    /// [`crate::kv_transfer::import`] and [`SeqKv::f32_start`]).
    pub(crate) fn from_layers(
        config: &LlamaConfig,
        layers: Vec<LayerKv>,
        bf16: Option<Bf16Prefix>,
        len: usize,
        capacity: usize,
        device: &Device,
        f32_start: usize,
    ) -> Self {
        SeqKv {
            layers,
            bf16,
            len,
            capacity,
            n_kv_heads: config.n_kv_heads,
            head_dim: config.head_dim,
            device: device.clone(),
            f32_start,
        }
    }

    /// This cache's imported tokens as a base for caches rebuilt from the same
    /// context (module docs); `None` unless it was imported from BF16 blocks
    /// on the CPU (the kernels share rows only below a BF16 copy) and no
    /// imported token was overwritten since.
    pub fn kv_base(&self) -> Option<KvBase> {
        let p = self.bf16.as_ref()?;
        if p.valid != p.tokens {
            return None;
        }
        // A lazy rebuild's copy holds zeros where it shares the base's rows:
        // those come from the base.
        let merged = |copy: &[Arc<Vec<u16>>], k: bool| -> Vec<Arc<Vec<u16>>> {
            let Some(s) = p.shared.as_ref().filter(|_| p.sparse) else {
                return copy.to_vec();
            };
            let (hd, nh) = (self.head_dim, self.n_kv_heads);
            copy.iter()
                .enumerate()
                .map(|(li, own)| {
                    let (base, same) = if k {
                        (&s.base.k16[li], &s.same_k)
                    } else {
                        (&s.base.v16[li], &s.same_v)
                    };
                    let mut out = if own.is_empty() {
                        vec![0; nh * p.tokens * hd]
                    } else {
                        own.as_ref().clone()
                    };
                    for h in 0..nh {
                        for t in 0..p.tokens {
                            if same.is_present(li, h, t) {
                                let r = (h * p.tokens + t) * hd;
                                out[r..r + hd].copy_from_slice(&base[r..r + hd]);
                            }
                        }
                    }
                    Arc::new(out)
                })
                .collect()
        };
        let (k16, v16) = (merged(&p.k, true), merged(&p.v, false));
        let side = |copy: &[Arc<Vec<u16>>]| -> Vec<Arc<Vec<f32>>> {
            copy.iter()
                .map(|l| {
                    Arc::new(
                        l.iter()
                            .map(|&x| f32::from_bits(u32::from(x) << 16))
                            .collect(),
                    )
                })
                .collect()
        };
        // The copy holds exactly the F32 values (BF16 numbers).
        Some(KvBase {
            tokens: p.tokens,
            k: side(&k16),
            v: side(&v16),
            k16,
            v16,
        })
    }

    /// Gives the F32 storage every row again ([`SeqKv::f32_start`] → 0): the
    /// rows below the start from the BF16 copy and its base. A no-op for any
    /// other cache. Paths that read F32 rows below the start (the multi-row
    /// tensor attention, export, an append below it) call it first.
    pub(crate) fn materialize_f32(&mut self) -> Result<()> {
        let fs = self.f32_start;
        if fs == 0 {
            return Ok(());
        }
        let p = self
            .bf16
            .as_ref()
            .filter(|p| p.valid >= fs)
            .ok_or_else(|| {
                GpuError::Engine("a cache's F32 rows start past its BF16 copy".into())
            })?;
        let (nh, hd, cap) = (self.n_kv_heads, self.head_dim, self.capacity);
        let widen = |x: u16| f32::from_bits(u32::from(x) << 16);
        let own_rows = self.len.saturating_sub(fs);
        for (li, l) in self.layers.iter_mut().enumerate() {
            for (side, t) in [&mut l.k, &mut l.v].into_iter().enumerate() {
                let tail: Vec<f32> = t
                    .flatten_all()
                    .and_then(|x| x.to_vec1())
                    .ctx("kv materialize")?;
                let mut data = vec![0f32; nh * cap * hd];
                let copy = if side == 0 { &p.k[li] } else { &p.v[li] };
                let shared = p.shared.as_ref().map(|s| {
                    if side == 0 {
                        (&s.base.k[li], &s.same_k)
                    } else {
                        (&s.base.v[li], &s.same_v)
                    }
                });
                for h in 0..nh {
                    for tok in 0..fs {
                        let src = (h * p.tokens + tok) * hd;
                        let dst = &mut data[(h * cap + tok) * hd..][..hd];
                        match shared {
                            Some((base, same)) if same.is_present(li, h, tok) => {
                                dst.copy_from_slice(&base[src..src + hd]);
                            }
                            _ if copy.is_empty() => {}
                            _ => {
                                for (d, &x) in dst.iter_mut().zip(&copy[src..src + hd]) {
                                    *d = widen(x);
                                }
                            }
                        }
                    }
                    let from = &tail[h * (cap - fs) * hd..][..own_rows * hd];
                    data[(h * cap + fs) * hd..][..own_rows * hd].copy_from_slice(from);
                }
                *t = Tensor::from_vec(data, (nh, cap, hd), &self.device).ctx("kv materialize")?;
            }
        }
        self.f32_start = 0;
        Ok(())
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
        let shape = (self.n_kv_heads, cap - self.f32_start, self.head_dim);
        let rows = self.len.saturating_sub(self.f32_start);
        for l in &mut self.layers {
            let k = Tensor::zeros(shape, DType::F32, &self.device).ctx("kv grow")?;
            let v = Tensor::zeros(shape, DType::F32, &self.device).ctx("kv grow")?;
            if rows > 0 {
                k.slice_set(
                    &l.k.narrow(1, 0, rows)
                        .ctx("kv grow")?
                        .contiguous()
                        .ctx("kv grow")?,
                    1,
                    0,
                )
                .ctx("kv grow")?;
                v.slice_set(
                    &l.v.narrow(1, 0, rows)
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
        if self.len < self.f32_start {
            // Overwriting tokens that only the BF16 copy holds.
            self.materialize_f32()?;
        }
        if let Some(p) = &mut self.bf16 {
            p.valid = p.valid.min(self.len);
        }
        let at = self.len - self.f32_start;
        let l = &mut self.layers[layer];
        l.k.slice_set(k, 1, at).ctx("kv append k")?;
        l.v.slice_set(v, 1, at).ctx("kv append v")?;
        Ok(())
    }

    /// The first layer where this cache is not bit for bit its base
    /// ([`SharedRows`]; `n_layers` if it is in every layer), for a cache
    /// rebuilt on a base and still holding just the imported tokens; `None`
    /// for any other.
    pub(crate) fn first_layer_off_base(&self) -> Option<usize> {
        let p = self.bf16.as_ref()?;
        let s = p.shared.as_ref()?;
        if p.valid != p.tokens || self.len != p.tokens || s.base.tokens != p.tokens {
            return None;
        }
        let nh = self.n_kv_heads;
        let off = |l: usize| {
            (l * nh..(l + 1) * nh).any(|i| !s.own_k[i].is_empty() || !s.own_v[i].is_empty())
        };
        Some(
            (0..self.layers.len())
                .find(|&l| off(l))
                .unwrap_or(self.layers.len()),
        )
    }

    /// K and V rows `from..from + t` of `layer` as stored, each
    /// `(n_kv_heads, t, head_dim)` (what [`SeqKv::append`] takes); they must
    /// lie in the F32 storage and below the length.
    pub(crate) fn stored_rows(
        &self,
        layer: usize,
        from: usize,
        t: usize,
    ) -> Result<(Tensor, Tensor)> {
        if layer >= self.layers.len() || from < self.f32_start || from + t > self.len {
            return Err(GpuError::Engine(format!(
                "rows {from}..{} of layer {layer} are not stored (F32 rows from {}, length {})",
                from + t,
                self.f32_start,
                self.len
            )));
        }
        let l = &self.layers[layer];
        let at = from - self.f32_start;
        let rows = |x: &Tensor| x.narrow(1, at, t).and_then(|r| r.contiguous());
        Ok((
            rows(&l.k).ctx("stored k rows")?,
            rows(&l.v).ctx("stored v rows")?,
        ))
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
        if self.f32_start > 0 {
            return Err(GpuError::Engine(
                "a tensor view of F32 storage that starts past token 0".into(),
            ));
        }
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

    /// Forgets every token from position `len` on (no-op if `len ≥ self.len()`):
    /// the next appended token goes to position `len`, over the old rows.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Attention of one new query row (CPU only) against `layer`'s first `n`
    /// tokens (the query's own, freshly appended row last), on the raw F32
    /// storage: `q` holds `n_kv_heads · rep` heads of `head_dim` (scaled and
    /// rotated; head `h · rep + r` uses KV head `h`), `out` receives the same
    /// layout. A one-token decode step uses `n = len + 1`; row `i` of a
    /// multi-row pass computed as decode uses `n = len + i + 1` and gets the
    /// same arithmetic as if it had been decoded alone at that position. The
    /// arithmetic depends only on this sequence and `n`, not on the batch.
    pub(crate) fn attend_row(
        &self,
        layer: usize,
        n: usize,
        q: &[f32],
        rep: usize,
        scores: &mut Vec<f32>,
        out: &mut [f32],
    ) -> Result<()> {
        let l = &self.layers[layer];
        let (hd, nkv, cap) = (self.head_dim, self.n_kv_heads, self.capacity);
        if q.len() != nkv * rep * hd || out.len() != q.len() || n > cap || n == 0 {
            return Err(GpuError::Engine("attention row shape".into()));
        }
        if self.f32_start > 0 {
            return Err(GpuError::Engine(
                "row attention on F32 storage that starts past token 0".into(),
            ));
        }
        let (ks, kl) = l.k.storage_and_layout();
        let (vs, vl) = l.v.storage_and_layout();
        let kd = cpu_f32(&ks, kl, nkv * cap * hd)?;
        let vd = cpu_f32(&vs, vl, nkv * cap * hd)?;
        let bias = l.bias.as_ref().map(|b| b.storage_and_layout());
        let bd = match &bias {
            Some((bs, bl)) => Some(cpu_f32(bs, bl, nkv * cap)?),
            None => None,
        };
        scores.resize(n, 0.0);
        let simd = has_avx2_fma();
        for h in 0..nkv {
            let kh = &kd[h * cap * hd..][..n * hd];
            let vh = &vd[h * cap * hd..][..n * hd];
            let bh = bd.map(|b| &b[h * cap..][..n]);
            for r in 0..rep {
                let head = (h * rep + r) * hd;
                let qh = &q[head..head + hd];
                let mut max = f32::NEG_INFINITY;
                for (p, (s, kr)) in scores.iter_mut().zip(kh.chunks_exact(hd)).enumerate() {
                    let mut v = dot(simd, qh, kr);
                    if let Some(b) = bh {
                        v += b[p];
                    }
                    *s = v;
                    max = max.max(v);
                }
                exp_shifted(simd, scores, max);
                let mut sum = 0f32;
                for s in scores.iter() {
                    sum += *s;
                }
                let o = &mut out[head..head + hd];
                weighted_sum(simd, o, scores, vh);
                let inv = 1.0 / sum;
                for od in o.iter_mut() {
                    *od *= inv;
                }
            }
        }
        Ok(())
    }

    /// Bytes this cache's valid tokens take as F32.
    pub fn bytes_f32(&self) -> u64 {
        (2 * self.layers.len() * self.n_kv_heads * self.head_dim * 4 * self.len) as u64
    }
}

/// The contiguous F32 CPU data of a tensor of `len` elements.
pub(crate) fn cpu_f32<'a>(s: &'a Storage, l: &Layout, len: usize) -> Result<&'a [f32]> {
    let Storage::Cpu(c) = s else {
        return Err(GpuError::Engine("raw attention needs a CPU cache".into()));
    };
    let d = c.as_slice::<f32>().ctx("kv storage")?;
    match l.contiguous_offsets() {
        Some((a, b)) if b - a == len && b <= d.len() => Ok(&d[a..b]),
        _ => Err(GpuError::Engine("kv storage is not contiguous".into())),
    }
}

pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `s[i] = exp(s[i] − max)`, the softmax's numerators: libm's `expf` bits
/// either way (`simd` must be [`has_avx2_fma`]); with AVX2+FMA and glibc,
/// whose `expf` is the one `expf_avx2` reproduces, four lanes at a time.
pub(crate) fn exp_shifted(simd: bool, s: &mut [f32], max: f32) {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    {
        if simd {
            // SAFETY: AVX2 and FMA were detected (`simd`).
            unsafe { crate::model::expf_avx2::exp_shifted(s, max) };
            return;
        }
    }
    let _ = simd;
    for x in s.iter_mut() {
        *x = (*x - max).exp();
    }
}

/// Dot product (a fixed order for a given `simd`; `simd` must be
/// [`has_avx2_fma`]).
fn dot(simd: bool, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if simd && a.len() == b.len() && a.len().is_multiple_of(16) {
            // SAFETY: AVX2 and FMA were detected (`simd`); lengths checked.
            return unsafe { dot_avx2(a, b) };
        }
    }
    let _ = simd;
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// # Safety
/// AVX2 and FMA must be available; `a.len() == b.len()`, a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut s0 = _mm256_setzero_ps();
    let mut s1 = _mm256_setzero_ps();
    let mut i = 0;
    while i < a.len() {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
        s1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(pa.add(i + 8)),
            _mm256_loadu_ps(pb.add(i + 8)),
            s1,
        );
        i += 16;
    }
    let s = _mm256_add_ps(s0, s1);
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    _mm_cvtss_f32(h)
}

/// `o = Σ_p w[p] · v[p]` over the rows `v[p]` of `vs` (each `o.len()` long),
/// accumulated in row order from 0 — bit for bit a zeroed `o` followed by
/// [`axpy`] per row. For 64-wide rows (SmolLM2's head dim) with AVX2 the 64
/// sums stay in 8 registers instead of being loaded and stored for every row.
fn weighted_sum(simd: bool, o: &mut [f32], w: &[f32], vs: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if simd && o.len() == 64 && vs.len() >= w.len() * 64 {
            // SAFETY: AVX2 and FMA were detected (`simd`); lengths checked.
            unsafe { weighted_sum64_avx2(o, w, vs) };
            return;
        }
    }
    o.fill(0.0);
    let n = o.len().max(1);
    for (a, vr) in w.iter().zip(vs.chunks_exact(n)) {
        axpy(simd, o, *a, vr);
    }
}

/// # Safety
/// AVX2 and FMA must be available; `o.len() == 64`, `vs.len() ≥ 64 · w.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum64_avx2(o: &mut [f32], w: &[f32], vs: &[f32]) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 8];
    let pv = vs.as_ptr();
    for (p, &a) in w.iter().enumerate() {
        let av = _mm256_set1_ps(a);
        let row = pv.add(p * 64);
        for (j, r) in acc.iter_mut().enumerate() {
            // Same operation and order as `axpy_avx2`: fma(a, v, o).
            *r = _mm256_fmadd_ps(av, _mm256_loadu_ps(row.add(j * 8)), *r);
        }
    }
    let po = o.as_mut_ptr();
    for (j, r) in acc.iter().enumerate() {
        _mm256_storeu_ps(po.add(j * 8), *r);
    }
}

/// `o += a · v` (`simd` must be [`has_avx2_fma`]).
fn axpy(simd: bool, o: &mut [f32], a: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if simd && o.len() == v.len() && o.len().is_multiple_of(8) {
            // SAFETY: AVX2 and FMA were detected (`simd`); lengths checked.
            unsafe { axpy_avx2(o, a, v) };
            return;
        }
    }
    let _ = simd;
    for (od, vv) in o.iter_mut().zip(v) {
        *od += a * vv;
    }
}

/// # Safety
/// AVX2 and FMA must be available; `o.len() == v.len()`, a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(o: &mut [f32], a: f32, v: &[f32]) {
    use std::arch::x86_64::*;
    let av = _mm256_set1_ps(a);
    let (po, pv) = (o.as_mut_ptr(), v.as_ptr());
    let mut i = 0;
    while i < o.len() {
        let r = _mm256_fmadd_ps(av, _mm256_loadu_ps(pv.add(i)), _mm256_loadu_ps(po.add(i)));
        _mm256_storeu_ps(po.add(i), r);
        i += 8;
    }
}

#[cfg(test)]
mod kernel_tests {
    use super::*;

    /// The register-held weighted sum is bit for bit the zeroed output plus
    /// one `axpy` per row, on values of both signs over a wide range.
    #[test]
    fn weighted_sum_equals_axpy_per_row() {
        let simd = has_avx2_fma();
        let mut x = 0x9e37_79b9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f32::from_bits((x & 0x807f_ffff) | (((x >> 23) % 40 + 100) << 23))
        };
        for rows in [0usize, 1, 7, 300] {
            for width in [64usize, 16] {
                let vs: Vec<f32> = (0..rows * width).map(|_| next()).collect();
                let w: Vec<f32> = (0..rows).map(|_| next()).collect();
                let mut fast = vec![f32::NAN; width];
                weighted_sum(simd, &mut fast, &w, &vs);
                let mut slow = vec![0f32; width];
                for (a, vr) in w.iter().zip(vs.chunks_exact(width)) {
                    axpy(simd, &mut slow, *a, vr);
                }
                assert!(
                    fast.iter()
                        .zip(&slow)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{rows} rows × {width}"
                );
            }
        }
    }
}
