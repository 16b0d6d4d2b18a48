//! The gateway's HTTP/1.1 server: keep-alive connections, JSON bodies by
//! `Content-Length`, responses by `Content-Length` or, for streams,
//! `Transfer-Encoding: chunked` server-sent events (`data: {…}` lines, then
//! `data: [DONE]`), as OpenAI's API and vLLM's server speak them.
//!
//! Routes: `GET /v1/models`, `POST /v1/completions`,
//! `POST /v1/chat/completions`, `GET /health` and `GET /metrics` (the
//! gateway's request counters and latency histograms under vLLM's names).
//! Every wait is bounded: a request head must come within
//! [`IDLE_TIMEOUT`] of the previous response, its body within
//! [`BODY_TIMEOUT`], and a request's answer within the gateway's `timeout`
//! (the actor fails it then) plus [`ANSWER_SLACK`].

use super::text::{Codec, Detokenizer};
use actix::Addr;
use edgemu_actors::lyreo::gateway::{GatewayActor, StreamEvent, Submit};
use edgemu_actors::lyreo::live::LyreoLive;
use edgemu_codec::openai::api::{self as openai, ApiError, Endpoint, Reply, Usage};
use edgemu_codec::openai::http_head::{parse_head, Head};
use edgemu_config::GatewaySpec;
use serde_json::Value;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body.
pub const MAX_BODY: usize = 8 << 20;
/// How long a kept-alive connection may sit without a new request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request's body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long past the gateway's own timeout the HTTP side waits for the
/// actor's verdict (it only matters if the actor is gone).
pub const ANSWER_SLACK: Duration = Duration::from_secs(5);

/// What one gateway's connections share.
pub struct Gateway {
    pub name: String,
    pub spec: GatewaySpec,
    pub actor: Addr<GatewayActor>,
    pub codec: Codec,
    pub api_key: Option<String>,
    pub live: LyreoLive,
}

