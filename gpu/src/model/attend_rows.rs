//! Attention of several consecutive query rows of one sequence against its
//! cache (CPU), bit for bit [`SeqKv::attend_row`] of each row.
//!
//! Teacher forcing runs a sequence's 31 forced positions as rows of one pass
//! ([`crate::model::llama::Llama::forward_rows_as_decode`]); row `i` attends to
//! the first `n0 + i` tokens. Computed row by row, every row reads the whole
//! ≈ 1 560-token K and V of each head again (≈ 400 KB each, from L2/L3) and
//! spends a call, a dependency chain and a horizontal sum on every score.
//! Here, per KV head, keys and values go through in tiles of [`TILE`] rows
//! (16 KB, kept in L1) and every query row of the sequence uses a tile
//! before the next one is read; four keys' dot products run side by side.
//!
//! **Same bits.** Each score is computed by exactly the operations of
//! `dot_avx2` (two 8-lane FMA chains over alternate 8-element chunks, their
//! sum, then the same horizontal reduction), the bias is added after it,
//! the maximum, `exp` and sum run per row in key order as before (the same
//! `kv::exp_shifted`: libm's bits, four lanes at a time), and each
//! output element is the same chain `acc = fma(w[p], v[p], acc)` for
//! `p = 0, 1, …` — only held in memory between tiles, which rounds nothing.
//! Rows known to be all +0 (a zero-fill rebuild's lost rows, marked when the
//! cache is rebuilt on a base) are not read: a +0 key's score is the +0 that
//! chain gives for any finite query, and a +0 value leaves every
//! `fma(w, +0, acc)` at `acc` for a finite `w`; only the sum of numerators
//! still adds their `w` in key order. (A query or weight that is not finite
//! computes with a tile of +0 rows instead.)
//! The unit test compares with `attend_row` bit for bit. Without AVX2+FMA, or
//! for a head dimension other than 64, each row goes through `attend_row`.

use crate::error::{GpuError, Result};
use crate::model::kv::{cpu_f32, exp_shifted, has_avx2_fma, OwnRun, SeqKv};

/// Keys (and values) per tile.
const TILE: usize = 64;

impl SeqKv {
    /// [`attend_rows_head_group`] of this one sequence (the tests' entry).
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend_rows_head(
        &self,
        layer: usize,
        n0: usize,
        t: usize,
        q: &[f32],
        h: usize,
        rep: usize,
        scores: &mut Vec<f32>,
        out: &mut [f32],
    ) -> Result<()> {
        attend_rows_head_group(
            &[GroupRows { kv: self, n0, t, q }],
            layer,
            h,
            rep,
            scores,
            out,
        )
    }

    /// Checks the shape of rows `n0 − 1 .. n0 + t − 1` of KV head `h` of
    /// `layer` (see [`attend_rows_head_group`]).
    fn check_rows(
        &self,
        layer: usize,
        n0: usize,
        t: usize,
        q: &[f32],
        h: usize,
        rep: usize,
    ) -> Result<()> {
        let (hd, nkv, cap) = (self.head_dim, self.n_kv_heads, self.capacity);
        if n0 == 0
            || t == 0
            || h >= nkv
            || q.len() != t * nkv * rep * hd
            || n0 + t - 1 > cap
            || layer >= self.layers.len()
        {
            return Err(GpuError::Engine("attention rows shape".into()));
        }
        Ok(())
    }

    /// The row kernel's view of KV head `h` of `layer` for checked rows
    /// ([`SeqKv::check_rows`]), over the storage `locks` holds.
    #[allow(clippy::too_many_arguments)]
    fn head_view<'s, G: std::ops::Deref<Target = candle_core::Storage>>(
        &'s self,
        locks: &'s LayerLocks<'s, G>,
        layer: usize,
        n0: usize,
        t: usize,
        q: &'s [f32],
        h: usize,
        rep: usize,
    ) -> Result<HeadView<'s>> {
        let (hd, nkv, cap) = (self.head_dim, self.n_kv_heads, self.capacity);
        let hs = nkv * rep * hd;
        // The F32 storage holds tokens `fs..cap` (`SeqKv::f32_start`).
        let fs = self.f32_start;
        let kd = cpu_f32(&locks.k.0, locks.k.1, nkv * (cap - fs) * hd)?;
        let vd = cpu_f32(&locks.v.0, locks.v.1, nkv * (cap - fs) * hd)?;
        let bd = match &locks.bias {
            Some((bs, bl)) => Some(cpu_f32(bs, bl, nkv * cap)?),
            None => None,
        };
        let nmax = n0 + t - 1;
        if nmax < fs || self.bf16.as_ref().is_some_and(|p| p.valid < fs) {
            return Err(GpuError::Engine(
                "attention rows below the F32 storage's first token".into(),
            ));
        }
        let kh = &kd[h * (cap - fs) * hd..][..(nmax - fs) * hd];
        let vh = &vd[h * (cap - fs) * hd..][..(nmax - fs) * hd];
        let bh = bd.map(|b| &b[h * cap..][..nmax]);
        // Rows below `frozen` are read from the BF16 copy (module docs of `kv`);
        // of those, the rows marked equal to a base, from the base.
        let (kb, vb, frozen) = match &self.bf16 {
            Some(p) if layer < p.k.len() => {
                let f = p.valid.min(nmax);
                let at = h * p.tokens * hd;
                // A sparse copy's layer without own rows is empty (zeros).
                let own = |c: &'s [u16]| if c.is_empty() { c } else { &c[at..][..f * hd] };
                let shared = |rows: &'s [f32], own: &'s [Vec<OwnRun>]| Shared {
                    rows: &rows[at..][..f * hd],
                    own: &own[layer * nkv + h],
                };
                let (sk, sv) = match &p.shared {
                    Some(s) => (
                        Some(shared(&s.base.k[layer], &s.own_k)),
                        Some(shared(&s.base.v[layer], &s.own_v)),
                    ),
                    None => (None, None),
                };
                (
                    Some((own(&p.k[layer]), sk)),
                    Some((own(&p.v[layer]), sv)),
                    f,
                )
            }
            _ if fs > 0 => {
                return Err(GpuError::Engine(
                    "a cache whose F32 rows start past token 0 has no BF16 copy".into(),
                ))
            }
            _ => (None, None, 0),
        };
        Ok(HeadView {
            kh,
            vh,
            bh,
            kb,
            vb,
            fs,
            frozen,
            nmax,
            n0,
            t,
            qs: q,
            hs,
            h,
        })
    }

    /// Read locks on `layer`'s K, V and bias storage.
    fn lock_layer(
        &self,
        layer: usize,
    ) -> LayerLocks<'_, impl std::ops::Deref<Target = candle_core::Storage> + '_> {
        let l = &self.layers[layer];
        LayerLocks {
            k: l.k.storage_and_layout(),
            v: l.v.storage_and_layout(),
            bias: l.bias.as_ref().map(|b| b.storage_and_layout()),
        }
    }
}

