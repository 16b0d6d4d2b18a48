//! Decode attention of a whole batch in one CUDA kernel launch per layer.
//!
//! On CUDA a decode step used to run attention sequence by sequence as candle
//! ops (copy the new K/V row in, two cuBLAS products, a softmax, a concat):
//! about eight launches per sequence per layer, so a step of 32 sequences on
//! the 30-layer SmolLM2 made ≈ 7 700 launches and the step time grew linearly
//! with the batch (H200, 2026-12-04: 4.1 ms at batch 1, 46–59 ms at batch 32)
//! while the matmuls, batched already, cost almost nothing.
//!
//! Here every sequence's caches stay where they are (each [`SeqKv`] owns its
//! per-layer tensors, reserved for the step before it starts, so they do not
//! move during it). Once per step, [`StepTables::upload`] copies one table to
//! the device — the addresses of every sequence's K, V (and mask bias)
//! storage in every layer, the lengths and the capacities — and in each
//! layer one kernel does the rest. (The first version uploaded five arrays
//! per layer, 150 host-to-device copies per SmolLM2 step; one table made the
//! kernel's gain over the per-sequence path 1.5× instead of 1.12× at batch 1
//! and 10.9× instead of 8.7× at batch 32 on the H200.)
//!
//! The kernel: grid (sequence, query head), one block of 256 threads each:
//! the scores of the query against the cached keys and the new key (a key
//! row per thread, float4 loads), the softmax, the weighted sum of the values
//! (16 rows at a time, a float4 column per thread, so the reads of a warp are
//! contiguous), and (blocks of the first query head of each KV group) the new
//! K and V rows written at the end of the cache. Missing rows of an imported,
//! incomplete cache have −∞ bias as in [`SeqKv`]; the new row is always
//! present. Rows of one sequence never depend on other sequences, so results
//! do not depend on the batch.
//!
//! The kernel is compiled once per process with NVRTC (the CUDA runtime
//! compiler, which cudarc links for candle) when a model is loaded on CUDA,
//! and cached in candle's module store. It applies when the head dimension is
//! a multiple of 4 whose float4 columns divide the block, and the scores fit
//! shared memory (≈ 11 000 cached tokens); otherwise, with
//! `EDGEMU_CUDA_BATCHED_ATTENTION=0`, or if compiling or loading failed (one
//! warning), the per-sequence path runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, DevicePtr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CpuStorage, CudaDevice, CudaStorage, CustomOp3, Layout, Shape, Storage, Tensor};

use crate::error::{CandleContext, GpuError, Result};
use crate::model::config::LlamaConfig;
use crate::model::llama::SeqInput;

const MODULE: &str = "edgemu_decode_attend";
const FUNC: &str = "edgemu_decode_attend";
const THREADS: u32 = 256;
/// Shared memory a block may use without opting in (48 KiB on every CUDA
/// device), in floats: the scores, the query and 4 floats per thread.
const MAX_SHARED_FLOATS: usize = 48 * 1024 / 4;

/// Floats of shared memory for a longest sequence of `max_len` cached tokens.
fn shared_floats(max_len: usize, head_dim: usize) -> usize {
    (max_len + 1).div_ceil(4) * 4 + head_dim + 4 * THREADS as usize
}

