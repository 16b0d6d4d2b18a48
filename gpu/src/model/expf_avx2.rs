//! The softmax's `exp`, four lanes at a time, with libm's bits.
//!
//! The CPU attention kernels compute `exp(s − max)` for every score; through
//! libm's scalar `expf` that was ≈ 5 % of the PriorityFEC grid's samples. Any
//! other approximation moves the last bits of some weights, and through
//! near-ties every shipped quality figure, so this is not *an* `exp` but
//! glibc's: the algorithm of `sysdeps/ieee754/flt-32/e_expf.c` (glibc ≥ 2.27,
//! Szabolcs Nagy's) exactly as its FMA build `__expf_fma` runs it — the one
//! glibc's ifunc picks on every CPU with AVX2 and FMA, i.e. wherever these
//! kernels run. Read off the machine's `libm.so.6` (disassembly and its
//! `__exp2f_data` table), per lane in double precision:
//!
//! ```text
//! kds = fma(N/ln2, x, SHIFT)        ki = bits(kds)        kd = kds − SHIFT
//! r   = fma(N/ln2, x, −kd)
//! s   = from_bits(T[ki mod 32] + (ki << 47))               (2^(k/N))
//! y   = fma(fma(r, C0, C1), r·r, fma(r, C2, 1)) · s        → rounded to f32
//! ```
//!
//! Inputs with |x| ≥ 88 (where glibc branches to its overflow, underflow and
//! infinity/NaN cases) go through libm itself, four lanes at once. The unit
//! test compares all 2³² inputs with `f32::exp` bit for bit. Compiled for
//! x86-64 with glibc only; elsewhere the kernels keep libm's scalar `exp`.

use std::arch::x86_64::*;

/// `__exp2f_data.tab`: `bits(2^(i/32)) − (i << 47)`.
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// `invln2_scaled`: 32 / ln 2.
const INV_LN2_N: u64 = 0x40471547652b82fe;
/// `poly_scaled`: the cubic's coefficients, scaled by 1/32^3, 1/32^2, 1/32.
const C0: u64 = 0x3ebc6af84b912394;
const C1: u64 = 0x3f2ebfce50fac4f3;
const C2: u64 = 0x3f962e42ff0c52d6;
/// `shift`: 1.5 · 2^52, rounds to an integer in the low bits.
const SHIFT: u64 = 0x4338000000000000;
/// `top12(88.0f)`: from here on glibc takes its special-case branch.
const SPECIAL_ABS_BITS: i32 = 0x42b0_0000;

/// `s[i] = (s[i] − max).exp()` for every element, bit for bit libm's `expf`
/// (module docs).
///
/// # Safety
/// The CPU must have AVX2 and FMA (`crate::model::kv::has_avx2_fma`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_shifted(s: &mut [f32], max: f32) {
    let inv = _mm256_set1_pd(f64::from_bits(INV_LN2_N));
    let shift = _mm256_set1_pd(f64::from_bits(SHIFT));
    let c0 = _mm256_set1_pd(f64::from_bits(C0));
    let c1 = _mm256_set1_pd(f64::from_bits(C1));
    let c2 = _mm256_set1_pd(f64::from_bits(C2));
    let one = _mm256_set1_pd(1.0);
    let low5 = _mm256_set1_epi64x(31);
    let vmax = _mm_set1_ps(max);
    let abs_mask = _mm_set1_epi32(0x7fff_ffff);
    let special = _mm_set1_epi32(SPECIAL_ABS_BITS - 1);
    let mut chunks = s.chunks_exact_mut(4);
    for c in &mut chunks {
        // SAFETY: `c` is 4 floats; unaligned loads and stores.
        let x = _mm_sub_ps(_mm_loadu_ps(c.as_ptr()), vmax);
        let abs = _mm_and_si128(_mm_castps_si128(x), abs_mask);
        if _mm_movemask_epi8(_mm_cmpgt_epi32(abs, special)) != 0 {
            let mut lanes = [0f32; 4];
            _mm_storeu_ps(lanes.as_mut_ptr(), x);
            for (o, l) in c.iter_mut().zip(lanes) {
                *o = l.exp();
            }
            continue;
        }
        let xd = _mm256_cvtps_pd(x);
        let kds = _mm256_fmadd_pd(inv, xd, shift);
        let ki = _mm256_castpd_si256(kds);
        let kd = _mm256_sub_pd(kds, shift);
        let r = _mm256_fmsub_pd(inv, xd, kd);
        let idx = _mm256_and_si256(ki, low5);
        // SAFETY: every index is in 0..32, TAB's length.
        let t = _mm256_i64gather_epi64::<8>(TAB.as_ptr() as *const i64, idx);
        let sc = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let z = _mm256_fmadd_pd(r, c0, c1);
        let r2 = _mm256_mul_pd(r, r);
        let y = _mm256_fmadd_pd(r, c2, one);
        let y = _mm256_mul_pd(_mm256_fmadd_pd(z, r2, y), sc);
        _mm_storeu_ps(c.as_mut_ptr(), _mm256_cvtpd_ps(y));
    }
    for x in chunks.into_remainder() {
        *x = (*x - max).exp();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Every one of the 2³² f32 inputs gives libm's bits (NaN for NaN).
    #[test]
    fn equals_libm_expf_on_every_input() {
        if !crate::model::kv::has_avx2_fma() {
            eprintln!("skipped: no AVX2+FMA on this CPU");
            return;
        }
        let bad: u64 = (0u32..1 << 16)
            .into_par_iter()
            .map(|hi| {
                let mut xs: Vec<f32> = (0..1u32 << 16)
                    .map(|lo| f32::from_bits(hi << 16 | lo))
                    .collect();
                let want: Vec<f32> = xs.iter().map(|x| x.exp()).collect();
                // SAFETY: AVX2 and FMA detected above.
                unsafe { exp_shifted(&mut xs, 0.0) };
                xs.iter()
                    .zip(&want)
                    .filter(|(g, w)| !(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())))
                    .count() as u64
            })
            .sum();
        assert_eq!(bad, 0, "inputs whose exp differs from libm's");
    }

    /// The shift by `max` is the f32 subtraction of the scalar loop.
    #[test]
    fn shifted_by_max_equals_the_scalar_loop() {
        if !crate::model::kv::has_avx2_fma() {
            return;
        }
        let max = 3.7f32;
        let xs: Vec<f32> = (0..1003)
            .map(|i| max - (i as f32) * 0.173)
            .chain([f32::NEG_INFINITY, max, -1e30])
            .collect();
        let want: Vec<f32> = xs.iter().map(|x| (x - max).exp()).collect();
        let mut got = xs.clone();
        // SAFETY: AVX2 and FMA detected above.
        unsafe { exp_shifted(&mut got, max) };
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.to_bits(), w.to_bits());
        }
    }
}
