//! GGUF metadata: the key–value header of a GGUF file, read without the
//! tensors.
//!
//! A GGUF file (spec: `ggml/docs/gguf.md`) starts with the magic `GGUF`, a
//! version (1, 2 or 3), the tensor count, the metadata count and then the
//! metadata entries (key string, value type, value); tensor descriptions and
//! data follow and are not read here (the model crate reads them). Lengths
//! are `u32` in version 1 and `u64` after it.
//!
//! Values are read exactly as candle's GGUF parser reads them, so the
//! tokenizer and the model see the same metadata: strings drop trailing NUL
//! bytes and invalid UTF-8 is replaced (`from_utf8_lossy`), and a repeated key
//! keeps its last value. A hostile header is refused with a typed error
//! before anything is allocated from it: a string or array may not be longer
//! than the bytes left in the file (nor than 2^30), arrays nest at most 64
//! deep, and the declared entry counts must fit in the file at their
//! smallest encoding.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Result, TokenizerError};

/// Longest string and array (elements), as llama.cpp and candle cap them.
const MAX_LENGTH: u64 = 1 << 30;
/// Deepest nesting of arrays.
const MAX_DEPTH: usize = 64;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    /// The value as an integer, whatever its width.
    fn integer(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(x) => x.into(),
            MetaValue::I8(x) => x.into(),
            MetaValue::U16(x) => x.into(),
            MetaValue::I16(x) => x.into(),
            MetaValue::U32(x) => x.into(),
            MetaValue::I32(x) => x.into(),
            MetaValue::U64(x) => x.into(),
            MetaValue::I64(x) => x.into(),
            _ => return None,
        })
    }
}

/// The metadata of one GGUF file (or buffer).
#[derive(Debug, Clone)]
pub struct GgufMetadata {
    label: String,
    values: HashMap<String, MetaValue>,
}

/// A reader that knows how many bytes are left.
struct Bounded<'a, R> {
    reader: &'a mut R,
    left: u64,
    long_lengths: bool,
    label: &'a str,
}

