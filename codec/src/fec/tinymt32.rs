//! TinyMT32, the PRNG of RFC 8682 (parameters mat1 = 0x8f7011ee,
//! mat2 = 0xfc78ff1f, tmat = 0x3793fdff, the ones RFC 8681 fixes).
//!
//! Both ends of the FEC link run it seeded by the repair key of a repair packet,
//! so the coding coefficients never travel on the wire. Determinism is the whole
//! point: the test checks the first 50 outputs for seed 1 against the values
//! RFC 8682 §2.2 publishes (from the authors' `check32.out.txt`).

const MAT1: u32 = 0x8f70_11ee;
const MAT2: u32 = 0xfc78_ff1f;
const TMAT: u32 = 0x3793_fdff;
const SH0: u32 = 1;
const SH1: u32 = 10;
const SH8: u32 = 8;
const MASK: u32 = 0x7fff_ffff;
const MIN_LOOP: u32 = 8;
const PRE_LOOP: u32 = 8;

/// TinyMT32 state (128 bits) with the RFC 8682 parameter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TinyMt32 {
    status: [u32; 4],
}

impl TinyMt32 {
    /// `tinymt32_init(s, seed)` of RFC 8682.
    pub fn new(seed: u32) -> Self {
        let mut s = TinyMt32 {
            status: [seed, MAT1, MAT2, TMAT],
        };
        for i in 1..MIN_LOOP {
            let prev = s.status[((i - 1) & 3) as usize];
            s.status[(i & 3) as usize] ^=
                i.wrapping_add(1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)));
        }
        // Period certification: the all-zero state is not allowed.
        if s.status[0] & MASK == 0 && s.status[1] == 0 && s.status[2] == 0 && s.status[3] == 0 {
            s.status = [
                u32::from(b'T'),
                u32::from(b'I'),
                u32::from(b'N'),
                u32::from(b'Y'),
            ];
        }
        for _ in 0..PRE_LOOP {
            s.next_state();
        }
        s
    }

    fn next_state(&mut self) {
        let st = &mut self.status;
        let mut y = st[3];
        let mut x = (st[0] & MASK) ^ st[1] ^ st[2];
        x ^= x << SH0;
        y ^= (y >> SH0) ^ x;
        st[0] = st[1];
        st[1] = st[2];
        st[2] = x ^ (y << SH1);
        st[3] = y;
        if y & 1 == 1 {
            st[1] ^= MAT1;
            st[2] ^= MAT2;
        }
    }

    fn temper(&self) -> u32 {
        let st = &self.status;
        let mut t0 = st[3];
        let t1 = st[0].wrapping_add(st[2] >> SH8);
        t0 ^= t1;
        if t1 & 1 == 1 {
            t0 ^= TMAT;
        }
        t0
    }

    /// `tinymt32_generate_uint32`: the next 32-bit output.
    #[allow(clippy::should_implement_trait)]
    pub fn next_u32(&mut self) -> u32 {
        self.next_state();
        self.temper()
    }

    /// `tinymt32_rand256` of RFC 8681: an integer in 0..=255.
    pub fn rand256(&mut self) -> u8 {
        (self.next_u32() & 0xff) as u8
    }

    /// `tinymt32_rand16` of RFC 8681: an integer in 0..=15.
    pub fn rand16(&mut self) -> u8 {
        (self.next_u32() & 0xf) as u8
    }

    /// A float in [0, 1) from the next output (for simulations, not in the RFCs).
    pub fn next_f64(&mut self) -> f64 {
        f64::from(self.next_u32()) / 4_294_967_296.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8682 §2.2, Figure 2: the first 50 outputs of
    /// `tinymt32_generate_uint32` for seed 1.
    const SEED1: [u32; 50] = [
        2545341989, 981918433, 3715302833, 2387538352, 3591001365, 3820442102, 2114400566,
        2196103051, 2783359912, 764534509, 643179475, 1822416315, 881558334, 4207026366,
        3690273640, 3240535687, 2921447122, 3984931427, 4092394160, 44209675, 2188315343,
        2908663843, 1834519336, 3774670961, 3019990707, 4065554902, 1239765502, 4035716197,
        3412127188, 552822483, 161364450, 353727785, 140085994, 149132008, 2547770827, 4064042525,
        4078297538, 2057335507, 622384752, 2041665899, 2193913817, 1080849512, 33160901, 662956935,
        642999063, 3384709977, 1723175122, 3866752252, 521822317, 2292524454,
    ];

    #[test]
    fn rfc8682_reference_outputs_seed_1() {
        let mut s = TinyMt32::new(1);
        for (i, &want) in SEED1.iter().enumerate() {
            assert_eq!(s.next_u32(), want, "output {i}");
        }
    }

    /// RFC 8681 Appendix A derives its rand256 / rand16 vectors from the same
    /// stream by masking.
    #[test]
    fn rand256_and_rand16_mask_the_stream() {
        let mut a = TinyMt32::new(1);
        let mut b = TinyMt32::new(1);
        for &want in &SEED1 {
            assert_eq!(u32::from(a.rand256()), want & 0xff);
            assert_eq!(u32::from(b.rand16()), want & 0xf);
        }
    }

    #[test]
    fn seeds_differ_and_repeat() {
        let a: Vec<u32> = (0..8)
            .scan(TinyMt32::new(7), |s, _| Some(s.next_u32()))
            .collect();
        let b: Vec<u32> = (0..8)
            .scan(TinyMt32::new(7), |s, _| Some(s.next_u32()))
            .collect();
        let c: Vec<u32> = (0..8)
            .scan(TinyMt32::new(8), |s, _| Some(s.next_u32()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Seed 0 is allowed by TinyMT32.
        let _ = TinyMt32::new(0).next_u32();
    }
}
