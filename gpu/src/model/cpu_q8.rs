//! An int8 weight matrix with an AVX2/FMA kernel against F32 activations.
//!
//! candle's quantized matmul quantizes the activations to Q8_0 and runs one
//! integer dot product per (row, column) with AVX2's 16-bit multiply-adds (it
//! does not use AVX-512 VNNI, though the 2-core Zen 4 machine this was tuned on
//! has it); at decode batch sizes of 4–32 that is compute-bound there, and it
//! rounds the activations. [`Q8Matrix`] keeps them F32 and quantizes each
//! weight row as blocks of 32 `i8` with one `f32` scale (absmax / 127, the Q8_0
//! rule) and stores the rows interleaved in groups of 8: for every `k` the 8
//! weights of a group's 8 rows are adjacent, so one 8-lane vector holds one
//! input element's weights for 8 output columns and the kernel broadcasts
//! activations instead of reducing horizontally.
//!
//! * Fewer than 6 activation rows (batch-1 to -5 decode): register tiles of all
//!   rows × up to 4 groups of 8 columns, weights dequantized in registers.
//! * 6 or more rows: each tile of 16 output columns is dequantized once into
//!   a per-thread F32 buffer, then a 6-row × 16-column register tile (12
//!   accumulators) streams through it, so the work per token is a plain F32
//!   FMA stream and the weights are read once per matmul whatever the batch.
//!
//! Every output element is the same sequential chain
//! `acc = fma(x[k], q[k]·d, acc)` for `k = 0, 1, …` (no horizontal sum), whatever
//! kernel, tiling or batch size computes it, so a sequence's result does not
//! depend on its batch. Columns are split across rayon's threads. Without
//! AVX2+FMA a scalar loop with the same arithmetic is used.

use std::cell::RefCell;

use rayon::prelude::*;

use super::column_chunks::by_column_chunks;

const BLOCK: usize = 32;
/// Output columns per interleaved group (one ymm register of f32).
const GROUP: usize = 8;
/// Columns per rayon task.
const COL_CHUNK: usize = 32;
/// Activation rows in the many-rows register tile.
const ROW_TILE: usize = 6;
/// Groups in the many-rows register tile (and in one dequantized panel).
const PANEL_GROUPS: usize = 2;

thread_local! {
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// An `(n, k)` int8 matrix with per-32-element f32 scales.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    n: usize,
    k: usize,
    /// `[group][k / 32][8]`; padding columns have scale 0.
    scales: Vec<f32>,
    /// `[group][k][8]`; padding columns are 0.
    quants: Vec<i8>,
}

/// The Q8_0 rule of both int8 formats (weights here, weights and
/// activations in [`super::cpu_i8`]): scale absmax / 127 and its inverse. A
/// NaN element makes the scale NaN (so the outputs it reaches are NaN, as in
/// F32) and an infinite one infinite; a block whose scale has no finite
/// inverse (all zero, or subnormal) quantizes to zeros.
pub(super) fn block_scale(blk: &[f32]) -> (f32, f32) {
    let amax = blk.iter().fold(0f32, |a, x| {
        if x.is_nan() || a.is_nan() {
            f32::NAN
        } else {
            a.max(x.abs())
        }
    });
    scale_of(amax)
}

/// [`block_scale`] from the block's absolute maximum.
pub(super) fn scale_of(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let inv = 1.0 / d;
    (d, if d > 0.0 && inv.is_finite() { inv } else { 0.0 })
}

