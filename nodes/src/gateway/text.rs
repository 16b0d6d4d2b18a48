//! Text ↔ tokens at the gateway. With the model's tokenizer (`model =
//! "smollm2"`), chat messages are rendered with its chat template, prompts
//! become their real token ids (a `backend = "real"` server prefills them)
//! and real generated tokens come back as text. Without one (`model =
//! "modeled"`), a prompt's length is estimated at one token per four bytes
//! of UTF-8 and each generated token is shown as a placeholder word: only
//! counts and timing are real then.

use edgemu_codec::openai::api::{ApiError, Prompt};
use edgemu_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

/// How the gateway tokenizes.
pub enum Codec {
    Model {
        tokenizer: Box<Tokenizer>,
        template: ChatTemplate,
    },
    Estimate,
}

/// A prompt ready to send: its token ids (empty when only estimated) and
/// its length.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    pub tokens: Vec<u32>,
    pub len: u32,
    /// The prompt as text: chat messages rendered (with the model's
    /// template, or as `role: content` lines without one); empty for a
    /// prompt of token ids.
    pub text: String,
}

/// Words a placeholder token is shown as (cycled by output index).
const PLACEHOLDER_WORDS: [&str; 8] = [
    " edge", " token", " model", " link", " server", " cell", " batch", " slot",
];

impl Codec {
    /// The tokenizer and chat template of the model file (`EDGEMU_GGUF`,
    /// `EDGEMU_MODEL_DIR` or the cache; `scripts/fetch-model.sh` puts it
    /// there). Read once, when the gateway starts, on its own HTTP thread
    /// (only the GGUF metadata; the reader bounds every length in it).
    pub fn smollm2() -> anyhow::Result<Codec> {
        use anyhow::Context;
        let path = edgemu_tokenizer::resolve_model_path(None)
            .context("the gateway's tokenizer (model = \"smollm2\")")?;
        let meta = edgemu_tokenizer::GgufMetadata::open(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let tokenizer = Tokenizer::from_gguf(&meta)
            .with_context(|| format!("the tokenizer in {}", path.display()))?;
        let template = ChatTemplate::from_jinja(
            meta.string("tokenizer.chat_template")
                .with_context(|| format!("the chat template in {}", path.display()))?,
        )
        .with_context(|| format!("the chat template in {}", path.display()))?;
        Ok(Codec::Model {
            tokenizer: Box::new(tokenizer),
            template,
        })
    }

    /// The prompt's tokens; an error for ids outside the vocabulary.
    pub fn encode(&self, prompt: &Prompt) -> Result<Encoded, ApiError> {
        let text = match (self, prompt) {
            (_, Prompt::Tokens(_)) => String::new(),
            (_, Prompt::Text(t)) => t.clone(),
            (Codec::Model { template, .. }, Prompt::Messages(m)) => {
                let msgs: Vec<ChatMessage> =
                    m.iter().map(|(r, c)| ChatMessage::new(r, c)).collect();
                template.render(&msgs, true)
            }
            (Codec::Estimate, Prompt::Messages(m)) => {
                let mut t: String = m.iter().map(|(r, c)| format!("{r}: {c}\n")).collect();
                t.push_str("assistant:");
                t
            }
        };
        let (tokens, len) = match (self, prompt) {
            (Codec::Model { tokenizer, .. }, Prompt::Tokens(ids)) => {
                let vocab = tokenizer.vocab_size();
                if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                    return Err(ApiError::bad_request(
                        format!("token id {bad} is outside the vocabulary (0..{vocab})"),
                        Some("prompt"),
                    ));
                }
                (ids.clone(), ids.len())
            }
            (Codec::Model { tokenizer, .. }, _) => {
                let ids = tokenizer.encode(&text);
                let n = ids.len();
                (ids, n)
            }
            (Codec::Estimate, Prompt::Tokens(ids)) => (Vec::new(), ids.len()),
            (Codec::Estimate, Prompt::Text(t)) => (Vec::new(), t.len().div_ceil(4)),
            // The role and the template's markers: about 4 tokens each.
            (Codec::Estimate, Prompt::Messages(m)) => (
                Vec::new(),
                m.iter()
                    .map(|(_, c)| c.len() + 16)
                    .sum::<usize>()
                    .div_ceil(4),
            ),
        };
        Ok(Encoded {
            tokens,
            len: len.clamp(1, u32::MAX as usize) as u32,
            text,
        })
    }
}

/// Turns one request's tokens into text as they arrive. Byte-level BPE
/// text is the concatenation of its tokens' bytes, so only the new tokens
/// are decoded, to bytes; the bytes of a character not yet complete (at
/// most 3) wait for the next tokens, and bytes that can never be UTF-8
/// show as U+FFFD, as a whole decode would show them.
pub struct Detokenizer<'a> {
    codec: &'a Codec,
    /// Bytes decoded but not shown yet: the start of a character.
    pending: Vec<u8>,
    count: usize,
}

impl<'a> Detokenizer<'a> {
    pub fn new(codec: &'a Codec) -> Self {
        Detokenizer {
            codec,
            pending: Vec::new(),
            count: 0,
        }
    }

    /// What is left when the output ends: a character cut short shows as
    /// U+FFFD, as in a decode of the whole output.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }

