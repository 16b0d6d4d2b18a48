//! A streaming client of OpenAI's `/v1/completions`, enough for a server
//! actor to use an external serving stack (llama.cpp's server, vLLM,
//! another edgemu gateway) as its backend: one HTTP/1.1 request per
//! completion, `stream: true`, the answer read as server-sent events.
//! Every wait has the request's timeout; a malformed answer is an error
//! that says what was wrong, never a panic.

use edgemu_codec::openai::sse::{parse_event, Event, SseReader};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
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
    /// From `http://host:port/base`.
    pub fn parse(url: &str, model: &str, api_key: Option<String>) -> Result<Endpoint, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let authority = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            base_path: path.trim_end_matches('/').to_string(),
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
        let mut r = BufReader::new(s);
        let (status, chunked) = read_head(&mut r).await?;
        if status != 200 {
            let mut body = String::new();
            let _ = r.take(4096).read_to_string(&mut body).await;
            let body: String = body.chars().take(200).collect();
            return Err(format!("the backend answered {status}: {body}"));
        }
        let mut events = SseReader::default();
        let mut texts: u64 = 0;
        // A backend streams about one event per token; one that goes on far
        // past `max_tokens` is not answering this request.
        let most = u64::from(c.max_tokens).saturating_mul(2).saturating_add(16);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let done = if chunked {
                read_chunk(&mut r, &mut buf).await?
            } else {
                let n = r
                    .read_buf(&mut buf)
                    .await
                    .map_err(|err| format!("reading the stream: {err}"))?;
                n == 0
            };
            for data in events.push(&buf)? {
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
            if done {
                return Err("the stream ended without [DONE]".into());
            }
        }
    };
    tokio::time::timeout(c.timeout, run)
        .await
        .map_err(|_| format!("no end of the stream within {:?}", c.timeout))?
}

/// Largest answer head.
const HEAD_LIMIT: usize = 16 * 1024;
/// Largest chunk-size line read.
const CHUNK_LINE_LIMIT: u64 = 256;

/// The status and whether the body is chunked.
async fn read_head(r: &mut BufReader<TcpStream>) -> Result<(u16, bool), String> {
    let mut head = Vec::new();
    loop {
        // A line is read only up to the head's limit, however long it is.
        let room = (HEAD_LIMIT + 1).saturating_sub(head.len()) as u64;
        let n = (&mut *r)
            .take(room)
            .read_until(b'\n', &mut head)
            .await
            .map_err(|e| format!("reading the answer's head: {e}"))?;
        if n == 0 {
            return Err("the backend closed the connection before answering".into());
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        if head.len() > HEAD_LIMIT {
            return Err("the answer's head is over 16 KiB".into());
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(&head)
        .map_err(|e| format!("a malformed HTTP answer: {e}"))?;
    let status = resp.code.ok_or("an HTTP answer without a status")?;
    let chunked = resp.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            && String::from_utf8_lossy(h.value)
                .to_ascii_lowercase()
                .contains("chunked")
    });
    Ok((status, chunked))
}

/// Appends one chunk's data to `out`; true at the last (empty) chunk.
async fn read_chunk(r: &mut BufReader<TcpStream>, out: &mut Vec<u8>) -> Result<bool, String> {
    let mut line = String::new();
    // A chunk-size line is a few hex digits (and maybe an extension).
    (&mut *r)
        .take(CHUNK_LINE_LIMIT)
        .read_line(&mut line)
        .await
        .map_err(|e| format!("reading a chunk size: {e}"))?;
    let size = line.trim().split(';').next().unwrap_or("");
    let n = usize::from_str_radix(size, 16).map_err(|_| format!("a bad chunk size {size:?}"))?;
    if n > 16 << 20 {
        return Err(format!("a chunk of {n} bytes"));
    }
    let start = out.len();
    out.resize(start + n + 2, 0);
    r.read_exact(&mut out[start..])
        .await
        .map_err(|e| format!("reading a chunk: {e}"))?;
    out.truncate(start + n);
    Ok(n == 0)
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
