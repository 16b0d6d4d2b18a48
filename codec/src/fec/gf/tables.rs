//! Lookup tables derived once from the `gf256` scalar multiplication.
//!
//! - `mul[c][x] = c · x` (64 KiB; the scalar kernel uses one 256-byte row),
//! - `lo[c][n] = c · n`, `hi[c][n] = c · (n << 4)` for nibbles `n` (the `pshufb`
//!   kernels: `c · x = lo[c][x & 15] ^ hi[c][x >> 4]` by linearity),
//! - `affine[c]`: the 8×8 GF(2) matrix of `x ↦ c · x` laid out for
//!   `GF2P8AFFINEQB` (see [`affine_matrix`]).

use std::sync::LazyLock;

use super::gf_mul;

pub(crate) struct Tables {
    pub mul: [[u8; 256]; 256],
    pub lo: [[u8; 16]; 256],
    pub hi: [[u8; 16]; 256],
    pub affine: [u64; 256],
}

static TABLES: LazyLock<Box<Tables>> = LazyLock::new(|| {
    let mut t = Box::new(Tables {
        mul: [[0; 256]; 256],
        lo: [[0; 16]; 256],
        hi: [[0; 16]; 256],
        affine: [0; 256],
    });
    for c in 0..256usize {
        for x in 0..256usize {
            t.mul[c][x] = gf_mul(c as u8, x as u8);
        }
        for n in 0..16usize {
            t.lo[c][n] = t.mul[c][n];
            t.hi[c][n] = t.mul[c][n << 4];
        }
        t.affine[c] = affine_matrix(c as u8);
    }
    t
});

#[inline]
pub(crate) fn tables() -> &'static Tables {
    &TABLES
}

/// The operand `A` of `GF2P8AFFINEQB(x, A, 0)` that makes it compute `c · x`
/// over 0x11D.
///
/// Intel defines, for each byte `x` and its 64-bit matrix word `A`:
/// `result.bit[i] = parity(A.byte[7 - i] & x)`. Multiplication by `c` is linear
/// over GF(2): bit `i` of `c · x` is the parity of `x` masked by the row
/// `{ j : bit i of c · 2^j is set }`, so that row goes into byte `7 - i`.
pub fn affine_matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if (gf_mul(c, 1 << j) >> i) & 1 == 1 {
                row |= 1 << j;
            }
        }
        m |= u64::from(row) << (8 * (7 - i));
    }
    m
}

/// Software model of one byte of `GF2P8AFFINEQB(x, A, imm8)`, written from the
/// instruction's pseudocode; lets the matrix layout be checked on CPUs without
/// GFNI.
pub fn gf_affine_byte(a: u64, x: u8, imm8: u8) -> u8 {
    let mut r = 0u8;
    for i in 0..8 {
        let row = (a >> (8 * (7 - i))) as u8;
        let bit = ((row & x).count_ones() & 1) as u8 ^ ((imm8 >> i) & 1);
        r |= bit << i;
    }
    r
}
