//! GF(2^8) arithmetic: scalars and region kernels.
//!
//! The field is GF(2)[x] / (x^8 + x^4 + x^3 + x^2 + 1), polynomial 0x11D, the one
//! RFC 8681 §3.1 mandates for the RLC FEC scheme. Scalar multiplication and
//! inversion go through the [`gf256`] crate (its default `gf256` type uses exactly
//! 0x11D); that crate has no slice ("region") operations, so this module adds the
//! two the codec needs:
//!
//! - [`mul_add`]: `dst[i] ^= c · src[i]` (the inner loop of encoding and of
//!   Gaussian elimination),
//! - [`mul`]: `dst[i] = c · dst[i]` (normalising a row by its pivot).
//!
//! Both exist in several [`Kernel`]s: portable scalar (one 256-byte product table
//! row per coefficient), SSSE3 and AVX2 (split-nibble table lookups with `pshufb`),
//! and AVX-512 + GFNI (`GF2P8AFFINEQB` with the 8×8 bit matrix of "multiply by c"
//! over 0x11D; `GF2P8MULB` is hard-wired to the AES polynomial 0x11B and would be
//! wrong here). The fastest kernel the CPU supports is chosen on first use by
//! runtime feature detection; `EDGEMU_FEC_KERNEL=scalar|ssse3|avx2|avx512-gfni`
//! overrides that choice at start-up and [`force_kernel`] at any time (tests,
//! benchmarks). Every kernel computes exactly the scalar result — see the tests.

mod scalar;
mod tables;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU8, Ordering};

use super::error::FecError;
pub(crate) use tables::tables;
pub use tables::{affine_matrix, gf_affine_byte};

/// Product of two field elements (through the `gf256` crate).
#[inline]
pub fn gf_mul(a: u8, b: u8) -> u8 {
    (gf256::gf256(a) * gf256::gf256(b)).get()
}

/// Multiplicative inverse; `None` for zero.
#[inline]
pub fn gf_inv(a: u8) -> Option<u8> {
    gf256::gf256(a).checked_recip().map(|x| x.get())
}

/// One implementation of the region operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernel {
    /// Portable: one lookup in the 256-byte product row of the coefficient per byte.
    Scalar,
    /// 16 bytes per step: `pshufb` on two 16-entry tables (low and high nibble).
    Ssse3,
    /// 32 bytes per step, same split-nibble method on 256-bit registers.
    Avx2,
    /// 64 bytes per step: one `vgf2p8affineqb` with the matrix of "· c" (needs
    /// AVX-512F, AVX-512BW for the masked tail, and GFNI).
    Avx512Gfni,
}

impl Kernel {
    /// All kernels, slowest first.
    pub const ALL: [Kernel; 4] = [
        Kernel::Scalar,
        Kernel::Ssse3,
        Kernel::Avx2,
        Kernel::Avx512Gfni,
    ];

    /// Short name, as in benchmark output and `EDGEMU_FEC_KERNEL`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512Gfni => "avx512-gfni",
        }
    }

    /// Parses a [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether this CPU can run the kernel (runtime feature detection).
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Gfni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kernels this CPU can run, slowest first.
    pub fn available() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_available())
            .collect()
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        Kernel::ALL
            .into_iter()
            .rev()
            .find(|k| k.is_available())
            .unwrap_or(Kernel::Scalar)
    }

    /// `dst[i] ^= c · src[i]` for `i < min(dst.len(), src.len())` with this kernel.
    pub fn mul_add(self, dst: &mut [u8], src: &[u8], c: u8) -> Result<(), FecError> {
        if !self.is_available() {
            return Err(FecError::KernelUnavailable(self));
        }
        dispatch_mul_add(self, dst, src, c);
        Ok(())
    }

    /// `dst[i] = c · dst[i]` with this kernel.
    pub fn mul(self, dst: &mut [u8], c: u8) -> Result<(), FecError> {
        if !self.is_available() {
            return Err(FecError::KernelUnavailable(self));
        }
        dispatch_mul(self, dst, c);
        Ok(())
    }

    fn to_u8(self) -> u8 {
        match self {
            Kernel::Scalar => 1,
            Kernel::Ssse3 => 2,
            Kernel::Avx2 => 3,
            Kernel::Avx512Gfni => 4,
        }
    }

    fn from_u8(v: u8) -> Option<Kernel> {
        match v {
            1 => Some(Kernel::Scalar),
            2 => Some(Kernel::Ssse3),
            3 => Some(Kernel::Avx2),
            4 => Some(Kernel::Avx512Gfni),
            _ => None,
        }
    }
}

