//! The bytes a run sends: a position-dependent pattern, so the receiver can
//! check that it reads the stream in order and intact (a transport that
//! reordered or corrupted data would fail the run, not just count bytes).

/// Period of the pattern (a prime, so it does not line up with packet sizes).
const PERIOD: u64 = 251;

/// Byte at stream offset `offset`.
fn byte_at(offset: u64) -> u8 {
    (offset % PERIOD) as u8
}

/// A source of the stream's bytes in chunks.
pub(crate) struct Pattern {
    buf: Vec<u8>,
}

impl Pattern {
    /// Chunks of up to `chunk` bytes.
    pub(crate) fn new(chunk: usize) -> Self {
        let len = chunk + PERIOD as usize;
        Pattern {
            buf: (0..len as u64).map(byte_at).collect(),
        }
    }

    /// The bytes at `offset..offset + len` (`len` capped at the chunk size).
    pub(crate) fn slice(&self, offset: u64, len: u64) -> &[u8] {
        let start = (offset % PERIOD) as usize;
        let max = self.buf.len() - PERIOD as usize;
        let n = usize::try_from(len).unwrap_or(usize::MAX).min(max);
        &self.buf[start..start + n]
    }
}

/// Whether `data` is what the stream holds at `offset`.
pub(crate) fn matches(offset: u64, data: &[u8]) -> bool {
    data.iter().zip(offset..).all(|(&b, off)| b == byte_at(off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_match_and_mismatch() {
        let p = Pattern::new(1000);
        let s = p.slice(1234, 5000);
        assert_eq!(s.len(), 1000);
        assert!(matches(1234, s));
        assert!(!matches(1235, s));
    }
}