/// A layer's storage, read-locked (guards `G`) while the kernel reads it.
struct LayerLocks<'a, G> {
    k: (G, &'a candle_core::Layout),
    v: (G, &'a candle_core::Layout),
    bias: Option<(G, &'a candle_core::Layout)>,
}

/// One sequence's rows in [`attend_rows_head_group`].
pub(crate) struct GroupRows<'a> {
    pub(crate) kv: &'a SeqKv,
    /// Row `i` attends to the first `n0 + i` tokens.
    pub(crate) n0: usize,
    pub(crate) t: usize,
    /// `t` rows of all `n_kv_heads · rep` query heads (scaled and rotated).
    pub(crate) q: &'a [f32],
}

/// What the kernel reads for one sequence's rows of one KV head.
struct HeadView<'s> {
    kh: &'s [f32],
    vh: &'s [f32],
    bh: Option<&'s [f32]>,
    kb: Option<(&'s [u16], Option<Shared<'s>>)>,
    vb: Option<(&'s [u16], Option<Shared<'s>>)>,
    fs: usize,
    frozen: usize,
    nmax: usize,
    n0: usize,
    t: usize,
    qs: &'s [f32],
    hs: usize,
    h: usize,
}

/// Attention of KV head `h`'s query heads for `t` consecutive rows of each of
/// several sequences: row `i` of a sequence attends to `layer`'s first
/// `n0 + i` tokens (its own, freshly appended, row last), as
/// [`SeqKv::attend_row`] with `n = n0 + i`. `out` receives, per row, the `rep`
/// heads of KV head `h`, sequence after sequence: `(Σ t, rep, head_dim)`. Each
/// sequence's outputs are bit for bit those of a group of it alone. Tile by tile, every
/// sequence uses a tile of keys (values) before the next tile is read, so
/// caches that share a base's rows ([`crate::model::kv::SharedRows`]) — a
/// decode step's handoffs of one context — read each shared tile from
/// memory once for the group, not once per sequence.
pub(crate) fn attend_rows_head_group(
    items: &[GroupRows<'_>],
    layer: usize,
    h: usize,
    rep: usize,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<()> {
    let Some(first) = items.first() else {
        return Ok(());
    };
    let hd = first.kv.head_dim;
    let gw = rep * hd;
    let total: usize = items.iter().map(|g| g.t).sum();
    if out.len() != total * gw || items.iter().any(|g| g.kv.head_dim != hd) {
        return Err(GpuError::Engine("attention rows shape".into()));
    }
    let items: Vec<&GroupRows<'_>> = items.iter().filter(|g| g.t > 0).collect();
    for g in &items {
        g.kv.check_rows(layer, g.n0, g.t, g.q, h, rep)?;
    }
    if !(hd == 64 && has_avx2_fma()) {
        // The plain row kernel, one sequence and row at a time.
        let mut at = 0;
        for g in &items {
            let hs = g.q.len() / g.t;
            let mut full = vec![0f32; hs];
            for i in 0..g.t {
                g.kv.attend_row(
                    layer,
                    g.n0 + i,
                    &g.q[i * hs..(i + 1) * hs],
                    rep,
                    scores,
                    &mut full,
                )?;
                out[(at + i) * gw..(at + i + 1) * gw].copy_from_slice(&full[h * gw..(h + 1) * gw]);
            }
            at += g.t;
        }
        return Ok(());
    }
    let locks: Vec<_> = items.iter().map(|g| g.kv.lock_layer(layer)).collect();
    let views = items
        .iter()
        .zip(&locks)
        .map(|(g, l)| g.kv.head_view(l, layer, g.n0, g.t, g.q, h, rep))
        .collect::<Result<Vec<_>>>()?;
    // Per sequence: where its score rows start (one per (row, query head),
    // `nmax` apart) and where its output rows start.
    let mut score_at = Vec::with_capacity(views.len());
    let mut out_at = Vec::with_capacity(views.len());
    let (mut sa, mut oa) = (0, 0);
    for v in &views {
        score_at.push(sa);
        out_at.push(oa);
        sa += v.t * rep * v.nmax;
        oa += v.t * gw;
    }
    scores.clear();
    scores.resize(sa, 0.0);
    let mut tile = Vec::with_capacity(TILE * hd);
    let mut segs = Vec::new();
    fn qrow<'a>(v: &HeadView<'a>, i: usize, r: usize, rep: usize) -> &'a [f32] {
        &v.qs[i * v.hs + (v.h * rep + r) * 64..][..64]
    }
    // Per sequence and row: are all its query heads of this KV head finite
    // (then +0 keys need not be read; checked once, not per tile)?
    let q_finite: Vec<Vec<bool>> = views
        .iter()
        .map(|v| {
            (0..v.t)
                .map(|i| (0..rep).all(|r| qrow(v, i, r, rep).iter().all(|x| x.is_finite())))
                .collect()
        })
        .collect();
    for_each_run(
        &views,
        true,
        hd,
        &mut tile,
        &mut segs,
        |j, i, pa, pe, kt| {
            let v = &views[j];
            for r in 0..rep {
                let s = &mut scores[score_at[j] + (i * rep + r) * v.nmax..][pa..pe];
                let q = qrow(v, i, r, rep);
                match kt {
                    // SAFETY: AVX2 and FMA were detected (`head_view`); head
                    // dim 64, `kt` holds rows `pa..pe`.
                    Some(kt) => unsafe { scores64_avx2(q, kt, s) },
                    // +0 keys: each FMA chain of the dot stays +0 for a
                    // finite query, so the score is the +0 `s` holds.
                    None if q_finite[j][i] => {}
                    // SAFETY: as above; `ZERO_ROWS` holds a tile of rows.
                    None => unsafe { scores64_avx2(q, &ZERO_ROWS[..s.len() * 64], s) },
                }
                if let Some(b) = v.bh {
                    for (x, bb) in s.iter_mut().zip(&b[pa..pe]) {
                        *x += bb;
                    }
                }
            }
        },
    );
    // Softmax numerators per row, in key order as `attend_row`.
    for (v, &sa) in views.iter().zip(&score_at) {
        for i in 0..v.t {
            for r in 0..rep {
                let s = &mut scores[sa + (i * rep + r) * v.nmax..][..v.n0 + i];
                // SAFETY: AVX2 was detected (`head_view`).
                let max = unsafe { max_avx2(s) };
                // `true`: AVX2 and FMA were detected (`head_view`).
                exp_shifted(true, s, max);
            }
        }
    }
    // Each row's sum of numerators, `sum += s[p]` in key order as in
    // `attend_row`, is taken while the weighted sum walks the same keys in
    // the same order: its chain of dependent additions then runs beside
    // the FMAs instead of on its own.
    let mut sums = vec![0f32; total * rep];
    out.fill(0.0);
    for_each_run(
        &views,
        false,
        hd,
        &mut tile,
        &mut segs,
        |j, i, pa, pe, vt| {
            let (v, oa) = (&views[j], out_at[j]);
            for r in 0..rep {
                let w = &scores[score_at[j] + (i * rep + r) * v.nmax..][pa..pe];
                let o = &mut out[oa + (i * rep + r) * hd..][..hd];
                let sum = &mut sums[oa / hd + i * rep + r];
                match vt {
                    // SAFETY: as above; `o` is 64 long, `vt` holds rows `pa..pe`.
                    Some(vt) => unsafe { weighted_sum64_acc_avx2(o, w, vt, sum) },
                    // +0 values: `fma(w, +0, o)` is `o` for a finite `w`
                    // (but for `o` = −0, which a chain from +0 reaches only by
                    // rounding a negative sum below the smallest subnormal),
                    // so only the numerators' sum moves.
                    None => {
                        let (mut total, mut all_finite) = (*sum, true);
                        for &a in w {
                            total += a;
                            all_finite &= a.is_finite();
                        }
                        if all_finite {
                            *sum = total;
                        } else {
                            // SAFETY: as above; `ZERO_ROWS` holds a tile of rows.
                            unsafe {
                                weighted_sum64_acc_avx2(o, w, &ZERO_ROWS[..w.len() * 64], sum)
                            }
                        }
                    }
                }
            }
        },
    );
    for (o, s) in out.chunks_exact_mut(hd).zip(&sums) {
        let inv = 1.0 / s;
        for x in o.iter_mut() {
            *x *= inv;
        }
    }
    Ok(())
}

