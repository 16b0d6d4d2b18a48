//! Text ↔ token ids for edgemu's model, without candle: the byte-level BPE
//! tokenizer and the chat template that a GGUF model file carries in its
//! metadata, the reader of that metadata, and where the model file is.
//!
//! - [`gguf`]: [`GgufMetadata`], the key–value header of a GGUF file (the
//!   tensors are the model crate's business).
//! - [`bpe`]: [`Tokenizer`], GPT-2-style byte-level BPE from
//!   `tokenizer.ggml.*`, SmolLM2's pre-tokenization.
//! - [`chat`]: [`ChatTemplate`], ChatML recognised from
//!   `tokenizer.chat_template`.
//! - [`locate`]: the model file (`EDGEMU_GGUF`, `EDGEMU_MODEL_DIR`,
//!   `<cache>/models/` in the project's cache directory, `edgemu_assets::cache`).
//! - [`tiny`]: the tiny tokenizer of the random test models.

pub mod bpe;
pub mod chat;
pub mod error;
pub mod gguf;
pub mod locate;
pub mod tiny;

pub use bpe::Tokenizer;
pub use chat::{ChatMessage, ChatTemplate};
pub use error::{Result, TokenizerError};
pub use gguf::{GgufMetadata, MetaValue};
pub use locate::{expected_model_path, model_path, resolve_model_path, GGUF_FILE_NAME};