const SOURCE: &str = r#"
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One block per (sequence b, query head h). Shared memory: the L scores
// (padded to 4), the query, then a scratch of 4 floats per thread.
extern "C" __global__ void edgemu_decode_attend(
    const float* __restrict__ q,       // (B, n_heads, hd), scaled and rotated
    const float* __restrict__ k_new,   // (B, nkv, hd)
    const float* __restrict__ v_new,   // (B, nkv, hd)
    // The step's table, (3·n_layers + 2) rows of B: the addresses of the K
    // caches of layer 0..n_layers ((nkv, cap_b, hd) f32), then of the V
    // caches, then of the mask biases ((nkv, 1, cap_b) f32, or 0), then the
    // tokens cached before this step, then the capacities.
    const unsigned long long* __restrict__ table,
    float* __restrict__ out,           // (B, n_heads * hd)
    int layer, int n_layers, int n_heads, int nkv, int hd)
{
    extern __shared__ float4 sh4[];
    float* sh = (float*)sh4;
    const int b = blockIdx.x, h = blockIdx.y;
    const unsigned long long B = gridDim.x;
    const int rep = n_heads / nkv, g = h / rep, h4 = hd / 4;
    const unsigned long long kaddr = table[(unsigned long long)layer * B + b];
    const unsigned long long vaddr = table[(unsigned long long)(n_layers + layer) * B + b];
    const unsigned long long baddr = table[(unsigned long long)(2 * n_layers + layer) * B + b];
    const unsigned int len = (unsigned int)table[(unsigned long long)(3 * n_layers) * B + b];
    const unsigned int cap = (unsigned int)table[(unsigned long long)(3 * n_layers + 1) * B + b];
    const unsigned int L = len + 1;
    float* kc = (float*)kaddr + (unsigned long long)g * cap * hd;
    float* vc = (float*)vaddr + (unsigned long long)g * cap * hd;
    const float* bs = baddr ? (const float*)baddr + (unsigned long long)g * cap : (const float*)0;
    const float* qh = q + ((unsigned long long)b * n_heads + h) * hd;
    const float* kn = k_new + ((unsigned long long)b * nkv + g) * hd;
    const float* vn = v_new + ((unsigned long long)b * nkv + g) * hd;
    const unsigned int lpad = (L + 3) & ~3u;
    float* scores = sh;
    float* qs = sh + lpad;
    float* red = qs + hd;
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;

    for (int d = tid; d < hd; d += nt) qs[d] = qh[d];
    __syncthreads();

    // Scores: one key row per thread, read as float4s.
    const float4* q4 = (const float4*)qs;
    float m = __int_as_float(0xff800000); // -inf (NVRTC has no math.h)
    for (unsigned int j = tid; j < L; j += nt) {
        const float4* kr = (const float4*)((j == len) ? kn : kc + (unsigned long long)j * hd);
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll 4
        for (int i = 0; i < h4; ++i) {
            const float4 kk = kr[i], qq = q4[i];
            s0 += qq.x * kk.x; s1 += qq.y * kk.y; s2 += qq.z * kk.z; s3 += qq.w * kk.w;
        }
        float s = (s0 + s1) + (s2 + s3);
        if (bs && j < len) s += bs[j];
        scores[j] = s;
        m = fmaxf(m, s);
    }
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < nw; ++w) m = fmaxf(m, red[w]);
    __syncthreads();

    float sum = 0.f;
    for (unsigned int j = tid; j < L; j += nt) {
        const float p = expf(scores[j] - m);
        scores[j] = p;
        sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    sum = 0.f;
    for (int w = 0; w < nw; ++w) sum += red[w];
    const float inv = 1.f / sum;
    __syncthreads();

    // Value sum: thread (part, c) adds float4 column c of rows j = part (mod parts).
    const int c = tid % h4, part = tid / h4, parts = nt / h4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (unsigned int j = part; j < L; j += parts) {
        const float4* vr = (const float4*)((j == len) ? vn : vc + (unsigned long long)j * hd);
        const float p = scores[j];
        const float4 vv = vr[c];
        acc.x += p * vv.x; acc.y += p * vv.y; acc.z += p * vv.z; acc.w += p * vv.w;
    }
    float4* red4 = (float4*)red;
    red4[tid] = acc;
    __syncthreads();
    if (part == 0) {
        for (int p = 1; p < parts; ++p) {
            const float4 o = red4[p * h4 + c];
            acc.x += o.x; acc.y += o.y; acc.z += o.z; acc.w += o.w;
        }
        acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
        ((float4*)(out + ((unsigned long long)b * n_heads + h) * hd))[c] = acc;
        // The first query head of each KV group appends the new row; no block
        // of this launch reads row `len` from the cache (they use k_new/v_new).
        if (h % rep == 0) {
            ((float4*)(kc + (unsigned long long)len * hd))[c] = ((const float4*)kn)[c];
            ((float4*)(vc + (unsigned long long)len * hd))[c] = ((const float4*)vn)[c];
        }
    }
}
"#;

/// Whether the batched kernel is switched on (the default) by the environment:
/// off with `EDGEMU_CUDA_BATCHED_ATTENTION=0` (or `false`, `off`).
pub fn batched_attention_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        !matches!(
            std::env::var("EDGEMU_CUDA_BATCHED_ATTENTION").as_deref(),
            Ok("0") | Ok("false") | Ok("off")
        )
    })
}

