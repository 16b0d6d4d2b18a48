//! candle-transformers' `quantized_llama::ModelWeights` on the same GGUF.
//!
//! It keeps one KV cache for the whole batch, so a batch is static: all
//! sequences have the same length and decode at the same position. Timings are
//! wall-clock around forward passes, each ended by reading the argmax back
//! (which synchronises a GPU).

use std::io::{Read, Seek};
use std::time::Instant;

use candle_core::quantized::gguf_file::Content;
use candle_core::{DType, Device, Tensor, D};
use candle_transformers::models::quantized_llama::ModelWeights;
use edgemu_tokenizer::resolve_model_path;

use crate::baseline::{BaselineFigures, BaselineWorkload};
use crate::error::{CandleContext, GpuError, Result};
use crate::model::ModelSource;

fn load<R: Read + Seek>(mut r: R, label: &str, device: &Device) -> Result<ModelWeights> {
    let ct = Content::read(&mut r).map_err(|e| GpuError::Gguf {
        path: label.to_string(),
        msg: format!("candle-transformers baseline: {e}"),
    })?;
    ModelWeights::from_gguf(ct, &mut r, device).ctx("candle-transformers quantized_llama load")
}

/// Loads `quantized_llama` from the source's GGUF (file or random bytes).
pub fn load_model(source: &ModelSource, device: &Device) -> Result<ModelWeights> {
    match source {
        ModelSource::File(f) => {
            let path = resolve_model_path(f.as_deref())?;
            let file = std::fs::File::open(&path).map_err(|source| GpuError::Io {
                path: path.clone(),
                source,
            })?;
            load(
                std::io::BufReader::new(file),
                &path.display().to_string(),
                device,
            )
        }
        ModelSource::Random(w) => {
            let bytes = crate::model::random::try_random_gguf(w.arch, w.seed)?;
            load(std::io::Cursor::new(bytes), &w.label(), device)
        }
    }
}

/// One forward pass of `rows` (all the same length) at `pos`; greedy tokens.
fn step(m: &mut ModelWeights, rows: &[Vec<u32>], pos: usize, device: &Device) -> Result<Vec<u32>> {
    let (b, l) = (rows.len(), rows[0].len());
    let flat: Vec<u32> = rows.iter().flatten().copied().collect();
    let x = Tensor::from_vec(flat, (b, l), device).ctx("baseline ids")?;
    let logits = m.forward(&x, pos).ctx("baseline forward")?;
    logits
        .argmax(D::Minus1)
        .and_then(|t| t.to_dtype(DType::U32))
        .and_then(|t| t.to_vec1::<u32>())
        .ctx("baseline argmax")
}

/// Prefill of `prompts` (equal lengths), then `steps` timed decode steps;
/// returns decode tok/s (aggregate).
fn decode_rate(
    m: &mut ModelWeights,
    prompts: &[Vec<u32>],
    steps: usize,
    device: &Device,
) -> Result<f64> {
    m.clear_kv_cache();
    let mut pos = prompts[0].len();
    let mut next = if prompts.len() == 1 {
        step(m, prompts, 0, device)?
    } else {
        // Its last-row selection is not contiguous for a batch of several rows
        // (the CPU quantized matmul refuses it): feed the prompts one position
        // at a time (untimed).
        let mut next = Vec::new();
        for j in 0..pos {
            let col: Vec<Vec<u32>> = prompts.iter().map(|p| vec![p[j]]).collect();
            next = step(m, &col, j, device)?;
        }
        next
    };
    let t0 = Instant::now();
    for _ in 0..steps {
        let rows: Vec<Vec<u32>> = next.iter().map(|t| vec![*t]).collect();
        next = step(m, &rows, pos, device)?;
        pos += 1;
    }
    Ok((prompts.len() * steps) as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Measures the baseline on `work`.
pub fn measure(
    source: &ModelSource,
    device: &Device,
    work: &BaselineWorkload,
) -> Result<BaselineFigures> {
    let mut m = load_model(source, device)?;
    let first = work
        .decode_prompts
        .first()
        .ok_or_else(|| GpuError::Engine("baseline without decode prompts".into()))?;
    if work.decode_prompts.iter().any(|p| p.len() != first.len()) {
        return Err(GpuError::Engine(
            "a static batch needs prompts of one length".into(),
        ));
    }
    // Warm-up (kernel loading on a GPU).
    decode_rate(&mut m, std::slice::from_ref(first), 2, device)?;
    m.clear_kv_cache();
    let t0 = Instant::now();
    step(
        &mut m,
        std::slice::from_ref(&work.prefill_prompt),
        0,
        device,
    )?;
    let prefill = work.prefill_prompt.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9);
    let b1 = decode_rate(&mut m, std::slice::from_ref(first), work.steps, device)?;
    let b16 = if work.decode_prompts.len() >= 16 {
        Some(decode_rate(
            &mut m,
            &work.decode_prompts[..16],
            work.steps,
            device,
        )?)
    } else {
        None
    };
    Ok(BaselineFigures {
        prefill_200_tok_s: prefill,
        decode_b1_tok_s: b1,
        decode_b16_tok_s: b16,
        batch16: "static batch: 16 prompts of one length decoded together".into(),
        notes: "candle-transformers 0.11 quantized_llama, GGUF tensors as stored".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RandomArch, RandomWeights};

    #[test]
    fn measures_the_tiny_random_model() {
        let src = ModelSource::Random(RandomWeights {
            arch: RandomArch::Tiny,
            seed: 5,
        });
        let work = BaselineWorkload {
            prefill_prompt: (3..40).collect(),
            decode_prompts: (0..16).map(|i| (10 + i..20 + i).collect()).collect(),
            steps: 3,
        };
        let f = measure(&src, &Device::Cpu, &work).unwrap();
        assert!(f.prefill_200_tok_s > 0.0 && f.decode_b1_tok_s > 0.0);
        assert!(f.decode_b16_tok_s.is_some_and(|x| x > 0.0));
    }
}
