//! GGUF reading (and writing of the tiny random test model).
//!
//! [`GgufFile`] wraps candle's `gguf_file::Content` with typed errors that name
//! the file and the key or tensor at fault. Llama hyper-parameters come from the
//! `llama.*` metadata keys: `block_count`, `embedding_length`,
//! `feed_forward_length`, `attention.head_count`, `attention.head_count_kv`,
//! `rope.freq_base`, `attention.layer_norm_rms_epsilon`, `context_length`; the
//! vocabulary size from `llama.vocab_size` or the token list.
//!
//! [`tiny_gguf`] writes a 2-layer random-initialised Llama with a byte-level
//! tokenizer into an in-memory GGUF, with the same tensor names and quantized
//! types (Q4_1 matrices, Q8_0 embedding) as the SmolLM2 file, so unit tests run
//! the very same loader and forward pass as the real model without a download.

use std::collections::HashMap;
use std::io::{Cursor, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::error::{GpuError, Result};
use crate::model::config::LlamaConfig;

/// An open GGUF file (or buffer) and its parsed header.
pub struct GgufFile<R> {
    pub(crate) content: Content,
    reader: R,
    label: String,
}

impl GgufFile<std::io::BufReader<std::fs::File>> {
    /// Opens and parses the header of a GGUF file.
    pub fn open(path: &Path) -> Result<Self> {
        let f = std::fs::File::open(path).map_err(|source| GpuError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_reader(std::io::BufReader::new(f), &path.display().to_string())
    }
}

impl GgufFile<Cursor<Vec<u8>>> {
    /// Parses a GGUF held in memory.
    pub fn from_bytes(bytes: Vec<u8>, label: &str) -> Result<Self> {
        Self::from_reader(Cursor::new(bytes), label)
    }
}

impl<R: Read + Seek> GgufFile<R> {
    /// Parses the header from `reader`; `label` names it in errors.
    pub fn from_reader(mut reader: R, label: &str) -> Result<Self> {
        let content = Content::read(&mut reader).map_err(|e| GpuError::Gguf {
            path: label.to_string(),
            msg: format!("cannot parse header: {e}"),
        })?;
        Ok(GgufFile {
            content,
            reader,
            label: label.to_string(),
        })
    }

    /// The file name or label used in errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// All metadata.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    fn meta_err(&self, key: &str, msg: impl Into<String>) -> GpuError {
        GpuError::Metadata {
            path: self.label.clone(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }

    /// A metadata value, or an error naming the key.
    pub fn value(&self, key: &str) -> Result<&Value> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// An integer metadata value (any integer width).
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.value(key)?;
        let n: i128 = match v {
            Value::U8(x) => *x as i128,
            Value::I8(x) => *x as i128,
            Value::U16(x) => *x as i128,
            Value::I16(x) => *x as i128,
            Value::U32(x) => *x as i128,
            Value::I32(x) => *x as i128,
            Value::U64(x) => *x as i128,
            Value::I64(x) => *x as i128,
            other => return Err(self.meta_err(key, format!("expected an integer, got {other:?}"))),
        };
        usize::try_from(n).map_err(|_| self.meta_err(key, format!("{n} is out of range")))
    }

    /// A float metadata value.
    pub fn f64(&self, key: &str) -> Result<f64> {
        match self.value(key)? {
            Value::F32(x) => Ok(*x as f64),
            Value::F64(x) => Ok(*x),
            other => Err(self.meta_err(key, format!("expected a float, got {other:?}"))),
        }
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Result<&str> {
        match self.value(key)? {
            Value::String(s) => Ok(s),
            other => Err(self.meta_err(key, format!("expected a string, got {other:?}"))),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        match self.value(key)? {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.as_str()),
                    other => Err(self.meta_err(key, format!("element {i} is {other:?}"))),
                })
                .collect(),
            other => Err(self.meta_err(key, format!("expected an array, got {other:?}"))),
        }
    }

    /// An array of integers.
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        match self.value(key)? {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::U8(x) => Ok(*x as i64),
                    Value::I8(x) => Ok(*x as i64),
                    Value::U16(x) => Ok(*x as i64),
                    Value::I16(x) => Ok(*x as i64),
                    Value::U32(x) => Ok(*x as i64),
                    Value::I32(x) => Ok(*x as i64),
                    Value::U64(x) => Ok(*x as i64),
                    Value::I64(x) => Ok(*x),
                    other => Err(self.meta_err(key, format!("element {i} is {other:?}"))),
                })
                .collect(),
            other => Err(self.meta_err(key, format!("expected an array, got {other:?}"))),
        }
    }

    /// Whether a tensor exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Reads a tensor onto `device`, or [`GpuError::MissingTensor`].
    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        if !self.has_tensor(name) {
            return Err(GpuError::MissingTensor {
                path: self.label.clone(),
                name: name.to_string(),
            });
        }
        self.content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| GpuError::Gguf {
                path: self.label.clone(),
                msg: format!("reading tensor `{name}`: {e}"),
            })
    }

    /// Reads a tensor and checks its shape (candle order: outermost first).
    pub fn tensor_shaped(
        &mut self,
        name: &str,
        device: &Device,
        shape: &[usize],
    ) -> Result<QTensor> {
        let t = self.tensor(name, device)?;
        if t.shape().dims() != shape {
            return Err(GpuError::TensorShape {
                path: self.label.clone(),
                name: name.to_string(),
                got: t.shape().dims().to_vec(),
                expected: shape.to_vec(),
            });
        }
        Ok(t)
    }

    /// Llama hyper-parameters from the metadata.
    pub fn llama_config(&self) -> Result<LlamaConfig> {
        let arch = self.string("general.architecture")?;
        if arch != "llama" {
            return Err(self.meta_err(
                "general.architecture",
                format!("architecture `{arch}` is not supported (only llama)"),
            ));
        }
        let hidden = self.usize("llama.embedding_length")?;
        let n_heads = self.usize("llama.attention.head_count")?;
        let vocab = match self.usize("llama.vocab_size") {
            Ok(v) => v,
            Err(_) => self.strings("tokenizer.ggml.tokens")?.len(),
        };
        let head_dim = hidden.checked_div(n_heads).unwrap_or(0);
        let config = LlamaConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.usize("llama.feed_forward_length")?,
            n_layers: self.usize("llama.block_count")?,
            n_heads,
            n_kv_heads: self
                .usize("llama.attention.head_count_kv")
                .unwrap_or(n_heads),
            head_dim,
            rope_theta: self.f64("llama.rope.freq_base").unwrap_or(10_000.0) as f32,
            rms_norm_eps: self.f64("llama.attention.layer_norm_rms_epsilon")?,
            max_seq_len: self.usize("llama.context_length").unwrap_or(4096),
        };
        config.validate().map_err(|m| self.meta_err("llama.*", m))?;
        if let Ok(d) = self.usize("llama.rope.dimension_count") {
            if d != head_dim {
                return Err(self.meta_err(
                    "llama.rope.dimension_count",
                    format!("partial rotary ({d} of {head_dim} dims) is not supported"),
                ));
            }
        }
        Ok(config)
    }
}