/// Walks the keys (`keys`) or values of every view tile by tile — each view
/// uses a tile before the next is read — and within a tile run by run
/// ([`segments`]): `f(view, row, pa, pe, rows)` for every query row `row` of
/// view `view` that sees keys `pa..pe` of the run, `rows` their 64-wide rows
/// (`None`: rows that are all +0, not read).
fn for_each_run<'a>(
    views: &[HeadView<'a>],
    keys: bool,
    hd: usize,
    tile: &mut Vec<f32>,
    segs: &mut Vec<(usize, usize, Run<'a>)>,
    mut f: impl FnMut(usize, usize, usize, usize, Option<&[f32]>),
) {
    let pmax = views.iter().map(|v| v.nmax).max().unwrap_or(0);
    for p0 in (0..pmax).step_by(TILE) {
        for (j, v) in views.iter().enumerate() {
            if p0 >= v.nmax {
                continue;
            }
            let p1 = (p0 + TILE).min(v.nmax);
            let (own, copy) = if keys { (v.kh, v.kb) } else { (v.vh, v.vb) };
            segments(own, v.fs, copy, v.frozen, p0, p1, hd, tile, segs);
            for &(pa, pb, run) in segs.iter() {
                let rows = match run {
                    Run::Rows(r) => Some(r),
                    Run::Buffer(o) => Some(&tile[o * hd..(o + pb - pa) * hd]),
                    Run::Zero => None,
                };
                for i in 0..v.t {
                    let pe = pb.min(v.n0 + i);
                    if pe > pa {
                        f(j, i, pa, pe, rows.map(|r| &r[..(pe - pa) * hd]));
                    }
                }
            }
        }
    }
}

/// The largest of `s` (−∞ if empty), NaNs skipped as `f32::max` skips them.
/// (Which zero it returns when the largest is ±0 does not matter: `x − max`
/// then differs only in the sign of a zero, and `exp(±0) = 1`.)
///
/// # Safety
/// AVX2 must be available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_avx2(s: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
    let chunks = s.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        // `max_ps(x, m)` is `x > m ? x : m`: a NaN `x` keeps `m`.
        m = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr()), m);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn max_avx2(s: &[f32]) -> f32 {
    s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// One head's K or V rows in a shared base (F32), and which of them the
/// cache's own rows equal (`same`, at this layer and head).
#[derive(Clone, Copy)]
struct Shared<'a> {
    rows: &'a [f32],
    /// The runs of rows that are not the base's, in order.
    own: &'a [OwnRun],
}

