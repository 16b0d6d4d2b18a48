//! An int8 weight matrix multiplied against int8-quantized activations, with
//! an AVX-512 VNNI kernel, an AVX2 kernel and a scalar path, all giving the
//! same bits.
//!
//! [`crate::model::cpu_q8::Q8Matrix`] keeps the activations F32, so its inner
//! loop is one F32 FMA per weight: 16 multiply-adds per cycle on a core with
//! two 256-bit FMA pipes. Here each activation row is quantized like the
//! weights — blocks of 32 `i8` with one `f32` scale, absmax / 127 (the Q8_0
//! rule llama.cpp and candle use for their CPU quantized matmuls), rounded
//! half to even — and a block's dot product is exact integer arithmetic:
//! `vpdpbusd` on a 512-bit register multiplies 64 byte pairs and adds them
//! into 16 `i32` lanes in one instruction.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, so the activations go in
//! offset by 128 (`u = q + 128`, in 1..=255) and each block's accumulator
//! starts at `−128 · Σ w` of its column, which the matrix keeps per (block,
//! column): the integer result is then exactly `Σ q·w`. Without VNNI an AVX2
//! kernel (`pmaddubsw` on |q| and weights carrying q's sign: products ≤ 127²,
//! so no saturation) computes the same integers, and so does the scalar path.
//! Weights are stored in groups of 16 output columns, four consecutive `k` of
//! one column in one 32-bit lane, so one broadcast 32-bit word of activations
//! meets 16 columns' weights (no horizontal reduction).
//!
//! Every output element is the same chain over its blocks `b = 0, 1, …`:
//! `acc = fma((i as f32) · w_scale[b], x_scale[b], acc)` with `i` the block's
//! exact integer dot product — whatever kernel, tiling or batch computes it —
//! so a sequence's result does not depend on its batch or on the CPU's
//! extensions (NaN and infinite activations included: a block holding one
//! has a non-finite scale in every path).

use rayon::prelude::*;

use super::column_chunks::by_column_chunks;
use super::cpu_q8::{block_scale, scale_of};

const BLOCK: usize = 32;
/// Output columns per interleaved group (sixteen `i32` lanes of a zmm register).
const GROUP: usize = 16;
/// Columns per rayon task.
const COL_CHUNK: usize = 64;
/// Activation rows per register tile.
const ROW_TILE: usize = 6;
/// Groups per register tile.
const TILE_GROUPS: usize = 2;

/// An `(n, k)` int8 matrix with per-32-element f32 scales, for int8 activations.
#[derive(Debug, Clone)]
pub struct I8Matrix {
    n: usize,
    k: usize,
    /// `[group][k / 32][16]`; padding columns have scale 0.
    scales: Vec<f32>,
    /// `[group][k / 32][16]`: `−128 · Σ` of the block's weights of each column.
    offsets: Vec<i32>,
    /// `[group][k / 4][16][4]`; padding columns are 0.
    quants: Vec<i8>,
}

/// Activation rows quantized per block of 32: `u = q + 128` with
/// `q = round_half_even(clamp(x · (1/d), ±127))`, `d = absmax / 127`.
pub struct I8Rows {
    m: usize,
    k: usize,
    /// `[row][k]`, offset by 128.
    quants: Vec<u8>,
    /// `[row][k / 32]`.
    scales: Vec<f32>,
}

