//! AVX-512 + GFNI kernel: one `vgf2p8affineqb` per 64 bytes.
//!
//! `GF2P8AFFINEQB(x, A, 0)` multiplies every byte of `x`, as a bit vector, by the
//! 8×8 GF(2) matrix in the matching 64-bit word of `A`. With `A` = the matrix of
//! "multiply by c" over 0x11D ([`affine_matrix`](super::super::affine_matrix)),
//! broadcast to all eight words, it computes `c · x` for 64 bytes at once, for any
//! field polynomial. (`GF2P8MULB` would be a single instruction too, but it is
//! fixed to the AES polynomial 0x11B, a different field.) The tail under 64 bytes
//! uses masked loads and stores (AVX-512BW), which never touch masked-off bytes.

use std::arch::x86_64::*;

use super::super::tables;

#[inline]
fn tail_mask(r: usize) -> __mmask64 {
    debug_assert!(r < 64);
    (1u64 << r) - 1
}

/// `dst[i] ^= c · src[i]`, equal lengths.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and GFNI.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(crate) unsafe fn mul_add_gfni(dst: &mut [u8], src: &[u8], c: u8) {
    let a = _mm512_set1_epi64(tables().affine[c as usize] as i64);
    let n = dst.len().min(src.len());
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    let mut i = 0;
    while i + 128 <= n {
        let x0 = _mm512_loadu_si512(s.add(i).cast());
        let x1 = _mm512_loadu_si512(s.add(i + 64).cast());
        let y0 = _mm512_loadu_si512(d.add(i).cast());
        let y1 = _mm512_loadu_si512(d.add(i + 64).cast());
        let p0 = _mm512_gf2p8affine_epi64_epi8::<0>(x0, a);
        let p1 = _mm512_gf2p8affine_epi64_epi8::<0>(x1, a);
        _mm512_storeu_si512(d.add(i).cast(), _mm512_xor_si512(y0, p0));
        _mm512_storeu_si512(d.add(i + 64).cast(), _mm512_xor_si512(y1, p1));
        i += 128;
    }
    if i + 64 <= n {
        let x = _mm512_loadu_si512(s.add(i).cast());
        let y = _mm512_loadu_si512(d.add(i).cast());
        let p = _mm512_gf2p8affine_epi64_epi8::<0>(x, a);
        _mm512_storeu_si512(d.add(i).cast(), _mm512_xor_si512(y, p));
        i += 64;
    }
    if i < n {
        let k = tail_mask(n - i);
        let x = _mm512_maskz_loadu_epi8(k, s.add(i).cast());
        let y = _mm512_maskz_loadu_epi8(k, d.add(i).cast());
        let p = _mm512_gf2p8affine_epi64_epi8::<0>(x, a);
        _mm512_mask_storeu_epi8(d.add(i).cast(), k, _mm512_xor_si512(y, p));
    }
}

/// `dst[i] = c · dst[i]`.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and GFNI.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
pub(crate) unsafe fn mul_gfni(dst: &mut [u8], c: u8) {
    let a = _mm512_set1_epi64(tables().affine[c as usize] as i64);
    let n = dst.len();
    let d = dst.as_mut_ptr();
    let mut i = 0;
    while i + 64 <= n {
        let x = _mm512_loadu_si512(d.add(i).cast());
        _mm512_storeu_si512(d.add(i).cast(), _mm512_gf2p8affine_epi64_epi8::<0>(x, a));
        i += 64;
    }
    if i < n {
        let k = tail_mask(n - i);
        let x = _mm512_maskz_loadu_epi8(k, d.add(i).cast());
        _mm512_mask_storeu_epi8(d.add(i).cast(), k, _mm512_gf2p8affine_epi64_epi8::<0>(x, a));
    }
}
