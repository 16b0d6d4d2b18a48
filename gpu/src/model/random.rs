//! Seeded random-weight models, written as an in-memory GGUF and loaded by the
//! very same loader and forward pass as a real file.
//!
//! Two architectures:
//! * [`RandomArch::Tiny`] — [`LlamaConfig::tiny`], 2 layers, for unit tests;
//! * [`RandomArch::SmolLm2_135M`] — the shape of SmolLM2-135M (30 layers,
//!   9 query / 3 KV heads of 64, hidden 576, MLP 1536, vocabulary 49 152,
//!   rope base 100 000, context 8192), so a machine without the 98 MB GGUF
//!   (a GPU machine with no network) measures the same time per token: the
//!   matrices have the real file's shapes and quantized types (Q4_1 matrices,
//!   Q8_0 embedding tied to the LM head, F32 norms), so the same kernels run.
//!
//! The tokenizer is the tiny byte-level BPE (3 specials, 256 bytes, 10 merges),
//! padded with plain `<|pad_N|>` tokens up to the vocabulary size; the
//! benchmarks feed token ids, so its quality does not matter.
//!
//! Weights are uniform in ±1.7/√fan_in from splitmix64 seeded by `seed`, drawn
//! in a fixed order: the same seed gives the same bytes, bit for bit, on every
//! machine.

use std::io::Cursor;
use std::str::FromStr;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use edgemu_tokenizer::{tiny, MetaValue};

use crate::error::{GpuError, Result};
use crate::model::config::LlamaConfig;

/// Architectures a random model can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomArch {
    /// [`LlamaConfig::tiny`] (vocabulary = the tiny tokenizer's 269 tokens).
    Tiny,
    /// SmolLM2-135M's shape.
    SmolLm2_135M,
}

impl RandomArch {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            RandomArch::Tiny => "tiny",
            RandomArch::SmolLm2_135M => "smollm2-135m",
        }
    }

    /// The hyper-parameters.
    pub fn config(self) -> LlamaConfig {
        match self {
            RandomArch::Tiny => LlamaConfig::tiny(tiny::vocab_size()),
            RandomArch::SmolLm2_135M => LlamaConfig {
                vocab_size: 49_152,
                hidden_size: 576,
                intermediate_size: 1536,
                n_layers: 30,
                n_heads: 9,
                n_kv_heads: 3,
                head_dim: 64,
                rope_theta: 100_000.0,
                // As the GGUF stores it (an f32).
                rms_norm_eps: f64::from(1e-5_f32),
                max_seq_len: 8192,
            },
        }
    }
}

/// Which random model: architecture and seed. Parses `[ARCH:]SEED` with ARCH
/// `smollm2-135m` (the default) or `tiny`, e.g. `42`, `tiny:7`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomWeights {
    pub arch: RandomArch,
    pub seed: u64,
}

impl RandomWeights {
    /// A label for logs and reports, e.g. `random smollm2-135m seed 42`.
    pub fn label(&self) -> String {
        format!("random {} seed {}", self.arch.name(), self.seed)
    }
}

impl FromStr for RandomWeights {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (arch, seed) = match s.split_once(':') {
            Some((a, n)) => (a, n),
            None => ("smollm2-135m", s),
        };
        let arch = match arch.to_ascii_lowercase().as_str() {
            "smollm2-135m" | "smollm2" => RandomArch::SmolLm2_135M,
            "tiny" => RandomArch::Tiny,
            other => {
                return Err(format!(
                    "unknown random architecture `{other}` (use smollm2-135m or tiny)"
                ))
            }
        };
        let seed = seed
            .trim()
            .parse::<u64>()
            .map_err(|e| format!("random-weights seed `{seed}`: {e} (use [ARCH:]SEED)"))?;
        Ok(RandomWeights { arch, seed })
    }
}

/// Deterministic pseudo-random numbers (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// A candle GGUF value of a metadata value.
fn candle_value(v: MetaValue) -> Value {
    match v {
        MetaValue::U8(x) => Value::U8(x),
        MetaValue::I8(x) => Value::I8(x),
        MetaValue::U16(x) => Value::U16(x),
        MetaValue::I16(x) => Value::I16(x),
        MetaValue::U32(x) => Value::U32(x),
        MetaValue::I32(x) => Value::I32(x),
        MetaValue::U64(x) => Value::U64(x),
        MetaValue::I64(x) => Value::I64(x),
        MetaValue::F32(x) => Value::F32(x),
        MetaValue::F64(x) => Value::F64(x),
        MetaValue::Bool(x) => Value::Bool(x),
        MetaValue::String(x) => Value::String(x),
        MetaValue::Array(x) => Value::Array(x.into_iter().map(candle_value).collect()),
    }
}

fn gguf_err(arch: RandomArch, msg: String) -> GpuError {
    GpuError::Gguf {
        path: format!("random {}", arch.name()),
        msg,
    }
}