impl I8Rows {
    /// Quantizes `m` rows of `k` elements (`k` a multiple of 32); rows in
    /// parallel, each block with the AVX-512 path where there is one (same
    /// bits as the scalar one for finite activations).
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Option<I8Rows> {
        if !k.is_multiple_of(BLOCK) || m.checked_mul(k) != Some(x.len()) {
            return None;
        }
        let nb = k / BLOCK;
        let mut quants = vec![0u8; m * k];
        let mut scales = vec![0f32; m * nb];
        if k == 0 || m == 0 {
            return Some(I8Rows {
                m,
                k,
                quants,
                scales,
            });
        }
        let simd = simd_quantize_available();
        let rows_per_task = (8192 / k).max(1);
        x.par_chunks(rows_per_task * k)
            .zip(quants.par_chunks_mut(rows_per_task * k))
            .zip(scales.par_chunks_mut(rows_per_task * nb))
            .for_each(|((xr, qr), sr)| {
                for ((blk, qb), sb) in xr
                    .chunks_exact(BLOCK)
                    .zip(qr.chunks_exact_mut(BLOCK))
                    .zip(sr.iter_mut())
                {
                    #[cfg(target_arch = "x86_64")]
                    if simd {
                        // SAFETY: AVX-512 F/BW was detected; both blocks
                        // hold 32 elements.
                        *sb = unsafe { quantize_block_avx512(blk, qb) };
                        continue;
                    }
                    let _ = simd;
                    *sb = quantize_block(blk, qb);
                }
            });
        Some(I8Rows {
            m,
            k,
            quants,
            scales,
        })
    }

    pub fn rows(&self) -> usize {
        self.m
    }
}

/// One element on the grid: clamp to ±127 first (a NaN becomes 127, as
/// `vminps` does), then round half to even (as `vcvtps2dq` does).
#[inline]
#[allow(clippy::manual_clamp)] // `clamp` keeps a NaN; `vminps` and this give 127
fn grid(v: f32) -> i32 {
    v.min(127.0).max(-127.0).round_ties_even() as i32
}

/// One block of activations: `u = q + 128`; returns the scale.
fn quantize_block(blk: &[f32], out: &mut [u8]) -> f32 {
    let (d, id) = block_scale(blk);
    for (x, u) in blk.iter().zip(out.iter_mut()) {
        *u = (grid(x * id) + 128) as u8;
    }
    d
}

fn simd_quantize_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`quantize_block`] with AVX-512: the same operations on 16 lanes.
///
/// # Safety
/// AVX-512 F and BW must be available; `blk` and `out` hold 32 elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_block_avx512(blk: &[f32], out: &mut [u8]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert!(blk.len() == BLOCK && out.len() == BLOCK);
    let a = _mm512_loadu_ps(blk.as_ptr());
    let b = _mm512_loadu_ps(blk.as_ptr().add(16));
    // max is exact, so the order of the reduction does not matter; a NaN
    // anywhere makes the scale NaN, as in `block_scale`.
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(b, b);
    let amax = if nan != 0 {
        f32::NAN
    } else {
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)))
    };
    let (d, id) = scale_of(amax);
    let idv = _mm512_set1_ps(id);
    let (hi, lo) = (_mm512_set1_ps(127.0), _mm512_set1_ps(-127.0));
    let q = |v: __m512| {
        let v = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v, idv), hi), lo);
        _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(128))
    };
    _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(q(a)));
    _mm_storeu_si128(
        out.as_mut_ptr().add(16) as *mut __m128i,
        _mm512_cvtepi32_epi8(q(b)),
    );
    d
}

