//! Fixed-length token contexts from conversations.
//!
//! **How a context is formed.** A conversation's turns become chat messages
//! (`human`/`user` → `user`, `gpt`/… → `assistant`, `system` → `system`; see
//! [`Role::chat_role`](crate::Role::chat_role)) and are rendered with the model's
//! chat template exactly as the model crate renders a prompt
//! ([`ChatTemplate::render`], ChatML for SmolLM2: the default system prompt is
//! prepended when the first turn is not a system one; no generation prompt). The
//! text is tokenized with the model's tokenizer and the first
//! [`ContextConfig::tokens`] ids (1536 by default, the paper's truncation) are the
//! context. To bound tokenizer work, turns are added only until the rendered
//! text holds at least `8 × tokens` bytes, far more than `tokens` tokens need.
//!
//! **Short conversations.** A conversation whose rendering has fewer than
//! `tokens` tokens is skipped, never padded or concatenated with another one:
//! every context is one real conversation cut to exactly `tokens` tokens.
//! (A rendering with fewer bytes than `tokens` is skipped before tokenizing,
//! since every token covers at least one byte.)
//!
//! **Profiling and evaluation sets.** The conversation indices are shuffled
//! with ChaCha8 seeded by [`ContextConfig::seed`]; walking that order, each
//! eligible conversation goes to the profiling set until it holds
//! [`ContextConfig::profiling`] contexts, then to the evaluation set until it
//! holds [`ContextConfig::evaluation`]. The two sets are disjoint by
//! construction (no conversation in both), and the same seed and input give the
//! same sets bit for bit.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use edgemu_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

use crate::{Conversation, DataError, Result};

/// The paper's context length.
pub const DEFAULT_CONTEXT_TOKENS: usize = 1536;

/// How contexts are built and split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// Exact length of every context in tokens.
    pub tokens: usize,
    /// Size of the profiling set.
    pub profiling: usize,
    /// Size of the evaluation set.
    pub evaluation: usize,
    /// Seed of the shuffle that chooses both sets.
    pub seed: u64,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            tokens: DEFAULT_CONTEXT_TOKENS,
            profiling: 32,
            evaluation: 48,
            seed: 0,
        }
    }
}

/// One fixed-length context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The ShareGPT id of the conversation it was cut from.
    pub conversation_id: String,
    /// Exactly `ContextConfig::tokens` token ids.
    pub tokens: Vec<u32>,
}

/// The profiling and evaluation sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSets {
    pub profiling: Vec<Context>,
    pub evaluation: Vec<Context>,
}

/// The chat messages of a conversation.
pub fn chat_messages(conv: &Conversation) -> Vec<ChatMessage> {
    conv.turns
        .iter()
        .map(|t| ChatMessage::new(t.from.chat_role(), &t.text))
        .collect()
}

/// The first `tokens` token ids of `conv` rendered with `template`, or `None`
/// when the conversation is shorter than that (module docs).
pub fn context_of(
    conv: &Conversation,
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    tokens: usize,
) -> Option<Vec<u32>> {
    let messages = chat_messages(conv);
    let byte_budget = tokens.saturating_mul(8);
    let mut used = 0;
    let mut bytes = 0;
    while used < messages.len() && bytes < byte_budget {
        bytes += messages[used].content.len();
        used += 1;
    }
    let text = template.render(&messages[..used], false);
    if text.len() < tokens {
        return None;
    }
    let mut ids = tokenizer.encode(&text);
    if ids.len() < tokens {
        return None;
    }
    ids.truncate(tokens);
    Some(ids)
}

/// Builds the profiling and evaluation sets (module docs). Fails when fewer
/// than `profiling + evaluation` conversations are long enough.
pub fn build(
    conversations: &[Conversation],
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    config: &ContextConfig,
) -> Result<ContextSets> {
    if config.tokens == 0 {
        return Err(DataError::Contexts(
            "context length must be positive".into(),
        ));
    }
    let mut order: Vec<usize> = (0..conversations.len()).collect();
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(config.seed));
    let want = config.profiling + config.evaluation;
    let mut sets = ContextSets {
        profiling: Vec::with_capacity(config.profiling),
        evaluation: Vec::with_capacity(config.evaluation),
    };
    for i in order {
        if sets.profiling.len() + sets.evaluation.len() == want {
            break;
        }
        let conv = &conversations[i];
        let Some(tokens) = context_of(conv, tokenizer, template, config.tokens) else {
            continue;
        };
        let ctx = Context {
            conversation_id: conv.id.clone(),
            tokens,
        };
        if sets.profiling.len() < config.profiling {
            sets.profiling.push(ctx);
        } else {
            sets.evaluation.push(ctx);
        }
    }
    let got = sets.profiling.len() + sets.evaluation.len();
    if got < want {
        return Err(DataError::Contexts(format!(
            "only {got} of {} conversations reach {} tokens; {want} contexts \
             ({} profiling + {} evaluation) were asked for",
            conversations.len(),
            config.tokens,
            config.profiling,
            config.evaluation
        )));
    }
    Ok(sets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgemu_tokenizer::tiny;

    /// The tokenizer and template of the random test models.
    fn tiny() -> (Tokenizer, ChatTemplate) {
        (tiny::tokenizer(), tiny::chat_template())
    }

    #[test]
    fn contexts_have_exact_length_and_disjoint_sets() {
        let (tok, chat) = tiny();
        let convs = crate::builtin::conversations();
        let config = ContextConfig {
            tokens: 40,
            profiling: 2,
            evaluation: 2,
            seed: 3,
        };
        let sets = build(&convs, &tok, &chat, &config).unwrap();
        assert_eq!(sets.profiling.len(), 2);
        assert_eq!(sets.evaluation.len(), 2);
        for c in sets.profiling.iter().chain(&sets.evaluation) {
            assert_eq!(c.tokens.len(), 40);
        }
        for p in &sets.profiling {
            assert!(sets
                .evaluation
                .iter()
                .all(|e| e.conversation_id != p.conversation_id));
        }
        // Same seed, same sets; the context is the prefix of the whole rendering.
        assert_eq!(build(&convs, &tok, &chat, &config).unwrap(), sets);
        let conv = convs
            .iter()
            .find(|c| c.id == sets.profiling[0].conversation_id)
            .unwrap();
        let full = tok.encode(&chat.render(&chat_messages(conv), false));
        assert_eq!(&full[..40], &sets.profiling[0].tokens[..]);
    }

    #[test]
    fn seeds_choose_different_splits() {
        let (tok, chat) = tiny();
        let convs = crate::builtin::conversations();
        let split = |seed| {
            let c = ContextConfig {
                tokens: 40,
                profiling: 2,
                evaluation: 2,
                seed,
            };
            let s = build(&convs, &tok, &chat, &c).unwrap();
            s.profiling
                .iter()
                .map(|c| c.conversation_id.clone())
                .collect::<Vec<_>>()
        };
        let first = split(0);
        assert!((1..20).any(|s| split(s) != first));
    }

    #[test]
    fn short_conversations_are_skipped_and_too_few_is_an_error() {
        let (tok, chat) = tiny();
        let convs = crate::builtin::conversations();
        let config = ContextConfig {
            tokens: 100_000,
            profiling: 1,
            evaluation: 0,
            seed: 0,
        };
        match build(&convs, &tok, &chat, &config) {
            Err(DataError::Contexts(msg)) => assert!(msg.contains("only 0 of 4"), "{msg}"),
            other => panic!("expected a contexts error, got {other:?}"),
        }
    }
}
