//! Weight layouts: how a GGUF matrix is held in memory for each phase.
//!
//! The GGUF ships SmolLM2's matrices as Q4_1 (token embedding Q8_0). candle's
//! Q4_1 CPU kernel has no SIMD dot product, so on CPU keeping Q4_1 is the slowest
//! choice. At load, each linear weight is turned into one matrix per phase:
//!
//! * **prefill** multiplies many rows at once (a whole prompt), which is
//!   compute-bound: dequantized F32 weights go through candle's gemm (blocked,
//!   SIMD, multi-threaded), several times faster than any quantized kernel here.
//! * **decode** multiplies one row per running sequence, which is bound by
//!   reading the weights: a requantized Q8_0 matrix (AVX2 `q8_0·q8_0` dot product)
//!   reads 4× fewer bytes than F32.
//!
//! [`WeightLayout::for_device`] picks per device; the figures behind the CPU
//! choice are in the crate README (`cargo run --release --example bench_decode --
//! --layouts` measures them again). On CUDA the GGUF tensors are kept as they are
//! (candle's CUDA quantized kernels cover Q4_1): on an H200 that was level with
//! Q8_0 and ahead of F16 at batch 1 and 32 (docs/experiments/gpu.md, "H200 figures").
//!
//! A decode step never uses the prefill matrix and vice versa, so results of a
//! sequence do not depend on which other sequences share its batch.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{CandleContext, Result};
use crate::model::cpu_i8::I8Matrix;
use crate::model::cpu_q8::Q8Matrix;

/// In-memory format of one matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// As stored in the GGUF (Q4_1 for SmolLM2).
    Keep,
    /// Requantized to Q4_0.
    Q4_0,
    /// Requantized to Q8_0.
    Q8_0,
    /// Dequantized to F32.
    F32,
    /// Dequantized to F16 (meant for CUDA).
    F16,
    /// Int8 blocks with f32 scales, multiplied against F32 activations by this
    /// crate's AVX2 kernel ([`crate::model::cpu_q8`]); CPU only.
    Q8Cpu,
    /// Int8 blocks with f32 scales, multiplied against activations quantized
    /// the same way (Q8_0 rule) with exact integer dot products — AVX-512
    /// VNNI where the CPU has it, else AVX2, the same bits
    /// ([`crate::model::cpu_i8`]); CPU only.
    Q8Int,
}

impl WeightFormat {
    /// The name [`Self::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Keep => "keep",
            WeightFormat::Q4_0 => "q4_0",
            WeightFormat::Q8_0 => "q8_0",
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
            WeightFormat::Q8Cpu => "q8_cpu",
            WeightFormat::Q8Int => "q8_int",
        }
    }

    /// Parses `keep`, `q4_0`, `q8_0`, `f32`, `f16`, `q8_cpu`, `q8_int`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "keep" | "q4_1" => WeightFormat::Keep,
            "q4_0" => WeightFormat::Q4_0,
            "q8_0" => WeightFormat::Q8_0,
            "f32" => WeightFormat::F32,
            "f16" => WeightFormat::F16,
            "q8_cpu" | "q8cpu" => WeightFormat::Q8Cpu,
            "q8_int" | "q8int" => WeightFormat::Q8Int,
            _ => return None,
        })
    }
}

/// Format used for prefill and for decode matmuls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightLayout {
    pub prefill: WeightFormat,
    pub decode: WeightFormat,
}

impl WeightLayout {
    /// The measured best layout for a device: CPU → F32 prefill + Q8Cpu decode;
    /// CUDA → keep the GGUF's quantized tensors for both.
    pub fn for_device(device: &Device) -> Self {
        if device.is_cpu() {
            WeightLayout {
                prefill: WeightFormat::F32,
                decode: WeightFormat::Q8Cpu,
            }
        } else {
            WeightLayout {
                prefill: WeightFormat::Keep,
                decode: WeightFormat::Keep,
            }
        }
    }

    /// The same format for both phases.
    pub fn uniform(f: WeightFormat) -> Self {
        WeightLayout {
            prefill: f,
            decode: f,
        }
    }

    /// Short label, e.g. `prefill=f32,decode=q8_0`.
    pub fn label(&self) -> String {
        format!(
            "prefill={},decode={}",
            self.prefill.name(),
            self.decode.name()
        )
    }
}

/// A matrix in one of the formats.
#[derive(Debug, Clone)]
enum Mat {
    Candle(QMatMul),
    Q8(Q8Matrix),
    I8(I8Matrix),
}