/// Writes the random model of `arch` seeded by `seed` as an in-memory GGUF.
pub fn random_gguf(arch: RandomArch, seed: u64) -> Vec<u8> {
    // Every step below works on shapes fixed in this file; a failure is a bug.
    try_random_gguf(arch, seed).expect("random GGUF of a built-in architecture")
}

/// [`random_gguf`] with errors.
pub fn try_random_gguf(arch: RandomArch, seed: u64) -> Result<Vec<u8>> {
    let c = arch.config();
    let err = |e: candle_core::Error| gguf_err(arch, e.to_string());
    let mut rng = SplitMix(seed);
    let dev = Device::Cpu;
    let mut q = |shape: (usize, usize), scale: f32, dt: GgmlDType| -> Result<QTensor> {
        let v: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| rng.next_f32() * scale)
            .collect();
        let t = Tensor::from_vec(v, shape, &dev).map_err(err)?;
        QTensor::quantize(&t, dt).map_err(err)
    };
    let ones = |n: usize| -> Result<QTensor> {
        let t = Tensor::ones(n, candle_core::DType::F32, &Device::Cpu).map_err(err)?;
        QTensor::quantize(&t, GgmlDType::F32).map_err(err)
    };
    let h = c.hidden_size;
    let kvw = c.kv_width();
    let ffn = c.intermediate_size;
    let mut named: Vec<(String, QTensor)> = Vec::new();
    named.push((
        "token_embd.weight".into(),
        q((c.vocab_size, h), 1.0, GgmlDType::Q8_0)?,
    ));
    named.push(("output_norm.weight".into(), ones(h)?));
    let s = 1.0 / (h as f32).sqrt() * 1.7;
    let s_down = 1.0 / (ffn as f32).sqrt() * 1.7;
    for i in 0..c.n_layers {
        let p = format!("blk.{i}");
        named.push((format!("{p}.attn_norm.weight"), ones(h)?));
        named.push((format!("{p}.ffn_norm.weight"), ones(h)?));
        for (name, shape, scale) in [
            ("attn_q", (h, h), s),
            ("attn_k", (kvw, h), s),
            ("attn_v", (kvw, h), s),
            ("attn_output", (h, h), s),
            ("ffn_gate", (ffn, h), s),
            ("ffn_up", (ffn, h), s),
            ("ffn_down", (h, ffn), s_down),
        ] {
            named.push((
                format!("{p}.{name}.weight"),
                q(shape, scale, GgmlDType::Q4_1)?,
            ));
        }
    }
    let mut meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        (
            "general.name",
            Value::String(format!("random-{}-seed-{seed}", arch.name())),
        ),
        ("llama.block_count", Value::U32(c.n_layers as u32)),
        ("llama.context_length", Value::U32(c.max_seq_len as u32)),
        ("llama.embedding_length", Value::U32(h as u32)),
        ("llama.feed_forward_length", Value::U32(ffn as u32)),
        ("llama.attention.head_count", Value::U32(c.n_heads as u32)),
        (
            "llama.attention.head_count_kv",
            Value::U32(c.n_kv_heads as u32),
        ),
        ("llama.rope.freq_base", Value::F32(c.rope_theta)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(c.rms_norm_eps as f32),
        ),
        ("llama.vocab_size", Value::U32(c.vocab_size as u32)),
        ("llama.rope.dimension_count", Value::U32(c.head_dim as u32)),
    ];
    meta.extend(
        tiny::metadata(c.vocab_size)
            .into_iter()
            .map(|(k, v)| (k, candle_value(v))),
    );
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = named.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut buf = Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &meta_refs, &tensor_refs).map_err(err)?;
    Ok(buf.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GgufFile;

    #[test]
    fn parses_arch_and_seed() {
        let r: RandomWeights = "42".parse().unwrap();
        assert_eq!(r.arch, RandomArch::SmolLm2_135M);
        assert_eq!(r.seed, 42);
        let r: RandomWeights = "tiny:7".parse().unwrap();
        assert_eq!((r.arch, r.seed), (RandomArch::Tiny, 7));
        assert!("gpt:1".parse::<RandomWeights>().is_err());
        assert!("tiny:x".parse::<RandomWeights>().is_err());
    }

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let a = random_gguf(RandomArch::Tiny, 3);
        assert_eq!(a, random_gguf(RandomArch::Tiny, 3));
        assert_ne!(a, random_gguf(RandomArch::Tiny, 4));
    }

    #[test]
    fn smollm2_shape_loads_with_the_real_config() {
        let g = GgufFile::from_bytes(random_gguf(RandomArch::SmolLm2_135M, 1), "r").unwrap();
        let c = g.llama_config().unwrap();
        assert_eq!(c, RandomArch::SmolLm2_135M.config());
        assert_eq!(
            g.metadata().strings("tokenizer.ggml.tokens").unwrap().len(),
            49_152
        );
        assert!(g.has_tensor("blk.29.ffn_down.weight"));
        assert!(
            !g.has_tensor("output.weight"),
            "LM head tied, as in SmolLM2"
        );
    }
}
