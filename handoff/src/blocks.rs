//! Transport blocks: the unit the handoff orders and completes.
//!
//! A block is one layer × `tokens_per_block` consecutive tokens of K and V
//! (the paper uses 16 tokens). The handoff is model-agnostic: a
//! [`BlockLayout`] gives the counts and the bytes of one block, and the
//! caller's KV payload is **block-major**: block `b` occupies bytes
//! `b·block_bytes .. (b+1)·block_bytes` of one buffer. Block ids are
//! layer-major, `b = layer·blocks_per_layer + token_block`, so FIFO order is
//! block id order.
//!
//! Inside a block the bytes are whatever the exporter wrote; for the gpu
//! crate's `kv_transfer::export` in BF16 that is K `[kv_head][token][dim]`
//! then V in the same layout. SmolLM2-135M (3 KV heads, head dim 64):
//! 3 × 16 × 64 × 2 B = 6 144 B of K + 6 144 B of V = 12 288 B per block, 30
//! layers × 96 token blocks = 2 880 blocks for a 1 536-token context.
//!
//! A block is cut into fragments of at most [`MAX_PAYLOAD`] = 1 368 bytes;
//! fragment `f` holds bytes `f·1368 .. min((f+1)·1368, block_bytes)`. Each
//! fragment is one source packet. A block is **complete** when every one of
//! its fragments was decoded; recovered utility counts complete blocks only.

use std::ops::Range;

use edgemu_codec::fec::MAX_PAYLOAD;

use crate::error::HandoffError;

/// How KV is cut into transport blocks. A layout read off the wire (a
/// peer's offer) goes through [`BlockLayout::new`]'s checks, so no count
/// a peer sends can divide by zero or overflow the layout's arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "UncheckedLayout")]
pub struct BlockLayout {
    pub n_layers: u32,
    pub n_tokens: u32,
    pub tokens_per_block: u32,
    /// Bytes of one block (K and V together).
    pub block_bytes: u32,
}

/// A layout as sent, before [`BlockLayout::new`] checks it.
#[derive(serde::Deserialize)]
struct UncheckedLayout {
    n_layers: u32,
    n_tokens: u32,
    tokens_per_block: u32,
    block_bytes: u32,
}

impl TryFrom<UncheckedLayout> for BlockLayout {
    type Error = HandoffError;
    fn try_from(u: UncheckedLayout) -> Result<Self, HandoffError> {
        BlockLayout::new(u.n_layers, u.n_tokens, u.tokens_per_block, u.block_bytes)
    }
}

/// Paper's tokens per block.
pub const TOKENS_PER_BLOCK: u32 = 16;

impl BlockLayout {
    /// A checked layout: every count positive, `n_tokens` a multiple of
    /// `tokens_per_block`, fragment ids fit 16 bits and the payload fits memory.
    pub fn new(
        n_layers: u32,
        n_tokens: u32,
        tokens_per_block: u32,
        block_bytes: u32,
    ) -> Result<Self, HandoffError> {
        let l = BlockLayout {
            n_layers,
            n_tokens,
            tokens_per_block,
            block_bytes,
        };
        if n_layers == 0 || n_tokens == 0 || tokens_per_block == 0 || block_bytes == 0 {
            return Err(HandoffError::Layout(format!(
                "every count must be positive: {l:?}"
            )));
        }
        if !n_tokens.is_multiple_of(tokens_per_block) {
            return Err(HandoffError::Layout(format!(
                "{n_tokens} tokens are not a multiple of {tokens_per_block} tokens per block"
            )));
        }
        let frags = u64::from(block_bytes).div_ceil(MAX_PAYLOAD as u64);
        if frags > u64::from(u16::MAX) {
            return Err(HandoffError::Layout(format!(
                "a block of {block_bytes} bytes needs {frags} fragments, more than 65535"
            )));
        }
        let blocks = u64::from(n_layers) * u64::from(n_tokens / tokens_per_block);
        if blocks * frags >= u64::from(u32::MAX) / 2 || blocks * u64::from(block_bytes) > 1 << 36 {
            return Err(HandoffError::Layout(format!(
                "{blocks} blocks of {block_bytes} bytes is too large a handoff"
            )));
        }
        Ok(l)
    }