/// Accepts connections for the life of the listener's task.
pub async fn serve(listener: TcpListener, gw: Rc<Gateway>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let gw = gw.clone();
                actix_rt::spawn(async move {
                    if let Err(e) = connection(stream, &gw).await {
                        tracing::debug!(gateway = %gw.name, %peer, error = %e, "gateway connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(gateway = %gw.name, error = %e, "accepting a gateway connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(mut stream: TcpStream, gw: &Gateway) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // The head, within the idle timeout.
        let head = loop {
            match parse_head(&buf) {
                Ok(Some(h)) => break h,
                Ok(None) if buf.len() >= MAX_HEAD => {
                    let e = ApiError::new(431, "invalid_request_error", "request head too large");
                    return write_json(&mut stream, e.status, &e.body(), false).await;
                }
                Ok(None) => {}
                Err(msg) => {
                    let e = ApiError::bad_request(msg, None);
                    return write_json(&mut stream, 400, &e.body(), false).await;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = match tokio::time::timeout(IDLE_TIMEOUT, stream.read(&mut chunk)).await {
                Ok(r) => r?,
                Err(_) => return Ok(()),
            };
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        buf.drain(..head.len);
        if head.chunked {
            let e = ApiError::new(
                411,
                "invalid_request_error",
                "send the body with Content-Length (chunked request bodies are not accepted)",
            );
            return write_json(&mut stream, e.status, &e.body(), false).await;
        }
        if head.content_length > MAX_BODY {
            let e = ApiError::new(
                413,
                "invalid_request_error",
                format!("request body over {MAX_BODY} bytes"),
            );
            return write_json(&mut stream, e.status, &e.body(), false).await;
        }
        let read_body = async {
            while buf.len() < head.content_length {
                let mut chunk = [0u8; 16 * 1024];
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "connection closed inside a request body",
                    ));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Ok::<(), std::io::Error>(())
        };
        match tokio::time::timeout(BODY_TIMEOUT, read_body).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        }
        let body: Vec<u8> = buf.drain(..head.content_length).collect();
        let keep = head.keep_alive;
        let read_at = std::time::Instant::now();
        if let Some(e2e_ns) = respond(&mut stream, &head, &body, gw).await? {
            let total = read_at.elapsed().as_nanos() as u64;
            let overhead = total.saturating_sub(e2e_ns) as f64 * 1e-9;
            gw.live.gateway(&gw.name, &gw.spec.served_model_name, |l| {
                l.overhead.observe(overhead)
            });
        }
        if !keep {
            return stream.shutdown().await;
        }
    }
}

/// Whether `given` is `Bearer <key>`, compared in constant time.
fn authorized(given: Option<&str>, key: &str) -> bool {
    let Some(token) = given.and_then(|g| g.strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (token.trim().as_bytes(), key.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Answers one request; for a completion that finished, its time inside
/// the emulator (ns).
async fn respond(
    stream: &mut TcpStream,
    head: &Head,
    body: &[u8],
    gw: &Gateway,
) -> std::io::Result<Option<u64>> {
    let keep = head.keep_alive;
    let route = (head.method.as_str(), head.path.as_str());
    if route == ("GET", "/health") {
        return write_response(stream, 200, "text/plain", b"", keep)
            .await
            .map(|()| None);
    }
    if let Some(key) = &gw.api_key {
        if !authorized(head.authorization.as_deref(), key) {
            let e = ApiError::new(401, "invalid_request_error", "Incorrect API key provided: send `Authorization: Bearer <key>` with the key of the gateway's `api_key_env`");
            return write_json(stream, 401, &e.body(), keep)
                .await
                .map(|()| None);
        }
    }
    let done = match route {
        ("POST", "/v1/completions") => {
            return completion(stream, Endpoint::Completions, body, gw, keep).await
        }
        ("POST", "/v1/chat/completions") => {
            return completion(stream, Endpoint::Chat, body, gw, keep).await
        }
        ("GET", "/v1/models") => {
            let v = openai::models(
                &gw.spec.served_model_name,
                unix_now(),
                gw.spec.max_input.saturating_add(gw.spec.max_output),
            );
            write_json(stream, 200, &v, keep).await
        }
        ("GET", "/metrics") => {
            let text = crate::metrics::gateway::text(&gw.live.snapshot());
            write_response(
                stream,
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                text.as_bytes(),
                keep,
            )
            .await
        }
        (_, "/v1/models" | "/metrics" | "/v1/completions" | "/v1/chat/completions") => {
            let e = ApiError::new(
                405,
                "invalid_request_error",
                format!("method {} not allowed on {}", head.method, head.path),
            );
            write_json(stream, 405, &e.body(), keep).await
        }
        _ => {
            let e = ApiError::new(
                404,
                "NotFoundError",
                format!("no route {} {}", head.method, head.path),
            );
            write_json(stream, 404, &e.body(), keep).await
        }
    };
    done.map(|()| None)
}

/// Checks the request and hands it to the gateway actor; what it gets
/// back goes to the client as one response or as a stream.
async fn completion(
    stream: &mut TcpStream,
    endpoint: Endpoint,
    body: &[u8],
    gw: &Gateway,
    keep: bool,
) -> std::io::Result<Option<u64>> {
    let checked = openai::parse(endpoint, body, &gw.spec.served_model_name).and_then(|job| {
        let enc = gw.codec.encode(&job.prompt)?;
        let max_tokens = job.max_tokens.unwrap_or(gw.spec.max_tokens);
        if enc.len > gw.spec.max_input {
            return Err(ApiError::bad_request(
                format!(
                    "This model's maximum prompt length is {} tokens; the prompt has {}.",
                    gw.spec.max_input, enc.len
                ),
                Some("messages"),
            ));
        }
        if max_tokens > gw.spec.max_output {
            return Err(ApiError::bad_request(
                format!(
                    "max_tokens is {max_tokens}; this gateway allows at most {}",
                    gw.spec.max_output
                ),
                Some("max_tokens"),
            ));
        }
        Ok((job, enc, max_tokens))
    });
    let (job, enc, max_tokens) = match checked {
        Ok(x) => x,
        Err(e) => {
            return write_json(stream, e.status, &e.body(), keep)
                .await
                .map(|()| None)
        }
    };
    // Unbounded on purpose: the gateway actor must never wait on a slow
    // client, and what one request can queue is bounded anyway: at most
    // one event per token (`max_tokens` ≤ `max_output`) plus its end. A
    // client that stops reading is cut off by its socket, and the request
    // ends at the gateway's `timeout`.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let submitted = gw
        .actor
        .send(Submit {
            prompt: enc.tokens,
            text: enc.text,
            input_len: enc.len,
            max_tokens,
            events: tx,
        })
        .await;
    let id = match submitted {
        Ok(Ok(id)) => id,
        Ok(Err(refused)) => {
            let e = ApiError::new(503, "service_unavailable", refused.to_string());
            return write_json(stream, 503, &e.body(), keep)
                .await
                .map(|()| None);
        }
        Err(_) => {
            let e = ApiError::new(503, "service_unavailable", "the gateway actor is gone");
            return write_json(stream, 503, &e.body(), keep)
                .await
                .map(|()| None);
        }
    };
    let reply = Reply::new(endpoint, id, unix_now(), &gw.spec.served_model_name);
    let limit = Duration::from_nanos(gw.spec.timeout_ns) + ANSWER_SLACK;
    let deadline = tokio::time::Instant::now() + limit;
    let mut detok = Detokenizer::new(&gw.codec);
    let usage = |completion: u32| Usage {
        prompt: enc.len,
        completion,
    };
    if !job.stream {
        let mut text = String::new();
        loop {
            match next_event(&mut rx, deadline).await {
                StreamEvent::Tokens {
                    tokens,
                    placeholder,
                    pieces,
                } => text.push_str(&detok.push(&tokens, placeholder, &pieces)),
                StreamEvent::Done {
                    stopped,
                    output_tokens,
                    e2e_ns,
                } => {
                    let finish = if stopped { "stop" } else { "length" };
                    text.push_str(&detok.finish());
                    let v = reply.complete(&text, finish, usage(output_tokens));
                    return write_json(stream, 200, &v, keep)
                        .await
                        .map(|()| Some(e2e_ns));
                }
                StreamEvent::Failed { reason } => {
                    let e = ApiError::from_failure(&reason);
                    return write_json(stream, e.status, &e.body(), keep)
                        .await
                        .map(|()| None);
                }
            }
        }
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: {}\r\n\r\n",
        if keep { "keep-alive" } else { "close" }
    );
    stream.write_all(head.as_bytes()).await?;
    let mut first = true;
    let mut finished = None;
    // Events already queued go out in one write (one system call, one
    // wake-up of the client) instead of one write each.
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    let mut ev = next_event(&mut rx, deadline).await;
    loop {
        let last = match ev {
            StreamEvent::Tokens {
                tokens,
                placeholder,
                pieces,
            } => {
                let text = detok.push(&tokens, placeholder, &pieces);
                if !text.is_empty() || first {
                    sse(&mut out, &reply.chunk(&text, first, None));
                    first = false;
                }
                false
            }
            StreamEvent::Done {
                stopped,
                output_tokens,
                e2e_ns,
            } => {
                finished = Some(e2e_ns);
                let finish = if stopped { "stop" } else { "length" };
                sse(&mut out, &reply.chunk(&detok.finish(), first, Some(finish)));
                if job.include_usage {
                    sse(&mut out, &reply.usage_chunk(usage(output_tokens)));
                }
                true
            }
            StreamEvent::Failed { reason } => {
                // Headers are out: the error goes in the stream, where
                // OpenAI's clients raise it.
                sse(&mut out, &ApiError::from_failure(&reason).body());
                true
            }
        };
        if last {
            break;
        }
        match rx.try_recv() {
            Ok(next) => ev = next,
            Err(_) => {
                stream.write_all(&out).await?;
                out.clear();
                ev = next_event(&mut rx, deadline).await;
            }
        }
    }
    chunk(&mut out, b"data: [DONE]\n\n");
    out.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(finished)
}

/// The request's next event, or a failure at `deadline`.
async fn next_event(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    deadline: tokio::time::Instant,
) -> StreamEvent {
    match tokio::time::timeout_at(deadline, rx.recv()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => StreamEvent::Failed {
            reason: "gateway stopped".into(),
        },
        Err(_) => StreamEvent::Failed {
            reason: "timeout".into(),
        },
    }
}

/// Appends one server-sent event (`data: …`) as one HTTP chunk.
fn sse(out: &mut Vec<u8>, v: &Value) {
    let mut data = Vec::with_capacity(256);
    data.extend_from_slice(b"data: ");
    // Writing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut data, v);
    data.extend_from_slice(b"\n\n");
    chunk(out, &data);
}

/// Appends `data` as one HTTP chunk.
fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

async fn write_json(
    stream: &mut TcpStream,
    status: u16,
    v: &Value,
    keep: bool,
) -> std::io::Result<()> {
    write_response(
        stream,
        status,
        "application/json",
        v.to_string().as_bytes(),
        keep,
    )
    .await
}

async fn write_response(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    keep: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
        reason(status),
        body.len(),
        if keep { "keep-alive" } else { "close" }
    )
    .into_bytes();
    out.extend_from_slice(body);
    stream.write_all(&out).await?;
    stream.flush().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_key_is_authorized() {
        assert!(authorized(Some("Bearer secret"), "secret"));
        assert!(!authorized(Some("Bearer secreT"), "secret"));
        assert!(!authorized(Some("Bearer secret2"), "secret"));
        assert!(!authorized(Some("secret"), "secret"));
        assert!(!authorized(None, "secret"));
    }
}