impl<R: Read> Bounded<'_, R> {
    fn err(&self, msg: impl Into<String>) -> TokenizerError {
        TokenizerError::Gguf {
            path: self.label.to_string(),
            msg: msg.into(),
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.reader
            .read_exact(&mut b)
            .map_err(|e| self.err(format!("cannot parse header: {e}")))?;
        self.left = self.left.saturating_sub(N as u64);
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32> {
        self.bytes().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.bytes().map(u64::from_le_bytes)
    }

    /// A length: `u32` in version 1, `u64` after it.
    fn length(&mut self) -> Result<u64> {
        if self.long_lengths {
            self.u64()
        } else {
            self.u32().map(u64::from)
        }
    }

    fn length_size(&self) -> u64 {
        if self.long_lengths {
            8
        } else {
            4
        }
    }

    fn string(&mut self) -> Result<String> {
        let len = self.length()?;
        if len > MAX_LENGTH || len > self.left {
            return Err(self.err(format!(
                "cannot parse header: string length {len} exceeds the {} bytes left",
                self.left.min(MAX_LENGTH)
            )));
        }
        let mut v = vec![0u8; len as usize];
        self.reader
            .read_exact(&mut v)
            .map_err(|e| self.err(format!("cannot parse header: {e}")))?;
        self.left -= len;
        while v.last() == Some(&0) {
            v.pop();
        }
        Ok(String::from_utf8_lossy(&v).into_owned())
    }

    /// Smallest encoding of one value of type `ty`, bytes.
    fn min_size(&self, ty: u32) -> u64 {
        match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 => self.length_size(),
            9 => 4 + self.length_size(),
            _ => 8,
        }
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue> {
        if depth > MAX_DEPTH {
            return Err(self.err(format!(
                "cannot parse header: arrays nest deeper than {MAX_DEPTH}"
            )));
        }
        Ok(match ty {
            0 => MetaValue::U8(u8::from_le_bytes(self.bytes()?)),
            1 => MetaValue::I8(i8::from_le_bytes(self.bytes()?)),
            2 => MetaValue::U16(u16::from_le_bytes(self.bytes()?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.bytes()?)),
            4 => MetaValue::U32(self.u32()?),
            5 => MetaValue::I32(i32::from_le_bytes(self.bytes()?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.bytes()?)),
            7 => match u8::from_le_bytes(self.bytes()?) {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => return Err(self.err(format!("cannot parse header: bool value {b}"))),
            },
            8 => MetaValue::String(self.string()?),
            9 => {
                let elem = self.u32()?;
                let len = self.length()?;
                let needed = len.saturating_mul(self.min_size(elem));
                if len > MAX_LENGTH || needed > self.left {
                    return Err(self.err(format!(
                        "cannot parse header: an array of {len} elements needs at least \
                         {needed} bytes, {} are left",
                        self.left
                    )));
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(elem, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            10 => MetaValue::U64(self.u64()?),
            11 => MetaValue::I64(i64::from_le_bytes(self.bytes()?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.bytes()?)),
            other => {
                return Err(self.err(format!("cannot parse header: value type {other}")));
            }
        })
    }
}

impl GgufMetadata {
    /// Reads the metadata of the GGUF file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let f = std::fs::File::open(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_reader(&mut std::io::BufReader::new(f), &path.display().to_string())
    }

    /// Reads the metadata of a GGUF held in memory.
    pub fn from_bytes(bytes: &[u8], label: &str) -> Result<Self> {
        Self::from_reader(&mut std::io::Cursor::new(bytes), label)
    }

    /// Reads the metadata of the GGUF that starts at `reader`'s position;
    /// `label` names it in errors. Leaves the reader after the metadata.
    pub fn from_reader<R: Read + Seek>(reader: &mut R, label: &str) -> Result<Self> {
        let err = |msg: String| TokenizerError::Gguf {
            path: label.to_string(),
            msg,
        };
        let start = reader
            .stream_position()
            .map_err(|e| err(format!("cannot seek: {e}")))?;
        let end = reader
            .seek(SeekFrom::End(0))
            .and_then(|n| reader.seek(SeekFrom::Start(start)).map(|_| n))
            .map_err(|e| err(format!("cannot seek: {e}")))?;
        let mut r = Bounded {
            reader,
            left: end.saturating_sub(start),
            long_lengths: true,
            label,
        };
        let magic = r.bytes::<4>()?;
        if &magic != b"GGUF" && &magic != b"FUGG" {
            return Err(err(format!(
                "cannot parse header: not a GGUF file (magic {magic:02x?})"
            )));
        }
        let version = r.u32()?;
        r.long_lengths = match version {
            1 => false,
            2 | 3 => true,
            v => return Err(err(format!("cannot parse header: GGUF version {v}"))),
        };
        let tensors = r.length()?;
        let entries = r.length()?;
        // Each entry takes at least a key length, a type and one byte; each
        // tensor description a name length, a rank, a type and an offset.
        let needed = entries
            .saturating_mul(r.length_size() + 5)
            .saturating_add(tensors.saturating_mul(r.length_size() + 16));
        if tensors > MAX_LENGTH || entries > MAX_LENGTH || needed > r.left {
            return Err(err(format!(
                "cannot parse header: {tensors} tensors and {entries} metadata entries need \
                 at least {needed} bytes, {} are left",
                r.left
            )));
        }
        let mut values = HashMap::new();
        for _ in 0..entries {
            let key = r.string()?;
            let ty = r.u32()?;
            let value = r.value(ty, 0)?;
            values.insert(key, value);
        }
        Ok(GgufMetadata {
            label: label.to_string(),
            values,
        })
    }

    /// No keys yet; `label` names it in errors.
    pub fn empty(label: &str) -> Self {
        GgufMetadata {
            label: label.to_string(),
            values: HashMap::new(),
        }
    }

    /// The file name or label used in errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Every key and value.
    pub fn values(&self) -> &HashMap<String, MetaValue> {
        &self.values
    }

    /// Sets a key (a value read later, or a test's hostile value).
    pub fn insert(&mut self, key: impl Into<String>, value: MetaValue) {
        self.values.insert(key.into(), value);
    }

    fn meta_err(&self, key: &str, msg: impl Into<String>) -> TokenizerError {
        TokenizerError::Metadata {
            path: self.label.clone(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }

    /// A metadata value, or an error naming the key.
    pub fn value(&self, key: &str) -> Result<&MetaValue> {
        self.values
            .get(key)
            .ok_or_else(|| self.meta_err(key, "missing"))
    }

    /// An integer metadata value (any integer width).
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.value(key)?;
        let n = v
            .integer()
            .ok_or_else(|| self.meta_err(key, format!("expected an integer, got {v:?}")))?;
        usize::try_from(n).map_err(|_| self.meta_err(key, format!("{n} is out of range")))
    }

    /// An integer metadata value that must not exceed `max` (checked before
    /// anything is sized by it).
    pub fn usize_at_most(&self, key: &str, max: usize) -> Result<usize> {
        let v = self.usize(key)?;
        if v > max {
            return Err(TokenizerError::GgufLimit {
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
            MetaValue::F32(x) => Ok(*x as f64),
            MetaValue::F64(x) => Ok(*x),
            other => Err(self.meta_err(key, format!("expected a float, got {other:?}"))),
        }
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Result<&str> {
        match self.value(key)? {
            MetaValue::String(s) => Ok(s),
            other => Err(self.meta_err(key, format!("expected a string, got {other:?}"))),
        }
    }

    /// An array of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<&str>> {
        match self.value(key)? {
            MetaValue::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    MetaValue::String(s) => Ok(s.as_str()),
                    other => Err(self.meta_err(key, format!("element {i} is {other:?}"))),
                })
                .collect(),
            other => Err(self.meta_err(key, format!("expected an array, got {other:?}"))),
        }
    }

    /// An array of integers.
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        match self.value(key)? {
            MetaValue::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    // As an `as` cast: a u64 above i64::MAX wraps.
                    v.integer()
                        .map(|n| n as i64)
                        .ok_or_else(|| self.meta_err(key, format!("element {i} is {v:?}")))
                })
                .collect(),
            other => Err(self.meta_err(key, format!("expected an array, got {other:?}"))),
        }
    }
}

/// Writes a GGUF of metadata only (no tensors), version 3: for tests of
/// the reader and of what is built from metadata.
pub fn metadata_only_gguf(entries: &[(&str, MetaValue)]) -> Vec<u8> {
    fn string(b: &mut Vec<u8>, s: &str) {
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    fn type_id(v: &MetaValue) -> u32 {
        match v {
            MetaValue::U8(_) => 0,
            MetaValue::I8(_) => 1,
            MetaValue::U16(_) => 2,
            MetaValue::I16(_) => 3,
            MetaValue::U32(_) => 4,
            MetaValue::I32(_) => 5,
            MetaValue::F32(_) => 6,
            MetaValue::Bool(_) => 7,
            MetaValue::String(_) => 8,
            MetaValue::Array(_) => 9,
            MetaValue::U64(_) => 10,
            MetaValue::I64(_) => 11,
            MetaValue::F64(_) => 12,
        }
    }
    fn value(b: &mut Vec<u8>, v: &MetaValue) {
        match v {
            MetaValue::U8(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I8(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::U16(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I16(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::U32(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I32(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::U64(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I64(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::F32(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::F64(x) => b.extend_from_slice(&x.to_le_bytes()),
            MetaValue::Bool(x) => b.push(u8::from(*x)),
            MetaValue::String(s) => string(b, s),
            MetaValue::Array(items) => {
                let elem = items.first().map_or(4, type_id);
                b.extend_from_slice(&elem.to_le_bytes());
                b.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for i in items {
                    value(b, i);
                }
            }
        }
    }
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (k, v) in entries {
        string(&mut b, k);
        b.extend_from_slice(&type_id(v).to_le_bytes());
        value(&mut b, v);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_reads_back() {
        let entries = vec![
            ("a.u8", MetaValue::U8(7)),
            ("a.i8", MetaValue::I8(-7)),
            ("a.u16", MetaValue::U16(700)),
            ("a.i16", MetaValue::I16(-700)),
            ("a.u32", MetaValue::U32(70_000)),
            ("a.i32", MetaValue::I32(-70_000)),
            ("a.u64", MetaValue::U64(1 << 40)),
            ("a.i64", MetaValue::I64(-(1 << 40))),
            ("a.f32", MetaValue::F32(0.5)),
            ("a.f64", MetaValue::F64(-2.25)),
            ("a.bool", MetaValue::Bool(true)),
            ("a.str", MetaValue::String("héllo".into())),
            (
                "a.strs",
                MetaValue::Array(vec![
                    MetaValue::String("x".into()),
                    MetaValue::String("y z".into()),
                ]),
            ),
            (
                "a.ints",
                MetaValue::Array(vec![MetaValue::I32(3), MetaValue::I32(-1)]),
            ),
        ];
        let m = GgufMetadata::from_bytes(&metadata_only_gguf(&entries), "t").unwrap();
        for (k, v) in &entries {
            assert_eq!(m.value(k).unwrap(), v, "{k}");
        }
        assert_eq!(m.usize("a.u16").unwrap(), 700);
        assert_eq!(m.usize("a.u64").unwrap(), 1 << 40);
        assert!(m.usize("a.i8").is_err(), "negative");
        assert_eq!(m.f64("a.f32").unwrap(), 0.5);
        assert_eq!(m.string("a.str").unwrap(), "héllo");
        assert_eq!(m.strings("a.strs").unwrap(), ["x", "y z"]);
        assert_eq!(m.ints("a.ints").unwrap(), [3, -1]);
        let e = m.string("a.u8").unwrap_err().to_string();
        assert_eq!(e, "GGUF t: metadata `a.u8`: expected a string, got U8(7)");
        let e = m.value("nope").unwrap_err().to_string();
        assert!(e.contains("`nope`") && e.contains("missing"), "{e}");
        assert!(matches!(
            m.usize_at_most("a.u32", 100),
            Err(TokenizerError::GgufLimit { value: 70_000, .. })
        ));
    }

    #[test]
    fn trailing_nuls_are_dropped_and_bad_utf8_replaced() {
        let mut b = metadata_only_gguf(&[("k", MetaValue::String("ab\0\0".into()))]);
        // Turn `b` into an invalid UTF-8 byte: the length stays the same.
        let at = b.len() - 3;
        b[at] = 0xff;
        let m = GgufMetadata::from_bytes(&b, "t").unwrap();
        assert_eq!(m.string("k").unwrap(), "a\u{fffd}");
    }

    #[test]
    fn version_1_has_32_bit_lengths() {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"ok");
        let m = GgufMetadata::from_bytes(&b, "v1").unwrap();
        assert_eq!(m.string("k").unwrap(), "ok");
    }

    #[test]
    fn hostile_headers_are_errors_before_allocation() {
        let good = metadata_only_gguf(&[("k", MetaValue::String("v".into()))]);
        // Garbage, a wrong magic, an unknown version, a truncated file.
        for (bytes, what) in [
            (vec![1u8, 2, 3], "short"),
            (b"NOPE\x03\0\0\0".to_vec(), "magic"),
            ([&b"GGUF\x09\0\0\0"[..], &[0u8; 16]].concat(), "version"),
            (good[..good.len() - 1].to_vec(), "truncated"),
        ] {
            let e = GgufMetadata::from_bytes(&bytes, "h").unwrap_err();
            assert!(e.to_string().starts_with("GGUF h:"), "{what}: {e}");
        }
        // A string, an array and entry counts longer than the file.
        let mut b = metadata_only_gguf(&[("k", MetaValue::String("v".into()))]);
        let len_at = b.len() - 1 - 8;
        b[len_at..len_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(GgufMetadata::from_bytes(&b, "h").is_err());
        let mut b = metadata_only_gguf(&[("k", MetaValue::Array(vec![MetaValue::U64(1)]))]);
        let len_at = b.len() - 8 - 8;
        b[len_at..len_at + 8].copy_from_slice(&(1u64 << 29).to_le_bytes());
        let e = GgufMetadata::from_bytes(&b, "h").unwrap_err().to_string();
        assert!(e.contains("array of 536870912 elements"), "{e}");
        let mut b = good.clone();
        b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(GgufMetadata::from_bytes(&b, "h").is_err());
        // Arrays of arrays 100 deep.
        let mut b = metadata_only_gguf(&[]);
        b[16..24].copy_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&9u32.to_le_bytes());
        for _ in 0..100 {
            b.extend_from_slice(&9u32.to_le_bytes());
            b.extend_from_slice(&1u64.to_le_bytes());
        }
        b.extend_from_slice(&[0u8; 64]);
        let e = GgufMetadata::from_bytes(&b, "h").unwrap_err().to_string();
        assert!(e.contains("nest"), "{e}");
    }
}
