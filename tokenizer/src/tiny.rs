//! The tiny tokenizer of the random test models: 3 control tokens
//! (`<|endoftext|>`, `<|im_start|>` = BOS, `<|im_end|>` = EOS), the 256 byte
//! tokens and 10 merges (`hello`, ` the`, ` world`, …), with a ChatML template
//! without a default system prompt. `edgemu_gpu`'s random models write these
//! keys into their GGUF; tests that need only text ↔ ids build the tokenizer
//! from them directly, without a model.

use crate::bpe::{byte_to_unicode, Tokenizer};
use crate::chat::ChatTemplate;
use crate::gguf::{GgufMetadata, MetaValue};

/// The tiny ChatML template (`tokenizer.chat_template`).
pub const CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Tokens (3 controls, 256 bytes, one per merge), merges and token types.
pub fn vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = vec![
        "<|endoftext|>".into(),
        "<|im_start|>".into(),
        "<|im_end|>".into(),
    ];
    let mut types = vec![3, 3, 3];
    let enc = byte_to_unicode();
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

/// Size of the tiny vocabulary.
pub fn vocab_size() -> usize {
    vocab().0.len()
}

/// The `tokenizer.*` metadata keys, in the order a GGUF writes them, with
/// the vocabulary padded by plain `<|pad_N|>` tokens up to `vocab_size`.
pub fn metadata(vocab_size: usize) -> Vec<(&'static str, MetaValue)> {
    let (mut tokens, merges, mut types) = vocab();
    for i in tokens.len()..vocab_size {
        tokens.push(format!("<|pad_{i}|>"));
        types.push(1);
    }
    let strings = |v: Vec<String>| MetaValue::Array(v.into_iter().map(MetaValue::String).collect());
    vec![
        ("tokenizer.ggml.model", MetaValue::String("gpt2".into())),
        ("tokenizer.ggml.pre", MetaValue::String("smollm".into())),
        ("tokenizer.ggml.tokens", strings(tokens)),
        ("tokenizer.ggml.merges", strings(merges)),
        (
            "tokenizer.ggml.token_type",
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", MetaValue::U32(1)),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(2)),
        ("tokenizer.ggml.padding_token_id", MetaValue::U32(2)),
        (
            "tokenizer.chat_template",
            MetaValue::String(CHAT_TEMPLATE.into()),
        ),
    ]
}

/// The tiny tokenizer.
pub fn tokenizer() -> Tokenizer {
    let mut g = GgufMetadata::empty("tiny tokenizer");
    for (k, v) in metadata(vocab_size()) {
        g.insert(k, v);
    }
    // Built from constants in this file: a failure is a bug.
    Tokenizer::from_gguf(&g).expect("the tiny tokenizer's metadata")
}

/// The tiny chat template.
pub fn chat_template() -> ChatTemplate {
    ChatTemplate::from_jinja(CHAT_TEMPLATE).expect("the tiny template is ChatML")
}
