//! Portable region kernels: one lookup per byte in the product-table row of the
//! coefficient. The reference every SIMD kernel is tested against.

use super::tables;

/// `dst[i] ^= c · src[i]`; both slices have the same length (the caller trims).
pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    if c == 1 {
        xor_into(dst, src);
        return;
    }
    let row = &tables().mul[c as usize];
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

/// `dst[i] = c · dst[i]`.
pub(crate) fn mul(dst: &mut [u8], c: u8) {
    let row = &tables().mul[c as usize];
    for d in dst.iter_mut() {
        *d = row[*d as usize];
    }
}

/// `dst[i] ^= src[i]` over the common length (auto-vectorised by the compiler).
pub(crate) fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}