    /// SmolLM2-135M in BF16 (30 layers, 3 KV heads, head dim 64), 16 tokens
    /// per block.
    pub fn smollm2(n_tokens: u32) -> Result<Self, HandoffError> {
        Self::for_model(30, 3, 64, 2, n_tokens)
    }

    /// A model's layout: `2 · kv_heads · 16 · head_dim · elem_bytes` per block.
    pub fn for_model(
        n_layers: u32,
        n_kv_heads: u32,
        head_dim: u32,
        elem_bytes: u32,
        n_tokens: u32,
    ) -> Result<Self, HandoffError> {
        let bytes = 2u64
            * u64::from(n_kv_heads)
            * u64::from(TOKENS_PER_BLOCK)
            * u64::from(head_dim)
            * u64::from(elem_bytes);
        let bytes = u32::try_from(bytes)
            .map_err(|_| HandoffError::Layout(format!("{bytes} bytes per block")))?;
        Self::new(n_layers, n_tokens, TOKENS_PER_BLOCK, bytes)
    }

    pub fn blocks_per_layer(&self) -> u32 {
        self.n_tokens / self.tokens_per_block
    }

    pub fn n_blocks(&self) -> u32 {
        self.n_layers * self.blocks_per_layer()
    }

    /// Block id of (layer, token block).
    pub fn block_id(&self, layer: u32, token_block: u32) -> u32 {
        layer * self.blocks_per_layer() + token_block
    }

    /// (layer, first token) of a block.
    pub fn block_position(&self, block: u32) -> (u32, u32) {
        let bpl = self.blocks_per_layer();
        (block / bpl, (block % bpl) * self.tokens_per_block)
    }

    pub fn fragments_per_block(&self) -> u16 {
        // Checked in `new`.
        self.block_bytes.div_ceil(MAX_PAYLOAD as u32) as u16
    }

    /// Source packets of the whole handoff.
    pub fn n_source_packets(&self) -> u32 {
        self.n_blocks() * u32::from(self.fragments_per_block())
    }

    /// Bytes of the whole KV payload.
    pub fn total_bytes(&self) -> usize {
        self.n_blocks() as usize * self.block_bytes as usize
    }

    /// Byte range of fragment `f` inside its block.
    pub fn fragment_range(&self, fragment: u16) -> Range<usize> {
        let start = usize::from(fragment) * MAX_PAYLOAD;
        start..(start + MAX_PAYLOAD).min(self.block_bytes as usize)
    }

    /// Byte range of block `b` in the block-major payload.
    pub fn block_range(&self, block: u32) -> Range<usize> {
        let start = block as usize * self.block_bytes as usize;
        start..start + self.block_bytes as usize
    }

    /// What an in-order byte stream of the KV (blocks in id order) has
    /// brought after its first `n` bytes: per block, the range of its bytes
    /// present (one range, or none).
    pub fn prefix_present(&self, n: usize) -> Vec<Vec<Range<usize>>> {
        let n = n.min(self.total_bytes());
        (0..self.n_blocks())
            .map(|b| {
                let range = self.block_range(b);
                let have = n.saturating_sub(range.start).min(range.len());
                // One range (a Vec of ranges, not of indices).
                std::iter::once(0..have).filter(|r| !r.is_empty()).collect()
            })
            .collect()
    }

    /// Checks a (block, fragment, payload length) triple read off the wire.
    pub fn check_fragment(
        &self,
        block: u32,
        fragment: u16,
        len: usize,
    ) -> Result<(), HandoffError> {
        if block >= self.n_blocks() {
            return Err(HandoffError::BadBlock {
                block,
                n_blocks: self.n_blocks(),
            });
        }
        let fragments = self.fragments_per_block();
        if fragment >= fragments {
            return Err(HandoffError::BadFragment {
                block,
                fragment,
                fragments,
            });
        }
        let expected = self.fragment_range(fragment).len();
        if len != expected {
            return Err(HandoffError::FragmentLength {
                block,
                fragment,
                expected,
                got: len,
            });
        }
        Ok(())
    }
}