/// Where a run of a tile's rows is read from ([`segments`]).
#[derive(Clone, Copy)]
enum Run<'a> {
    /// Where they lie: the F32 storage or the shared base.
    Rows(&'a [f32]),
    /// Widened (or zero) rows in the tile buffer, from this row of it.
    Buffer(usize),
    /// Rows whose every element is +0 ([`OwnRun::zero`]), not read.
    Zero,
}

/// A tile of +0 rows, for the rare query or weight that is not finite (then
/// +0 rows are computed with, not skipped).
static ZERO_ROWS: [f32; TILE * 64] = [0.0; TILE * 64];

/// Rows `p0..p1` of one head's keys or values (`hd` wide) as runs of
/// consecutive rows, each read where it can be: straight from the F32
/// storage `f` (whose row `r` is token `fs + r`); for the rows below
/// `frozen`, converted from the BF16 copy `b` into `buf` (exact: those F32
/// values are BF16 numbers), so they are read from memory at two bytes an
/// element and used from L1; and the rows marked equal to the base's where
/// they lie in the base (the same values) — which a group of handoffs of one
/// context shares, so each is read from memory once for all of them; own
/// rows that are all +0 ([`OwnRun::zero`]: lost in a zero-fill rebuild) as
/// [`Run::Zero`], not read at all. An empty `b` (a sparse copy's layer with
/// no own row) reads as zeros.
/// `runs` receives `(first row, end row, run)`.
#[allow(clippy::too_many_arguments)]
fn segments<'a>(
    f: &'a [f32],
    fs: usize,
    b: Option<(&'a [u16], Option<Shared<'a>>)>,
    frozen: usize,
    p0: usize,
    p1: usize,
    hd: usize,
    buf: &mut Vec<f32>,
    runs: &mut Vec<(usize, usize, Run<'a>)>,
) {
    buf.clear();
    runs.clear();
    // Rows `p0..m` are below the copy's end, `m..p1` in the F32 storage.
    let m = p1.min(frozen).max(p0);
    let widen_into = |buf: &mut Vec<f32>, b: &[u16], a: usize, e: usize| {
        let at = buf.len() / hd;
        if b.is_empty() {
            buf.resize(buf.len() + (e - a) * hd, 0.0);
        } else {
            buf.extend(
                b[a * hd..e * hd]
                    .iter()
                    .map(|x| f32::from_bits(u32::from(*x) << 16)),
            );
        }
        Run::Buffer(at)
    };
    match b {
        Some((b, Some(s))) if p0 < m => {
            let mut p = p0;
            let first = s.own.partition_point(|r| r.rows.end as usize <= p0);
            for r in &s.own[first..] {
                let (a, e) = (
                    (r.rows.start as usize).max(p0),
                    (r.rows.end as usize).min(m),
                );
                if a >= m {
                    break;
                }
                if a > p {
                    runs.push((p, a, Run::Rows(&s.rows[p * hd..a * hd])));
                }
                let run = if r.zero {
                    Run::Zero
                } else {
                    widen_into(buf, b, a, e)
                };
                runs.push((a, e, run));
                p = e;
            }
            if p < m {
                runs.push((p, m, Run::Rows(&s.rows[p * hd..m * hd])));
            }
        }
        Some((b, None)) if p0 < m => runs.push((p0, m, widen_into(buf, b, p0, m))),
        _ => {}
    }
    if m < p1 {
        runs.push((m, p1, Run::Rows(&f[(m - fs) * hd..(p1 - fs) * hd])));
    }
}

