//! Text ↔ token ids from GGUF metadata, and the chat template.

pub mod bpe;
pub mod chat;

pub use bpe::Tokenizer;
pub use chat::{ChatMessage, ChatTemplate};
