//! A streaming client of OpenAI's `/v1/completions`, enough for a server
//! actor to use an external serving stack (llama.cpp's server, vLLM,
//! another edgemu gateway) as its backend: one HTTP/1.1 request per
//! completion, `stream: true`, the answer read as server-sent events.
//! Every wait has the request's timeout. What the backend sends is decoded
//! by `edgemu_codec::openai` (response head, chunked body, events), which
//! bounds what it holds and is fuzzed; a malformed answer is an error that
//! says what was wrong, never a panic.

use edgemu_codec::openai::response::{parse_response_head, BodyDecoder, RESPONSE_HEAD_LIMIT};
use edgemu_codec::openai::sse::{parse_event, Event, SseReader};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where and what to ask.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// `host:port`.
    pub authority: String,
    /// Path of the API base, e.g. `/v1`.
    pub base_path: String,
    pub model: String,
    pub api_key: Option<String>,
}

impl Endpoint {
    /// From `http://host:port/base` (`edgemu_config::parse_http_url`, as
    /// cluster.toml's `url` is checked).
    pub fn parse(url: &str, model: &str, api_key: Option<String>) -> Result<Endpoint, String> {
        let (authority, base_path) = edgemu_config::parse_http_url(url)?;
        Ok(Endpoint {
            authority,
            base_path,
            model: model.to_string(),
            api_key,
        })
    }
}

/// The prompt of one completion.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Tokens(Vec<u32>),
    Text(String),
}

/// One completion to run.
#[derive(Debug, Clone)]
pub struct Completion {
    pub prompt: Prompt,
    pub max_tokens: u32,
    /// Generate exactly `max_tokens` (a request whose length is given).
    pub ignore_eos: bool,
    pub timeout: Duration,
}

/// The request's bytes.
pub fn request_bytes(e: &Endpoint, c: &Completion) -> Vec<u8> {
    let prompt = match &c.prompt {
        Prompt::Tokens(t) => serde_json::json!(t),
        Prompt::Text(t) => serde_json::json!(t),
    };
    let mut body = serde_json::json!({
        "model": e.model,
        "prompt": prompt,
        "max_tokens": c.max_tokens,
        "stream": true,
        "temperature": 0,
    });
    if c.ignore_eos {
        body["ignore_eos"] = serde_json::json!(true);
        body["min_tokens"] = serde_json::json!(c.max_tokens);
    }
    let body = body.to_string();
    let auth = e
        .api_key
        .as_ref()
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {}/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        e.base_path,
        e.authority,
        body.len()
    )
    .into_bytes()
}

/// Runs `c` at `e`, calling `on_text` with each piece of text as it
/// arrives; returns when the stream ends.
pub async fn stream(
    e: &Endpoint,
    c: &Completion,
    mut on_text: impl FnMut(String),
) -> Result<(), String> {
    let run = async {
        let mut s = TcpStream::connect(&e.authority)
            .await
            .map_err(|err| format!("connecting to {}: {err}", e.authority))?;
        let _ = s.set_nodelay(true);
        s.write_all(&request_bytes(e, c))
            .await
            .map_err(|err| format!("sending to {}: {err}", e.authority))?;
        // The head, read up to its limit; what came after it is the body's.
        let mut head = Vec::with_capacity(4096);
        let h = loop {
            let room = (RESPONSE_HEAD_LIMIT + 1).saturating_sub(head.len()) as u64;
            let n = (&mut s)
                .take(room)
                .read_buf(&mut head)
                .await
                .map_err(|e| format!("reading the answer's head: {e}"))?;
            if let Some(h) = parse_response_head(&head)? {
                break h;
            }
            if n == 0 {
                return Err("the backend closed the connection before answering".into());
            }
        };
        let mut body = BodyDecoder::for_head(&h);
        let mut bytes = Vec::new();
        let ended = body.push(&head[h.len..], &mut bytes)?;
        if h.status != 200 {
            if !ended {
                let mut raw = Vec::new();
                let _ = (&mut s).take(4096).read_to_end(&mut raw).await;
                let _ = body.push(&raw, &mut bytes);
            }
            let text: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            return Err(format!("the backend answered {}: {text}", h.status));
        }
        let mut events = SseReader::default();
        let mut texts: u64 = 0;
        // A backend streams about one event per token; one that goes on far
        // past `max_tokens` is not answering this request.
        let most = u64::from(c.max_tokens).saturating_mul(2).saturating_add(16);
        let mut raw = Vec::with_capacity(16 * 1024);
        let mut ended = ended;
        loop {
            for data in events.push(&bytes)? {
                match parse_event(&data)? {
                    Event::Text(t) => {
                        texts += 1;
                        if texts > most {
                            return Err(format!(
                                "the backend sent over {most} text events for max_tokens {}",
                                c.max_tokens
                            ));
                        }
                        on_text(t)
                    }
                    Event::Done => return Ok(()),
                    Event::Empty => {}
                }
            }
            if ended {
                return Err("the stream ended without [DONE]".into());
            }
            bytes.clear();
            raw.clear();
            let n = s
                .read_buf(&mut raw)
                .await
                .map_err(|err| format!("reading the stream: {err}"))?;
            ended = body.push(&raw, &mut bytes)? || n == 0;
        }
    };
    tokio::time::timeout(c.timeout, run)
        .await
        .map_err(|_| format!("no end of the stream within {:?}", c.timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_host_port_and_base() {
        let e = Endpoint::parse("http://127.0.0.1:8080/v1/", "m", None).unwrap();
        assert_eq!(
            (e.authority.as_str(), e.base_path.as_str()),
            ("127.0.0.1:8080", "/v1")
        );
        let e = Endpoint::parse("http://llm.local", "m", Some("k".into())).unwrap();
        assert_eq!(
            (e.authority.as_str(), e.base_path.as_str()),
            ("llm.local:80", "")
        );
        assert!(Endpoint::parse("https://x/v1", "m", None).is_err());
        assert!(Endpoint::parse("http:///v1", "m", None).is_err());
        let req = String::from_utf8(request_bytes(
            &e,
            &Completion {
                prompt: Prompt::Tokens(vec![1, 2]),
                max_tokens: 3,
                ignore_eos: true,
                timeout: Duration::from_secs(1),
            },
        ))
        .unwrap();
        assert!(
            req.starts_with("POST /completions HTTP/1.1\r\nHost: llm.local:80\r\n"),
            "{req}"
        );
        assert!(req.contains("Authorization: Bearer k\r\n"));
        let body: serde_json::Value =
            serde_json::from_str(req.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["prompt"], serde_json::json!([1, 2]));
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream"], true);
    }
}