/// Compiles the kernel and loads it on `device` (once per process and device);
/// if that fails the per-sequence path runs, with one warning.
pub(crate) fn prepare(device: &CudaDevice) {
    if !batched_attention_enabled() {
        return;
    }
    let loaded = ptx().and_then(|ptx| {
        device
            .get_or_load_custom_func(FUNC, MODULE, ptx)
            .map(|_| ())
            .ctx("loading the decode-attention kernel")
    });
    match loaded {
        Ok(()) => READY.store(true, Ordering::Relaxed),
        Err(e) => {
            tracing::warn!("batched CUDA decode attention is off, the per-sequence path runs: {e}")
        }
    }
}

/// Set once [`prepare`] compiled and loaded the kernel.
static READY: AtomicBool = AtomicBool::new(false);

/// Whether decode steps on CUDA use the batched kernel (switched on, compiled
/// and loaded when a model was loaded on CUDA).
pub fn batched_attention_active() -> bool {
    batched_attention_enabled() && READY.load(Ordering::Relaxed)
}

/// Whether [`decode_attend`] can run this step: every sequence has one new
/// row, the head dimension splits into float4 columns that divide the block,
/// and the scores fit shared memory.
pub(crate) fn applies(batch: &[SeqInput<'_>], head_dim: usize) -> bool {
    batched_attention_active()
        && head_dim > 0
        && head_dim.is_multiple_of(4)
        && head_dim / 4 <= THREADS as usize
        && (THREADS as usize).is_multiple_of(head_dim / 4)
        && batch.iter().all(|s| {
            s.tokens.len() == 1 && shared_floats(s.kv.len(), head_dim) <= MAX_SHARED_FLOATS
        })
}

/// The PTX of [`SOURCE`], compiled once per process.
fn ptx() -> Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        let ptx = candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(SOURCE)
            .map_err(|e| format!("NVRTC could not compile the decode-attention kernel: {e}"))?;
        let bytes = ptx
            .as_bytes()
            .ok_or_else(|| "NVRTC returned no PTX image".to_string())?;
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        String::from_utf8(bytes[..end].to_vec()).map_err(|e| format!("PTX is not text: {e}"))
    })
    .as_deref()
    .map_err(|e| GpuError::Engine(e.clone()))
}

/// Device address of a CUDA tensor's f32 storage (its first element).
fn address(storage: &Storage, layout: &Layout, what: &str) -> Result<u64> {
    let Storage::Cuda(cs) = storage else {
        return Err(GpuError::Engine(format!("{what}: not on a CUDA device")));
    };
    if !layout.is_contiguous() || !layout.start_offset().is_multiple_of(4) {
        return Err(GpuError::Engine(format!(
            "{what}: not contiguous from a 16-byte boundary"
        )));
    }
    let slice = cs.as_cuda_slice::<f32>().ctx(what)?;
    let stream = cs.device.cuda_stream();
    let (ptr, _sync) = slice.device_ptr(&stream);
    Ok(ptr + (layout.start_offset() * std::mem::size_of::<f32>()) as u64)
}

/// One decode step's table on the device (see the kernel's `table`): every
/// layer's cache addresses of every sequence, their lengths and capacities,
/// uploaded once per step by [`StepTables::upload`] and read by every layer.
pub(crate) struct StepTables {
    table: CudaSlice<u64>,
    batch: usize,
    n_layers: usize,
    max_len: usize,
}