/// Checks a utility vector against a layout: one finite, non-negative value
/// per block and a positive total.
pub fn check_utilities(layout: &BlockLayout, utilities: &[f64]) -> Result<(), HandoffError> {
    if utilities.len() != layout.n_blocks() as usize {
        return Err(HandoffError::Utilities(format!(
            "{} utilities for {} blocks",
            utilities.len(),
            layout.n_blocks()
        )));
    }
    if let Some((i, u)) = utilities
        .iter()
        .enumerate()
        .find(|(_, u)| !u.is_finite() || **u < 0.0)
    {
        return Err(HandoffError::Utilities(format!(
            "block {i} has utility {u}, must be finite and ≥ 0"
        )));
    }
    if utilities.iter().sum::<f64>() <= 0.0 {
        return Err(HandoffError::Utilities("total utility is 0".into()));
    }
    Ok(())
}

/// Per-block utilities from a measured KV-utility profile (the paper's α
/// mapping from profile cells to blocks). `cells[g][b]` is the utility of
/// layer group `g`, whose layers are `layer_groups[g]`, × position bin `b`
/// (the bins split the context's tokens evenly); a block falls in the cell of
/// its layer and of its first token (a layer in no group counts in the last
/// group), and each cell's utility is spread equally over the blocks it
/// covers, so each cell keeps its share of the total however many blocks
/// that is.
pub fn cell_utilities(
    cells: &[Vec<f64>],
    layer_groups: &[Range<usize>],
    layout: &BlockLayout,
) -> Result<Vec<f64>, HandoffError> {
    let groups = cells.len();
    let bins = cells.first().map_or(0, Vec::len);
    if groups == 0 || bins == 0 || cells.iter().any(|r| r.len() != bins) {
        return Err(HandoffError::Utilities(
            "profile cells must be a non-empty rectangle (layer groups × position bins)".into(),
        ));
    }
    if layer_groups.len() != groups {
        return Err(HandoffError::Utilities(format!(
            "{} layer groups for {groups} rows of profile cells",
            layer_groups.len()
        )));
    }
    let n_tokens = layout.n_tokens as usize;
    let cell = |b: u32| {
        let (layer, start) = layout.block_position(b);
        let g = layer_groups
            .iter()
            .position(|r| r.contains(&(layer as usize)))
            .unwrap_or(groups - 1);
        let bin = (start as usize * bins / n_tokens.max(1)).min(bins - 1);
        (g, bin)
    };
    let mut count = vec![0usize; groups * bins];
    for b in 0..layout.n_blocks() {
        let (g, bin) = cell(b);
        count[g * bins + bin] += 1;
    }
    Ok((0..layout.n_blocks())
        .map(|b| {
            let (g, bin) = cell(b);
            cells[g][bin] / count[g * bins + bin] as f64
        })
        .collect())
}

/// The order source blocks are sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SourceOrder {
    /// Block id order: layer-major, tokens in order (the baselines).
    Fifo,
    /// Falling utility, ties in block id order (PriorityFEC, paper §III-C).
    Priority,
}

/// Block ids in send order.
pub fn source_sequence(order: SourceOrder, utilities: &[f64]) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..utilities.len() as u32).collect();
    if order == SourceOrder::Priority {
        // Stable: equal utilities keep FIFO order. total_cmp: no panic on NaN
        // (check_utilities refuses those anyway).
        ids.sort_by(|&a, &b| utilities[b as usize].total_cmp(&utilities[a as usize]));
    }
    ids
}