    /// The text the new `tokens` add (`pieces`: their text, when the
    /// server sent text rather than ids).
    pub fn push(&mut self, tokens: &[u32], placeholder: bool, pieces: &[String]) -> String {
        let start = self.count;
        self.count += tokens.len();
        if !pieces.is_empty() {
            return pieces.concat();
        }
        match self.codec {
            Codec::Model { tokenizer, .. } if !placeholder => {
                self.pending
                    .extend_from_slice(&tokenizer.decode_bytes(tokens, true));
                let mut text = String::new();
                loop {
                    match std::str::from_utf8(&self.pending) {
                        Ok(s) => {
                            text.push_str(s);
                            self.pending.clear();
                            break;
                        }
                        Err(e) => {
                            let valid = e.valid_up_to();
                            // The prefix was just checked to be UTF-8.
                            text.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                            match e.error_len() {
                                // A character cut short: wait for its rest.
                                None => {
                                    self.pending.drain(..valid);
                                    break;
                                }
                                // Bytes that are not UTF-8 whatever follows.
                                Some(bad) => {
                                    text.push('\u{FFFD}');
                                    self.pending.drain(..valid + bad);
                                }
                            }
                        }
                    }
                }
                text
            }
            _ => (start..self.count)
                .map(|i| PLACEHOLDER_WORDS[i % PLACEHOLDER_WORDS.len()])
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Codec {
        Codec::Model {
            tokenizer: Box::new(edgemu_tokenizer::tiny::tokenizer()),
            template: edgemu_tokenizer::tiny::chat_template(),
        }
    }

    #[test]
    fn estimated_lengths_are_a_token_per_four_bytes() {
        let c = Codec::Estimate;
        assert_eq!(c.encode(&Prompt::Text("abcdefghi".into())).unwrap().len, 3);
        assert_eq!(c.encode(&Prompt::Text("a".into())).unwrap().len, 1);
        assert_eq!(c.encode(&Prompt::Tokens(vec![5; 7])).unwrap().len, 7);
        let m = Prompt::Messages(vec![("user".into(), "x".repeat(16))]);
        let e = c.encode(&m).unwrap();
        assert_eq!((e.len, e.tokens.len()), (8, 0));
    }

    #[test]
    fn a_model_codec_sends_real_ids_and_streams_their_text_back() {
        let c = tiny();
        let Codec::Model { tokenizer, .. } = &c else {
            unreachable!()
        };
        let ids = tokenizer.encode("hello world");
        let e = c.encode(&Prompt::Text("hello world".into())).unwrap();
        assert_eq!(e.tokens, ids);
        assert_eq!(e.len as usize, ids.len());
        let chat = c
            .encode(&Prompt::Messages(vec![("user".into(), "hello".into())]))
            .unwrap();
        assert!(
            chat.len as usize > tokenizer.encode("hello").len(),
            "template adds markers"
        );
        let bad = c.encode(&Prompt::Tokens(vec![u32::MAX])).unwrap_err();
        assert!(
            bad.message.contains("outside the vocabulary"),
            "{}",
            bad.message
        );
        // Streaming the ids back one at a time gives the whole text.
        let mut d = Detokenizer::new(&c);
        let text: String = ids.iter().map(|&t| d.push(&[t], false, &[])).collect();
        assert_eq!(text, tokenizer.decode(&ids, true));
        // Characters of several bytes, whatever tokens they were cut into.
        let ids = tokenizer.encode("héllo 日本 ✓");
        let mut d = Detokenizer::new(&c);
        let text: String = ids.iter().map(|&t| d.push(&[t], false, &[])).collect();
        assert_eq!(text, tokenizer.decode(&ids, true));
        // Byte tokens, one per call, in runs that keep straddling
        // characters (more than 4 in a row), bytes that are never UTF-8,
        // and a character cut short at the end: the stream shows what a
        // decode of the whole output shows.
        let bytes: Vec<u8> = "日本語テキスト✓é"
            .bytes()
            .chain([0xff])
            .chain("😀".bytes())
            .chain([b'a', 0xe6, 0x97])
            .collect();
        let ids: Vec<u32> = bytes.iter().map(|&b| byte_token(tokenizer, b)).collect();
        let mut d = Detokenizer::new(&c);
        let mut text: String = ids.iter().map(|&t| d.push(&[t], false, &[])).collect();
        text.push_str(&d.finish());
        assert_eq!(text, tokenizer.decode(&ids, true));
        assert!(text.starts_with("日本語テキスト✓é\u{FFFD}😀a"), "{text}");
    }

    /// The id of the token that stands for byte `b` alone.
    fn byte_token(t: &Tokenizer, b: u8) -> u32 {
        (0..u32::MAX)
            .take(1 << 20)
            .find(|&id| t.decode_bytes(&[id], true) == [b])
            .unwrap_or_else(|| panic!("no token for byte {b:#x}"))
    }

    #[test]
    fn placeholder_tokens_become_one_word_each() {
        let c = tiny();
        let mut d = Detokenizer::new(&c);
        assert_eq!(d.push(&[0, 0], true, &[]), " edge token");
        assert_eq!(d.push(&[0], true, &[]), " model");
        assert_eq!(
            d.push(&[0, 0], false, &["Pa".into(), "ris".into()]),
            "Paris"
        );
        let e = Codec::Estimate;
        let mut d = Detokenizer::new(&e);
        assert_eq!(d.push(&[9], false, &[]), " edge");
    }
}