/// `s[p] = dot(q, k[p])` for the 64-wide rows of `k`, each with the exact
/// operations of `dot_avx2`, four keys interleaved.
///
/// # Safety
/// AVX2 and FMA must be available; `q.len() == 64`, `k.len() ≥ 64 · s.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores64_avx2(q: &[f32], k: &[f32], s: &mut [f32]) {
    use std::arch::x86_64::*;
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn reduce(s0: __m256, s1: __m256) -> f32 {
        let s = _mm256_add_ps(s0, s1);
        let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
        _mm_cvtss_f32(h)
    }
    let pq = q.as_ptr();
    let pk = k.as_ptr();
    let n = s.len();
    let mut p = 0;
    while p + 4 <= n {
        let (k0, k1, k2, k3) = (
            pk.add(p * 64),
            pk.add((p + 1) * 64),
            pk.add((p + 2) * 64),
            pk.add((p + 3) * 64),
        );
        let z = _mm256_setzero_ps();
        let (mut a0, mut a1, mut b0, mut b1) = (z, z, z, z);
        let (mut c0, mut c1, mut d0, mut d1) = (z, z, z, z);
        let mut i = 0;
        while i < 64 {
            let qa = _mm256_loadu_ps(pq.add(i));
            let qb = _mm256_loadu_ps(pq.add(i + 8));
            a0 = _mm256_fmadd_ps(qa, _mm256_loadu_ps(k0.add(i)), a0);
            b0 = _mm256_fmadd_ps(qa, _mm256_loadu_ps(k1.add(i)), b0);
            c0 = _mm256_fmadd_ps(qa, _mm256_loadu_ps(k2.add(i)), c0);
            d0 = _mm256_fmadd_ps(qa, _mm256_loadu_ps(k3.add(i)), d0);
            a1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(k0.add(i + 8)), a1);
            b1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(k1.add(i + 8)), b1);
            c1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(k2.add(i + 8)), c1);
            d1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(k3.add(i + 8)), d1);
            i += 16;
        }
        s[p] = reduce(a0, a1);
        s[p + 1] = reduce(b0, b1);
        s[p + 2] = reduce(c0, c1);
        s[p + 3] = reduce(d0, d1);
        p += 4;
    }
    while p < n {
        let kp = pk.add(p * 64);
        let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i < 64 {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i)), _mm256_loadu_ps(kp.add(i)), a0);
            a1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pq.add(i + 8)),
                _mm256_loadu_ps(kp.add(i + 8)),
                a1,
            );
            i += 16;
        }
        s[p] = reduce(a0, a1);
        p += 1;
    }
}