impl I8Matrix {
    /// Quantizes a row-major `(n, k)` F32 matrix; `k` must be a multiple of 32.
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if !k.is_multiple_of(BLOCK) || n.checked_mul(k) != Some(w.len()) {
            return None;
        }
        let nb = k / BLOCK;
        let groups = n.div_ceil(GROUP);
        let mut scales = vec![0f32; groups * nb * GROUP];
        let mut offsets = vec![0i32; groups * nb * GROUP];
        let mut quants = vec![0i8; groups * k * GROUP];
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let (g, l) = (j / GROUP, j % GROUP);
            for (b, blk) in row.chunks_exact(BLOCK).enumerate() {
                let (d, id) = block_scale(blk);
                scales[(g * nb + b) * GROUP + l] = d;
                let mut sum = 0i32;
                for (i, x) in blk.iter().enumerate() {
                    let kk = b * BLOCK + i;
                    let q = grid(x * id) as i8;
                    sum += q as i32;
                    quants[((g * (k / 4) + kk / 4) * GROUP + l) * 4 + kk % 4] = q;
                }
                offsets[(g * nb + b) * GROUP + l] = -128 * sum;
            }
        }
        Some(I8Matrix {
            n,
            k,
            scales,
            offsets,
            quants,
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// `y = x Wᵀ` for `x` of shape `(m, k)`: quantizes the rows, then
    /// [`Self::matmul_rows`].
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        match I8Rows::quantize(x, m, self.k) {
            Some(rows) => self.matmul_rows(&rows),
            None => panic!(
                "activation shape: {} values are not {m} rows of {}",
                x.len(),
                self.k
            ),
        }
    }

    /// `y = x Wᵀ` for quantized rows; returns `(m, n)` row-major.
    pub fn matmul_rows(&self, x: &I8Rows) -> Vec<f32> {
        assert_eq!(x.k, self.k, "activation width");
        by_column_chunks(self.n, x.rows(), GROUP, COL_CHUNK, |g0, ng, out| {
            self.chunk(x, g0, ng, out)
        })
    }

    /// Groups `g0..g0 + ng` into `out`, `(m, 16·ng)` row-major.
    fn chunk(&self, x: &I8Rows, g0: usize, ng: usize, out: &mut [f32]) {
        let ng = ng.min(self.n.div_ceil(GROUP).saturating_sub(g0));
        // `quantize` built the rows with a checked `m · k`; the kernels rely
        // on exactly that many bytes and scales.
        assert!(
            x.k == self.k
                && x.m.checked_mul(x.k) == Some(x.quants.len())
                && x.m.checked_mul(x.k / BLOCK) == Some(x.scales.len())
                && x.m
                    .checked_mul(ng * GROUP)
                    .is_some_and(|need| out.len() >= need),
            "int8 matmul: inconsistent shapes"
        );
        #[cfg(target_arch = "x86_64")]
        {
            if vnni_available() {
                // SAFETY: the features were just detected; `out` holds
                // `m · 16 · ng` elements, `x` `m` rows of `k` (asserted above)
                // and the groups are inside the matrix (clamped above).
                unsafe { self.chunk_vnni(x, g0, ng, out) };
                return;
            }
            if avx2_available() {
                // SAFETY: as above, for AVX2 and FMA.
                unsafe { self.chunk_avx2(x, g0, ng, out) };
                return;
            }
        }
        self.chunk_scalar(x, g0, ng, out)
    }

    /// Without VNNI: register tiles of up to 4 rows × one group (two 8-lane
    /// halves), the block dot products with AVX2's `pmaddubsw` on |q_x| and
    /// w signed like q_x (products ≤ 127², pair sums below `i16::MAX`, so
    /// exact) — the same integers, hence the same bits, as the VNNI kernel.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `out` holds `m · 16 · ng` elements and
    /// groups `g0..g0 + ng` exist.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk_avx2(&self, x: &I8Rows, g0: usize, ng: usize, out: &mut [f32]) {
        let m = x.rows();
        let wp = ng * GROUP;
        for gi in 0..ng {
            let mut r = 0;
            while r < m {
                let rt = (m - r).min(4);
                let o = out.as_mut_ptr().add(r * wp + gi * GROUP);
                match rt {
                    4 => self.tile_avx2::<4>(x, r, g0 + gi, o, wp),
                    3 => self.tile_avx2::<3>(x, r, g0 + gi, o, wp),
                    2 => self.tile_avx2::<2>(x, r, g0 + gi, o, wp),
                    _ => self.tile_avx2::<1>(x, r, g0 + gi, o, wp),
                }
                r += rt;
            }
        }
    }

    /// Rows `r0..r0 + R` × group `g` with AVX2 (see [`Self::chunk_avx2`]).
    ///
    /// # Safety
    /// As [`Self::chunk_avx2`]; `out` points at `R` rows of 16 writable
    /// elements with stride `ldo`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile_avx2<const R: usize>(
        &self,
        x: &I8Rows,
        r0: usize,
        g: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        use std::arch::x86_64::*;
        let (k, nb) = (self.k, self.k / BLOCK);
        let xq = x.quants.as_ptr().add(r0 * k);
        let xs = x.scales.as_ptr().add(r0 * nb);
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(-128);
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..nb {
            let mut dot = [[_mm256_setzero_si256(); 2]; R];
            for quad in 0..BLOCK / 4 {
                let kq = b * (BLOCK / 4) + quad;
                let wq = self.quants.as_ptr().add((g * (k / 4) + kq) * GROUP * 4);
                let w = [
                    _mm256_loadu_si256(wq as *const __m256i),
                    _mm256_loadu_si256(wq.add(32) as *const __m256i),
                ];
                for (t, dt) in dot.iter_mut().enumerate() {
                    // u = q + 128, so q = u XOR 0x80 as a signed byte.
                    let u = (xq.add(t * k + kq * 4) as *const i32).read_unaligned();
                    let q = _mm256_xor_si256(_mm256_set1_epi32(u), flip);
                    let a = _mm256_abs_epi8(q);
                    for (h, d) in dt.iter_mut().enumerate() {
                        let p = _mm256_maddubs_epi16(a, _mm256_sign_epi8(w[h], q));
                        *d = _mm256_add_epi32(*d, _mm256_madd_epi16(p, ones));
                    }
                }
            }
            let sc = self.scales.as_ptr().add((g * nb + b) * GROUP);
            for (t, at) in acc.iter_mut().enumerate() {
                let s = _mm256_set1_ps(*xs.add(t * nb + b));
                for (h, a) in at.iter_mut().enumerate() {
                    let ws = _mm256_loadu_ps(sc.add(8 * h));
                    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(dot[t][h]), ws);
                    *a = _mm256_fmadd_ps(v, s, *a);
                }
            }
        }
        for (t, at) in acc.iter().enumerate() {
            for (h, a) in at.iter().enumerate() {
                _mm256_storeu_ps(out.add(t * ldo + 8 * h), *a);
            }
        }
    }

    fn chunk_scalar(&self, x: &I8Rows, g0: usize, ng: usize, out: &mut [f32]) {
        let (k, nb, m) = (self.k, self.k / BLOCK, x.rows());
        let wp = ng * GROUP;
        for gi in 0..ng {
            let g = g0 + gi;
            for l in 0..GROUP {
                for r in 0..m {
                    let mut acc = 0f32;
                    for b in 0..nb {
                        let at = (g * nb + b) * GROUP + l;
                        let mut dot = self.offsets[at];
                        for i in 0..BLOCK {
                            let kk = b * BLOCK + i;
                            let w = self.quants[((g * (k / 4) + kk / 4) * GROUP + l) * 4 + kk % 4];
                            dot += x.quants[r * k + kk] as i32 * w as i32;
                        }
                        acc = (dot as f32 * self.scales[at]).mul_add(x.scales[r * nb + b], acc);
                    }
                    out[r * wp + gi * GROUP + l] = acc;
                }
            }
        }
    }

    /// Register tiles of up to 6 rows × 2 groups over the chunk.
    ///
    /// # Safety
    /// AVX-512 F and VNNI must be available; `out` holds `m · 16 · ng`
    /// elements and groups `g0..g0 + ng` exist.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn chunk_vnni(&self, x: &I8Rows, g0: usize, ng: usize, out: &mut [f32]) {
        let m = x.rows();
        let wp = ng * GROUP;
        let mut gi = 0;
        while gi < ng {
            let t = (ng - gi).min(TILE_GROUPS);
            let mut r = 0;
            while r < m {
                let rt = (m - r).min(ROW_TILE);
                let o = out.as_mut_ptr().add(r * wp + gi * GROUP);
                let g = g0 + gi;
                match (rt, t) {
                    (6, 2) => self.tile::<6, 2>(x, r, g, o, wp),
                    (5, 2) => self.tile::<5, 2>(x, r, g, o, wp),
                    (4, 2) => self.tile::<4, 2>(x, r, g, o, wp),
                    (3, 2) => self.tile::<3, 2>(x, r, g, o, wp),
                    (2, 2) => self.tile::<2, 2>(x, r, g, o, wp),
                    (1, 2) => self.tile::<1, 2>(x, r, g, o, wp),
                    (6, _) => self.tile::<6, 1>(x, r, g, o, wp),
                    (5, _) => self.tile::<5, 1>(x, r, g, o, wp),
                    (4, _) => self.tile::<4, 1>(x, r, g, o, wp),
                    (3, _) => self.tile::<3, 1>(x, r, g, o, wp),
                    (2, _) => self.tile::<2, 1>(x, r, g, o, wp),
                    _ => self.tile::<1, 1>(x, r, g, o, wp),
                }
                r += rt;
            }
            gi += t;
        }
    }

    /// Rows `r0..r0 + R` × groups `g..g + G`; writes `R` rows of `16 · G`
    /// outputs with row stride `ldo`.
    ///
    /// # Safety
    /// As [`Self::chunk_vnni`]; the rows and groups exist and `out` points at
    /// `R` rows of `16 · G` writable elements with stride `ldo`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    #[inline]
    unsafe fn tile<const R: usize, const G: usize>(
        &self,
        x: &I8Rows,
        r0: usize,
        g: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        use std::arch::x86_64::*;
        let (k, nb) = (self.k, self.k / BLOCK);
        let xq = x.quants.as_ptr().add(r0 * k);
        let xs = x.scales.as_ptr().add(r0 * nb);
        let mut acc = [[_mm512_setzero_ps(); G]; R];
        for b in 0..nb {
            let mut dot = [[_mm512_setzero_si512(); G]; R];
            for gg in 0..G {
                let off = _mm512_loadu_si512(
                    self.offsets.as_ptr().add(((g + gg) * nb + b) * GROUP) as *const __m512i,
                );
                for d in dot.iter_mut() {
                    d[gg] = off;
                }
            }
            for quad in 0..BLOCK / 4 {
                let kq = b * (BLOCK / 4) + quad;
                let mut w = [_mm512_setzero_si512(); G];
                for (gg, wg) in w.iter_mut().enumerate() {
                    *wg = _mm512_loadu_si512(
                        self.quants
                            .as_ptr()
                            .add(((g + gg) * (k / 4) + kq) * GROUP * 4)
                            as *const __m512i,
                    );
                }
                for (t, dt) in dot.iter_mut().enumerate() {
                    let a =
                        _mm512_set1_epi32((xq.add(t * k + kq * 4) as *const i32).read_unaligned());
                    for (gg, d) in dt.iter_mut().enumerate() {
                        *d = _mm512_dpbusd_epi32(*d, a, w[gg]);
                    }
                }
            }
            for gg in 0..G {
                let ws = _mm512_loadu_ps(self.scales.as_ptr().add(((g + gg) * nb + b) * GROUP));
                for t in 0..R {
                    let s = _mm512_set1_ps(*xs.add(t * nb + b));
                    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(dot[t][gg]), ws);
                    acc[t][gg] = _mm512_fmadd_ps(v, s, acc[t][gg]);
                }
            }
        }
        for (t, at) in acc.iter().enumerate() {
            for (gg, a) in at.iter().enumerate() {
                _mm512_storeu_ps(out.add(t * ldo + gg * GROUP), *a);
            }
        }
    }
}

