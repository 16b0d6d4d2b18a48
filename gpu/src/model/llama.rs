//! Llama forward pass with explicit per-sequence KV and selective batching.
//!
//! One call of [`Llama::forward`] runs a batch of sequences, each contributing
//! its own number of new tokens (a whole prompt during prefill, one token during
//! decode) at its own position (`SeqKv::len`). Following Orca's *selective
//! batching*, everything outside attention — embedding, RMSNorm, the Q/K/V/O
//! projections, rotary embedding, the SwiGLU MLP and the LM head — runs once on
//! the concatenated rows of all sequences; attention runs per sequence against
//! that sequence's own cache. Grouped-query attention is computed without
//! repeating K/V: the `n_rep` query heads that share a KV head are stacked as
//! rows of one matmul against that head's keys.
//!
//! Rotary embedding is the interleaved (GPT-J) form that llama.cpp's GGUF export
//! of Llama weights expects, with per-row positions. The LM head is applied only
//! to the last new row of each sequence (every row in
//! [`Llama::forward_rows_as_decode`], teacher forcing in one pass) and is tied to
//! the token embedding when the GGUF has no `output.weight`.

use candle_core::{DType, Device, Tensor, D};
use rayon::prelude::*;

use crate::error::{CandleContext, GpuError, Result};
use crate::model::attend_rows::{attend_rows_head_group, GroupRows};
use crate::model::config::LlamaConfig;
use crate::model::gguf::GgufFile;
use crate::model::kv::SeqKv;
use crate::model::weights::{concat_rows, Linear, WeightLayout};
use candle_core::quantized::QTensor;

/// Which matrices a forward pass uses (see [`crate::model::weights`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Prefill,
    Decode,
}

#[derive(Clone)]
struct Block {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    /// Q, K and V stacked: `(hidden + 2·kv_width, hidden)`.
    qkv: Linear,
    o: Linear,
    /// Gate and up stacked: `(2·ffn, hidden)`.
    gate_up: Linear,
    down: Linear,
}

/// A loaded Llama-family model. A clone shares the candle tensors and copies
/// the int8 matrices.
#[derive(Clone)]
pub struct Llama {
    config: LlamaConfig,
    embed: Tensor,
    blocks: Vec<Block>,
    norm: Tensor,
    lm_head: Linear,
    cos: Tensor,
    sin: Tensor,
    device: Device,
    layout: WeightLayout,
}

/// One sequence's share of a forward pass.
pub struct SeqInput<'a> {
    /// New tokens (at positions `kv.len()..kv.len() + tokens.len()`).
    pub tokens: &'a [u32],
    /// The sequence's cache; extended by `tokens.len()`.
    pub kv: &'a mut SeqKv,
}

