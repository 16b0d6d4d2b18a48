//! The CUDA decode path against the CPU's, on a machine with a GPU: built with
//! `--features cuda` (CI compiles it in its CUDA step), it runs where
//! `cuda:0` opens and says it was skipped elsewhere.
//!
//! Sequences of different lengths — one of them an imported, incomplete cache
//! with rows masked out of attention — decode together in one batch, so every
//! decode step goes through the batched attention kernel
//! (`model/cuda_decode_attend.rs`); their logits must match the CPU's F32
//! computation step by step.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use edgemu_gpu::kv_transfer::{export, import};
use edgemu_gpu::model::{load_random, Llama, Phase, RandomArch, RandomWeights, SeqInput, SeqKv};
use edgemu_gpu::{KvDtype, MissingRows, PresenceMask, WeightFormat, WeightLayout};

const STEPS: usize = 6;

fn model(device: &Device) -> Llama {
    let w = RandomWeights {
        arch: RandomArch::Tiny,
        seed: 11,
    };
    load_random(w, device, Some(WeightLayout::uniform(WeightFormat::F32)))
        .expect("tiny random model")
        .model
}

fn prompt(i: usize, len: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|t| ((i * 7919 + t * 104_729) % (vocab - 3) + 3) as u32)
        .collect()
}

/// Prefills each prompt alone, replaces the last cache with an import of itself
/// in which every third (layer, head, token) row is masked, then decodes all
/// together greedily for [`STEPS`] steps; returns the logits of every step.
fn run(m: &Llama) -> Vec<Vec<f32>> {
    let c = m.config().clone();
    let lens = [5usize, 23, 64, 40];
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| prompt(i, l, c.vocab_size))
        .collect();
    let mut kvs: Vec<SeqKv> = Vec::new();
    let mut next: Vec<u32> = Vec::new();
    for p in &prompts {
        let mut kv = m.new_kv(p.len() + STEPS + 1).expect("cache");
        let mut batch = [SeqInput {
            tokens: p,
            kv: &mut kv,
        }];
        next.extend(m.greedy(&mut batch, Phase::Prefill).expect("prefill"));
        kvs.push(kv);
    }
    let last = kvs.len() - 1;
    let n = kvs[last].len();
    let blocks = export(&kvs[last], 0..c.n_layers, 0..n, KvDtype::F32).expect("export");
    let mut presence = PresenceMask::all(c.n_layers, c.n_kv_heads, n);
    for l in 0..c.n_layers {
        for h in 0..c.n_kv_heads {
            for t in (l + h) % 3..n.saturating_sub(1) {
                if t % 3 == 0 {
                    presence.set(l, h, t, false);
                }
            }
        }
    }
    kvs[last] = import(
        &c,
        m.device(),
        n,
        &blocks,
        Some(&presence),
        MissingRows::Mask,
    )
    .expect("import");
    let mut out = Vec::new();
    for _ in 0..STEPS {
        let toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let mut batch: Vec<SeqInput<'_>> = kvs
            .iter_mut()
            .zip(&toks)
            .map(|(kv, t)| SeqInput { tokens: t, kv })
            .collect();
        let logits: Tensor = m.forward(&mut batch, Phase::Decode).expect("decode");
        let rows = logits.to_vec2::<f32>().expect("logits");
        next = rows
            .iter()
            .map(|r| {
                r.iter()
                    .enumerate()
                    .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
                    .0 as u32
            })
            .collect();
        out.extend(rows);
    }
    out
}

#[test]
fn cuda_decode_steps_match_the_cpu() {
    let Ok(cuda) = Device::new_cuda(0) else {
        eprintln!("no CUDA device: skipped");
        return;
    };
    let cpu_rows = run(&model(&Device::Cpu));
    let gpu_rows = run(&model(&cuda));
    assert_eq!(
        edgemu_gpu::model::batched_attention_active(),
        edgemu_gpu::model::batched_attention_enabled(),
        "the batched decode-attention kernel should be in use unless switched off"
    );
    assert_eq!(cpu_rows.len(), gpu_rows.len());
    for (i, (a, b)) in cpu_rows.iter().zip(&gpu_rows).enumerate() {
        let scale = a.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            worst <= 1e-3 * scale,
            "row {i} (step {}, sequence {}): CPU and CUDA logits differ by {worst} (scale {scale})",
            i / 4,
            i % 4
        );
    }
}