impl Q8Matrix {
    /// Quantizes a row-major `(n, k)` F32 matrix; `k` must be a multiple of 32.
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if !k.is_multiple_of(BLOCK) || w.len() != n * k {
            return None;
        }
        let nb = k / BLOCK;
        let groups = n.div_ceil(GROUP);
        let mut scales = vec![0f32; groups * nb * GROUP];
        let mut quants = vec![0i8; groups * k * GROUP];
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let (g, l) = (j / GROUP, j % GROUP);
            for (b, blk) in row.chunks_exact(BLOCK).enumerate() {
                let (d, id) = block_scale(blk);
                scales[(g * nb + b) * GROUP + l] = d;
                for (i, x) in blk.iter().enumerate() {
                    let kk = b * BLOCK + i;
                    quants[(g * k + kk) * GROUP + l] = (x * id).round().clamp(-127.0, 127.0) as i8;
                }
            }
        }
        Some(Q8Matrix {
            n,
            k,
            scales,
            quants,
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// `y = x Wᵀ` for `x` of shape `(m, k)`; returns `(m, n)` row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        // Checked: a wrapped `m · k` would let a huge `m` past into the kernels.
        assert_eq!(m.checked_mul(self.k), Some(x.len()), "activation shape");
        if m == 1 {
            // One row: the output row itself splits into disjoint column chunks.
            let mut y = vec![0f32; self.n];
            y.par_chunks_mut(COL_CHUNK)
                .enumerate()
                .for_each(|(c, out)| {
                    let g0 = c * COL_CHUNK / GROUP;
                    let mut tmp = [0f32; COL_CHUNK];
                    self.chunk(x, 1, g0, COL_CHUNK / GROUP, &mut tmp);
                    out.copy_from_slice(&tmp[..out.len()]);
                });
            return y;
        }
        by_column_chunks(self.n, m, GROUP, COL_CHUNK, |g0, ng, out| {
            self.chunk(x, m, g0, ng, out)
        })
    }

    /// Groups `g0..g0 + ng` (columns `8·g0..`) into `out`, `(m, 8·ng)` row-major;
    /// groups past the end of the matrix are skipped (their outputs stay as is).
    fn chunk(&self, x: &[f32], m: usize, g0: usize, ng: usize, out: &mut [f32]) {
        let ng = ng.min(self.n.div_ceil(GROUP).saturating_sub(g0));
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the features were just detected; `out` holds
                // `m · 8 · ng` elements, `x` `m · k` (checked by `matmul`),
                // and the groups are inside the matrix (clamped above).
                assert!(
                    m.checked_mul(ng * GROUP).is_some_and(|o| out.len() >= o)
                        && m.checked_mul(self.k).is_some_and(|i| x.len() >= i)
                );
                if m < ROW_TILE {
                    unsafe { self.few_rows_avx2(x, m, g0, ng, out) };
                } else {
                    PANEL.with(|p| {
                        let mut p = p.borrow_mut();
                        p.resize(PANEL_GROUPS * GROUP * self.k, 0.0);
                        unsafe { self.many_rows_avx2(x, m, g0, ng, out, &mut p) };
                    });
                }
                return;
            }
        }
        self.chunk_scalar(x, m, g0, ng, out)
    }

    fn chunk_scalar(&self, x: &[f32], m: usize, g0: usize, ng: usize, out: &mut [f32]) {
        let (k, nb) = (self.k, self.k / BLOCK);
        let wp = ng * GROUP;
        for gi in 0..ng {
            let g = g0 + gi;
            for l in 0..GROUP {
                for r in 0..m {
                    let mut acc = 0f32;
                    for kk in 0..k {
                        let d = self.scales[(g * nb + kk / BLOCK) * GROUP + l];
                        let wv = self.quants[(g * k + kk) * GROUP + l] as f32 * d;
                        acc = x[r * k + kk].mul_add(wv, acc);
                    }
                    out[r * wp + gi * GROUP + l] = acc;
                }
            }
        }
    }

    /// Dequantizes 8 weights (one `k` of group `g`) with the block's scales `d`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn deq(
        &self,
        g: usize,
        kk: usize,
        d: std::arch::x86_64::__m256,
    ) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        let q = self.quants.as_ptr().add((g * self.k + kk) * GROUP);
        let v = _mm_loadl_epi64(q as *const __m128i);
        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d)
    }

    /// Few activation rows (`m < 6`): register tiles of `m` rows × up to
    /// `12 / m` groups, weights dequantized in registers.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `x` holds `m · k` elements, `out`
    /// `m · 8 · ng`, and groups `g0..g0 + ng` exist.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn few_rows_avx2(&self, x: &[f32], m: usize, g0: usize, ng: usize, out: &mut [f32]) {
        let ldo = ng * GROUP;
        let (xp, op) = (x.as_ptr(), out.as_mut_ptr());
        let mut gi = 0;
        while gi < ng {
            let gmax = match m {
                1..=3 => 4,
                4 => 3,
                _ => 2,
            };
            let t = (ng - gi).min(gmax);
            let (g, o) = (g0 + gi, op.add(gi * GROUP));
            match (m, t) {
                (1, 4) => self.direct_tile::<1, 4>(xp, g, o, ldo),
                (1, 3) => self.direct_tile::<1, 3>(xp, g, o, ldo),
                (1, 2) => self.direct_tile::<1, 2>(xp, g, o, ldo),
                (1, _) => self.direct_tile::<1, 1>(xp, g, o, ldo),
                (2, 4) => self.direct_tile::<2, 4>(xp, g, o, ldo),
                (2, 3) => self.direct_tile::<2, 3>(xp, g, o, ldo),
                (2, 2) => self.direct_tile::<2, 2>(xp, g, o, ldo),
                (2, _) => self.direct_tile::<2, 1>(xp, g, o, ldo),
                (3, 4) => self.direct_tile::<3, 4>(xp, g, o, ldo),
                (3, 3) => self.direct_tile::<3, 3>(xp, g, o, ldo),
                (3, 2) => self.direct_tile::<3, 2>(xp, g, o, ldo),
                (3, _) => self.direct_tile::<3, 1>(xp, g, o, ldo),
                (4, 3) => self.direct_tile::<4, 3>(xp, g, o, ldo),
                (4, 2) => self.direct_tile::<4, 2>(xp, g, o, ldo),
                (4, _) => self.direct_tile::<4, 1>(xp, g, o, ldo),
                (_, 2) => self.direct_tile::<5, 2>(xp, g, o, ldo),
                _ => self.direct_tile::<5, 1>(xp, g, o, ldo),
            }
            gi += t;
        }
    }

    /// `R` rows (stride `k`) × `G` groups starting at group `g`, dequantized in
    /// registers; writes `R` rows of `8 · G` outputs with row stride `ldo`.
    ///
    /// # Safety
    /// As [`Self::few_rows_avx2`]; `x` points at `R · k` readable elements and
    /// `out` at `R` rows of `8 · G` writable elements with stride `ldo`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn direct_tile<const R: usize, const G: usize>(
        &self,
        x: *const f32,
        g: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        use std::arch::x86_64::*;
        let (k, nb) = (self.k, self.k / BLOCK);
        let mut acc = [[_mm256_setzero_ps(); G]; R];
        for b in 0..nb {
            let mut d = [_mm256_setzero_ps(); G];
            for (gg, dg) in d.iter_mut().enumerate() {
                *dg = _mm256_loadu_ps(self.scales.as_ptr().add(((g + gg) * nb + b) * GROUP));
            }
            for i in 0..BLOCK {
                let kk = b * BLOCK + i;
                let mut w = [_mm256_setzero_ps(); G];
                for (gg, wg) in w.iter_mut().enumerate() {
                    *wg = self.deq(g + gg, kk, d[gg]);
                }
                for (t, at) in acc.iter_mut().enumerate() {
                    let xv = _mm256_broadcast_ss(&*x.add(t * k + kk));
                    for (gg, a) in at.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(xv, w[gg], *a);
                    }
                }
            }
        }
        for (t, at) in acc.iter().enumerate() {
            for (gg, a) in at.iter().enumerate() {
                _mm256_storeu_ps(out.add(t * ldo + gg * GROUP), *a);
            }
        }
    }

    /// 6 or more rows: per panel of 2 groups, dequantize once, then run
    /// 6-row register tiles over it.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `x` holds `m · k` elements, `out`
    /// `m · 8 · ng`, `panel` `16 · k`, and groups `g0..g0 + ng` exist.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn many_rows_avx2(
        &self,
        x: &[f32],
        m: usize,
        g0: usize,
        ng: usize,
        out: &mut [f32],
        panel: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let (k, nb) = (self.k, self.k / BLOCK);
        let wp = ng * GROUP;
        let pp = panel.as_mut_ptr();
        let mut gi = 0;
        while gi < ng {
            let pg = (ng - gi).min(PANEL_GROUPS);
            // Panel layout: [k][pg · 8].
            for gg in 0..pg {
                let g = g0 + gi + gg;
                for b in 0..nb {
                    let d = _mm256_loadu_ps(self.scales.as_ptr().add((g * nb + b) * GROUP));
                    for i in 0..BLOCK {
                        let kk = b * BLOCK + i;
                        _mm256_storeu_ps(pp.add((kk * pg + gg) * GROUP), self.deq(g, kk, d));
                    }
                }
            }
            let o = out.as_mut_ptr().add(gi * GROUP);
            let mut r = 0;
            while r < m {
                // Full tiles unless that leaves a 1–3-row tail; then balanced
                // tiles (8 rows: 4, 4; 32 rows: 6, 6, 5, 5, 5, 5; 16: 6, 6, 4).
                let rem = m - r;
                let rt = if rem.is_multiple_of(ROW_TILE) || rem % ROW_TILE >= 4 {
                    rem.min(ROW_TILE)
                } else {
                    rem.div_ceil(rem.div_ceil(ROW_TILE))
                };
                let xr = x.as_ptr().add(r * k);
                let or = o.add(r * wp);
                match (rt, pg) {
                    (6, 2) => panel_tile::<6, 2>(xr, k, pp, or, wp),
                    (5, 2) => panel_tile::<5, 2>(xr, k, pp, or, wp),
                    (4, 2) => panel_tile::<4, 2>(xr, k, pp, or, wp),
                    (3, 2) => panel_tile::<3, 2>(xr, k, pp, or, wp),
                    (2, 2) => panel_tile::<2, 2>(xr, k, pp, or, wp),
                    (1, 2) => panel_tile::<1, 2>(xr, k, pp, or, wp),
                    (6, _) => panel_tile::<6, 1>(xr, k, pp, or, wp),
                    (5, _) => panel_tile::<5, 1>(xr, k, pp, or, wp),
                    (4, _) => panel_tile::<4, 1>(xr, k, pp, or, wp),
                    (3, _) => panel_tile::<3, 1>(xr, k, pp, or, wp),
                    (2, _) => panel_tile::<2, 1>(xr, k, pp, or, wp),
                    _ => panel_tile::<1, 1>(xr, k, pp, or, wp),
                }
                r += rt;
            }
            gi += pg;
        }
    }
}