/// The placeholder utility profile of the transport-only grid until the
/// measured KV-utility profile exists — the shape of the paper's Fig. 2a/2b,
/// not a measurement: layer weight `0.2 + 0.8·e^(−l/4) + 0.5·e^(−((l−22)/3)²)`
/// (a sensitive early region and a second, later one, so layer-major FIFO is
/// not already utility order) times position weight
/// `1 + 2·e^(−j/4) + 2·e^(−(J−1−j)/4)` over the layer's token blocks
/// `j = 0..J` (prompt prefix and recent context most sensitive).
pub fn placeholder_utilities(layout: &BlockLayout) -> Vec<f64> {
    let bpl = layout.blocks_per_layer();
    (0..layout.n_blocks())
        .map(|b| {
            let (l, j) = (f64::from(b / bpl), f64::from(b % bpl));
            let last = f64::from(bpl - 1);
            let lw = 0.2 + 0.8 * (-l / 4.0).exp() + 0.5 * (-((l - 22.0) / 3.0).powi(2)).exp();
            let pw = 1.0 + 2.0 * (-j / 4.0).exp() + 2.0 * (-(last - j) / 4.0).exp();
            lw * pw
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_layout() {
        let l = BlockLayout::smollm2(1536).unwrap();
        assert_eq!(l.block_bytes, 12_288);
        assert_eq!(l.n_blocks(), 2_880);
        assert_eq!(l.fragments_per_block(), 9);
        assert_eq!(l.fragment_range(8), 10_944..12_288);
        assert_eq!(l.n_source_packets(), 25_920);
        assert_eq!(l.block_position(97), (1, 16));
        assert_eq!(l.block_id(1, 1), 97);
    }

    #[test]
    fn bad_layouts_and_utilities() {
        assert!(BlockLayout::new(0, 16, 16, 10).is_err());
        assert!(BlockLayout::new(1, 17, 16, 10).is_err());
        assert!(BlockLayout::new(1, 16, 16, u32::MAX).is_err());
        let l = BlockLayout::new(2, 32, 16, 100).unwrap();
        assert!(check_utilities(&l, &[1.0; 3]).is_err());
        assert!(check_utilities(&l, &[1.0, f64::NAN, 1.0, 1.0]).is_err());
        assert!(check_utilities(&l, &[1.0, -1.0, 1.0, 1.0]).is_err());
        assert!(check_utilities(&l, &[0.0; 4]).is_err());
        assert!(check_utilities(&l, &[0.0, 1.0, 0.0, 0.0]).is_ok());
        assert_eq!(
            l.check_fragment(4, 0, 100),
            Err(HandoffError::BadBlock {
                block: 4,
                n_blocks: 4
            })
        );
        assert!(matches!(
            l.check_fragment(0, 1, 100),
            Err(HandoffError::BadFragment { .. })
        ));
        assert!(matches!(
            l.check_fragment(0, 0, 99),
            Err(HandoffError::FragmentLength { .. })
        ));
    }

    #[test]
    fn each_cell_keeps_its_share_of_utility() {
        // 6 layers in 2 groups of 3, 128 tokens (8 token blocks) in 4 bins of
        // 2 blocks: every cell covers 3 × 2 = 6 blocks.
        let cells = vec![vec![1.0, 0.5, 0.25, 0.125], vec![0.6, 0.3, 0.2, 0.1]];
        let groups = [0..3, 3..6];
        let layout = BlockLayout::for_model(6, 3, 64, 2, 128).unwrap();
        let u = cell_utilities(&cells, &groups, &layout).unwrap();
        assert_eq!(u.len(), 48);
        let total: f64 = cells.iter().flatten().sum();
        assert!((u.iter().sum::<f64>() - total).abs() < 1e-12);
        // Layer 0, token block 0 and 1: cell (0, 0); token block 2: (0, 1).
        assert_eq!(u[0], 1.0 / 6.0);
        assert_eq!(u[1], 1.0 / 6.0);
        assert_eq!(u[2], 0.5 / 6.0);
        // Layer 4, last token block: cell (1, 3).
        assert_eq!(u[layout.block_id(4, 7) as usize], 0.1 / 6.0);
        // A layer in no group counts in the last one.
        let u = cell_utilities(&cells, &[0..3, 3..5], &layout).unwrap();
        assert_eq!(u[layout.block_id(5, 0) as usize], 0.6 / 6.0);
        let three_groups = [0..2, 2..4, 4..6];
        assert!(
            cell_utilities(&cells, &three_groups, &layout).is_err(),
            "2 rows, 3 groups"
        );
        assert!(cell_utilities(&[vec![1.0], vec![]], &groups, &layout).is_err());
        assert!(cell_utilities(&[], &[], &layout).is_err());
    }

    #[test]
    fn priority_order_is_stable() {
        let u = [1.0, 3.0, 1.0, 3.0, 2.0];
        assert_eq!(
            source_sequence(SourceOrder::Priority, &u),
            vec![1, 3, 4, 0, 2]
        );
        assert_eq!(source_sequence(SourceOrder::Fifo, &u), vec![0, 1, 2, 3, 4]);
    }
}