/// `o += Σ_p w[p] · v[p]` over the 64-wide rows of `v`, in row order, each
/// step `fma(w[p], v[p], o)` as `weighted_sum64_avx2` (which starts from 0);
/// and `sum += w[p]`, in the same order.
///
/// # Safety
/// AVX2 and FMA must be available; `o.len() == 64`, `v.len() ≥ 64 · w.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum64_acc_avx2(o: &mut [f32], w: &[f32], v: &[f32], sum: &mut f32) {
    use std::arch::x86_64::*;
    let po = o.as_mut_ptr();
    let mut acc = [_mm256_setzero_ps(); 8];
    for (j, r) in acc.iter_mut().enumerate() {
        *r = _mm256_loadu_ps(po.add(j * 8));
    }
    let pv = v.as_ptr();
    let mut total = *sum;
    for (p, &a) in w.iter().enumerate() {
        total += a;
        let av = _mm256_set1_ps(a);
        let row = pv.add(p * 64);
        for (j, r) in acc.iter_mut().enumerate() {
            *r = _mm256_fmadd_ps(av, _mm256_loadu_ps(row.add(j * 8)), *r);
        }
    }
    for (j, r) in acc.iter().enumerate() {
        _mm256_storeu_ps(po.add(j * 8), *r);
    }
    *sum = total;
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn scores64_avx2(_q: &[f32], _k: &[f32], _s: &mut [f32]) {
    unreachable!("AVX2 is only detected on x86_64")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn weighted_sum64_acc_avx2(_o: &mut [f32], _w: &[f32], _v: &[f32], _sum: &mut f32) {
    unreachable!("AVX2 is only detected on x86_64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::LlamaConfig;
    use candle_core::{Device, Tensor};

    fn cfg(layers: usize) -> LlamaConfig {
        let mut c = LlamaConfig::tiny(100);
        c.n_layers = layers;
        c.n_kv_heads = 3;
        c.n_heads = 9;
        c.head_dim = 64;
        c.hidden_size = 9 * 64;
        c
    }

    /// Seeded values uniform in [-2, 2) (xorshift32).
    fn uniform(mut x: u32) -> impl FnMut() -> f32 {
        move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32 - 0.5) * 4.0
        }
    }

    /// Every row of the tiled multi-row kernel is bit for bit `attend_row`,
    /// with and without a presence mask, across tile borders.
    #[test]
    fn rows_equal_attend_row_bit_for_bit() {
        let c = cfg(1);
        let (nkv, rep, hd) = (3, 3, 64);
        let hs = nkv * rep * hd;
        let mut next = uniform(0x1234_5678);
        for (len, t, masked) in [
            (1usize, 1usize, false),
            (70, 5, false),
            (200, 31, true),
            (129, 3, true),
        ] {
            let mut kv = SeqKv::new(&c, len + t, &Device::Cpu).unwrap();
            let cap = kv.capacity;
            let k: Vec<f32> = (0..nkv * (len + t) * hd).map(|_| next()).collect();
            let v: Vec<f32> = (0..nkv * (len + t) * hd).map(|_| next()).collect();
            let kt = Tensor::from_vec(k, (nkv, len + t, hd), &Device::Cpu).unwrap();
            let vt = Tensor::from_vec(v, (nkv, len + t, hd), &Device::Cpu).unwrap();
            kv.append(0, &kt, &vt).unwrap();
            if masked {
                let b: Vec<f32> = (0..nkv * cap)
                    .map(|i| if i % 7 == 3 { f32::NEG_INFINITY } else { 0.0 })
                    .collect();
                kv.layers[0].bias = Some(Tensor::from_vec(b, (nkv, 1, cap), &Device::Cpu).unwrap());
            }
            let q: Vec<f32> = (0..t * hs).map(|_| next()).collect();
            let n0 = len + 1;
            let mut scratch = Vec::new();
            for h in 0..nkv {
                let mut fast = vec![f32::NAN; t * rep * hd];
                kv.attend_rows_head(0, n0, t, &q, h, rep, &mut scratch, &mut fast)
                    .unwrap();
                for i in 0..t {
                    let mut slow = vec![0f32; hs];
                    kv.attend_row(
                        0,
                        n0 + i,
                        &q[i * hs..(i + 1) * hs],
                        rep,
                        &mut scratch,
                        &mut slow,
                    )
                    .unwrap();
                    let want = &slow[h * rep * hd..(h + 1) * rep * hd];
                    let got = &fast[i * rep * hd..(i + 1) * rep * hd];
                    assert!(
                        want.iter()
                            .zip(got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "len {len}, row {i}, head {h}"
                    );
                }
            }
        }
    }

    /// BF16 blocks (head dim 64) of `block` tokens over `len` tokens of each
    /// of `layers` layers, values from `next`.
    fn bf16_blocks(
        layers: usize,
        len: usize,
        block: usize,
        nkv: usize,
        next: &mut impl FnMut() -> f32,
    ) -> Vec<crate::kv_transfer::KvBlock> {
        let mut bytes = |n: usize| -> Vec<u8> {
            (0..n)
                .flat_map(|_| half::bf16::from_f32(next()).to_le_bytes())
                .collect()
        };
        let mut out = Vec::new();
        for layer in 0..layers {
            for start in (0..len).step_by(block) {
                let n = (len - start).min(block);
                out.push(crate::kv_transfer::KvBlock {
                    layer,
                    start,
                    len: n,
                    n_kv_heads: nkv,
                    head_dim: 64,
                    dtype: crate::model::config::KvDtype::Bf16,
                    k: bytes(nkv * n * 64),
                    v: bytes(nkv * n * 64),
                });
            }
        }
        out
    }

    /// A cache imported from BF16 blocks keeps a BF16 copy, attention over it
    /// is bit for bit attention over the F32 storage alone, and an append
    /// below the copy's end (after a truncate) shortens it.
    #[test]
    fn bf16_copy_gives_the_same_bits() {
        use crate::kv_transfer::{import, KvBlock, MissingRows, PresenceMask};
        use crate::model::config::KvDtype;
        let c = cfg(2);
        let (nkv, rep, hd, len, t) = (3, 3, 64, 150, 7);
        let hs = nkv * rep * hd;
        let mut next = uniform(0x9e37_79b9);
        let blocks = bf16_blocks(2, len, 100, nkv, &mut next);
        let mut presence = PresenceMask::all(2, nkv, len);
        presence.set(1, 2, 77, false);
        for mode in [MissingRows::ZeroFill, MissingRows::Mask] {
            let mut kv = import(&c, &Device::Cpu, len, &blocks, Some(&presence), mode).unwrap();
            assert_eq!(kv.bf16.as_ref().map(|p| p.valid), Some(len));
            // Append `t` rows so that the last query sees them (and the copy's end).
            let k: Vec<f32> = (0..nkv * t * hd).map(|_| next()).collect();
            let v: Vec<f32> = (0..nkv * t * hd).map(|_| next()).collect();
            let kt = Tensor::from_vec(k, (nkv, t, hd), &Device::Cpu).unwrap();
            let vt = Tensor::from_vec(v, (nkv, t, hd), &Device::Cpu).unwrap();
            let q: Vec<f32> = (0..t * hs).map(|_| next()).collect();
            let compare = |kv: &SeqKv, n0: usize| {
                let mut plain = kv.clone();
                plain.bf16 = None;
                let mut s = Vec::new();
                for layer in 0..2 {
                    for h in 0..nkv {
                        let mut a = vec![f32::NAN; t * rep * hd];
                        let mut b = vec![f32::NAN; t * rep * hd];
                        kv.attend_rows_head(layer, n0, t, &q, h, rep, &mut s, &mut a)
                            .unwrap();
                        plain
                            .attend_rows_head(layer, n0, t, &q, h, rep, &mut s, &mut b)
                            .unwrap();
                        assert!(
                            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                            "{mode:?}, layer {layer}, head {h}"
                        );
                    }
                }
            };
            for layer in 0..2 {
                kv.append(layer, &kt, &vt).unwrap();
            }
            compare(&kv, len + 1);
            // Cut back into the copied tokens and write there: the copy ends
            // where the new rows start.
            kv.truncate(len - 20);
            for layer in 0..2 {
                kv.append(layer, &kt, &vt).unwrap();
            }
            assert_eq!(kv.bf16.as_ref().map(|p| p.valid), Some(len - 20));
            compare(&kv, len - 20 + 1);
        }
        // F32 blocks are not BF16 numbers: no copy.
        let f32_blocks: Vec<KvBlock> = blocks
            .iter()
            .map(|b| {
                let widen = |x: &[u8]| -> Vec<u8> {
                    x.chunks_exact(2)
                        .flat_map(|c| {
                            (half::bf16::from_le_bytes([c[0], c[1]]).to_f32() + 1e-3).to_le_bytes()
                        })
                        .collect()
                };
                KvBlock {
                    dtype: KvDtype::F32,
                    k: widen(&b.k),
                    v: widen(&b.v),
                    ..b.clone()
                }
            })
            .collect();
        let kv = import(&c, &Device::Cpu, len, &f32_blocks, None, MissingRows::Mask).unwrap();
        assert!(kv.bf16.is_none());
    }

    /// Caches rebuilt on a base read their intact rows from it and get the
    /// same bits as without it; rows that differ from the base (damaged,
    /// missing, or a base of other data) are their own.
    #[test]
    fn rows_read_from_a_base_give_the_same_bits() {
        use crate::handoff_quality::{rebuild, rebuild_on, PartialBlock};
        use crate::kv_transfer::MissingRows;
        let c = cfg(2);
        let (nkv, rep, hd, len, t) = (3, 3, 64, 150, 5);
        let hs = nkv * rep * hd;
        let mut next = uniform(0x51ed_270b);
        let blocks = bf16_blocks(2, len, 16, nkv, &mut next);
        let other = bf16_blocks(2, len, 16, nkv, &mut next);
        let full: Vec<PartialBlock> = blocks.iter().map(PartialBlock::complete).collect();
        // Every third block lost, every fifth torn in the middle of its K.
        let damaged: Vec<PartialBlock> = blocks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if i % 3 == 1 {
                    PartialBlock::lost(b)
                } else if i % 5 == 2 {
                    let mut p = PartialBlock::complete(b);
                    let total = b.k.len() + b.v.len();
                    p.present = vec![0..b.k.len() / 2 + 1, b.k.len() / 2 + 9..total];
                    p
                } else {
                    PartialBlock::complete(b)
                }
            })
            .collect();
        let other_full: Vec<PartialBlock> = other.iter().map(PartialBlock::complete).collect();
        let dev = Device::Cpu;
        let q: Vec<f32> = (0..t * hs).map(|_| next()).collect();
        let k: Vec<f32> = (0..nkv * t * hd).map(|_| next()).collect();
        let kt = Tensor::from_vec(k, (nkv, t, hd), &dev).unwrap();
        for mode in [MissingRows::ZeroFill, MissingRows::Mask] {
            let base = rebuild(&c, &dev, len, &full, mode)
                .unwrap()
                .kv_base()
                .unwrap();
            let foreign = rebuild(&c, &dev, len, &other_full, mode)
                .unwrap()
                .kv_base()
                .unwrap();
            let alone = rebuild(&c, &dev, len, &damaged, mode).unwrap();
            let on_base = rebuild_on(&c, &dev, len, &damaged, mode, Some(&base)).unwrap();
            let on_foreign = rebuild_on(&c, &dev, len, &damaged, mode, Some(&foreign)).unwrap();
            let shared = |kv: &SeqKv| -> usize {
                let s = kv.bf16.as_ref().unwrap().shared.as_ref().unwrap();
                2 * 2 * 3 * 150 - s.same_k.missing() - s.same_v.missing()
            };
            // 2 layers × 3 heads × 150 rows, K and V: the complete blocks'
            // rows (and in zero-fill the torn blocks' V rows) are shared.
            let (n_shared, n_foreign) = (shared(&on_base), shared(&on_foreign));
            assert!(n_shared > 900 && n_shared < 2 * 2 * 3 * 150, "{n_shared}");
            assert_eq!(n_foreign, 0);
            // With the row kernels at hand the rebuild on a base is lazy: no
            // imported row in F32, only differing rows in the copy; every
            // other path sees the values of the plain rebuild.
            let lazy = crate::model::kv::has_avx2_fma();
            assert_eq!(on_base.f32_start, if lazy { len } else { 0 });
            let f32_rows = |kv: &SeqKv, layer: usize| -> Vec<u32> {
                let mut kv = kv.clone();
                kv.materialize_f32().unwrap();
                assert_eq!(kv.f32_start, 0);
                let l = &kv.layers[layer];
                [&l.k, &l.v]
                    .iter()
                    .flat_map(|x| {
                        x.narrow(1, 0, len)
                            .unwrap()
                            .flatten_all()
                            .unwrap()
                            .to_vec1::<f32>()
                            .unwrap()
                    })
                    .map(f32::to_bits)
                    .collect()
            };
            for layer in 0..2 {
                assert_eq!(f32_rows(&on_base, layer), f32_rows(&alone, layer));
                assert_eq!(f32_rows(&on_foreign, layer), f32_rows(&alone, layer));
            }
            let exported = |kv: &SeqKv| {
                crate::kv_transfer::export(kv, 0..2, 0..len, crate::model::config::KvDtype::Bf16)
                    .unwrap()
            };
            assert_eq!(exported(&on_base), exported(&alone));
            // The base's own shared copy is the full cache again, and a
            // damaged cache's base holds its own values.
            let again = on_base.kv_base().unwrap();
            let want = alone.kv_base().unwrap();
            assert_eq!((&again.k16, &again.v16), (&want.k16, &want.v16));
            assert_eq!((&again.k, &again.v), (&want.k, &want.v));
            // Damage in layer 0 only: layer 1 has no own row, no copy.
            let one_layer: Vec<PartialBlock> = damaged
                .iter()
                .zip(&full)
                .map(|(d, f)| if d.layer == 0 { d.clone() } else { f.clone() })
                .collect();
            let alone_1 = rebuild(&c, &dev, len, &one_layer, mode).unwrap();
            let on_base_1 = rebuild_on(&c, &dev, len, &one_layer, mode, Some(&base)).unwrap();
            if lazy {
                let copy = on_base_1.bf16.as_ref().unwrap();
                assert!(copy.k[1].is_empty() && copy.v[1].is_empty());
                assert!(!copy.k[0].is_empty());
            }
            for layer in 0..2 {
                assert_eq!(f32_rows(&on_base_1, layer), f32_rows(&alone_1, layer));
            }
            let same = |mut a: SeqKv, mut b: SeqKv, cut: Option<usize>| {
                for kv in [&mut a, &mut b] {
                    if let Some(n) = cut {
                        kv.truncate(n);
                    }
                    for layer in 0..2 {
                        kv.append(layer, &kt, &kt).unwrap();
                    }
                }
                let n0 = a.len() + 1;
                let mut s = Vec::new();
                for layer in 0..2 {
                    for h in 0..nkv {
                        let mut x = vec![f32::NAN; t * rep * hd];
                        let mut y = vec![f32::NAN; t * rep * hd];
                        a.attend_rows_head(layer, n0, t, &q, h, rep, &mut s, &mut x)
                            .unwrap();
                        b.attend_rows_head(layer, n0, t, &q, h, rep, &mut s, &mut y)
                            .unwrap();
                        assert!(
                            x.iter().zip(&y).all(|(p, r)| p.to_bits() == r.to_bits()),
                            "{mode:?}, layer {layer}, head {h}, cut {cut:?}"
                        );
                    }
                }
            };
            same(alone.clone(), on_base.clone(), None);
            // Lost rows are +0 runs that the kernel does not read (the test
            // above covers their bits); a query that is not finite computes
            // with them instead, and still gets the plain rebuild's bits.
            if lazy {
                let s = on_base.bf16.as_ref().unwrap().shared.as_ref().unwrap();
                assert!(s.own_k.iter().chain(&s.own_v).flatten().any(|r| r.zero));
                let mut qn = q.clone();
                qn[5] = f32::INFINITY;
                let (mut a, mut b) = (alone.clone(), on_base.clone());
                for kv in [&mut a, &mut b] {
                    kv.append(0, &kt, &kt).unwrap();
                }
                let mut sc = Vec::new();
                for h in 0..nkv {
                    let mut x = vec![0f32; t * rep * hd];
                    let mut y = vec![0f32; t * rep * hd];
                    a.attend_rows_head(0, len + 1, t, &qn, h, rep, &mut sc, &mut x)
                        .unwrap();
                    b.attend_rows_head(0, len + 1, t, &qn, h, rep, &mut sc, &mut y)
                        .unwrap();
                    assert!(x.iter().zip(&y).all(|(p, r)| p.to_bits() == r.to_bits()));
                }
            }
            // A group of sequences (of different lengths, on a base and not)
            // gives each sequence its own call's bits.
            let mut seqs = [
                alone.clone(),
                on_base.clone(),
                on_base_1.clone(),
                on_foreign.clone(),
            ];
            for (j, kv) in seqs.iter_mut().enumerate() {
                if j == 2 {
                    kv.truncate(len - 40);
                }
                for layer in 0..2 {
                    kv.append(layer, &kt, &kt).unwrap();
                }
            }
            let mut sc = Vec::new();
            for layer in 0..2 {
                for h in 0..nkv {
                    let items: Vec<GroupRows<'_>> = seqs
                        .iter()
                        .map(|kv| GroupRows {
                            kv,
                            n0: kv.len() + 1,
                            t,
                            q: &q,
                        })
                        .collect();
                    let mut all = vec![f32::NAN; seqs.len() * t * rep * hd];
                    attend_rows_head_group(&items, layer, h, rep, &mut sc, &mut all).unwrap();
                    for (j, kv) in seqs.iter().enumerate() {
                        let mut one = vec![f32::NAN; t * rep * hd];
                        kv.attend_rows_head(layer, kv.len() + 1, t, &q, h, rep, &mut sc, &mut one)
                            .unwrap();
                        let got = &all[j * t * rep * hd..(j + 1) * t * rep * hd];
                        assert!(
                            one.iter().zip(got).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{mode:?}, sequence {j}, layer {layer}, head {h}"
                        );
                    }
                }
            }
            same(alone_1.clone(), on_base_1.clone(), None);
            same(alone_1.clone(), on_base_1.clone(), Some(len - 40));
            same(alone.clone(), on_foreign.clone(), None);
            // Written over inside the imported tokens: those rows are the
            // cache's own again.
            same(alone.clone(), on_base.clone(), Some(len - 40));
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let c = cfg(1);
        let kv = SeqKv::new(&c, 8, &Device::Cpu).unwrap();
        let mut s = Vec::new();
        let mut out = vec![0f32; 3 * 64];
        assert!(kv
            .attend_rows_head(0, 0, 1, &[0.0; 9 * 64], 0, 3, &mut s, &mut out)
            .is_err());
        assert!(kv
            .attend_rows_head(0, 1, 1, &[0.0; 9 * 64], 3, 3, &mut s, &mut out)
            .is_err());
        assert!(kv
            .attend_rows_head(1, 1, 1, &[0.0; 9 * 64], 0, 3, &mut s, &mut out)
            .is_err());
    }
}
