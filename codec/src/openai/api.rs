//! The OpenAI API's shapes, as the gateway reads and writes them: request
//! bodies of `/v1/completions` and `/v1/chat/completions` checked into a
//! [`Job`], and the JSON of responses, stream chunks and errors. Pure
//! functions; the gateway's HTTP side is `edgemu_nodes::gateway::http`.
//!
//! Decoding is greedy, one choice per request. Sampling fields
//! (`temperature`, `top_p`, `seed`, `presence_penalty`, …) are accepted and
//! have no effect; fields that would change what the client gets back and
//! that the gateway cannot honour (`n` other than 1, `stop`, `logprobs`,
//! `echo`, `best_of`, tools) are refused with a 400 that names them.

use serde_json::{json, Value};

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// The prompt as the client gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    /// Token ids (`/v1/completions` accepts them).
    Tokens(Vec<u32>),
    /// Chat messages: (role, text).
    Messages(Vec<(String, String)>),
}

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub endpoint: Endpoint,
    pub prompt: Prompt,
    /// `None`: the gateway's default.
    pub max_tokens: Option<u32>,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// An error as the API reports it: HTTP status, `type`, message, `param`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
            param,
        }
    }

    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
        }
    }

    /// The error for a request that ended with `reason` inside the
    /// emulator (see `StreamEvent::Failed`).
    pub fn from_failure(reason: &str) -> Self {
        let (status, kind) = match reason {
            "timeout" => (504, "timeout"),
            "does not fit" => (400, "invalid_request_error"),
            _ => (503, "service_unavailable"),
        };
        ApiError::new(
            status,
            kind,
            format!("the request failed in the emulated edge: {reason}"),
        )
    }

    /// `{"error": {...}}`.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status,
        }})
    }
}

/// Sampling and bookkeeping fields that are accepted and have no effect.
const IGNORED: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
    "ignore_eos",
    "min_tokens",
];

/// Fields that would change the answer and are not supported: refused
/// unless absent, null, false or (for `n`) 1.
const UNSUPPORTED: &[&str] = &[
    "stop",
    "logprobs",
    "top_logprobs",
    "echo",
    "best_of",
    "suffix",
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "response_format",
    "audio",
    "modalities",
    "prediction",
];

/// Checks a request body for `endpoint` served as model `model`.
pub fn parse(endpoint: Endpoint, body: &[u8], model: &str) -> Result<Job, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the request body is not valid JSON: {e}"), None)
    })?;
    let Value::Object(obj) = v else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
            None,
        ));
    };
    let prompt_key = match endpoint {
        Endpoint::Completions => "prompt",
        Endpoint::Chat => "messages",
    };
    for (k, val) in &obj {
        let known = matches!(
            k.as_str(),
            "model" | "max_tokens" | "max_completion_tokens" | "stream" | "stream_options" | "n"
        ) || k == prompt_key
            || IGNORED.contains(&k.as_str());
        if known {
            continue;
        }
        if let Some(&field) = UNSUPPORTED.iter().find(|&&u| u == k) {
            let harmless = match val {
                Value::Null | Value::Bool(false) => true,
                Value::Array(a) => a.is_empty(),
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if !harmless {
                return Err(ApiError::bad_request(
                    format!("`{k}` is not supported by this gateway (greedy decoding, one choice, text only)"),
                    Some(field),
                ));
            }
            continue;
        }
        return Err(ApiError::bad_request(format!("unknown field `{k}`"), None));
    }
    match obj.get("model") {
        Some(Value::String(m)) if m == model => {}
        Some(Value::String(m)) => {
            return Err(ApiError {
                status: 404,
                kind: "NotFoundError",
                message: format!("The model `{m}` does not exist. This gateway serves `{model}`."),
                param: Some("model"),
            })
        }
        _ => {
            return Err(ApiError::bad_request(
                format!("`model` must be the served model id, `{model}`"),
                Some("model"),
            ))
        }
    }
    if let Some(n) = obj.get("n") {
        if !(n.is_null() || n.as_u64() == Some(1)) {
            return Err(ApiError::bad_request(
                "`n` must be 1: the gateway returns one choice",
                Some("n"),
            ));
        }
    }
    let max_tokens = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|&k| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)));
    let max_tokens = match max_tokens {
        None => None,
        Some((k, v)) => match v.as_u64() {
            Some(n) if (1..=u64::from(u32::MAX)).contains(&n) => Some(n as u32),
            _ => {
                return Err(ApiError::bad_request(
                    format!("`{k}` must be a positive integer, found {v}"),
                    Some(if k == "max_tokens" {
                        "max_tokens"
                    } else {
                        "max_completion_tokens"
                    }),
                ))
            }
        },
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::bad_request(
                format!("`stream` must be a boolean, found {v}"),
                Some("stream"),
            ))
        }
    };
    let include_usage = obj
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let prompt = match endpoint {
        Endpoint::Completions => completion_prompt(obj.get("prompt"))?,
        Endpoint::Chat => Prompt::Messages(messages(obj.get("messages"))?),
    };
    Ok(Job {
        endpoint,
        prompt,
        max_tokens,
        stream,
        include_usage,
    })
}

