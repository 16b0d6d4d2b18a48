//! Independent seeds for each random stream of a run, from its one seed.

/// SplitMix64 of `seed` and a stream label: the forward link, the reverse
/// link and each protocol endpoint get unrelated, reproducible streams.
pub(crate) fn derive(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 32 seed bytes for a stream (quinn-proto endpoint RNGs).
pub(crate) fn derive_32(seed: u64, stream: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(
            &derive(seed, stream.wrapping_mul(4).wrapping_add(i as u64)).to_le_bytes(),
        );
    }
    out
}

pub(crate) const FORWARD_LINK: u64 = 1;
pub(crate) const REVERSE_LINK: u64 = 2;
pub(crate) const CLIENT: u64 = 3;
pub(crate) const SERVER: u64 = 4;
