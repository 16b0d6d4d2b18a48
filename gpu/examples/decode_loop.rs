//! Tight decode loop for profiling: `decode_loop <format> <batch> <steps>`.
use candle_core::Device;
use edgemu_gpu::model::{load, Phase, SeqInput, WeightFormat, WeightLayout};
use edgemu_tokenizer::model_path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let f = WeightFormat::parse(a.first().map(String::as_str).unwrap_or("q8_0")).ok_or("format")?;
    let b: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let steps: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
    let lm = load(&model_path()?, &Device::Cpu, Some(WeightLayout::uniform(f)))?;
    let m = &lm.model;
    let prompt: Vec<u32> = (0..64).map(|i| 1000 + i * 37).collect();
    let mut kvs: Vec<_> = (0..b).map(|_| m.new_kv(256).unwrap()).collect();
    let mut toks = vec![0u32; b];
    for (i, kv) in kvs.iter_mut().enumerate() {
        toks[i] = m.greedy(
            &mut [SeqInput {
                tokens: &prompt,
                kv,
            }],
            Phase::Prefill,
        )?[0];
    }
    let t = std::time::Instant::now();
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
    let el = t.elapsed().as_secs_f64();
    println!(
        "{f:?} b{b}: {:.1} ms/step, {:.1} tok/s",
        el * 1e3 / steps as f64,
        (b * steps) as f64 / el
    );
    Ok(())
}