fn completion_prompt(v: Option<&Value>) -> Result<Prompt, ApiError> {
    let bad = |what: String| ApiError::bad_request(what, Some("prompt"));
    match v {
        Some(Value::String(s)) if !s.is_empty() => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            completion_prompt(items.first())
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            let ids: Option<Vec<u32>> = items
                .iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect();
            ids.map(Prompt::Tokens)
                .ok_or_else(|| bad("token ids must fit in 32 bits".into()))
        }
        Some(Value::Array(items)) if items.len() > 1 && items.iter().all(Value::is_string) => Err(
            bad("one prompt per request: send several requests instead of a batch".into()),
        ),
        Some(v) => Err(bad(format!(
            "`prompt` must be a non-empty string or array of token ids, found {}",
            short(v)
        ))),
        None => Err(bad("`prompt` is required".into())),
    }
}

fn messages(v: Option<&Value>) -> Result<Vec<(String, String)>, ApiError> {
    let bad = |what: String| ApiError::bad_request(what, Some("messages"));
    let Some(Value::Array(items)) = v else {
        return Err(bad("`messages` must be a non-empty array".into()));
    };
    if items.is_empty() {
        return Err(bad("`messages` must be a non-empty array".into()));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "developer" | "user" | "assistant" | "tool")) => r,
            Some(r) => return Err(bad(format!("messages[{i}].role {r:?} is not a chat role"))),
            None => return Err(bad(format!("messages[{i}] has no `role`"))),
        };
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) if role == "assistant" => String::new(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => text.push_str(t),
                        _ => {
                            return Err(bad(format!(
                                "messages[{i}].content: only text parts are supported, found {}",
                                short(p)
                            )))
                        }
                    }
                }
                text
            }
            Some(v) => {
                return Err(bad(format!(
                    "messages[{i}].content must be a string or text parts, found {}",
                    short(v)
                )))
            }
            None => return Err(bad(format!("messages[{i}] has no `content`"))),
        };
        // The model's template knows `system`; a developer message is one.
        let role = if role == "developer" { "system" } else { role };
        out.push((role.to_string(), text));
    }
    Ok(out)
}

/// A value, cut for an error message.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Names and times one response's objects.
#[derive(Debug, Clone)]
pub struct Reply<'a> {
    pub endpoint: Endpoint,
    /// `cmpl-…` / `chatcmpl-…` with the request's run id.
    pub id: String,
    pub created: u64,
    pub model: &'a str,
}

impl<'a> Reply<'a> {
    pub fn new(endpoint: Endpoint, request: u64, created: u64, model: &'a str) -> Self {
        let prefix = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        Reply {
            endpoint,
            id: format!("{prefix}-{request:016x}"),
            created,
            model,
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// The non-streamed response.
    pub fn complete(&self, text: &str, finish: &str, usage: Usage) -> Value {
        let choice = match self.endpoint {
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": finish,
            }),
        };
        let mut v = self.envelope(false, json!([choice]));
        v["usage"] = usage.json();
        v
    }

    /// A stream chunk with `text` (chat: the first one also names the role).
    pub fn chunk(&self, text: &str, first: bool, finish: Option<&str>) -> Value {
        let choice = match self.endpoint {
            Endpoint::Completions => {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Chat => {
                let delta = match (first, finish) {
                    (true, _) => json!({"role": "assistant", "content": text}),
                    (false, Some(_)) if text.is_empty() => json!({}),
                    _ => json!({"content": text}),
                };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
        };
        self.envelope(true, json!([choice]))
    }

    /// The stream's usage chunk (`stream_options.include_usage`).
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        let mut v = self.envelope(true, json!([]));
        v["usage"] = usage.json();
        v
    }
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt: u32,
    pub completion: u32,
}

impl Usage {
    fn json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": u64::from(self.prompt) + u64::from(self.completion),
        })
    }
}