impl Llama {
    /// Loads the weights of a Llama GGUF onto `device` in the given layout.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        g: &mut GgufFile<R>,
        device: &Device,
        layout: WeightLayout,
    ) -> Result<Self> {
        let c = g.llama_config()?;
        let h = c.hidden_size;
        let kvw = c.kv_width();
        let ffn = c.intermediate_size;
        let embd_q = g.tensor_shaped("token_embd.weight", &Device::Cpu, &[c.vocab_size, h])?;
        let embed = embd_q
            .dequantize(device)
            .ctx("dequantize token_embd.weight")?;
        let lm_layout = WeightLayout::uniform(layout.decode);
        let lm_head = if g.has_tensor("output.weight") {
            let q = g.tensor_shaped("output.weight", &Device::Cpu, &[c.vocab_size, h])?;
            Linear::new(q, lm_layout, device, "output.weight")?
        } else {
            Linear::new(
                embd_q,
                lm_layout,
                device,
                "token_embd.weight (tied lm head)",
            )?
        };
        let vec = |g: &mut GgufFile<R>, name: &str| -> Result<Tensor> {
            g.tensor_shaped(name, device, &[h])?
                .dequantize(device)
                .ctx(name)
        };
        let norm = vec(g, "output_norm.weight")?;
        let mut blocks = Vec::with_capacity(c.n_layers);
        for i in 0..c.n_layers {
            let p = format!("blk.{i}");
            let mut read = |suffix: &str, shape: [usize; 2]| -> Result<QTensor> {
                // Matrices are read and fused on the host; `Linear::new` moves them.
                g.tensor_shaped(&format!("{p}.{suffix}.weight"), &Device::Cpu, &shape)
            };
            let q = read("attn_q", [h, h])?;
            let k = read("attn_k", [kvw, h])?;
            let v = read("attn_v", [kvw, h])?;
            let o = read("attn_output", [h, h])?;
            let gate = read("ffn_gate", [ffn, h])?;
            let up = read("ffn_up", [ffn, h])?;
            let down = read("ffn_down", [h, ffn])?;
            let qkv_name = format!("{p}.attn_qkv (fused)");
            let gu_name = format!("{p}.ffn_gate_up (fused)");
            blocks.push(Block {
                attn_norm: vec(g, &format!("{p}.attn_norm.weight"))?,
                ffn_norm: vec(g, &format!("{p}.ffn_norm.weight"))?,
                qkv: Linear::new(
                    concat_rows(&[q, k, v], &Device::Cpu, &qkv_name)?,
                    layout,
                    device,
                    &qkv_name,
                )?,
                o: Linear::new(o, layout, device, &format!("{p}.attn_output.weight"))?,
                gate_up: Linear::new(
                    concat_rows(&[gate, up], &Device::Cpu, &gu_name)?,
                    layout,
                    device,
                    &gu_name,
                )?,
                down: Linear::new(down, layout, device, &format!("{p}.ffn_down.weight"))?,
            });
        }
        let (cos, sin) = rope_tables(&c, device)?;
        // Compile and load the batched decode kernel now, not in the first
        // decode step (NVRTC takes a noticeable fraction of a second).
        #[cfg(feature = "cuda")]
        if let Device::Cuda(d) = device {
            crate::model::cuda_decode_attend::prepare(d);
        }
        Ok(Llama {
            config: c,
            embed,
            blocks,
            norm,
            lm_head,
            cos,
            sin,
            device: device.clone(),
            layout,
        })
    }

    /// The model's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The weight layout chosen at load.
    pub fn layout(&self) -> WeightLayout {
        self.layout
    }

    /// A fresh, empty cache for one sequence.
    pub fn new_kv(&self, capacity: usize) -> Result<SeqKv> {
        SeqKv::new(&self.config, capacity, &self.device)
    }

    /// A fresh cache with room for `capacity` tokens holding `tokens`
    /// prefilled (one sequence; its logits are not needed).
    pub fn prefilled(&self, tokens: &[u32], capacity: usize) -> Result<SeqKv> {
        let mut kv = self.new_kv(capacity)?;
        self.forward(
            &mut [SeqInput {
                tokens,
                kv: &mut kv,
            }],
            Phase::Prefill,
        )?;
        Ok(kv)
    }

    /// Runs the new tokens of every sequence; returns logits `(batch, vocab)` for
    /// the last new token of each sequence and extends every cache.
    pub fn forward(&self, batch: &mut [SeqInput<'_>], phase: Phase) -> Result<Tensor> {
        self.run(batch, phase, None, None, None)
    }

    /// Runs the new tokens of every sequence *as decode steps* and returns the
    /// logits of every new row, `(Σ tokens, vocab)` in batch order (teacher
    /// forcing in one pass). Every row uses the decode matrices, and on the CPU
    /// its attention is the one-token decode computation at its own position
    /// ([`SeqKv::attend_row`]), so row `i`'s logits are bit-identical to feeding
    /// the tokens one at a time with [`Phase::Decode`] — while the matmuls run
    /// over all rows at once and each cache is read once per layer, not once
    /// per token. On other devices the rows go through the causal multi-row
    /// attention (equal up to rounding).
    pub fn forward_rows_as_decode(&self, batch: &mut [SeqInput<'_>]) -> Result<Tensor> {
        let from = vec![0; batch.len()];
        self.run(batch, Phase::Decode, Some(&from), None, None)
    }

    /// [`Llama::forward_rows_as_decode`], returning the logits of sequence
    /// `s`'s new rows from its row `from[s]` on (`from[s] < tokens`), in batch
    /// order: e.g. a prompt's continuation fed as decode rows, of which only
    /// the last row's logits are wanted (`from[s] = tokens − 1`). Each row's
    /// logits are the same bits whichever rows are returned.
    pub fn forward_as_decode_from(
        &self,
        batch: &mut [SeqInput<'_>],
        from: &[usize],
    ) -> Result<Tensor> {
        self.run(batch, Phase::Decode, Some(from), None, None)
    }

    /// [`Llama::forward_as_decode_from`], also returning the hidden state of
    /// every row entering each layer and after the last (`n_layers + 1`
    /// entries of `(Σ tokens, hidden)`, row-major): what
    /// [`Llama::forward_as_decode_joining`] starts other sequences' rows from.
    pub fn forward_as_decode_recording(
        &self,
        batch: &mut [SeqInput<'_>],
        from: &[usize],
    ) -> Result<(Tensor, Vec<Vec<f32>>)> {
        let mut record = Vec::with_capacity(self.config.n_layers + 1);
        let logits = self.run(batch, Phase::Decode, Some(from), None, Some(&mut record))?;
        Ok((logits, record))
    }

    /// [`Llama::forward_as_decode_from`] where sequence `s` joins the pass at
    /// layer `join[s]` (CPU only; `join` non-decreasing along the batch, each
    /// ≤ `n_layers`): a sequence that joins later feeds exactly `rows.tokens`
    /// at position `rows.at`, its rows enter layer `join[s]` with
    /// `rows.hidden[join[s]]`, and every layer it skips appends `rows.kv`'s
    /// K and V rows at those positions to its cache.
    ///
    /// **Same bits.** Every row's arithmetic depends only on its token, its
    /// position and its own cache, never on the batch. So when a sequence's
    /// cache equals the recording's (`rows`, [`Llama::forward_as_decode_recording`]
    /// of the same tokens at the same position) bit for bit in every layer
    /// below `join[s]`, its rows there would compute the recorded hidden
    /// states and K, V rows; skipping those layers changes no bit. A handoff
    /// whose cache is damaged from layer `ℓ` on joins its teacher-forced
    /// pass at `ℓ` (`handoff_quality`).
    pub fn forward_as_decode_joining(
        &self,
        batch: &mut [SeqInput<'_>],
        from: &[usize],
        join: &[usize],
        rows: &JoinRows<'_>,
    ) -> Result<Tensor> {
        self.run(batch, Phase::Decode, Some(from), Some((join, rows)), None)
    }

    /// Checks a joining pass ([`Llama::forward_as_decode_joining`]).
    fn check_join(
        &self,
        batch: &[SeqInput<'_>],
        join: &[usize],
        rows: &JoinRows<'_>,
    ) -> Result<()> {
        let c = &self.config;
        let bad = |what: String| Err(GpuError::Engine(format!("joining pass: {what}")));
        if join.len() != batch.len() {
            return bad(format!(
                "{} join layers for {} sequences",
                join.len(),
                batch.len()
            ));
        }
        if !matches!(self.device, Device::Cpu) && join.iter().any(|&j| j > 0) {
            return bad("rows join part-way only on the CPU".into());
        }
        if join.windows(2).any(|w| w[0] > w[1]) || join.iter().any(|&j| j > c.n_layers) {
            return bad(format!(
                "join layers {join:?} must rise and stay ≤ {}",
                c.n_layers
            ));
        }
        let width = rows.tokens.len() * c.hidden_size;
        if join.iter().any(|&j| j > 0)
            && (rows.hidden.len() != c.n_layers + 1 || rows.hidden.iter().any(|h| h.len() != width))
        {
            return bad("recorded hidden states of another shape".into());
        }
        for (s, &j) in batch.iter().zip(join) {
            if j > 0 && (s.tokens != rows.tokens || s.kv.len() != rows.at) {
                return bad(format!(
                    "a sequence at position {} joins rows recorded at {} for other tokens",
                    s.kv.len(),
                    rows.at
                ));
            }
        }
        Ok(())
    }

    /// [`Llama::forward`]; with `from`, every row as a decode step and the
    /// logits of the rows [`Llama::forward_as_decode_from`] names; with
    /// `join`, sequences joining part-way
    /// ([`Llama::forward_as_decode_joining`]); with `record`, every layer's
    /// input rows and the last layer's output.
    fn run(
        &self,
        batch: &mut [SeqInput<'_>],
        phase: Phase,
        from: Option<&[usize]>,
        join: Option<(&[usize], &JoinRows<'_>)>,
        mut record: Option<&mut Vec<Vec<f32>>>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let every_row = from.is_some();
        if batch.is_empty() {
            return Err(GpuError::Engine("forward on an empty batch".into()));
        }
        if let Some(f) = from.filter(|f| f.len() != batch.len()) {
            return Err(GpuError::Engine(format!(
                "{} first rows for {} sequences",
                f.len(),
                batch.len()
            )));
        }
        if let Some((j, rows)) = join {
            if record.is_some() {
                return Err(GpuError::Engine(
                    "a joining pass is not recorded (its early layers lack rows)".into(),
                ));
            }
            self.check_join(batch, j, rows)?;
        }
        let joins: Vec<usize> = join.map_or_else(|| vec![0; batch.len()], |(j, _)| j.to_vec());
        // Sequences `..active(l)` take part in layer `l` (`join` rises).
        let active = |l: usize| joins.partition_point(|&j| j <= l);
        // The first row of each sequence, and the end.
        let row_at: Vec<usize> = std::iter::once(0)
            .chain(batch.iter().scan(0, |a, s| {
                *a += s.tokens.len();
                Some(*a)
            }))
            .collect();
        // Rows whose logits are returned.
        let mut keep: Vec<u32> = Vec::with_capacity(batch.len());
        let mut at = 0usize;
        for (i, s) in batch.iter().enumerate() {
            let t = s.tokens.len();
            let first = from.map_or(t.saturating_sub(1), |f| f[i]);
            if t > 0 && first >= t {
                return Err(GpuError::Engine(format!(
                    "first returned row {first} of a sequence of {t} new tokens"
                )));
            }
            keep.extend((at + first..at + t).map(|r| r as u32));
            at += t;
        }
        let mut ids = Vec::new();
        let mut pos = Vec::new();
        for s in batch.iter_mut() {
            if s.tokens.is_empty() {
                return Err(GpuError::Engine("a sequence has no new tokens".into()));
            }
            let start = s.kv.len();
            if start + s.tokens.len() > c.max_seq_len {
                return Err(GpuError::Engine(format!(
                    "sequence of {} tokens exceeds the context length {}",
                    start + s.tokens.len(),
                    c.max_seq_len
                )));
            }
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(GpuError::Engine(format!(
                    "token id {bad} is outside the vocabulary ({})",
                    c.vocab_size
                )));
            }
            s.kv.reserve(start + s.tokens.len())?;
            ids.extend_from_slice(s.tokens);
            pos.extend((start..start + s.tokens.len()).map(|p| p as u32));
        }
        let n = ids.len();
        let dev = &self.device;
        let decode = phase == Phase::Decode;
        let rowwise = every_row && matches!(dev, Device::Cpu);
        let batched = decode_batched(dev, batch, c)?;
        let ids = Tensor::new(ids.as_slice(), dev).ctx("token ids")?;
        let pos = Tensor::new(pos.as_slice(), dev).ctx("positions")?;
        let half = c.head_dim / 2;
        let cos = self
            .cos
            .index_select(&pos, 0)
            .and_then(|t| t.reshape((n, 1, half)))
            .ctx("rope cos")?;
        let sin = self
            .sin
            .index_select(&pos, 0)
            .and_then(|t| t.reshape((n, 1, half)))
            .ctx("rope sin")?;
        // Causal masks, one per multi-token sequence, shared by all layers.
        let mut masks = Vec::with_capacity(batch.len());
        for s in batch.iter() {
            let t = s.tokens.len();
            masks.push(if t > 1 && !rowwise {
                let l = s.kv.len() + t;
                let past = l - t;
                let m: Vec<f32> = (0..t)
                    .flat_map(|i| {
                        (0..l).map(move |j| {
                            if j <= past + i {
                                0.0
                            } else {
                                f32::NEG_INFINITY
                            }
                        })
                    })
                    .collect();
                Some(Tensor::from_vec(m, (t, l), dev).ctx("causal mask")?)
            } else {
                None
            });
        }
        // The rows of the sequences taking part so far (a prefix of the batch).
        let mut joined = active(0);
        let mut x = if joined == 0 {
            Tensor::zeros((0, c.hidden_size), DType::F32, dev).ctx("embedding")?
        } else {
            self.embed
                .index_select(&ids.narrow(0, 0, row_at[joined]).ctx("token ids")?, 0)
                .ctx("embedding")?
        };
        let eps = c.rms_norm_eps as f32;
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        for (li, b) in self.blocks.iter().enumerate() {
            if let Some((_, rows)) = join {
                x = join_rows(x, rows, li, joined, active(li), &row_at, c)?;
                joined = active(li);
                // The sequences still waiting append the recorded rows (the
                // same tokens, `check_join`).
                if joined < batch.len() {
                    let (k, v) = rows.kv.stored_rows(li, rows.at, rows.tokens.len())?;
                    for s in batch[joined..].iter_mut() {
                        s.kv.append(li, &k, &v)?;
                    }
                }
                if joined == 0 {
                    continue;
                }
            }
            if let Some(r) = record.as_mut() {
                r.push(
                    x.flatten_all()
                        .and_then(|t| t.to_vec1())
                        .ctx("record rows")?,
                );
            }
            let n = row_at[joined];
            let (batch, masks) = (&mut batch[..joined], &masks[..joined]);
            let (cos, sin) = (
                cos.narrow(0, 0, n).ctx("rope cos")?,
                sin.narrow(0, 0, n).ctx("rope sin")?,
            );
            let h = candle_nn::ops::rms_norm(&x, &b.attn_norm, eps).ctx("attn norm")?;
            let qkv = b.qkv.forward(&h, decode)?;
            let kvw = c.kv_width();
            let q = qkv.narrow(1, 0, c.hidden_size).ctx("q split")?;
            let k = qkv
                .narrow(1, c.hidden_size, kvw)
                .and_then(|t| t.contiguous())
                .ctx("k split")?;
            let v = qkv
                .narrow(1, c.hidden_size + kvw, kvw)
                .and_then(|t| t.contiguous())
                .ctx("v split")?;
            // The scale makes the copy that rope needs contiguous.
            let q = (q * scale)
                .and_then(|t| t.reshape((n, c.n_heads, 1, c.head_dim)))
                .ctx("q scale")?;
            let q = candle_nn::rotary_emb::rope_i(&q, &cos, &sin).ctx("rope q")?;
            let k = k
                .reshape((n, c.n_kv_heads, 1, c.head_dim))
                .ctx("k reshape")?;
            let k = candle_nn::rotary_emb::rope_i(&k, &cos, &sin).ctx("rope k")?;
            let k = k.reshape((n, c.n_kv_heads, c.head_dim)).ctx("k reshape")?;
            let v = v.reshape((n, c.n_kv_heads, c.head_dim)).ctx("v reshape")?;
            let attn = if matches!(dev, Device::Cpu) {
                self.attend_cpu(li, batch, masks, &q, &k, &v, rowwise)?
            } else if let Some(a) = batched_decode_attention(batched.as_ref(), li, &q, &k, &v, c)? {
                a
            } else {
                let mut outs = Vec::with_capacity(batch.len());
                let mut off = 0;
                for (s, mask) in batch.iter_mut().zip(masks) {
                    let t = s.tokens.len();
                    outs.push(self.attend(li, s.kv, &q, &k, &v, off, t, mask.as_ref())?);
                    off += t;
                }
                Tensor::cat(&outs, 0).ctx("attn cat")?
            };
            x = (x + b.o.forward(&attn, decode)?).ctx("attn residual")?;
            let h = candle_nn::ops::rms_norm(&x, &b.ffn_norm, eps).ctx("ffn norm")?;
            let gu = b.gate_up.forward(&h, decode)?;
            let ffn = c.intermediate_size;
            let g = gu.narrow(1, 0, ffn).ctx("gate split")?;
            let u = gu.narrow(1, ffn, ffn).ctx("up split")?;
            let f = (g.silu().ctx("silu")? * u).ctx("swiglu")?;
            x = (x + b.down.forward(&f, decode)?).ctx("ffn residual")?;
        }
        if let Some((_, rows)) = join {
            x = join_rows(x, rows, c.n_layers, joined, batch.len(), &row_at, c)?;
        }
        if let Some(r) = record.as_mut() {
            r.push(
                x.flatten_all()
                    .and_then(|t| t.to_vec1())
                    .ctx("record rows")?,
            );
        }
        for s in batch.iter_mut() {
            s.kv.advance(s.tokens.len());
        }
        let x = if keep.len() == n {
            x
        } else {
            let keep = Tensor::new(keep.as_slice(), dev).ctx("returned rows")?;
            x.index_select(&keep, 0).ctx("returned rows")?
        };
        let x = candle_nn::ops::rms_norm(&x, &self.norm, eps).ctx("final norm")?;
        self.lm_head.forward(&x, true)
    }

    /// Attention of every sequence on the CPU: single new rows (decode), and
    /// with `rowwise` every row, run on the raw cache ([`SeqKv::attend_row`])
    /// instead of a dozen tiny tensor ops each; other multi-row sequences use
    /// [`Llama::attend`]. Returns `(n, hidden)`.
    #[allow(clippy::too_many_arguments)]
    fn attend_cpu(
        &self,
        layer: usize,
        batch: &mut [SeqInput<'_>],
        masks: &[Option<Tensor>],
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        rowwise: bool,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (nkv, hd, hs) = (c.n_kv_heads, c.head_dim, c.hidden_size);
        let n: usize = batch.iter().map(|s| s.tokens.len()).sum();
        let qs = q
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .ctx("q rows")?;
        let mut out = vec![0f32; n * hs];
        // Appends (and multi-row sequences) first, then the single rows in parallel.
        let mut off = 0;
        for (s, mask) in batch.iter_mut().zip(masks) {
            let t = s.tokens.len();
            if t == 1 || rowwise {
                append_new_rows(s.kv, layer, k, v, off, t)?;
            } else {
                let o = self
                    .attend(layer, s.kv, q, k, v, off, t, mask.as_ref())?
                    .flatten_all()
                    .and_then(|o| o.to_vec1::<f32>())
                    .ctx("attn rows")?;
                out[off * hs..(off + t) * hs].copy_from_slice(&o);
            }
            off += t;
        }
        // Tasks of (KV head, consecutive sequences with up to `GROUP_ROWS`
        // rows together — one sequence if it has more): each runs the tiled
        // multi-row kernel over its sequences at once (bit for bit
        // `SeqKv::attend_row` per row, see `attend_rows`), which reads a tile
        // of rows that the sequences share from a base once for all of them;
        // in parallel, and the results are scattered into `out` by head.
        const GROUP_ROWS: usize = 8;
        let rep = c.n_rep();
        let gw = rep * hd;
        // Each sequence's rows and the row its output starts at, in batch
        // order; groups are ranges of them (and their row counts).
        let mut rows: Vec<GroupRows<'_>> = Vec::new();
        let mut starts: Vec<usize> = Vec::new();
        let mut groups: Vec<(std::ops::Range<usize>, usize)> = Vec::new();
        let mut off = 0;
        for s in batch.iter() {
            let t = s.tokens.len();
            if t == 1 || rowwise {
                match groups.last_mut() {
                    Some((g, n)) if *n + t <= GROUP_ROWS => {
                        g.end += 1;
                        *n += t;
                    }
                    _ => groups.push((rows.len()..rows.len() + 1, t)),
                }
                starts.push(off);
                rows.push(GroupRows {
                    kv: &*s.kv,
                    n0: s.kv.len() + 1,
                    t,
                    q: &qs[off * hs..(off + t) * hs],
                });
            }
            off += t;
        }
        let tasks: Vec<(usize, usize)> = (0..groups.len())
            .flat_map(|g| (0..nkv).map(move |h| (g, h)))
            .collect();
        let parts: Vec<Vec<f32>> = tasks
            .par_iter()
            .map_init(Vec::new, |scores, &(g, h)| {
                let (range, n) = &groups[g];
                let mut o = vec![0f32; n * gw];
                attend_rows_head_group(&rows[range.clone()], layer, h, rep, scores, &mut o)?;
                Ok(o)
            })
            .collect::<Result<_>>()?;
        for (&(g, h), o) in tasks.iter().zip(&parts) {
            let mut at = 0;
            let range = groups[g].0.clone();
            for (off, r) in starts[range.clone()].iter().zip(&rows[range]) {
                for i in 0..r.t {
                    out[(off + i) * hs + h * gw..][..gw]
                        .copy_from_slice(&o[(at + i) * gw..(at + i + 1) * gw]);
                }
                at += r.t;
            }
        }
        Tensor::from_vec(out, (n, hs), q.device()).ctx("attn rows")
    }

    /// Attention of one sequence's `t` new rows (starting at row `off`).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        layer: usize,
        kv: &mut SeqKv,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        off: usize,
        t: usize,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (nkv, rep, hd) = (c.n_kv_heads, c.n_rep(), c.head_dim);
        // The tensor attention reads every F32 row.
        kv.materialize_f32()?;
        append_new_rows(kv, layer, k, v, off, t)?;
        let (kc, vc, bias) = kv.view(layer, t)?;
        let l = kv.len() + t;
        let qi = q.narrow(0, off, t).ctx("q rows")?;
        if t == 1 {
            let qg = qi.reshape((nkv, rep, hd)).ctx("q group")?;
            let mut att = qg.matmul(&kc.t().ctx("kt")?).ctx("qk")?;
            if let Some(b) = bias {
                att = att.broadcast_add(&b).ctx("kv mask")?;
            }
            let att = candle_nn::ops::softmax_last_dim(&att).ctx("softmax")?;
            att.matmul(&vc)
                .and_then(|o| o.reshape((1, c.hidden_size)))
                .ctx("av")
        } else {
            let qg = qi
                .reshape((t, nkv, rep, hd))
                .and_then(|x| x.permute((1, 2, 0, 3)))
                .and_then(|x| x.contiguous())
                .and_then(|x| x.reshape((nkv, rep * t, hd)))
                .ctx("q group")?;
            let att = qg.matmul(&kc.t().ctx("kt")?).ctx("qk")?;
            let att = att.reshape((nkv, rep, t, l)).ctx("att reshape")?;
            let mask = mask.ok_or_else(|| GpuError::Engine("missing causal mask".into()))?;
            let mut att = att.broadcast_add(mask).ctx("causal mask")?;
            if let Some(b) = bias {
                let b = b.reshape((nkv, 1, 1, l)).ctx("kv mask")?;
                att = att.broadcast_add(&b).ctx("kv mask")?;
            }
            let att = candle_nn::ops::softmax_last_dim(&att)
                .and_then(|a| a.reshape((nkv, rep * t, l)))
                .ctx("softmax")?;
            att.matmul(&vc)
                .and_then(|o| o.reshape((nkv, rep, t, hd)))
                .and_then(|o| o.permute((2, 0, 1, 3)))
                .and_then(|o| o.contiguous())
                .and_then(|o| o.reshape((t, c.hidden_size)))
                .ctx("av")
        }
    }

    /// Greedy next token (argmax of the logits) of every sequence.
    pub fn greedy(&self, batch: &mut [SeqInput<'_>], phase: Phase) -> Result<Vec<u32>> {
        argmax_rows(&self.forward(batch, phase)?, "argmax")
    }

    /// Greedy next token of every row [`Llama::forward_as_decode_from`] returns.
    pub fn greedy_as_decode(&self, batch: &mut [SeqInput<'_>], from: &[usize]) -> Result<Vec<u32>> {
        argmax_rows(&self.forward_as_decode_from(batch, from)?, "argmax")
    }

    /// Prefills `prompt` into a fresh cache and greedily decodes `n` tokens alone
    /// (the reference the batched engine is tested against).
    pub fn generate_alone(&self, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
        let mut kv = self.new_kv(prompt.len() + n)?;
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        let mut tok = self.greedy(
            &mut [SeqInput {
                tokens: prompt,
                kv: &mut kv,
            }],
            Phase::Prefill,
        )?[0];
        out.push(tok);
        while out.len() < n {
            tok = self.greedy(
                &mut [SeqInput {
                    tokens: &[tok],
                    kv: &mut kv,
                }],
                Phase::Decode,
            )?[0];
            out.push(tok);
        }
        Ok(out)
    }
}

fn rope_tables(c: &LlamaConfig, device: &Device) -> Result<(Tensor, Tensor)> {
    let half = c.head_dim / 2;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / c.rope_theta.powf(2.0 * i as f32 / c.head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(c.max_seq_len * half);
    let mut sin = Vec::with_capacity(c.max_seq_len * half);
    for p in 0..c.max_seq_len {
        for f in &inv {
            let a = p as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let cos = Tensor::from_vec(cos, (c.max_seq_len, half), device).ctx("rope table")?;
    let sin = Tensor::from_vec(sin, (c.max_seq_len, half), device).ctx("rope table")?;
    Ok((cos, sin))
}

/// What a step whose attention runs as one CUDA kernel launch per layer
/// ([`crate::model::cuda_decode_attend`]) shares between its layers: the
/// table of cache addresses, uploaded once. Uninhabited without `cuda`.
#[cfg(feature = "cuda")]
type BatchedStep = crate::model::cuda_decode_attend::StepTables;
#[cfg(not(feature = "cuda"))]
type BatchedStep = std::convert::Infallible;

/// The batched step where this step's attention takes the CUDA kernel:
/// decided (and its table uploaded) once per forward, since it depends only
/// on the device and the sequences, not on the layer. The caches must hold
/// room for the step already.
fn decode_batched(
    dev: &Device,
    batch: &[SeqInput<'_>],
    c: &LlamaConfig,
) -> Result<Option<BatchedStep>> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = dev {
        if crate::model::cuda_decode_attend::applies(batch, c.head_dim) {
            return crate::model::cuda_decode_attend::StepTables::upload(batch, d).map(Some);
        }
    }
    let _ = (dev, batch, c);
    Ok(None)
}

/// The batched attention of one layer where [`decode_batched`] gave a step,
/// else `None` (and always `None` without the `cuda` feature).
fn batched_decode_attention(
    step: Option<&BatchedStep>,
    layer: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    c: &LlamaConfig,
) -> Result<Option<Tensor>> {
    let Some(step) = step else {
        return Ok(None);
    };
    #[cfg(feature = "cuda")]
    return crate::model::cuda_decode_attend::decode_attend(step, layer, q, k, v, c).map(Some);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (layer, q, k, v, c);
        match *step {}
    }
}

/// Rows that join a pass part-way ([`Llama::forward_as_decode_joining`]),
/// from a pass recorded on the same tokens at the same position
/// ([`Llama::forward_as_decode_recording`]).
pub struct JoinRows<'a> {
    /// The tokens every joining sequence feeds.
    pub tokens: &'a [u32],
    /// Their rows' input to each layer and after the last (`n_layers + 1`
    /// entries of `tokens.len() × hidden`).
    pub hidden: &'a [Vec<f32>],
    /// A cache holding the K and V rows of those tokens at `at..`.
    pub kv: &'a SeqKv,
    /// Their first position.
    pub at: usize,
}

/// `x` (the rows of sequences `..from`) with the rows of sequences
/// `from..to` appended, each the recorded input rows of `layer` (`n_layers`:
/// the last layer's output).
fn join_rows(
    x: Tensor,
    rows: &JoinRows<'_>,
    layer: usize,
    from: usize,
    to: usize,
    row_at: &[usize],
    c: &LlamaConfig,
) -> Result<Tensor> {
    if to <= from {
        return Ok(x);
    }
    let hidden = rows.hidden.get(layer).ok_or_else(|| {
        GpuError::Engine(format!("joining pass: no recorded rows for layer {layer}"))
    })?;
    let mut add = Vec::with_capacity((row_at[to] - row_at[from]) * c.hidden_size);
    for _ in from..to {
        add.extend_from_slice(hidden);
    }
    let rows = add.len() / c.hidden_size;
    let add = Tensor::from_vec(add, (rows, c.hidden_size), x.device()).ctx("joining rows")?;
    if from == 0 {
        return Ok(add);
    }
    Tensor::cat(&[&x, &add], 0).ctx("joining rows")
}

/// The argmax of every row of `logits` `(rows, vocab)`; `what` names the
/// step in an error.
pub(crate) fn argmax_rows(logits: &Tensor, what: &str) -> Result<Vec<u32>> {
    logits
        .argmax(D::Minus1)
        .and_then(|t| t.to_dtype(DType::U32))
        .and_then(|t| t.to_vec1::<u32>())
        .ctx(what)
}

/// Appends rows `off..off + t` of one layer's new keys and values (each
/// `(tokens, n_kv_heads, head_dim)`) to `kv`, which stores them as
/// `(n_kv_heads, t, head_dim)`. One row (every decode step, per layer and
/// sequence) is already in that order: a view, no copy; several rows are a
/// transposed copy.
fn append_new_rows(
    kv: &mut SeqKv,
    layer: usize,
    k: &Tensor,
    v: &Tensor,
    off: usize,
    t: usize,
) -> Result<()> {
    let rows = |x: &Tensor| {
        let r = x.narrow(0, off, t)?;
        if t == 1 {
            let (_, nkv, hd) = r.dims3()?;
            r.reshape((nkv, 1, hd))
        } else {
            r.transpose(0, 1)?.contiguous()
        }
    };
    let kn = rows(k).ctx("new k rows")?;
    let vn = rows(v).ctx("new v rows")?;
    kv.append(layer, &kn, &vn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::tiny_gguf;
    use crate::model::weights::WeightFormat;

    pub(crate) fn tiny(layout: WeightLayout) -> Llama {
        let mut g = GgufFile::from_bytes(tiny_gguf(7), "tiny").unwrap();
        Llama::from_gguf(&mut g, &Device::Cpu, layout).unwrap()
    }

    #[test]
    fn prefill_then_decode_equals_prefill_all() {
        // Logits of the last token must not depend on how the prompt was split.
        let m = tiny(WeightLayout::uniform(WeightFormat::F32));
        let prompt: Vec<u32> = (10..30).collect();
        let mut kv1 = m.new_kv(8).unwrap();
        let a = m
            .forward(
                &mut [SeqInput {
                    tokens: &prompt,
                    kv: &mut kv1,
                }],
                Phase::Prefill,
            )
            .unwrap();
        let mut kv2 = m.new_kv(8).unwrap();
        m.forward(
            &mut [SeqInput {
                tokens: &prompt[..12],
                kv: &mut kv2,
            }],
            Phase::Prefill,
        )
        .unwrap();
        let mut b = None;
        for t in &prompt[12..] {
            b = Some(
                m.forward(
                    &mut [SeqInput {
                        tokens: &[*t],
                        kv: &mut kv2,
                    }],
                    Phase::Decode,
                )
                .unwrap(),
            );
        }
        let d = (a - b.unwrap()).unwrap().abs().unwrap().max_all().unwrap();
        let d: f32 = d.to_scalar().unwrap();
        assert!(d < 1e-3, "max logit difference {d}");
        assert_eq!(kv1.len(), 20);
        assert_eq!(kv2.len(), 20);
    }

    /// Sequences joining a recorded pass part-way get the plain pass's logits
    /// and cache rows bit for bit; a join that cannot hold is an error.
    #[test]
    fn joining_a_recorded_pass_gives_the_same_bits() {
        let m = tiny(WeightLayout::for_device(&Device::Cpu));
        let nl = m.config().n_layers;
        assert!(nl >= 2);
        let prompt: Vec<u32> = (5..25).collect();
        let forced: Vec<u32> = vec![3, 77, 12, 9, 60];
        let fresh = || m.prefilled(&prompt, 32).unwrap();
        let (mut rec_kv, mut plain_kv) = (fresh(), fresh());
        let from = [1usize];
        let (rec_logits, hidden) = m
            .forward_as_decode_recording(
                &mut [SeqInput {
                    tokens: &forced,
                    kv: &mut rec_kv,
                }],
                &from,
            )
            .unwrap();
        assert_eq!(hidden.len(), nl + 1);
        let plain = m
            .forward_as_decode_from(
                &mut [SeqInput {
                    tokens: &forced,
                    kv: &mut plain_kv,
                }],
                &from,
            )
            .unwrap();
        let bits = |t: &Tensor| -> Vec<u32> {
            t.flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        };
        assert_eq!(bits(&rec_logits), bits(&plain));
        let rows = JoinRows {
            tokens: &forced,
            hidden: &hidden,
            kv: &rec_kv,
            at: prompt.len(),
        };
        let join = [0, 1, nl - 1, nl];
        let mut kvs: Vec<SeqKv> = join.iter().map(|_| fresh()).collect();
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .map(|kv| SeqInput {
                tokens: &forced,
                kv,
            })
            .collect();
        let out = m
            .forward_as_decode_joining(&mut batch, &[1; 4], &join, &rows)
            .unwrap();
        let (per, want) = (bits(&plain).len(), bits(&plain));
        let got = bits(&out);
        for s in 0..join.len() {
            assert_eq!(&got[s * per..(s + 1) * per], &want[..], "join {}", join[s]);
        }
        for kv in &kvs {
            assert_eq!(kv.len(), prompt.len() + forced.len());
            for l in 0..nl {
                let a = kv.stored_rows(l, prompt.len(), forced.len()).unwrap();
                let b = plain_kv.stored_rows(l, prompt.len(), forced.len()).unwrap();
                assert_eq!(bits(&a.0), bits(&b.0));
                assert_eq!(bits(&a.1), bits(&b.1));
            }
        }
        // Falling join layers, other tokens, another position: errors.
        let other: Vec<u32> = vec![3, 77, 12, 9, 61];
        let mut a = fresh();
        let mut b = fresh();
        let e = m.forward_as_decode_joining(
            &mut [
                SeqInput {
                    tokens: &forced,
                    kv: &mut a,
                },
                SeqInput {
                    tokens: &forced,
                    kv: &mut b,
                },
            ],
            &[1, 1],
            &[1, 0],
            &rows,
        );
        assert!(e.is_err());
        for tokens in [&other, &forced] {
            let mut c = fresh();
            if tokens == &forced {
                c.truncate(prompt.len() - 1);
            }
            let e = m.forward_as_decode_joining(
                &mut [SeqInput { tokens, kv: &mut c }],
                &[1],
                &[1],
                &rows,
            );
            assert!(format!("{}", e.err().unwrap()).contains("joining pass"));
        }
    }

    #[test]
    fn rows_as_decode_equal_decode_steps_bit_for_bit() {
        // Teacher forcing in one pass must give exactly the logits of feeding
        // the tokens one decode step at a time, for every row and whatever
        // shares the batch.
        let m = tiny(WeightLayout::for_device(&Device::Cpu));
        let prompts: [Vec<u32>; 2] = [(5..17).collect(), (40..49).collect()];
        let forced: [Vec<u32>; 2] = [vec![3, 77, 12, 9, 60, 2, 31], vec![8, 8, 100, 4]];
        let mut stepwise = Vec::new();
        for (p, f) in prompts.iter().zip(&forced) {
            let mut kv = m.new_kv(0).unwrap();
            m.forward(
                &mut [SeqInput {
                    tokens: p,
                    kv: &mut kv,
                }],
                Phase::Prefill,
            )
            .unwrap();
            for t in f {
                let l = m
                    .forward(
                        &mut [SeqInput {
                            tokens: &[*t],
                            kv: &mut kv,
                        }],
                        Phase::Decode,
                    )
                    .unwrap();
                stepwise.push(l.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            }
        }
        let mut kvs = Vec::new();
        for p in &prompts {
            let mut kv = m.new_kv(0).unwrap();
            m.forward(
                &mut [SeqInput {
                    tokens: p,
                    kv: &mut kv,
                }],
                Phase::Prefill,
            )
            .unwrap();
            kvs.push(kv);
        }
        let (a, b) = kvs.split_at_mut(1);
        let logits = m
            .forward_rows_as_decode(&mut [
                SeqInput {
                    tokens: &forced[0],
                    kv: &mut a[0],
                },
                SeqInput {
                    tokens: &forced[1],
                    kv: &mut b[0],
                },
            ])
            .unwrap();
        let rows = logits.to_vec2::<f32>().unwrap();
        assert_eq!(rows.len(), stepwise.len());
        for (i, (r, s)) in rows.iter().zip(&stepwise).enumerate() {
            assert!(
                r.iter().zip(s).all(|(x, y)| x.to_bits() == y.to_bits()),
                "row {i} differs"
            );
        }
        assert_eq!(kvs[0].len(), 12 + 7);
        assert_eq!(kvs[1].len(), 9 + 4);
        // Truncating and decoding again overwrites the forced rows.
        let mut kv = kvs.swap_remove(0);
        kv.truncate(12 + 3);
        let again = m
            .forward(
                &mut [SeqInput {
                    tokens: &[forced[0][3]],
                    kv: &mut kv,
                }],
                Phase::Decode,
            )
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(again
            .iter()
            .zip(&stepwise[3])
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    #[test]
    fn batch_rows_are_independent() {
        let m = tiny(WeightLayout::for_device(&Device::Cpu));
        let p1: Vec<u32> = (5..15).collect();
        let p2: Vec<u32> = (40..47).collect();
        let alone1 = m.generate_alone(&p1, 6).unwrap();
        let alone2 = m.generate_alone(&p2, 6).unwrap();
        let mut k1 = m.new_kv(0).unwrap();
        let mut k2 = m.new_kv(0).unwrap();
        let first = m
            .greedy(
                &mut [
                    SeqInput {
                        tokens: &p1,
                        kv: &mut k1,
                    },
                    SeqInput {
                        tokens: &p2,
                        kv: &mut k2,
                    },
                ],
                Phase::Prefill,
            )
            .unwrap();
        let (mut o1, mut o2) = (vec![first[0]], vec![first[1]]);
        for _ in 0..5 {
            let (a, b) = (*o1.last().unwrap(), *o2.last().unwrap());
            let nx = m
                .greedy(
                    &mut [
                        SeqInput {
                            tokens: &[a],
                            kv: &mut k1,
                        },
                        SeqInput {
                            tokens: &[b],
                            kv: &mut k2,
                        },
                    ],
                    Phase::Decode,
                )
                .unwrap();
            o1.push(nx[0]);
            o2.push(nx[1]);
        }
        assert_eq!(o1, alone1);
        assert_eq!(o2, alone2);
    }
}
