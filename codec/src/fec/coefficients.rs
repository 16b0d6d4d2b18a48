//! Coding coefficients exactly as RFC 8681 §3.6 generates them
//! (`generate_coding_coefficients`, case m = 8, GF(2^8)).
//!
//! A fresh TinyMT32 is seeded with the 16-bit repair key. With density threshold
//! `DT = 15` every coefficient is drawn with `tinymt32_rand256`, redrawing zeros,
//! so every source packet of the range takes part. With `DT < 15` each position
//! first draws `tinymt32_rand16`; if it is `<= DT` the coefficient is drawn like
//! above (nonzero), else it is 0 — on average `(DT + 1) / 16` of the packets take
//! part. (RFC 8681 avoids zero by redrawing; nothing maps 0 to 1.) Sender and
//! receiver call this with the `(key, count, DT)` of the repair header and get the
//! same vector.

use super::error::FecError;
use super::tinymt32::TinyMt32;

/// Largest density threshold (all coefficients nonzero).
pub const MAX_DT: u8 = 15;

/// Fills `cc` (one coefficient per source packet of the repair range, lowest id
/// first) for `repair_key` and density threshold `dt`.
pub fn generate_coding_coefficients(
    repair_key: u16,
    cc: &mut [u8],
    dt: u8,
) -> Result<(), FecError> {
    if dt > MAX_DT {
        return Err(FecError::BadDensity(dt));
    }
    let mut s = TinyMt32::new(u32::from(repair_key));
    let draw_nonzero = |s: &mut TinyMt32| loop {
        let c = s.rand256();
        if c != 0 {
            break c;
        }
    };
    if dt == MAX_DT {
        for c in cc.iter_mut() {
            *c = draw_nonzero(&mut s);
        }
    } else {
        for c in cc.iter_mut() {
            *c = if s.rand16() <= dt {
                draw_nonzero(&mut s)
            } else {
                0
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_coefficients_follow_rand256_skipping_zeros() {
        let mut cc = [0u8; 40];
        generate_coding_coefficients(1, &mut cc, 15).unwrap();
        let mut s = TinyMt32::new(1);
        let mut expect = Vec::new();
        while expect.len() < cc.len() {
            let c = s.rand256();
            if c != 0 {
                expect.push(c);
            }
        }
        assert_eq!(&cc[..], &expect[..]);
        // Seed 1 starts 2545341989 & 0xff = 0x25, 981918433 & 0xff = 0xe1.
        assert_eq!(&cc[..2], &[0x25, 0xe1]);
    }

    #[test]
    fn sparse_coefficients_interleave_rand16_and_rand256() {
        let mut cc = [0u8; 64];
        generate_coding_coefficients(1, &mut cc, 3).unwrap();
        let mut s = TinyMt32::new(1);
        for &c in &cc {
            if s.rand16() <= 3 {
                let mut v = s.rand256();
                while v == 0 {
                    v = s.rand256();
                }
                assert_eq!(c, v);
            } else {
                assert_eq!(c, 0);
            }
        }
        // First draws for seed 1: rand16 = 5 (> 3) → 0; 1 (≤ 3) → rand256 of
        // 3715302833 = 0xb1.
        assert_eq!(&cc[..2], &[0, 0xb1]);
    }

    #[test]
    fn density_controls_the_share_of_nonzeros() {
        let mut cc = vec![0u8; 16_000];
        for dt in 0..=15u8 {
            generate_coding_coefficients(999, &mut cc, dt).unwrap();
            let nz = cc.iter().filter(|&&c| c != 0).count() as f64 / cc.len() as f64;
            let want = f64::from(dt + 1) / 16.0;
            assert!((nz - want).abs() < 0.02, "dt={dt} share={nz}");
        }
        assert_eq!(
            generate_coding_coefficients(1, &mut cc, 16),
            Err(FecError::BadDensity(16))
        );
    }
}