impl StepTables {
    /// Reads every sequence's cache addresses (the caches must already hold
    /// room for this step's row: they do not move during the step) and
    /// uploads them with the lengths and capacities in one copy.
    pub(crate) fn upload(batch: &[SeqInput<'_>], device: &CudaDevice) -> Result<Self> {
        let b = batch.len();
        let n_layers = batch.first().map_or(0, |s| s.kv.layers.len());
        let mut table = vec![0u64; (3 * n_layers + 2) * b];
        for (i, s) in batch.iter().enumerate() {
            let kv = &*s.kv;
            if kv.len() + 1 > kv.capacity || kv.layers.len() != n_layers {
                return Err(GpuError::Engine(format!(
                    "decode attention: a cache of capacity {} and {} layers holds {} tokens (want room for one more and {n_layers} layers)",
                    kv.capacity,
                    kv.layers.len(),
                    kv.len()
                )));
            }
            for (li, l) in kv.layers.iter().enumerate() {
                let (st, lay) = l.k.storage_and_layout();
                table[li * b + i] = address(&st, lay, "k cache")?;
                let (st, lay) = l.v.storage_and_layout();
                table[(n_layers + li) * b + i] = address(&st, lay, "v cache")?;
                if let Some(t) = &l.bias {
                    let (st, lay) = t.storage_and_layout();
                    table[(2 * n_layers + li) * b + i] = address(&st, lay, "kv mask")?;
                }
            }
            table[3 * n_layers * b + i] = kv.len() as u64;
            table[(3 * n_layers + 1) * b + i] = kv.capacity as u64;
        }
        let max_len = batch.iter().map(|s| s.kv.len()).max().unwrap_or(0);
        let table = device
            .clone_htod(&table)
            .map_err(|e| GpuError::Engine(format!("decode-attention table: {e}")))?;
        Ok(Self {
            table,
            batch: b,
            n_layers,
            max_len,
        })
    }
}

/// The kernel for one layer of a step; q, k, v come as the op's inputs.
struct DecodeAttend<'a> {
    step: &'a StepTables,
    layer: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl CustomOp3 for DecodeAttend<'_> {
    fn name(&self) -> &'static str {
        "edgemu-decode-attend"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("the batched decode-attention kernel is CUDA only")
    }

    fn cuda_fwd(
        &self,
        q: &CudaStorage,
        ql: &Layout,
        k: &CudaStorage,
        kl: &Layout,
        v: &CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = q.device();
        let b = self.step.batch;
        let (nh, nkv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        for (l, want, what) in [(ql, nh, "q"), (kl, nkv, "k"), (vl, nkv, "v")] {
            // float4 loads: rows start on 16 bytes (allocations are aligned).
            if !l.is_contiguous()
                || l.shape().elem_count() != b * want * hd
                || !l.start_offset().is_multiple_of(4)
            {
                candle_core::bail!("decode attention: {what} has shape {:?}", l.shape());
            }
        }
        let ptx = ptx().map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let func = dev.get_or_load_custom_func(FUNC, MODULE, ptx)?;
        let out = dev.alloc_zeros::<f32>(b * nh * hd)?;
        let qs = q.as_cuda_slice::<f32>()?.slice(ql.start_offset()..);
        let ks = k.as_cuda_slice::<f32>()?.slice(kl.start_offset()..);
        let vs = v.as_cuda_slice::<f32>()?.slice(vl.start_offset()..);
        let shared = (shared_floats(self.step.max_len, hd) * 4) as u32;
        let cfg = LaunchConfig {
            grid_dim: (b as u32, nh as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: shared,
        };
        let (nh_i, nkv_i, hd_i) = (nh as i32, nkv as i32, hd as i32);
        let (layer_i, n_layers_i) = (self.layer as i32, self.step.n_layers as i32);
        let mut builder = func.builder();
        builder.arg(&qs);
        builder.arg(&ks);
        builder.arg(&vs);
        builder.arg(&self.step.table);
        builder.arg(&out);
        builder.arg(&layer_i);
        builder.arg(&n_layers_i);
        builder.arg(&nh_i);
        builder.arg(&nkv_i);
        builder.arg(&hd_i);
        // SAFETY: the arguments match the kernel's parameters; every address
        // in the table is a live cache of at least its capacity in tokens
        // (held by the caller for the step).
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            Shape::from((b, nh * hd)),
        ))
    }
}

/// Attention of every sequence's one new row against its cache in `layer`,
/// the new K/V rows appended to the caches (the caller advances the
/// lengths). `step` was uploaded for this batch; `q` is `(B, n_heads, 1,
/// hd)`, `k` and `v` `(B, nkv, hd)`; returns `(B, n_heads·hd)`.
pub(crate) fn decode_attend(
    step: &StepTables,
    layer: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    config: &LlamaConfig,
) -> Result<Tensor> {
    if layer >= step.n_layers {
        return Err(GpuError::Engine(format!(
            "decode attention: layer {layer} of a step uploaded for {}",
            step.n_layers
        )));
    }
    let op = DecodeAttend {
        step,
        layer,
        n_heads: config.n_heads,
        n_kv_heads: config.n_kv_heads,
        head_dim: config.head_dim,
    };
    // Fresh, aligned copies only where a view does not start on 16 bytes.
    let aligned = |t: &Tensor, what: &str| -> Result<Tensor> {
        let t = t.contiguous().ctx(what)?;
        if t.layout().start_offset().is_multiple_of(4) {
            Ok(t)
        } else {
            t.copy().ctx(what)
        }
    };
    let q = aligned(q, "q rows")?;
    let k = aligned(k, "k rows")?;
    let v = aligned(v, "v rows")?;
    q.apply_op3_no_bwd(&k, &v, &op).ctx("decode attention")
}
