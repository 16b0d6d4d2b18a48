//! GPT-2-style byte-level BPE, built from GGUF `tokenizer.ggml.*` metadata.
//!
//! Encoding: (1) control tokens (token type 3, e.g. `<|im_start|>`) found in the
//! text are emitted as their ids; (2) the rest is pre-tokenized like SmolLM2's
//! `tokenizer.json` — every digit is its own piece (`Digits(individual_digits)`),
//! then the GPT-2 split `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//! ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` (letters/numbers by `char::is_alphabetic` /
//! `is_numeric`); (3) each piece's UTF-8 bytes are mapped to the printable
//! byte-level alphabet (`Ġ` = space) and merged pairwise by merge rank.
//! Decoding concatenates token strings and maps the alphabet back to bytes.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::error::{Result, TokenizerError};
use crate::gguf::GgufMetadata;

/// GPT-2's reversible byte → printable char table.
pub fn byte_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        table[b as usize] = char::from_u32(c).unwrap_or('?');
    }
    table
}

/// A byte-level BPE tokenizer.
pub struct Tokenizer {
    vocab: HashMap<String, u32>,
    tokens: Vec<String>,
    ranks: HashMap<(String, String), usize>,
    specials: Vec<(String, u32)>,
    is_special: Vec<bool>,
    byte_enc: [char; 256],
    byte_dec: HashMap<char, u8>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    cache: RefCell<HashMap<String, Vec<u32>>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.tokens.len())
            .field("merges", &self.ranks.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

fn tok_err(g_label: &str, msg: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Tokenizer(format!("{g_label}: {msg}"))
}

impl Tokenizer {
    /// The tokenizer of the GGUF model file at `path` (only its metadata is
    /// read).
    pub fn from_model_file(path: &std::path::Path) -> Result<Self> {
        Self::from_gguf(&GgufMetadata::open(path)?)
    }

    /// Builds the tokenizer from `tokenizer.ggml.{model,tokens,merges,token_type,
    /// bos_token_id,eos_token_id}`.
    pub fn from_gguf(g: &GgufMetadata) -> Result<Self> {
        let model = g.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(tok_err(
                g.label(),
                format!("tokenizer model `{model}` is not gpt2 (byte-level BPE)"),
            ));
        }
        let tokens: Vec<String> = g
            .strings("tokenizer.ggml.tokens")?
            .into_iter()
            .map(str::to_string)
            .collect();
        let merges = g.strings("tokenizer.ggml.merges")?;
        let types = g.ints("tokenizer.ggml.token_type").unwrap_or_default();
        let mut ranks = HashMap::with_capacity(merges.len());
        for (i, m) in merges.iter().enumerate() {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| tok_err(g.label(), format!("merge {i} `{m}` has no space")))?;
            ranks.insert((a.to_string(), b.to_string()), i);
        }
        let vocab: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let mut is_special = vec![false; tokens.len()];
        let mut specials = Vec::new();
        for (i, ty) in types.iter().enumerate() {
            if *ty == 3 && i < tokens.len() {
                is_special[i] = true;
                specials.push((tokens[i].clone(), i as u32));
            }
        }
        // Longest first so that a special that prefixes another does not win.
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        let byte_enc = byte_to_unicode();
        let byte_dec = byte_enc
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect();
        let id = |k: &str| {
            g.usize(k)
                .ok()
                .map(|v| v as u32)
                .filter(|v| (*v as usize) < tokens.len())
        };
        Ok(Tokenizer {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
            vocab,
            tokens,
            ranks,
            specials,
            is_special,
            byte_enc,
            byte_dec,
            cache: RefCell::new(HashMap::new()),
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Beginning-of-sequence id (`<|im_start|>` for SmolLM2).
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence id (`<|im_end|>` for SmolLM2).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The id of an exact token string.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// Encodes text; control tokens written in the text become their ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let hit = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|p| (p, s.len(), *id)))
                .min_by_key(|(p, len, _)| (*p, usize::MAX - len));
            match hit {
                Some((p, len, id)) => {
                    self.encode_plain(&rest[..p], &mut out);
                    out.push(id);
                    rest = &rest[p + len..];
                }
                None => {
                    self.encode_plain(rest, &mut out);
                    break;
                }
            }
        }
        out
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        for piece in pretokenize(text) {
            if let Some(ids) = self.cache.borrow().get(piece) {
                out.extend_from_slice(ids);
                continue;
            }
            let ids = self.bpe(piece);
            out.extend_from_slice(&ids);
            let mut cache = self.cache.borrow_mut();
            if cache.len() > 50_000 {
                cache.clear();
            }
            cache.insert(piece.to_string(), ids);
        }
    }

    fn bpe(&self, piece: &str) -> Vec<u32> {
        let mut word: Vec<String> = piece
            .bytes()
            .map(|b| self.byte_enc[b as usize].to_string())
            .collect();
        loop {
            let mut best: Option<(usize, usize)> = None;
            for i in 0..word.len().saturating_sub(1) {
                if let Some(&r) = self.ranks.get(&(word[i].clone(), word[i + 1].clone())) {
                    if best.is_none_or(|(br, _)| r < br) {
                        best = Some((r, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            let merged = format!("{}{}", word[i], word[i + 1]);
            word[i] = merged;
            word.remove(i + 1);
        }
        word.iter()
            .flat_map(|s| match self.vocab.get(s) {
                Some(id) => vec![*id],
                // A byte the vocabulary lacks (SmolLM2 has no tokens for some
                // control bytes) becomes the unknown token.
                None => s
                    .chars()
                    .filter_map(|c| self.vocab.get(&c.to_string()).copied().or(self.unk))
                    .collect(),
            })
            .collect()
    }

    /// Decodes ids to text; control tokens are kept unless `skip_special`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids, skip_special)).into_owned()
    }

    /// The bytes `ids` stand for (byte-level BPE: the text is the
    /// concatenation of its tokens' bytes, and a token may end inside a
    /// UTF-8 character); control tokens are kept unless `skip_special`.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Vec<u8> {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(tok) = self.tokens.get(id as usize) else {
                continue;
            };
            if self.is_special[id as usize] {
                if !skip_special {
                    bytes.extend_from_slice(tok.as_bytes());
                }
                continue;
            }
            for c in tok.chars() {
                match self.byte_dec.get(&c) {
                    Some(b) => bytes.push(*b),
                    None => bytes.extend_from_slice(c.to_string().as_bytes()),
                }
            }
        }
        bytes
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        Class::Space
    } else if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Number
    } else {
        Class::Other
    }
}

