//! Kernel equivalence: every kernel this CPU runs equals the scalar reference.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

fn reference_mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= gf_mul(c, *s);
    }
}

fn simd_kernels() -> Vec<Kernel> {
    let ks: Vec<Kernel> = Kernel::available()
        .into_iter()
        .filter(|k| *k != Kernel::Scalar)
        .collect();
    for k in Kernel::ALL {
        if !k.is_available() {
            eprintln!(
                "note: kernel {} not available on this CPU, not tested",
                k.name()
            );
        }
    }
    ks
}

#[test]
fn field_is_0x11d() {
    // x^7 · x = x^8 = x^4 + x^3 + x^2 + 1.
    assert_eq!(gf_mul(0x80, 0x02), 0x1d);
    assert_eq!(gf_mul(0x02, 0x8e), 0x01); // 2 · 0x8e = 1 in 0x11D
    for a in 1..=255u8 {
        let inv = gf_inv(a).unwrap();
        assert_eq!(gf_mul(a, inv), 1);
    }
    assert_eq!(gf_inv(0), None);
}

#[test]
fn tables_match_gf256() {
    let t = tables();
    for c in 0..=255u8 {
        for x in 0..=255u8 {
            let p = gf_mul(c, x);
            assert_eq!(t.mul[c as usize][x as usize], p);
            let split = t.lo[c as usize][(x & 15) as usize] ^ t.hi[c as usize][(x >> 4) as usize];
            assert_eq!(split, p, "nibble split c={c} x={x}");
        }
    }
}

#[test]
fn affine_matrix_multiplies_by_c() {
    for c in 0..=255u8 {
        let m = affine_matrix(c);
        for x in 0..=255u8 {
            assert_eq!(gf_affine_byte(m, x, 0), gf_mul(c, x), "c={c} x={x}");
        }
    }
    // The identity matrix of GF2P8AFFINEQB is 0x0102040810204080.
    assert_eq!(affine_matrix(1), 0x0102_0408_1020_4080);
}

#[test]
fn scalar_matches_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for len in [0usize, 1, 15, 16, 17, 100, 1400] {
        let mut src = vec![0u8; len];
        let mut dst = vec![0u8; len];
        rng.fill(&mut src[..]);
        rng.fill(&mut dst[..]);
        for c in 0..=255u8 {
            let mut a = dst.clone();
            let mut b = dst.clone();
            Kernel::Scalar.mul_add(&mut a, &src, c).unwrap();
            reference_mul_add(&mut b, &src, c);
            assert_eq!(a, b);
            let mut m = src.clone();
            Kernel::Scalar.mul(&mut m, c).unwrap();
            let expect: Vec<u8> = src.iter().map(|&x| gf_mul(c, x)).collect();
            assert_eq!(m, expect);
        }
    }
}

fn check_kernel(k: Kernel, src: &[u8], dst: &[u8], c: u8) {
    let mut a = dst.to_vec();
    let mut b = dst.to_vec();
    k.mul_add(&mut a, src, c).unwrap();
    Kernel::Scalar.mul_add(&mut b, src, c).unwrap();
    assert_eq!(a, b, "{} mul_add len={} c={c}", k.name(), src.len());
    let mut a = src.to_vec();
    let mut b = src.to_vec();
    k.mul(&mut a, c).unwrap();
    Kernel::Scalar.mul(&mut b, c).unwrap();
    assert_eq!(a, b, "{} mul len={} c={c}", k.name(), src.len());
}

/// Every length 0..4096 (three coefficients each, one of them random), and every
/// coefficient on lengths around the vector widths, at unaligned offsets.
#[test]
fn simd_kernels_match_scalar() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut src = vec![0u8; 4096 + 64];
    let mut dst = vec![0u8; 4096 + 64];
    rng.fill(&mut src[..]);
    rng.fill(&mut dst[..]);
    for k in simd_kernels() {
        for len in 0..4096usize {
            let off = len % 61;
            let s = &src[off..off + len];
            let d = &dst[(off * 7) % 64..(off * 7) % 64 + len];
            for c in [1u8, (len % 256) as u8, rng.random::<u8>()] {
                check_kernel(k, s, d, c);
            }
        }
        for len in (0..=200).chain([255, 256, 257, 1399, 1400, 1401, 4095]) {
            for c in 0..=255u8 {
                check_kernel(k, &src[3..3 + len], &dst[5..5 + len], c);
            }
        }
    }
}

/// The full cross product the issue asks for: every length 0..4096 × every
/// coefficient. Slow in debug builds; run with
/// `cargo test --release -p edgemu-codec exhaustive -- --ignored`.
#[test]
#[ignore]
fn simd_kernels_match_scalar_exhaustive() {
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let mut src = vec![0u8; 4096];
    let mut dst = vec![0u8; 4096];
    rng.fill(&mut src[..]);
    rng.fill(&mut dst[..]);
    for k in simd_kernels() {
        for len in 0..4096usize {
            for c in 0..=255u8 {
                check_kernel(k, &src[..len], &dst[4096 - len..], c);
            }
        }
    }
}

#[test]
fn mismatched_lengths_use_the_common_prefix() {
    for k in Kernel::available() {
        let src = [3u8; 40];
        let mut dst = [0u8; 20];
        k.mul_add(&mut dst, &src, 2).unwrap();
        assert!(dst.iter().all(|&x| x == 6));
        let mut dst = [0u8; 50];
        k.mul_add(&mut dst, &src, 2).unwrap();
        assert!(dst[..40].iter().all(|&x| x == 6) && dst[40..].iter().all(|&x| x == 0));
    }
}

#[test]
fn kernel_names_and_forcing() {
    for k in Kernel::ALL {
        assert_eq!(Kernel::from_name(k.name()), Some(k));
        if !k.is_available() {
            assert_eq!(force_kernel(k), Err(FecError::KernelUnavailable(k)));
            assert!(k.mul_add(&mut [0u8; 4], &[1; 4], 3).is_err());
        }
    }
    assert!(Kernel::available().contains(&Kernel::Scalar));
    assert!(Kernel::best().is_available());
    // Forcing the active kernel back and forth does not change results.
    let src: Vec<u8> = (0..=255u8).collect();
    let mut outs = Vec::new();
    let before = active_kernel();
    for k in Kernel::available() {
        force_kernel(k).unwrap();
        let mut d = vec![0x5au8; 256];
        mul_add(&mut d, &src, 0x53);
        mul(&mut d, 0xca);
        outs.push(d);
    }
    force_kernel(before).unwrap();
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
}
