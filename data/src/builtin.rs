//! A few short conversations compiled into the crate, in ShareGPT's JSON shape
//! and read through the same parser as the real file, so tests exercise the
//! real code path without downloading anything.

use crate::sharegpt::{read_from, Conversation, ReadOptions};

/// The built-in conversations as ShareGPT JSON.
pub const BUILTIN_JSON: &str = r#"[
  {"id": "builtin_0", "conversations": [
    {"from": "human", "value": "What is a KV cache in a transformer, and why does it grow with the context?"},
    {"from": "gpt", "value": "During decoding, each layer keeps the key and value vectors of every earlier token so that attention for a new token does not recompute them. The cache holds one key and one value row per token, per layer and per key-value head, so its size grows linearly with the number of tokens in the context."}
  ]},
  {"id": "builtin_1", "conversations": [
    {"from": "human", "value": "Explain forward error correction for a lossy wireless link in two sentences."},
    {"from": "gpt", "value": "The sender adds repair packets that are combinations of the source packets, so the receiver can rebuild lost packets without waiting for a retransmission. This trades some bandwidth for lower delay, which matters when a deadline is close."},
    {"from": "human", "value": "And when is retransmission better?"},
    {"from": "gpt", "value": "When the round-trip time is short compared with the deadline and losses are rare, asking again costs little and wastes no bandwidth on repairs that were not needed."}
  ]},
  {"id": "builtin_2", "conversations": [
    {"from": "system", "value": "You are a concise assistant."},
    {"from": "human", "value": "Write a haiku about edge servers."},
    {"from": "gpt", "value": "Close to the user,\nsmall machines answer quickly;\nthe cloud waits behind."}
  ]},
  {"id": "builtin_3", "conversations": [
    {"from": "human", "value": "List three ways to balance load across servers."},
    {"from": "gpt", "value": "1. Send each request to the least-loaded server.\n2. Hash requests to servers so that related ones share caches.\n3. Learn an assignment policy from the latency it produces, with a penalty for imbalance."}
  ]}
]"#;

/// The built-in conversations.
pub fn conversations() -> Vec<Conversation> {
    match read_from(
        BUILTIN_JSON.as_bytes(),
        "builtin",
        ReadOptions {
            allow_truncated_tail: false,
        },
    ) {
        Ok(l) => l.conversations,
        // The text is a constant checked by the tests below.
        Err(e) => unreachable!("built-in ShareGPT JSON is invalid: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builtin_parses() {
        let c = super::conversations();
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|c| c.turns.len() >= 2));
    }
}
