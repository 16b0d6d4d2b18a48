//! The chat template.
//!
//! SmolLM2's GGUF carries a Jinja template in `tokenizer.chat_template` for the
//! ChatML format. Rather than a Jinja engine, this recognises ChatML and renders
//! it directly:
//!
//! ```text
//! <|im_start|>system\n{system}<|im_end|>\n      (default system prompt if the first
//! <|im_start|>{role}\n{content}<|im_end|>\n     message is not a system one)
//! <|im_start|>assistant\n                      (if add_generation_prompt)
//! ```
//!
//! The default system prompt is taken from the template text itself.

use crate::error::{Result, TokenizerError};

/// One chat turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A recognised chat template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// ChatML with an optional default system prompt.
    ChatMl { default_system: Option<String> },
}

impl ChatTemplate {
    /// Recognises the Jinja template from `tokenizer.chat_template`.
    pub fn from_jinja(template: &str) -> Result<Self> {
        if !template.contains("<|im_start|>") {
            return Err(TokenizerError::Tokenizer(
                "chat template is not ChatML (no <|im_start|>)".into(),
            ));
        }
        // The newline may be a real one or a Jinja `\n` escape.
        let default_system = ["<|im_start|>system\n", "<|im_start|>system\\n"]
            .iter()
            .find_map(|key| {
                let p = template.find(key)?;
                let rest = &template[p + key.len()..];
                rest.find("<|im_end|>").map(|e| rest[..e].to_string())
            });
        Ok(ChatTemplate::ChatMl { default_system })
    }

    /// Renders messages to the prompt text.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        let ChatTemplate::ChatMl { default_system } = self;
        let mut s = String::new();
        if let Some(sys) = default_system {
            if messages.first().is_none_or(|m| m.role != "system") {
                s.push_str(&format!("<|im_start|>system\n{sys}<|im_end|>\n"));
            }
        }
        for m in messages {
            s.push_str(&format!(
                "<|im_start|>{}\n{}<|im_end|>\n",
                m.role, m.content
            ));
        }
        if add_generation_prompt {
            s.push_str("<|im_start|>assistant\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn smollm2_template() {
        let t = ChatTemplate::from_jinja(SMOL).unwrap();
        let s = t.render(&[ChatMessage::new("user", "Hi")], true);
        assert_eq!(
            s,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let s = t.render(
            &[
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "Hi"),
            ],
            false,
        );
        assert_eq!(
            s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        );
    }
}