fn convert(q: &Arc<QTensor>, f: WeightFormat, device: &Device, name: &str) -> Result<Mat> {
    let ctx = |what: &str| format!("weight `{name}`: {what}");
    if matches!(f, WeightFormat::Q8Cpu | WeightFormat::Q8Int) {
        if !device.is_cpu() {
            return Err(crate::error::GpuError::Device {
                device: format!("{device:?}"),
                msg: format!("weight `{name}`: the {} format is CPU only", f.name()),
            });
        }
        let (n, k) = q.shape().dims2().ctx(&ctx("shape"))?;
        let w = q
            .dequantize(&Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .ctx(&ctx("dequantize"))?;
        let m = if f == WeightFormat::Q8Int {
            I8Matrix::from_f32(&w, n, k).map(Mat::I8)
        } else {
            Q8Matrix::from_f32(&w, n, k).map(Mat::Q8)
        };
        return m.ok_or_else(|| {
            crate::error::GpuError::Engine(format!(
                "weight `{name}`: {k} columns are not a multiple of 32"
            ))
        });
    }
    Ok(Mat::Candle(match f {
        WeightFormat::Keep => match q.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => {
                QMatMul::Tensor(q.dequantize(device).ctx(&ctx("dequantize"))?)
            }
            _ if device.is_cpu() => QMatMul::QTensor(q.clone()),
            dt => {
                // Host tensor → device (the backend lays the blocks out itself).
                let data = q.data().ctx(&ctx("read"))?;
                let storage = QStorage::from_data(data, device, dt).ctx(&ctx("upload"))?;
                QMatMul::QTensor(Arc::new(
                    QTensor::new(storage, q.shape().clone()).ctx(&ctx("upload"))?,
                ))
            }
        },
        WeightFormat::Q4_0 | WeightFormat::Q8_0 => {
            let dt = if f == WeightFormat::Q4_0 {
                GgmlDType::Q4_0
            } else {
                GgmlDType::Q8_0
            };
            if q.dtype() == dt && device.is_cpu() {
                QMatMul::QTensor(q.clone())
            } else {
                let t = q.dequantize(&Device::Cpu).ctx(&ctx("dequantize"))?;
                let rq = QTensor::quantize_onto(&t, dt, device).ctx(&ctx("requantize"))?;
                QMatMul::QTensor(Arc::new(rq))
            }
        }
        WeightFormat::F32 => QMatMul::Tensor(q.dequantize(device).ctx(&ctx("dequantize"))?),
        WeightFormat::F16 => QMatMul::TensorF16(
            q.dequantize(device)
                .and_then(|t| t.to_dtype(DType::F16))
                .ctx(&ctx("dequantize f16"))?,
        ),
        WeightFormat::Q8Cpu | WeightFormat::Q8Int => unreachable!("handled above"),
    }))
}

/// Stacks matrices of shape `(n_i, k)` (same quantized type) into one
/// `(Σ n_i, k)` matrix by concatenating their row blocks — used to fuse the
/// Q/K/V and gate/up projections so one matmul call does the work of several.
pub fn concat_rows(parts: &[QTensor], device: &Device, name: &str) -> Result<QTensor> {
    let first = parts
        .first()
        .ok_or_else(|| crate::error::GpuError::Engine(format!("`{name}`: nothing to fuse")))?;
    let (dtype, k) = (first.dtype(), first.shape().dims2().ctx(name)?.1);
    let mut rows = 0;
    let mut bytes = Vec::new();
    for p in parts {
        let (n, pk) = p.shape().dims2().ctx(name)?;
        if pk != k || p.dtype() != dtype {
            return Err(crate::error::GpuError::Engine(format!(
                "`{name}`: cannot fuse {:?} {:?} with {:?} {:?}",
                p.dtype(),
                p.shape(),
                dtype,
                first.shape()
            )));
        }
        rows += n;
        bytes.extend_from_slice(&p.data().ctx(name)?);
    }
    let storage = QStorage::from_data(std::borrow::Cow::Owned(bytes), device, dtype).ctx(name)?;
    QTensor::new(storage, (rows, k)).ctx(name)
}

/// A linear layer `y = x Wᵀ` with one matrix per phase (shared when equal).
#[derive(Debug, Clone)]
pub struct Linear {
    prefill: Mat,
    decode: Option<Mat>,
    name: String,
}

impl Linear {
    /// Builds both phase matrices from a GGUF tensor of shape `(out, in)`.
    pub fn new(q: QTensor, layout: WeightLayout, device: &Device, name: &str) -> Result<Self> {
        let q = Arc::new(q);
        let prefill = convert(&q, layout.prefill, device, name)?;
        let decode = if layout.decode == layout.prefill {
            None
        } else {
            Some(convert(&q, layout.decode, device, name)?)
        };
        Ok(Linear {
            prefill,
            decode,
            name: name.to_string(),
        })
    }

    /// One of this crate's CPU matmuls, `f(x, rows) → (rows, n)` for a
    /// `(n, k)` matrix, on a tensor.
    fn host_matmul(
        &self,
        x: &Tensor,
        (n, k): (usize, usize),
        f: impl Fn(&[f32], usize) -> Vec<f32>,
    ) -> Result<Tensor> {
        let (rows, width) = x.dims2().ctx(&self.name)?;
        if width != k {
            return Err(crate::error::GpuError::Engine(format!(
                "weight `{}`: activations of width {width}, the matrix takes {k}",
                self.name
            )));
        }
        let xs = x
            .flatten_all()
            .and_then(|t| t.to_vec1::<f32>())
            .ctx(&self.name)?;
        Tensor::from_vec(f(&xs, rows), (rows, n), x.device()).ctx(&self.name)
    }

    /// Applies the layer for the given phase to `x` of shape `(rows, in)`.
    pub fn forward(&self, x: &Tensor, decode: bool) -> Result<Tensor> {
        let m = if decode {
            self.decode.as_ref().unwrap_or(&self.prefill)
        } else {
            &self.prefill
        };
        match m {
            Mat::Candle(q) => q.forward(x).ctx(&self.name),
            Mat::Q8(q) => self.host_matmul(x, (q.rows(), q.cols()), |xs, m| q.matmul(xs, m)),
            Mat::I8(q) => self.host_matmul(x, (q.rows(), q.cols()), |xs, m| q.matmul(xs, m)),
        }
    }
}
