//! Measures prefill and decode speed of each weight layout on the real model.
//! `cargo run --release -p edgemu-gpu --example layouts`
use std::time::Instant;

use candle_core::Device;
use edgemu_gpu::model::{load, Phase, SeqInput, WeightFormat, WeightLayout};
use edgemu_tokenizer::model_path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = model_path()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let formats: Vec<WeightFormat> = if args.is_empty() {
        vec![
            WeightFormat::Keep,
            WeightFormat::Q4_0,
            WeightFormat::Q8_0,
            WeightFormat::F32,
        ]
    } else {
        args.iter().filter_map(|a| WeightFormat::parse(a)).collect()
    };
    for f in formats {
        let lm = load(&path, &Device::Cpu, Some(WeightLayout::uniform(f)))?;
        let m = &lm.model;
        let prompt: Vec<u32> = (0..199).map(|i| 1000 + (i * 37) % 20000).collect();
        let mut kv = m.new_kv(512)?;
        let t = Instant::now();
        let mut tok = m.greedy(
            &mut [SeqInput {
                tokens: &prompt,
                kv: &mut kv,
            }],
            Phase::Prefill,
        )?[0];
        let pre = prompt.len() as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let n = 32;
        for _ in 0..n {
            tok = m.greedy(
                &mut [SeqInput {
                    tokens: &[tok],
                    kv: &mut kv,
                }],
                Phase::Decode,
            )?[0];
        }
        let dec1 = n as f64 / t.elapsed().as_secs_f64();
        // batch 16
        let mut kvs: Vec<_> = (0..16).map(|_| m.new_kv(256).unwrap()).collect();
        let mut toks = vec![0u32; 16];
        for (i, kv) in kvs.iter_mut().enumerate() {
            toks[i] = m.greedy(
                &mut [SeqInput {
                    tokens: &prompt[..64 + i],
                    kv,
                }],
                Phase::Prefill,
            )?[0];
        }
        let t = Instant::now();
        let steps = 8;
        for _ in 0..steps {
            let cur = toks.clone();
            let mut batch: Vec<SeqInput> = kvs
                .iter_mut()
                .zip(cur.iter())
                .map(|(kv, t)| SeqInput {
                    tokens: std::slice::from_ref(t),
                    kv,
                })
                .collect();
            toks = m.greedy(&mut batch, Phase::Decode)?;
        }
        let dec16 = (16 * steps) as f64 / t.elapsed().as_secs_f64();
        println!("{f:?}: prefill199 {pre:.0} tok/s, decode b1 {dec1:.1} tok/s, decode b16 {dec16:.1} tok/s");
    }
    Ok(())
}
