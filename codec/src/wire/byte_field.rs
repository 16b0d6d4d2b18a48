//! A `Vec<u8>` field carried as bytes (`#[serde(with = "edgemu_codec::wire::byte_field")]`).
//!
//! Encoded exactly as `serde_bytes` encodes it (a length, then the bytes).
//! Decoding asks for borrowed bytes: the frame decoder lends a slice of the
//! frame and the field is one copy of it. (Through `serde_bytes` bincode
//! first zero-fills a buffer of the field's length and then copies into
//! it: two passes over every KV frame a host receives.) Decoders that
//! cannot lend give owned bytes or a sequence, which are taken as they are.

use serde::de::{Error, SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    serde_bytes::serialize(bytes, s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_bytes(BytesVisitor)
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bytes")
    }

    fn visit_borrowed_bytes<E: Error>(self, v: &'de [u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // Cap what a peer's claimed length may reserve up front.
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element()? {
            v.push(b);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Ours(#[serde(with = "super")] Vec<u8>);

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Theirs(#[serde(with = "serde_bytes")] Vec<u8>);

    #[test]
    fn same_bytes_as_serde_bytes_and_read_back_either_way() {
        let cfg = bincode::config::standard();
        for len in [0usize, 1, 127, 128, 1400, 70_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let ours = bincode::serde::encode_to_vec(Ours(data.clone()), cfg).unwrap();
            let theirs = bincode::serde::encode_to_vec(Theirs(data.clone()), cfg).unwrap();
            assert_eq!(ours, theirs, "{len} bytes");
            let (back, _): (Ours, usize) =
                bincode::serde::borrow_decode_from_slice(&theirs, cfg).unwrap();
            assert_eq!(back.0, data);
            let (back, _): (Ours, usize) = bincode::serde::decode_from_slice(&theirs, cfg).unwrap();
            assert_eq!(back.0, data);
            let json = serde_json::to_string(&Ours(data.clone())).unwrap();
            assert_eq!(
                serde_json::from_str::<Ours>(&json).unwrap().0,
                data,
                "a sequence"
            );
        }
    }
}
