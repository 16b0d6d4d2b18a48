//! Delivered prefix → complete transport blocks.

/// How many blocks, in FIFO order with the given byte sizes, lie entirely
/// within the first `delivered_prefix` bytes of the stream. A reliable
/// transport delivers a prefix, so the complete blocks are always the first
/// `n`; a block of 0 bytes is complete once every block before it is.
pub fn complete_blocks(block_sizes: &[u64], delivered_prefix: u64) -> usize {
    let mut end: u64 = 0;
    for (i, &size) in block_sizes.iter().enumerate() {
        end = end.saturating_add(size);
        if end > delivered_prefix {
            return i;
        }
    }
    block_sizes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_whole_blocks() {
        let sizes = [10, 10, 5];
        assert_eq!(complete_blocks(&sizes, 0), 0);
        assert_eq!(complete_blocks(&sizes, 9), 0);
        assert_eq!(complete_blocks(&sizes, 10), 1);
        assert_eq!(complete_blocks(&sizes, 24), 2);
        assert_eq!(complete_blocks(&sizes, 25), 3);
        assert_eq!(complete_blocks(&sizes, u64::MAX), 3);
        assert_eq!(complete_blocks(&[], 7), 0);
        assert_eq!(complete_blocks(&[0, 3, 0], 0), 1);
        assert_eq!(complete_blocks(&[0, 3, 0], 3), 3);
    }
}