/// `/v1/models`.
pub fn models(model: &str, created: u64, max_model_len: u32) -> Value {
    json!({"object": "list", "data": [{
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "edgemu",
        "root": model,
        "max_model_len": max_model_len,
    }]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<Job, ApiError> {
        parse(Endpoint::Chat, body.to_string().as_bytes(), "m")
    }

    #[test]
    fn a_chat_request_is_read_with_its_messages_and_options() {
        let job = chat(json!({
            "model": "m",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": null},
            ],
            "max_completion_tokens": 12,
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.7,
            "stop": null,
            "n": 1,
        }))
        .expect("valid");
        assert_eq!(
            job.prompt,
            Prompt::Messages(vec![
                ("system".into(), "be brief".into()),
                ("user".into(), "hi there".into()),
                ("assistant".into(), String::new()),
            ])
        );
        assert_eq!(job.max_tokens, Some(12));
        assert!(job.stream && job.include_usage);
    }

    #[test]
    fn a_completion_prompt_is_text_or_token_ids() {
        let p = |v: Value| {
            parse(
                Endpoint::Completions,
                json!({"model": "m", "prompt": v}).to_string().as_bytes(),
                "m",
            )
        };
        assert_eq!(
            p(json!("hello")).unwrap().prompt,
            Prompt::Text("hello".into())
        );
        assert_eq!(
            p(json!(["hello"])).unwrap().prompt,
            Prompt::Text("hello".into())
        );
        assert_eq!(
            p(json!([1, 2, 3])).unwrap().prompt,
            Prompt::Tokens(vec![1, 2, 3])
        );
        for bad in [
            json!(""),
            json!([]),
            json!(["a", "b"]),
            json!(7),
            json!([1, -2]),
        ] {
            let e = p(bad.clone()).expect_err(&bad.to_string());
            assert_eq!((e.status, e.param), (400, Some("prompt")), "{bad}");
        }
    }

    #[test]
    fn bad_requests_get_openai_errors_that_say_what_is_wrong() {
        let cases = [
            (
                json!({"model": "other", "messages": [{"role": "user", "content": "x"}]}),
                404,
                "does not exist",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                400,
                "`model`",
            ),
            (json!({"model": "m", "messages": []}), 400, "non-empty"),
            (
                json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
                400,
                "not a chat role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}),
                400,
                "`n` must be 1",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["\n"]}),
                400,
                "`stop` is not supported",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
                400,
                "positive integer",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}),
                400,
                "boolean",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "frobnicate": 1}),
                400,
                "unknown field `frobnicate`",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                400,
                "only text parts",
            ),
        ];
        for (body, status, says) in cases {
            let e = chat(body.clone()).expect_err(&body.to_string());
            assert_eq!(e.status, status, "{body}");
            assert!(e.message.contains(says), "{body}: {}", e.message);
            assert_eq!(e.body()["error"]["code"], status);
        }
        let e = parse(Endpoint::Chat, b"{not json", "m").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse(Endpoint::Chat, b"[1]", "m").unwrap_err();
        assert!(e.message.contains("JSON object"), "{}", e.message);
    }

    #[test]
    fn responses_and_chunks_have_the_shapes_clients_parse() {
        let r = Reply::new(Endpoint::Chat, 0x2a, 1_700_000_000, "m");
        assert_eq!(r.id, "chatcmpl-000000000000002a");
        let full = r.complete(
            "hi",
            "stop",
            Usage {
                prompt: 3,
                completion: 1,
            },
        );
        assert_eq!(full["object"], "chat.completion");
        assert_eq!(full["choices"][0]["message"]["content"], "hi");
        assert_eq!(full["usage"]["total_tokens"], 4);
        let first = r.chunk("", true, None);
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["choices"][0]["finish_reason"], Value::Null);
        let last = r.chunk("", false, Some("length"));
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(
            r.usage_chunk(Usage {
                prompt: 1,
                completion: 2
            })["choices"],
            json!([])
        );
        let c = Reply::new(Endpoint::Completions, 1, 0, "m");
        assert_eq!(c.chunk("x", true, None)["choices"][0]["text"], "x");
        assert_eq!(
            c.complete(
                "x",
                "stop",
                Usage {
                    prompt: 1,
                    completion: 1
                }
            )["object"],
            "text_completion"
        );
        assert_eq!(models("m", 0, 4096)["data"][0]["id"], "m");
        assert_eq!(ApiError::from_failure("timeout").status, 504);
        assert_eq!(ApiError::from_failure("server killed").status, 503);
    }
}