/// `R` activation rows (stride `k`) × `G` dequantized groups of a panel laid out
/// `[k][G · 8]`; writes `R` rows of `8 · G` outputs with row stride `ldo`.
///
/// # Safety
/// AVX2 and FMA must be available; `x` points at `R · k` readable elements
/// (stride `k`), `panel` at `k · 8 · G`, `out` at `R` rows of `8 · G` writable
/// elements with stride `ldo`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_tile<const R: usize, const G: usize>(
    x: *const f32,
    k: usize,
    panel: *const f32,
    out: *mut f32,
    ldo: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); G]; R];
    for kk in 0..k {
        let mut w = [_mm256_setzero_ps(); G];
        for (gg, wg) in w.iter_mut().enumerate() {
            *wg = _mm256_loadu_ps(panel.add((kk * G + gg) * GROUP));
        }
        for (t, at) in acc.iter_mut().enumerate() {
            let xv = _mm256_broadcast_ss(&*x.add(t * k + kk));
            for (gg, a) in at.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(xv, w[gg], *a);
            }
        }
    }
    for (t, at) in acc.iter().enumerate() {
        for (gg, a) in at.iter().enumerate() {
            _mm256_storeu_ps(out.add(t * ldo + gg * GROUP), *a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_and_is_batch_invariant() {
        let (n, k) = (70, 96);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
            .collect();
        let q = Q8Matrix::from_f32(&w, n, k).unwrap();
        let m = 11;
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
            .collect();
        let y = q.matmul(&x, m);
        for r in 0..m {
            for j in 0..n {
                let exact: f32 = (0..k).map(|i| x[r * k + i] * w[j * k + i]).sum();
                assert!(
                    (y[r * n + j] - exact).abs() < 0.05 * (1.0 + exact.abs()),
                    "{r},{j}"
                );
            }
            // Row r alone (the one-row kernel) gives bit-identical results.
            let alone = q.matmul(&x[r * k..(r + 1) * k], 1);
            assert_eq!(&alone[..], &y[r * n..(r + 1) * n]);
        }
        // Every batch size (every row tiling) gives the same rows.
        for mm in 2..m {
            let part = q.matmul(&x[..mm * k], mm);
            assert_eq!(&part[..], &y[..mm * n], "m = {mm}");
        }
        let ng = n.div_ceil(GROUP);
        let mut scalar = vec![0f32; m * ng * GROUP];
        q.chunk_scalar(&x, m, 0, ng, &mut scalar);
        for r in 0..m {
            for j in 0..n {
                assert_eq!(scalar[r * ng * GROUP + j], y[r * n + j], "{r},{j}");
            }
        }
        assert!(Q8Matrix::from_f32(&w, n, k - 1).is_none());
    }
}
