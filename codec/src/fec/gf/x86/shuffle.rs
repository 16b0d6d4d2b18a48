//! SSSE3 and AVX2 kernels: split-nibble table lookups.
//!
//! Multiplication by a constant `c` is GF(2)-linear, so
//! `c · x = c · (x & 0x0f) ^ c · (x & 0xf0)`. Each half takes 16 values, and
//! `pshufb` looks 16 (SSSE3) or 2 × 16 (AVX2) bytes up in a 16-entry table at
//! once: two shuffles, two ANDs, one shift and one XOR per vector.

use std::arch::x86_64::*;

use super::super::{scalar, tables};

/// One 16-byte product `c · s` given the nibble tables of `c`.
#[inline]
#[target_feature(enable = "ssse3")]
unsafe fn mul16(lo: __m128i, hi: __m128i, mask: __m128i, s: __m128i) -> __m128i {
    let l = _mm_and_si128(s, mask);
    let h = _mm_and_si128(_mm_srli_epi64::<4>(s), mask);
    _mm_xor_si128(_mm_shuffle_epi8(lo, l), _mm_shuffle_epi8(hi, h))
}

/// One 32-byte product `c · s` given the nibble tables of `c` in both lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn mul32(lo: __m256i, hi: __m256i, mask: __m256i, s: __m256i) -> __m256i {
    let l = _mm256_and_si256(s, mask);
    let h = _mm256_and_si256(_mm256_srli_epi64::<4>(s), mask);
    _mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h))
}

/// `dst[i] ^= c · src[i]`, equal lengths.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn mul_add_ssse3(dst: &mut [u8], src: &[u8], c: u8) {
    let t = tables();
    let n = dst.len().min(src.len());
    let lo = _mm_loadu_si128(t.lo[c as usize].as_ptr().cast());
    let hi = _mm_loadu_si128(t.hi[c as usize].as_ptr().cast());
    let mask = _mm_set1_epi8(0x0f);
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    let mut i = 0;
    while i + 16 <= n {
        let x = _mm_loadu_si128(s.add(i).cast());
        let y = _mm_loadu_si128(d.add(i).cast());
        _mm_storeu_si128(d.add(i).cast(), _mm_xor_si128(y, mul16(lo, hi, mask, x)));
        i += 16;
    }
    scalar::mul_add(&mut dst[i..n], &src[i..n], c);
}

/// `dst[i] = c · dst[i]`.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(crate) unsafe fn mul_ssse3(dst: &mut [u8], c: u8) {
    let t = tables();
    let n = dst.len();
    let lo = _mm_loadu_si128(t.lo[c as usize].as_ptr().cast());
    let hi = _mm_loadu_si128(t.hi[c as usize].as_ptr().cast());
    let mask = _mm_set1_epi8(0x0f);
    let d = dst.as_mut_ptr();
    let mut i = 0;
    while i + 16 <= n {
        let x = _mm_loadu_si128(d.add(i).cast());
        _mm_storeu_si128(d.add(i).cast(), mul16(lo, hi, mask, x));
        i += 16;
    }
    scalar::mul(&mut dst[i..n], c);
}

/// `dst[i] ^= c · src[i]`, equal lengths.
///
/// # Safety
/// The CPU must support AVX2 (which implies SSSE3).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn mul_add_avx2(dst: &mut [u8], src: &[u8], c: u8) {
    let t = tables();
    let n = dst.len().min(src.len());
    let lo128 = _mm_loadu_si128(t.lo[c as usize].as_ptr().cast());
    let hi128 = _mm_loadu_si128(t.hi[c as usize].as_ptr().cast());
    let lo = _mm256_broadcastsi128_si256(lo128);
    let hi = _mm256_broadcastsi128_si256(hi128);
    let mask = _mm256_set1_epi8(0x0f);
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    let mut i = 0;
    // Four independent vectors per iteration keep both shuffle ports busy.
    while i + 128 <= n {
        let x0 = _mm256_loadu_si256(s.add(i).cast());
        let x1 = _mm256_loadu_si256(s.add(i + 32).cast());
        let x2 = _mm256_loadu_si256(s.add(i + 64).cast());
        let x3 = _mm256_loadu_si256(s.add(i + 96).cast());
        let y0 = _mm256_xor_si256(_mm256_loadu_si256(d.add(i).cast()), mul32(lo, hi, mask, x0));
        let y1 = _mm256_xor_si256(
            _mm256_loadu_si256(d.add(i + 32).cast()),
            mul32(lo, hi, mask, x1),
        );
        let y2 = _mm256_xor_si256(
            _mm256_loadu_si256(d.add(i + 64).cast()),
            mul32(lo, hi, mask, x2),
        );
        let y3 = _mm256_xor_si256(
            _mm256_loadu_si256(d.add(i + 96).cast()),
            mul32(lo, hi, mask, x3),
        );
        _mm256_storeu_si256(d.add(i).cast(), y0);
        _mm256_storeu_si256(d.add(i + 32).cast(), y1);
        _mm256_storeu_si256(d.add(i + 64).cast(), y2);
        _mm256_storeu_si256(d.add(i + 96).cast(), y3);
        i += 128;
    }
    while i + 32 <= n {
        let x = _mm256_loadu_si256(s.add(i).cast());
        let y = _mm256_loadu_si256(d.add(i).cast());
        _mm256_storeu_si256(d.add(i).cast(), _mm256_xor_si256(y, mul32(lo, hi, mask, x)));
        i += 32;
    }
    if i + 16 <= n {
        let m = _mm_set1_epi8(0x0f);
        let x = _mm_loadu_si128(s.add(i).cast());
        let y = _mm_loadu_si128(d.add(i).cast());
        _mm_storeu_si128(d.add(i).cast(), _mm_xor_si128(y, mul16(lo128, hi128, m, x)));
        i += 16;
    }
    scalar::mul_add(&mut dst[i..n], &src[i..n], c);
}

/// `dst[i] = c · dst[i]`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn mul_avx2(dst: &mut [u8], c: u8) {
    let t = tables();
    let n = dst.len();
    let lo128 = _mm_loadu_si128(t.lo[c as usize].as_ptr().cast());
    let hi128 = _mm_loadu_si128(t.hi[c as usize].as_ptr().cast());
    let lo = _mm256_broadcastsi128_si256(lo128);
    let hi = _mm256_broadcastsi128_si256(hi128);
    let mask = _mm256_set1_epi8(0x0f);
    let d = dst.as_mut_ptr();
    let mut i = 0;
    while i + 32 <= n {
        let x = _mm256_loadu_si256(d.add(i).cast());
        _mm256_storeu_si256(d.add(i).cast(), mul32(lo, hi, mask, x));
        i += 32;
    }
    if i + 16 <= n {
        let m = _mm_set1_epi8(0x0f);
        let x = _mm_loadu_si128(d.add(i).cast());
        _mm_storeu_si128(d.add(i).cast(), mul16(lo128, hi128, m, x));
        i += 16;
    }
    scalar::mul(&mut dst[i..n], c);
}
