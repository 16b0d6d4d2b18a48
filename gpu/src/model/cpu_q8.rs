//! An int8 weight matrix with an AVX2/FMA kernel against F32 activations.
//!
//! candle's quantized matmul quantizes the activations to Q8_0 and runs one
//! integer dot product per (row, column); at decode batch sizes of 4–32 that is
//! compute-bound on a 2-core AVX2 machine (no VNNI). [`Q8Matrix`] stores each
//! weight row as blocks of 32 `i8` with one `f32` scale (absmax / 127, the Q8_0
//! rule) and multiplies against F32 activations: every 8-lane slice of a
//! weight block is dequantized once per tile of 4 activation rows × 2 weight
//! rows (each dequantized vector serves 4 FMAs, each activation vector 2), so the work per token is a plain F32 FMA stream and the weights are read
//! once per matmul whatever the batch size.
//!
//! Every output element is accumulated in the same order (8 lanes over the
//! blocks in sequence, then a fixed horizontal sum) however many rows the call
//! has and however the rows are tiled, so a sequence's result does not depend
//! on its batch. Columns are split across rayon's threads. Without AVX2+FMA a
//! scalar loop with the same arithmetic order is used.

use rayon::prelude::*;

const BLOCK: usize = 32;
const ROW_TILE: usize = 4;
const COL_TILE: usize = 2;
/// Below this many rows the single-column kernel is faster (less dequantizing).
const FEW_ROWS: usize = 4;
const COL_CHUNK: usize = 32;

/// An `(n, k)` int8 matrix with per-32-element f32 scales.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    n: usize,
    k: usize,
    scales: Vec<f32>,
    quants: Vec<i8>,
}

