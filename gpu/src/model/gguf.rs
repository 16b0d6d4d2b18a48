//! GGUF reading (and writing of the tiny random test model).
//!
//! [`GgufFile`] wraps candle's `gguf_file::Content` (tensor descriptions and
//! data) and `edgemu_tokenizer`'s [`GgufMetadata`] (the key–value header, one
//! reader for the tokenizer and the model) with typed errors that name the
//! file and the key or tensor at fault. Llama hyper-parameters come from the
//! `llama.*` metadata keys: `block_count`, `embedding_length`,
//! `feed_forward_length`, `attention.head_count`, `attention.head_count_kv`,
//! `rope.freq_base`, `attention.layer_norm_rms_epsilon`, `context_length`; the
//! vocabulary size from `llama.vocab_size` or the token list.
//!
//! [`tiny_gguf`] writes a 2-layer random-initialised Llama into an in-memory
//! GGUF ([`crate::model::random`] also builds the full SmolLM2-135M shape), so
//! unit tests run the very same loader and forward pass as the real model
//! without a download.

use std::io::{Cursor, Read, Seek};
use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::QTensor;
use candle_core::Device;
use edgemu_tokenizer::GgufMetadata;

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
    content: Content,
    metadata: GgufMetadata,
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
        let metadata = GgufMetadata::from_reader(&mut reader, label)?;
        reader
            .seek(std::io::SeekFrom::Start(0))
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
            metadata,
            reader,
            label: label.to_string(),
        })
    }

    /// The file name or label used in errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The metadata (read by `edgemu_tokenizer`'s reader, the same for the
    /// tokenizer and the model).
    pub fn metadata(&self) -> &GgufMetadata {
        &self.metadata
    }

    fn meta_err(&self, key: &str, msg: impl Into<String>) -> GpuError {
        GpuError::Metadata {
            path: self.label.clone(),
            key: key.to_string(),
            msg: msg.into(),
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
        let m = &self.metadata;
        let arch = m.string("general.architecture")?;
        if arch != "llama" {
            return Err(self.meta_err(
                "general.architecture",
                format!("architecture `{arch}` is not supported (only llama)"),
            ));
        }
        use limits::*;
        let hidden = m.usize_at_most("llama.embedding_length", MAX_EMBEDDING_LENGTH)?;
        let n_heads = m.usize_at_most("llama.attention.head_count", MAX_HEAD_COUNT)?;
        let vocab = match m.usize("llama.vocab_size") {
            Ok(_) => m.usize_at_most("llama.vocab_size", MAX_VOCAB_SIZE)?,
            Err(_) => m.strings("tokenizer.ggml.tokens")?.len(),
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
        let n_kv_heads = match m.usize("llama.attention.head_count_kv") {
            Ok(_) => m.usize_at_most("llama.attention.head_count_kv", MAX_HEAD_COUNT)?,
            Err(_) => n_heads,
        };
        let max_seq_len = match m.usize("llama.context_length") {
            Ok(_) => m.usize_at_most("llama.context_length", MAX_CONTEXT_LENGTH)?,
            Err(_) => 4096,
        };
        let config = LlamaConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: m
                .usize_at_most("llama.feed_forward_length", MAX_FEED_FORWARD_LENGTH)?,
            n_layers: m.usize_at_most("llama.block_count", MAX_BLOCK_COUNT)?,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_theta: m.f64("llama.rope.freq_base").unwrap_or(10_000.0) as f32,
            rms_norm_eps: m.f64("llama.attention.layer_norm_rms_epsilon")?,
            max_seq_len,
        };
        config
            .validate()
            .map_err(|msg| self.meta_err("llama.*", msg))?;
        if let Ok(d) = m.usize("llama.rope.dimension_count") {
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
        use edgemu_tokenizer::MetaValue;
        for (key, value) in [
            ("llama.context_length", u32::MAX),
            ("llama.block_count", 1 << 30),
            ("llama.embedding_length", 1 << 30),
            ("llama.feed_forward_length", u32::MAX),
            ("llama.attention.head_count", 1 << 20),
            ("llama.vocab_size", u32::MAX),
        ] {
            let mut g = GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap();
            g.metadata.insert(key, MetaValue::U32(value));
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
            g2.metadata.insert(key, MetaValue::U32(value));
            let r = crate::model::Llama::from_gguf(
                &mut g2,
                &Device::Cpu,
                crate::model::WeightLayout::uniform(crate::model::WeightFormat::F32),
            );
            assert!(matches!(r, Err(GpuError::GgufLimit { .. })), "{key}");
        }
    }

    /// The tokenizer crate's metadata reader and candle's parser agree on
    /// every key of the tiny model and, where it is present, the real file.
    #[test]
    fn metadata_reader_agrees_with_candle() {
        use candle_core::quantized::gguf_file::Value;
        use edgemu_tokenizer::MetaValue;
        fn same(a: &Value, b: &MetaValue) -> bool {
            match (a, b) {
                (Value::U8(x), MetaValue::U8(y)) => x == y,
                (Value::I8(x), MetaValue::I8(y)) => x == y,
                (Value::U16(x), MetaValue::U16(y)) => x == y,
                (Value::I16(x), MetaValue::I16(y)) => x == y,
                (Value::U32(x), MetaValue::U32(y)) => x == y,
                (Value::I32(x), MetaValue::I32(y)) => x == y,
                (Value::U64(x), MetaValue::U64(y)) => x == y,
                (Value::I64(x), MetaValue::I64(y)) => x == y,
                (Value::F32(x), MetaValue::F32(y)) => x.to_bits() == y.to_bits(),
                (Value::F64(x), MetaValue::F64(y)) => x.to_bits() == y.to_bits(),
                (Value::Bool(x), MetaValue::Bool(y)) => x == y,
                (Value::String(x), MetaValue::String(y)) => x == y,
                (Value::Array(x), MetaValue::Array(y)) => {
                    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
                }
                _ => false,
            }
        }
        fn check<R: Read + Seek>(g: &GgufFile<R>) {
            let ours = g.metadata().values();
            assert_eq!(ours.len(), g.content.metadata.len(), "{}", g.label());
            for (k, v) in &g.content.metadata {
                assert!(same(v, &ours[k]), "{}: key {k}", g.label());
            }
        }
        check(&GgufFile::from_bytes(tiny_gguf(1), "tiny").unwrap());
        match edgemu_tokenizer::model_path() {
            Ok(p) => check(&GgufFile::open(&p).unwrap()),
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "CI must have the model: {e}"
                );
                eprintln!("real file skipped: {e}");
            }
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
