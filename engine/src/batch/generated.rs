//! The tokens a running request has generated so far.
//!
//! A real backend's tokens are kept for the caller (the answer's text). A
//! backend whose tokens are placeholders ([`crate::backend::Backend::produces_tokens`]
//! is false: the modeled one) only needs their count and the last one, so
//! nothing is written per token and no per-request buffer grows; the
//! finished request still carries one placeholder `0` per generated token.

/// Generated tokens, kept or only counted.
#[derive(Debug)]
pub(crate) struct GeneratedTokens {
    kept: Option<Vec<u32>>,
    count: usize,
    last: u32,
}

/// Most output tokens a kept list reserves room for when the request starts.
const MAX_RESERVED_TOKENS: usize = 4096;

impl GeneratedTokens {
    /// The first token of a request that may generate `output_len`; `keep`
    /// keeps every token, otherwise only the count and the last.
    pub(crate) fn first(token: u32, output_len: usize, keep: bool) -> Self {
        let kept = keep.then(|| {
            // Room for every token up front: one allocation per request
            // instead of a regrowth every few iterations.
            let mut v = Vec::with_capacity(output_len.clamp(1, MAX_RESERVED_TOKENS));
            v.push(token);
            v
        });
        GeneratedTokens {
            kept,
            count: 1,
            last: token,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, token: u32) {
        if let Some(v) = &mut self.kept {
            v.push(token);
        }
        self.count += 1;
        self.last = token;
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    #[inline]
    pub(crate) fn last(&self) -> u32 {
        self.last
    }

    /// Every token, or one placeholder `0` per token when only counted.
    pub(crate) fn into_tokens(self) -> Vec<u32> {
        self.kept.unwrap_or_else(|| vec![0; self.count])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_and_counted_agree_on_length_and_last() {
        let mut kept = GeneratedTokens::first(7, 3, true);
        let mut counted = GeneratedTokens::first(7, 3, false);
        for t in [8, 9] {
            kept.push(t);
            counted.push(t);
        }
        assert_eq!((kept.len(), kept.last()), (3, 9));
        assert_eq!((counted.len(), counted.last()), (3, 9));
        assert_eq!(kept.into_tokens(), vec![7, 8, 9]);
        assert_eq!(counted.into_tokens(), vec![0, 0, 0]);
    }
}