/// The kernel [`mul_add`] and [`mul`] use; 0 = not chosen yet.
static ACTIVE: AtomicU8 = AtomicU8::new(0);

/// The kernel the free functions use: chosen on first call — the one named by
/// `EDGEMU_FEC_KERNEL` if set and available, else [`Kernel::best`].
pub fn active_kernel() -> Kernel {
    if let Some(k) = Kernel::from_u8(ACTIVE.load(Ordering::Relaxed)) {
        return k;
    }
    let k = std::env::var("EDGEMU_FEC_KERNEL")
        .ok()
        .and_then(|n| Kernel::from_name(n.trim()))
        .filter(|k| k.is_available())
        .unwrap_or_else(Kernel::best);
    ACTIVE.store(k.to_u8(), Ordering::Relaxed);
    k
}

/// Makes [`mul_add`] and [`mul`] use `kernel` from now on (process-wide);
/// returns the kernel used before. All kernels give identical results, so this
/// only changes speed.
pub fn force_kernel(kernel: Kernel) -> Result<Kernel, FecError> {
    if !kernel.is_available() {
        return Err(FecError::KernelUnavailable(kernel));
    }
    let prev = active_kernel();
    ACTIVE.store(kernel.to_u8(), Ordering::Relaxed);
    Ok(prev)
}

/// `dst[i] ^= c · src[i]` over GF(2^8)/0x11D for `i < min(dst.len(), src.len())`,
/// with the [active kernel](active_kernel).
#[inline]
pub fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    dispatch_mul_add(active_kernel(), dst, src, c);
}

/// `dst[i] = c · dst[i]` over GF(2^8)/0x11D, with the [active kernel](active_kernel).
#[inline]
pub fn mul(dst: &mut [u8], c: u8) {
    dispatch_mul(active_kernel(), dst, c);
}

/// `dst[i] ^= src[i]` (the `c = 1` case; any kernel would compute the same).
#[inline]
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    scalar::xor_into(dst, src);
}

/// [`Kernel::mul_add`] without the availability check, for callers that
/// checked once (the benchmark loop).
#[inline]
pub(crate) fn dispatch_mul_add(kernel: Kernel, dst: &mut [u8], src: &[u8], c: u8) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    if c == 0 || n == 0 {
        return;
    }
    match kernel {
        Kernel::Scalar => scalar::mul_add(dst, src, c),
        // SAFETY: a kernel value other than Scalar only reaches this point after
        // `is_available` confirmed the CPU features the kernel is compiled for
        // (`Kernel::mul_add`, `force_kernel` and `active_kernel` all check it).
        #[cfg(target_arch = "x86_64")]
        Kernel::Ssse3 => unsafe { x86::mul_add_ssse3(dst, src, c) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { x86::mul_add_avx2(dst, src, c) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Gfni => unsafe { x86::mul_add_gfni(dst, src, c) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::mul_add(dst, src, c),
    }
}

#[inline]
fn dispatch_mul(kernel: Kernel, dst: &mut [u8], c: u8) {
    if c == 1 || dst.is_empty() {
        return;
    }
    if c == 0 {
        dst.fill(0);
        return;
    }
    match kernel {
        Kernel::Scalar => scalar::mul(dst, c),
        // SAFETY: as in `dispatch_mul_add`: the features were checked.
        #[cfg(target_arch = "x86_64")]
        Kernel::Ssse3 => unsafe { x86::mul_ssse3(dst, c) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => unsafe { x86::mul_avx2(dst, c) },
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512Gfni => unsafe { x86::mul_gfni(dst, c) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => scalar::mul(dst, c),
    }
}