/// Whether this CPU has AVX2 and FMA, for [`I8Matrix`]'s AVX2 kernel.
fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU runs [`I8Matrix`]'s VNNI kernel (else the AVX2 one, or
/// the scalar path; the same bits, slower).
pub fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, k: usize, m: usize) -> (Vec<f32>, Vec<f32>) {
        let w = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
            .collect();
        let x = (0..m * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
            .collect();
        (w, x)
    }

    #[test]
    fn matches_f32_and_is_batch_invariant_and_scalar_equal() {
        let (n, k, m) = (70, 96, 13);
        let (w, x) = data(n, k, m);
        let q = I8Matrix::from_f32(&w, n, k).unwrap();
        let y = q.matmul(&x, m);
        for r in 0..m {
            for j in 0..n {
                let exact: f32 = (0..k).map(|i| x[r * k + i] * w[j * k + i]).sum();
                assert!(
                    (y[r * n + j] - exact).abs() < 0.05 * (1.0 + exact.abs()),
                    "{r},{j}: {} vs {exact}",
                    y[r * n + j]
                );
            }
            let alone = q.matmul(&x[r * k..(r + 1) * k], 1);
            assert_eq!(&alone[..], &y[r * n..(r + 1) * n]);
        }
        for mm in 2..m {
            let part = q.matmul(&x[..mm * k], mm);
            assert_eq!(&part[..], &y[..mm * n], "m = {mm}");
        }
        let rows = I8Rows::quantize(&x, m, k).unwrap();
        let ng = n.div_ceil(GROUP);
        let mut scalar = vec![0f32; m * ng * GROUP];
        q.chunk_scalar(&rows, 0, ng, &mut scalar);
        for r in 0..m {
            for j in 0..n {
                assert_eq!(scalar[r * ng * GROUP + j], y[r * n + j], "{r},{j}");
            }
        }
        if !vnni_available() {
            eprintln!("note: no AVX-512 VNNI here; its kernel is not exercised");
        }
        // The AVX2 kernel (the one used without VNNI) gives the same bits.
        #[cfg(target_arch = "x86_64")]
        if avx2_available() {
            let mut avx2 = vec![0f32; m * ng * GROUP];
            // SAFETY: detected; `avx2` holds m · 16 · ng, groups 0..ng exist.
            unsafe { q.chunk_avx2(&rows, 0, ng, &mut avx2) };
            assert_eq!(avx2, scalar);
        }
        assert!(I8Matrix::from_f32(&w[..n * (k - 1)], n, k - 1).is_none());
        assert!(I8Rows::quantize(&x[..k - 1], 1, k - 1).is_none());
    }

    /// The vector quantizer gives the scalar one's bytes and scale, including
    /// at the rounding ties (x.5 on the grid round to even) and the clamp.
    #[test]
    fn vector_quantizer_equals_scalar() {
        if !simd_quantize_available() {
            eprintln!("SKIP: no AVX-512 F/BW");
            return;
        }
        let mut blocks: Vec<Vec<f32>> = Vec::new();
        // Ties: with absmax 127 the scale is 1, so k + 0.5 is a tie.
        blocks.push(
            (0..32)
                .map(|i| if i == 0 { 127.0 } else { i as f32 - 16.5 })
                .collect(),
        );
        blocks.push(vec![0.0; 32]);
        blocks.push((0..32).map(|i| -(i as f32) * 1e-3).collect());
        // Non-finite elements in either half, and a subnormal scale.
        for (at, v) in [
            (3, f32::NAN),
            (20, f32::NAN),
            (7, f32::INFINITY),
            (31, -f32::INFINITY),
        ] {
            let mut b: Vec<f32> = (0..32).map(|i| i as f32 - 9.0).collect();
            b[at] = v;
            blocks.push(b);
        }
        blocks.push((0..32).map(|i| if i == 5 { 1e-40 } else { 0.0 }).collect());
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            blocks.push(
                (0..32)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 7.0
                    })
                    .collect(),
            );
        }
        for blk in &blocks {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            let da = quantize_block(blk, &mut a);
            // SAFETY: detected above; 32 elements each.
            let db = unsafe { quantize_block_avx512(blk, &mut b) };
            assert!(
                da.to_bits() == db.to_bits() || (da.is_nan() && db.is_nan()),
                "{blk:?}: {da} vs {db}"
            );
            assert_eq!(a, b, "{blk:?}");
        }
    }

    /// A NaN activation reaches every output of its row as NaN (as in F32),
    /// and the other rows are untouched.
    #[test]
    fn nan_activations_propagate() {
        let (n, k, m) = (20, 64, 3);
        let (w, mut x) = data(n, k, m);
        let q = I8Matrix::from_f32(&w, n, k).unwrap();
        let clean = q.matmul(&x, m);
        x[k + 40] = f32::NAN;
        let y = q.matmul(&x, m);
        assert!(y[n..2 * n].iter().all(|v| v.is_nan()), "{:?}", &y[n..2 * n]);
        assert_eq!(&y[..n], &clean[..n]);
        assert_eq!(&y[2 * n..], &clean[2 * n..]);
    }

    /// The integer dot product is exact: activations and weights that are
    /// already on the int8 grid give the integer result times the scales.
    #[test]
    fn integer_grid_is_exact() {
        let (n, k) = (9, 64);
        // Every block holds a ±127, so its scale is 1 and nothing rounds.
        let grid = |i: usize, a: usize| {
            if i.is_multiple_of(32) {
                127.0
            } else {
                ((i * a % 255) as f32) - 127.0
            }
        };
        let w: Vec<f32> = (0..n * k).map(|i| grid(i, 7)).collect();
        let x: Vec<f32> = (0..k).map(|i| -grid(i, 11)).collect();
        let q = I8Matrix::from_f32(&w, n, k).unwrap();
        let y = q.matmul(&x, 1);
        for j in 0..n {
            let exact: i64 = (0..k).map(|i| x[i] as i64 * w[j * k + i] as i64).sum();
            assert_eq!(y[j], exact as f32, "column {j}");
        }
    }

    /// Speed against the F32-activation kernel on SmolLM2's MLP shape
    /// (`cargo test --release -p edgemu-gpu --lib cpu_i8 -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn speed_against_q8_cpu() {
        use crate::model::cpu_q8::Q8Matrix;
        for &(n, k) in &[(1536usize, 576usize), (576, 1536), (2304, 576)] {
            for &m in &[32usize, 992] {
                let (w, x) = data(n, k, m);
                let a = Q8Matrix::from_f32(&w, n, k).unwrap();
                let b = I8Matrix::from_f32(&w, n, k).unwrap();
                let reps = if m > 100 { 20 } else { 400 };
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(a.matmul(&x, m));
                }
                let ta = t.elapsed().as_secs_f64() / reps as f64;
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(b.matmul(&x, m));
                }
                let tb = t.elapsed().as_secs_f64() / reps as f64;
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(I8Rows::quantize(&x, m, k));
                }
                let tq = t.elapsed().as_secs_f64() / reps as f64;
                println!("  quantize {:.3} ms", tq * 1e3);
                #[cfg(target_arch = "x86_64")]
                if avx2_available() {
                    let rows = I8Rows::quantize(&x, m, k).unwrap();
                    let t = std::time::Instant::now();
                    for _ in 0..reps {
                        std::hint::black_box(by_column_chunks(
                            n,
                            m,
                            GROUP,
                            COL_CHUNK,
                            |g0, ng, o| {
                                // SAFETY: detected; `o` and the groups come from the driver.
                                unsafe {
                                    b.chunk_avx2(&rows, g0, ng.min(n.div_ceil(GROUP) - g0), o)
                                }
                            },
                        ));
                    }
                    let ta2 = t.elapsed().as_secs_f64() / reps as f64;
                    println!(
                        "  avx2 kernel (no VNNI) {:.3} ms, ratio to q8_cpu {:.2}",
                        ta2 * 1e3,
                        ta / ta2
                    );
                }
                let gmac = (n * k * m) as f64 / 1e9;
                println!(
                    "n {n} k {k} m {m}: q8_cpu {:.3} ms ({:.1} GMAC/s), i8 {:.3} ms ({:.1} GMAC/s), ratio {:.2}",
                    ta * 1e3,
                    gmac / ta,
                    tb * 1e3,
                    gmac / tb,
                    ta / tb
                );
            }
        }
    }
}
