//! GGUF reading (and writing of the tiny random test model).
//!
//! [`GgufFile`] wraps candle's `gguf_file::Content` with typed errors that name
//! the file and the key or tensor at fault. Llama hyper-parameters come from the
//! `llama.*` metadata keys: `block_count`, `embedding_length`,
//! `feed_forward_length`, `attention.head_count`, `attention.head_count_kv`,
//! `rope.freq_base`, `attention.layer_norm_rms_epsilon`, `context_length`; the
//! vocabulary size from `llama.vocab_size` or the token list.
//!
//! [`tiny_gguf`] writes a 2-layer random-initialised Llama into an in-memory
//! GGUF ([`crate::model::random`] also builds the full SmolLM2-135M shape), so
//! unit tests run the very same loader and forward pass as the real model
//! without a download.

use std::collections::HashMap;
use std::io::{Cursor, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::QTensor;
use candle_core::Device;

use crate::error::{GpuError, Result};
use crate::model::config::LlamaConfig;

/// Upper bounds on what a GGUF header may declare, checked before anything is
/// allocated from it: a hostile header must get a typed error
/// ([`GpuError::GgufLimit`]), never a multi-terabyte allocation, an overflow or
/// an abort. Generous for Llama-family models (Llama 3.1 405B: 126 blocks,
/// 16 384 hidden, 53 248 MLP, 128 Ki context, 128 Ki vocabulary).
pub mod limits {
    /// `llama.context_length` (rotary tables are sized by it).
    pub const MAX_CONTEXT_LENGTH: usize = 1 << 17;
    /// `llama.block_count`.
    pub const MAX_BLOCK_COUNT: usize = 1024;
    /// `llama.embedding_length`.
    pub const MAX_EMBEDDING_LENGTH: usize = 1 << 16;
    /// `llama.feed_forward_length`.
    pub const MAX_FEED_FORWARD_LENGTH: usize = 1 << 18;
    /// `llama.attention.head_count(_kv)`.
    pub const MAX_HEAD_COUNT: usize = 1024;
    /// Vocabulary size.
    pub const MAX_VOCAB_SIZE: usize = 1 << 22;
    /// Bytes of one tensor's data (it must also lie inside the file).
    pub const MAX_TENSOR_BYTES: u64 = 1 << 36;
}

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
    /// Parses the header from `reader`; `label` names it in errors. Every
    /// tensor's declared size is checked against [`limits::MAX_TENSOR_BYTES`]
    /// and the file's length here, before any tensor is read.
    pub fn from_reader(mut reader: R, label: &str) -> Result<Self> {
        let err = |msg: String| GpuError::Gguf {
            path: label.to_string(),
            msg,
        };
        let file_len = reader
            .seek(std::io::SeekFrom::End(0))
            .and_then(|n| reader.seek(std::io::SeekFrom::Start(0)).map(|_| n))
            .map_err(|e| err(format!("cannot seek: {e}")))?;
        // candle's parser bounds lengths by the file size, but a few header
        // values (e.g. `general.alignment = 0`) still make it panic: contain it.
        let content =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)))
                .map_err(|_| err("cannot parse header: the parser panicked".into()))?
                .map_err(|e| err(format!("cannot parse header: {e}")))?;
        check_tensor_sizes(&content, file_len, label)?;
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

    /// An integer metadata value that must not exceed `max` (checked before
    /// anything is sized by it).
    pub fn usize_at_most(&self, key: &str, max: usize) -> Result<usize> {
        let v = self.usize(key)?;
        if v > max {
            return Err(GpuError::GgufLimit {
                path: self.label.clone(),
                what: format!("metadata `{key}`"),
                value: v as u64,
                limit: max as u64,
            });
        }
        Ok(v)
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
        use limits::*;
        let hidden = self.usize_at_most("llama.embedding_length", MAX_EMBEDDING_LENGTH)?;
        let n_heads = self.usize_at_most("llama.attention.head_count", MAX_HEAD_COUNT)?;
        let vocab = match self.usize("llama.vocab_size") {
            Ok(_) => self.usize_at_most("llama.vocab_size", MAX_VOCAB_SIZE)?,
            Err(_) => self.strings("tokenizer.ggml.tokens")?.len(),
        };
        if vocab > MAX_VOCAB_SIZE {
            return Err(GpuError::GgufLimit {
                path: self.label.clone(),
                what: "vocabulary size".into(),
                value: vocab as u64,
                limit: MAX_VOCAB_SIZE as u64,
            });
        }
        let head_dim = hidden.checked_div(n_heads).unwrap_or(0);
        let n_kv_heads = match self.usize("llama.attention.head_count_kv") {
            Ok(_) => self.usize_at_most("llama.attention.head_count_kv", MAX_HEAD_COUNT)?,
            Err(_) => n_heads,
        };
        let max_seq_len = match self.usize("llama.context_length") {
            Ok(_) => self.usize_at_most("llama.context_length", MAX_CONTEXT_LENGTH)?,
            Err(_) => 4096,
        };
        let config = LlamaConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self
                .usize_at_most("llama.feed_forward_length", MAX_FEED_FORWARD_LENGTH)?,
            n_layers: self.usize_at_most("llama.block_count", MAX_BLOCK_COUNT)?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_theta: self.f64("llama.rope.freq_base").unwrap_or(10_000.0) as f32,
            rms_norm_eps: self.f64("llama.attention.layer_norm_rms_epsilon")?,
            max_seq_len,
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

/// Checks every tensor's declared size with overflow-checked arithmetic: at
/// most [`limits::MAX_TENSOR_BYTES`] and inside the file.
fn check_tensor_sizes(content: &Content, file_len: u64, label: &str) -> Result<()> {
    let limit = |what: String, value: u64, limit: u64| GpuError::GgufLimit {
        path: label.to_string(),
        what,
        value,
        limit,
    };
    for (name, info) in &content.tensor_infos {
        let elems = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let block = info.ggml_dtype.block_size() as u64;
        let bytes = elems
            .filter(|e| e % block == 0)
            .and_then(|e| (e / block).checked_mul(info.ggml_dtype.type_size() as u64));
        let Some(bytes) = bytes else {
            return Err(GpuError::Gguf {
                path: label.to_string(),
                msg: format!(
                    "tensor `{name}`: shape {:?} overflows or is not a whole number of {:?} blocks",
                    info.shape.dims(),
                    info.ggml_dtype
                ),
            });
        };
        if bytes > limits::MAX_TENSOR_BYTES {
            return Err(limit(
                format!("tensor `{name}` data size in bytes"),
                bytes,
                limits::MAX_TENSOR_BYTES,
            ));
        }
        let start = content.tensor_data_offset.saturating_add(info.offset);
        let room = file_len.saturating_sub(start);
        if bytes > room {
            return Err(limit(
                format!("tensor `{name}` data size (bytes at offset {start})"),
                bytes,
                room,
            ));
        }
    }
    Ok(())
}

/// A GGUF (in memory) of a random-initialised tiny Llama ([`LlamaConfig::tiny`]);
/// see [`crate::model::random`].
pub fn tiny_gguf(seed: u64) -> Vec<u8> {
    crate::model::random::random_gguf(crate::model::random::RandomArch::Tiny, seed)
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

    /// A GGUF v3 header written by hand: `kvs` as (key, u32 value), `tensors`
    /// as (name, dims innermost first, ggml type id, offset).
    fn hostile(kvs: &[(&str, u32)], tensors: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        let s = |b: &mut Vec<u8>, x: &str| {
            b.extend_from_slice(&(x.len() as u64).to_le_bytes());
            b.extend_from_slice(x.as_bytes());
        };
        for (k, v) in kvs {
            s(&mut b, k);
            b.extend_from_slice(&4u32.to_le_bytes()); // u32
            b.extend_from_slice(&v.to_le_bytes());
        }
        for (name, dims, ty, off) in tensors {
            s(&mut b, name);
            b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in *dims {
                b.extend_from_slice(&d.to_le_bytes());
            }
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
        }
        b.resize(b.len().div_ceil(32) * 32 + 64, 0);
        b
    }

    #[test]
    fn hostile_tensor_sizes_are_refused_before_allocation() {
        // 2^40 × 2^40 × 2^40 elements: the product overflows u64.
        let e = GgufFile::from_bytes(
            hostile(&[], &[("x", &[1 << 40, 1 << 40, 1 << 40], 0, 0)]),
            "h",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("overflows"), "{e}");
        // 2^36 F32 elements = 256 GiB: over the limit.
        let e = GgufFile::from_bytes(hostile(&[], &[("x", &[1 << 18, 1 << 18], 0, 0)]), "h")
            .err()
            .unwrap();
        assert!(matches!(e, GpuError::GgufLimit { .. }), "{e}");
        // 4 MiB declared in a file of a few bytes.
        let e = GgufFile::from_bytes(hostile(&[], &[("x", &[1024, 1024], 0, 0)]), "h")
            .err()
            .unwrap();
        assert!(
            matches!(e, GpuError::GgufLimit { ref what, .. } if what.contains("`x`")),
            "{e}"
        );
        // An offset past the end.
        let e = GgufFile::from_bytes(hostile(&[], &[("x", &[4], 0, 1 << 60)]), "h")
            .err()
            .unwrap();
        assert!(matches!(e, GpuError::GgufLimit { .. }), "{e}");
        // A zero alignment makes the parser divide by zero: an error, not a panic.
        let e = GgufFile::from_bytes(hostile(&[("general.alignment", 0)], &[]), "h")
            .err()
            .unwrap();
        assert!(e.to_string().contains("GGUF h"), "{e}");
    }

    #[test]
    fn hostile_hyper_parameters_are_refused_before_allocation() {
        use candle_core::quantized::gguf_file::Value;
        for (key, value) in [
            ("llama.context_length", u32::MAX),
            ("llama.block_count", 1 << 30),
            ("llama.embedding_length", 1 << 30),
            ("llama.feed_forward_length", u32::MAX),
            ("llama.attention.head_count", 1 << 20),
            ("llama.vocab_size", u32::MAX),
        ] {
            let mut g = GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap();
            g.content.metadata.insert(key.into(), Value::U32(value));
            let e = g.llama_config().unwrap_err();
            match &e {
                GpuError::GgufLimit { what, value: v, .. } => {
                    assert!(what.contains(key), "{e}");
                    assert_eq!(*v, value as u64);
                }
                other => panic!("{key}: expected a limit error, got {other}"),
            }
            // And the model loader stops there too.
            let mut g2 = GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap();
            g2.content.metadata.insert(key.into(), Value::U32(value));
            let r = crate::model::Llama::from_gguf(
                &mut g2,
                &Device::Cpu,
                crate::model::WeightLayout::uniform(crate::model::WeightFormat::F32),
            );
            assert!(matches!(r, Err(GpuError::GgufLimit { .. })), "{key}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let e = GgufFile::from_bytes(vec![1, 2, 3, 4, 5], "junk")
            .err()
            .unwrap();
        assert!(e.to_string().contains("junk"));
    }
}