impl Q8Matrix {
    /// Quantizes a row-major `(n, k)` F32 matrix; `k` must be a multiple of 32.
    pub fn from_f32(w: &[f32], n: usize, k: usize) -> Option<Self> {
        if !k.is_multiple_of(BLOCK) || w.len() != n * k {
            return None;
        }
        let mut scales = Vec::with_capacity(n * k / BLOCK);
        let mut quants = Vec::with_capacity(n * k);
        for blk in w.chunks_exact(BLOCK) {
            let amax = blk.iter().fold(0f32, |a, x| a.max(x.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            scales.push(d);
            quants.extend(
                blk.iter()
                    .map(|x| (x * id).round().clamp(-127.0, 127.0) as i8),
            );
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
        assert_eq!(x.len(), m * self.k, "activation shape");
        let chunks: Vec<Vec<f32>> = (0..self.n.div_ceil(COL_CHUNK))
            .into_par_iter()
            .map(|c| {
                let j0 = c * COL_CHUNK;
                let j1 = (j0 + COL_CHUNK).min(self.n);
                let mut out = vec![0f32; m * (j1 - j0)];
                self.chunk(x, m, j0, j1, &mut out);
                out
            })
            .collect();
        let mut y = vec![0f32; m * self.n];
        for (c, part) in chunks.iter().enumerate() {
            let j0 = c * COL_CHUNK;
            let w = part.len() / m.max(1);
            for r in 0..m {
                y[r * self.n + j0..r * self.n + j0 + w].copy_from_slice(&part[r * w..(r + 1) * w]);
            }
        }
        y
    }

    /// Columns `j0..j1` into `out` (`(m, j1 - j0)` row-major).
    fn chunk(&self, x: &[f32], m: usize, j0: usize, j1: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the features were just detected. Both kernels do the
                // same arithmetic per output element; they differ in reuse only.
                if m < FEW_ROWS {
                    unsafe { self.chunk_rows_avx2(x, m, j0, j1, out) };
                } else {
                    unsafe { self.chunk_avx2(x, m, j0, j1, out) };
                }
                return;
            }
        }
        self.chunk_scalar(x, m, j0, j1, out)
    }

    fn chunk_scalar(&self, x: &[f32], m: usize, j0: usize, j1: usize, out: &mut [f32]) {
        let nb = self.k / BLOCK;
        let w = j1 - j0;
        for j in j0..j1 {
            for r in 0..m {
                let mut acc = [0f32; 8];
                for b in 0..nb {
                    let d = self.scales[j * nb + b];
                    let q = &self.quants[j * self.k + b * BLOCK..][..BLOCK];
                    let xs = &x[r * self.k + b * BLOCK..][..BLOCK];
                    for c in 0..4 {
                        for l in 0..8 {
                            let wv = q[c * 8 + l] as f32 * d;
                            acc[l] = xs[c * 8 + l].mul_add(wv, acc[l]);
                        }
                    }
                }
                out[r * w + (j - j0)] = hsum(&acc);
            }
        }
    }

    /// Few rows (decode of 1–3 sequences): each dequantized block serves all rows.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk_rows_avx2(&self, x: &[f32], m: usize, j0: usize, j1: usize, out: &mut [f32]) {
        use std::arch::x86_64::*;
        const MAX_ROWS: usize = 8;
        let nb = self.k / BLOCK;
        let w = j1 - j0;
        let xp = x.as_ptr();
        for j in j0..j1 {
            let qrow = self.quants.as_ptr().add(j * self.k);
            let srow = self.scales.as_ptr().add(j * nb);
            let mut r0 = 0;
            while r0 < m {
                let rt = (m - r0).min(MAX_ROWS);
                let mut acc = [_mm256_setzero_ps(); MAX_ROWS];
                for b in 0..nb {
                    let d = _mm256_set1_ps(*srow.add(b));
                    let q = qrow.add(b * BLOCK);
                    let deq = |c: usize| {
                        let v = _mm_loadl_epi64(q.add(c * 8) as *const __m128i);
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d)
                    };
                    let (w0, w1, w2, w3) = (deq(0), deq(1), deq(2), deq(3));
                    for (t, a) in acc.iter_mut().enumerate().take(rt) {
                        let xr = xp.add((r0 + t) * self.k + b * BLOCK);
                        // Same order as the scalar path: lanes accumulate c = 0..4.
                        let mut s = *a;
                        s = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w0, s);
                        s = _mm256_fmadd_ps(_mm256_loadu_ps(xr.add(8)), w1, s);
                        s = _mm256_fmadd_ps(_mm256_loadu_ps(xr.add(16)), w2, s);
                        s = _mm256_fmadd_ps(_mm256_loadu_ps(xr.add(24)), w3, s);
                        *a = s;
                    }
                }
                for (t, a) in acc.iter().enumerate().take(rt) {
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
                    out[(r0 + t) * w + (j - j0)] = hsum(&lanes);
                }
                r0 += rt;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn chunk_avx2(&self, x: &[f32], m: usize, j0: usize, j1: usize, out: &mut [f32]) {
        let mut j = j0;
        while j < j1 {
            let jt = (j1 - j).min(COL_TILE);
            let mut r = 0;
            while r < m {
                let rt = (m - r).min(ROW_TILE);
                match (rt, jt) {
                    (4, 2) => self.tile_avx2::<4, 2>(x, r, j, j0, j1, out),
                    (3, 2) => self.tile_avx2::<3, 2>(x, r, j, j0, j1, out),
                    (2, 2) => self.tile_avx2::<2, 2>(x, r, j, j0, j1, out),
                    (1, 2) => self.tile_avx2::<1, 2>(x, r, j, j0, j1, out),
                    (4, _) => self.tile_avx2::<4, 1>(x, r, j, j0, j1, out),
                    (3, _) => self.tile_avx2::<3, 1>(x, r, j, j0, j1, out),
                    (2, _) => self.tile_avx2::<2, 1>(x, r, j, j0, j1, out),
                    _ => self.tile_avx2::<1, 1>(x, r, j, j0, j1, out),
                }
                r += rt;
            }
            j += jt;
        }
    }

    /// `R` activation rows × `J` weight rows; each dequantized 8-lane weight
    /// vector serves `R` FMAs and each activation vector `J`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_avx2<const R: usize, const J: usize>(
        &self,
        x: &[f32],
        r0: usize,
        jb: usize,
        j0: usize,
        j1: usize,
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let nb = self.k / BLOCK;
        let w = j1 - j0;
        let xp = x.as_ptr();
        let mut acc = [[_mm256_setzero_ps(); J]; R];
        for b in 0..nb {
            let mut d = [_mm256_setzero_ps(); J];
            for (jj, dj) in d.iter_mut().enumerate() {
                *dj = _mm256_set1_ps(*self.scales.as_ptr().add((jb + jj) * nb + b));
            }
            // Same order as the scalar path: lanes accumulate c = 0..4.
            for c in 0..4 {
                let mut wv = [_mm256_setzero_ps(); J];
                for (jj, wj) in wv.iter_mut().enumerate() {
                    let q = self
                        .quants
                        .as_ptr()
                        .add((jb + jj) * self.k + b * BLOCK + c * 8);
                    let v = _mm_loadl_epi64(q as *const __m128i);
                    *wj = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d[jj]);
                }
                for (t, at) in acc.iter_mut().enumerate() {
                    let xv = _mm256_loadu_ps(xp.add((r0 + t) * self.k + b * BLOCK + c * 8));
                    for (jj, a) in at.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(xv, wv[jj], *a);
                    }
                }
            }
        }
        for (t, at) in acc.iter().enumerate() {
            for (jj, a) in at.iter().enumerate() {
                let mut lanes = [0f32; 8];
                _mm256_storeu_ps(lanes.as_mut_ptr(), *a);
                out[(r0 + t) * w + (jb + jj - j0)] = hsum(&lanes);
            }
        }
    }
}

fn hsum(a: &[f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
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
            // Row r alone (the few-rows kernel) gives bit-identical results.
            let alone = q.matmul(&x[r * k..(r + 1) * k], 1);
            assert_eq!(&alone[..], &y[r * n..(r + 1) * n]);
        }
        let mut scalar = vec![0f32; m * n];
        q.chunk_scalar(&x, m, 0, n, &mut scalar);
        for (a, b) in scalar.iter().zip(&y) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()));
        }
        assert!(Q8Matrix::from_f32(&w, n, k - 1).is_none());
    }
}