/// Splits text into pre-tokens (digits isolated, then the GPT-2 pattern).
pub fn pretokenize(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_ascii_digit() {
            if start < i {
                gpt2_split(&text[start..i], &mut out);
            }
            out.push(&text[i..i + 1]);
            start = i + 1;
        }
    }
    if start < text.len() {
        gpt2_split(&text[start..], &mut out);
    }
    out
}

fn gpt2_split<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let n = chars.len();
    let at = |i: usize| if i < n { chars[i].0 } else { s.len() };
    let mut i = 0;
    while i < n {
        let c = chars[i].1;
        // Contractions.
        if c == '\'' && i + 1 < n {
            let rest = &s[at(i + 1)..];
            let m = ["re", "ve", "ll", "s", "t", "m", "d"]
                .iter()
                .find(|suf| rest.starts_with(*suf))
                .map(|suf| suf.len());
            if let Some(len) = m {
                out.push(&s[at(i)..at(i + 1) + len]);
                i += 1 + len; // all suffix chars are ASCII
                continue;
            }
        }
        let (first, cls) = if c == ' ' && i + 1 < n && class(chars[i + 1].1) != Class::Space {
            (i + 1, class(chars[i + 1].1))
        } else {
            (i, class(c))
        };
        if cls == Class::Space {
            let mut j = i;
            while j < n && class(chars[j].1) == Class::Space {
                j += 1;
            }
            // `\s+(?!\S)`: leave the last space to prefix the next word.
            let end = if j < n && j - i > 1 { j - 1 } else { j };
            out.push(&s[at(i)..at(end)]);
            i = end;
            continue;
        }
        let mut j = first + 1;
        while j < n && class(chars[j].1) == cls {
            j += 1;
        }
        out.push(&s[at(i)..at(j)]);
        i = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretokenize_like_gpt2_with_digits() {
        assert_eq!(
            pretokenize("Hello'Ve world 123\n\n  foo"),
            ["Hello", "'", "Ve", " world", " ", "1", "2", "3", "\n\n ", " foo"]
        );
        assert_eq!(pretokenize("it's  ok!!"), ["it", "'s", " ", " ok", "!!"]);
        assert_eq!(pretokenize("a  "), ["a", "  "]);
    }

    #[test]
    fn tiny_roundtrip_and_merges() {
        let t = crate::tiny::tokenizer();
        let text = "<|im_start|>user\nhello the world ünïcödé 42<|im_end|>";
        let ids = t.encode(text);
        assert_eq!(ids[0], 1);
        assert_eq!(*ids.last().unwrap(), 2);
        assert!(ids.contains(&t.token_id("hello").unwrap()));
        assert!(ids.contains(&t.token_id("Ġthe").unwrap()));
        assert_eq!(t.decode(&ids, false), text);
        assert_eq!(t.decode(&ids, true), "user\nhello the world ünïcödé 42");
    }
}