/// Deterministic pseudo-random numbers (splitmix64) for test weights.
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

/// Tokens of the tiny test tokenizer: 3 specials, 256 byte tokens, merges.
fn tiny_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = vec![
        "<|endoftext|>".into(),
        "<|im_start|>".into(),
        "<|im_end|>".into(),
    ];
    let mut types = vec![3, 3, 3];
    let enc = crate::tokenizer::bpe::byte_to_unicode();
    for b in 0..=255u8 {
        tokens.push(enc[b as usize].to_string());
        types.push(1);
    }
    let merges_src = [
        ("h", "e"),
        ("Ġ", "t"),
        ("Ġt", "he"),
        ("l", "l"),
        ("o", "r"),
        ("Ġ", "w"),
        ("Ġw", "or"),
        ("ll", "o"),
        ("he", "llo"),
        ("i", "n"),
    ];
    let mut merges = Vec::new();
    for (a, b) in merges_src {
        merges.push(format!("{a} {b}"));
        tokens.push(format!("{a}{b}"));
        types.push(1);
    }
    (tokens, merges, types)
}

/// A GGUF (in memory) of a random-initialised tiny Llama ([`LlamaConfig::tiny`]).
pub fn tiny_gguf(seed: u64) -> Vec<u8> {
    let (tokens, merges, types) = tiny_vocab();
    let c = LlamaConfig::tiny(tokens.len());
    let mut rng = SplitMix(seed);
    let dev = Device::Cpu;
    let mut rand = |shape: (usize, usize), scale: f32| -> Tensor {
        let n = shape.0 * shape.1;
        let v: Vec<f32> = (0..n).map(|_| rng.next_f32() * scale).collect();
        Tensor::from_vec(v, shape, &dev).expect("tiny tensor shape")
    };
    let q = |t: &Tensor, dt: GgmlDType| QTensor::quantize(t, dt).expect("quantize tiny tensor");
    let ones = |n: usize| -> QTensor {
        let t = Tensor::ones(n, candle_core::DType::F32, &Device::Cpu).expect("ones");
        QTensor::quantize(&t, GgmlDType::F32).expect("f32 qtensor")
    };
    let h = c.hidden_size;
    let kvw = c.kv_width();
    let mut named: Vec<(String, QTensor)> = Vec::new();
    named.push((
        "token_embd.weight".into(),
        q(&rand((c.vocab_size, h), 1.0), GgmlDType::Q8_0),
    ));
    named.push(("output_norm.weight".into(), ones(h)));
    let s = 1.0 / (h as f32).sqrt() * 1.7;
    for i in 0..c.n_layers {
        let p = format!("blk.{i}");
        named.push((format!("{p}.attn_norm.weight"), ones(h)));
        named.push((format!("{p}.ffn_norm.weight"), ones(h)));
        named.push((
            format!("{p}.attn_q.weight"),
            q(&rand((h, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.attn_k.weight"),
            q(&rand((kvw, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.attn_v.weight"),
            q(&rand((kvw, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.attn_output.weight"),
            q(&rand((h, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.ffn_gate.weight"),
            q(&rand((c.intermediate_size, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.ffn_up.weight"),
            q(&rand((c.intermediate_size, h), s), GgmlDType::Q4_1),
        ));
        named.push((
            format!("{p}.ffn_down.weight"),
            q(
                &rand(
                    (h, c.intermediate_size),
                    1.0 / (c.intermediate_size as f32).sqrt() * 1.7,
                ),
                GgmlDType::Q4_1,
            ),
        ));
    }
    let str_arr = |v: &[String]| Value::Array(v.iter().map(|s| Value::String(s.clone())).collect());
    let meta: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.name", Value::String("tiny-random-llama".into())),
        ("llama.block_count", Value::U32(c.n_layers as u32)),
        ("llama.context_length", Value::U32(c.max_seq_len as u32)),
        ("llama.embedding_length", Value::U32(h as u32)),
        ("llama.feed_forward_length", Value::U32(c.intermediate_size as u32)),
        ("llama.attention.head_count", Value::U32(c.n_heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(c.n_kv_heads as u32)),
        ("llama.rope.freq_base", Value::F32(c.rope_theta)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(c.rms_norm_eps as f32)),
        ("llama.vocab_size", Value::U32(c.vocab_size as u32)),
        ("llama.rope.dimension_count", Value::U32(c.head_dim as u32)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", str_arr(&tokens)),
        ("tokenizer.ggml.merges", str_arr(&merges)),
        ("tokenizer.ggml.token_type", Value::Array(types.iter().map(|t| Value::I32(*t)).collect())),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.padding_token_id", Value::U32(2)),
        (
            "tokenizer.chat_template",
            Value::String(
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}".into(),
            ),
        ),
    ];
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = named.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut buf = Cursor::new(Vec::new());
    gguf_file::write(&mut buf, &meta_refs, &tensor_refs).expect("write tiny gguf to memory");
    buf.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_roundtrips_through_loader() {
        let g = GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap();
        let c = g.llama_config().unwrap();
        assert_eq!(c.n_layers, 2);
        assert_eq!(c.vocab_size, 3 + 256 + 10);
        assert_eq!(c.head_dim, 16);
    }

    #[test]
    fn missing_tensor_is_named() {
        let mut g = GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap();
        let e = g.tensor("blk.9.attn_q.weight", &Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("blk.9.attn_q.weight"), "{e}");
    }

    #[test]
    fn garbage_is_an_error() {
        let e = GgufFile::from_bytes(vec![1, 2, 3, 4, 5], "junk")
            .err()
            .unwrap();
        assert!(e.to_string().contains("junk"));
    }
}
