//! x86-64 SIMD region kernels.
//!
//! Each kernel is an `unsafe fn` compiled with `#[target_feature]` for its ISA
//! extension. The only precondition for calling one is that the CPU supports
//! those features; the dispatcher in [`super`] guarantees it by checking
//! [`Kernel::is_available`](super::Kernel::is_available) (runtime detection)
//! before any call. Memory accesses stay inside the slices: full vectors are
//! loaded only while a whole vector remains, and the tail is handled by scalar
//! code (`pshufb` kernels) or masked loads and stores that suppress faults on
//! masked-off bytes (AVX-512).

mod gfni;
mod shuffle;

pub(crate) use gfni::{mul_add_gfni, mul_gfni};
pub(crate) use shuffle::{mul_add_avx2, mul_add_ssse3, mul_avx2, mul_ssse3};
