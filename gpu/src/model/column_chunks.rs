//! The column-parallel driver of the CPU int8 matmuls ([`super::cpu_q8`],
//! [`super::cpu_i8`]): the output columns are cut into chunks of whole
//! column groups, each chunk is computed by one rayon task into its own
//! `(m, chunk width)` buffer, and the buffers are copied into the row-major
//! `(m, n)` result. A chunk's values do not depend on the others, so the
//! split only decides who computes what.

use rayon::prelude::*;

/// `y`, `(m, n)` row-major, from `chunk(g0, ng, out)` for every chunk of
/// `col_chunk` columns (`col_chunk / group` groups of `group` columns,
/// fewer at the end); `chunk` fills `out`, `(m, group · ng)` row-major, for
/// groups `g0..g0 + ng` (padding columns past `n` are dropped).
pub(crate) fn by_column_chunks(
    n: usize,
    m: usize,
    group: usize,
    col_chunk: usize,
    chunk: impl Fn(usize, usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let mut y = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return y;
    }
    let groups = n.div_ceil(group);
    let per = col_chunk / group;
    let parts: Vec<Vec<f32>> = (0..n.div_ceil(col_chunk))
        .into_par_iter()
        .map(|c| {
            let g0 = c * per;
            let ng = (groups - g0).min(per);
            let mut out = vec![0f32; m * ng * group];
            chunk(g0, ng, &mut out);
            out
        })
        .collect();
    for (c, part) in parts.iter().enumerate() {
        let j0 = c * col_chunk;
        let wp = part.len() / m;
        let w = (n - j0).min(wp);
        for r in 0..m {
            y[r * n + j0..r * n + j0 + w].copy_from_slice(&part[r * wp..r * wp + w]);
        }
    }
    y
}
