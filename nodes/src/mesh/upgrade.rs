//! The HTTP/1.1 upgrade that opens a mesh websocket (RFC 6455 §4).
//!
//! The dialing host sends `GET /mesh` with `Upgrade: websocket`, a random
//! `Sec-WebSocket-Key` and version 13; the listening host answers `101
//! Switching Protocols` with `Sec-WebSocket-Accept = base64(SHA-1(key ‖
//! GUID))`, which the dialer checks. Any standard websocket client can open
//! a session this way (and is then asked for the mesh's own handshake).
//!
//! Both sides read the HTTP head one byte at a time, up to its blank line
//! and not one byte further: the peer may send its first websocket frame
//! right behind the head, and those bytes belong to the framing layer, not
//! to a buffer that would be thrown away. A head is at most
//! [`MAX_HEAD_BYTES`]; the callers bound the whole upgrade with a timeout.

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// RFC 6455's key suffix.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Longest request or response head accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 8192;
const MAX_HEADERS: usize = 32;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// Reads an HTTP head up to and including its blank line, never past it.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>> {
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD_BYTES {
            bail!("HTTP head longer than {MAX_HEAD_BYTES} bytes");
        }
        if s.read(&mut byte).await.context("reading the HTTP head")? == 0 {
            bail!(
                "connection closed in the HTTP head ({} bytes in)",
                head.len()
            );
        }
        head.push(byte[0]);
    }
    Ok(head)
}

fn header<'a>(headers: &'a [httparse::Header<'a>], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

/// Whether a comma-separated header value lists `token` (case-insensitive).
fn lists(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// The dialing side: asks `host` (the `Host` header) to upgrade `path`.
pub(crate) async fn client<S>(s: &mut S, host: &str, path: &str) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    s.write_all(request.as_bytes())
        .await
        .context("sending the upgrade request")?;
    let head = read_head(s).await?;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => bail!("incomplete upgrade response"),
        Err(e) => bail!("malformed upgrade response: {e}"),
    }
    if resp.code != Some(101) {
        bail!(
            "upgrade refused: {} {}",
            resp.code.unwrap_or(0),
            resp.reason.unwrap_or("")
        );
    }
    if !lists(header(resp.headers, "upgrade"), "websocket") {
        bail!("upgrade response without `Upgrade: websocket`");
    }
    match header(resp.headers, "sec-websocket-accept") {
        Some(a) if a == accept_key(&key) => Ok(()),
        Some(a) => bail!("upgrade response's Sec-WebSocket-Accept {a:?} does not match the key"),
        None => bail!("upgrade response without Sec-WebSocket-Accept"),
    }
}

/// What made a request unfit for an upgrade (answered with a 400).
fn check_request(req: &httparse::Request<'_, '_>) -> std::result::Result<String, String> {
    if req.method != Some("GET") {
        return Err(format!("method {:?}, not GET", req.method.unwrap_or("")));
    }
    if req.version != Some(1) {
        return Err("not HTTP/1.1".into());
    }
    if !lists(header(req.headers, "upgrade"), "websocket") {
        return Err("no `Upgrade: websocket`".into());
    }
    if !lists(header(req.headers, "connection"), "upgrade") {
        return Err("no `Connection: Upgrade`".into());
    }
    if header(req.headers, "sec-websocket-version") != Some("13") {
        return Err("Sec-WebSocket-Version is not 13".into());
    }
    let key = header(req.headers, "sec-websocket-key").ok_or("no Sec-WebSocket-Key")?;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(k) if k.len() == 16 => Ok(key.to_string()),
        _ => Err("Sec-WebSocket-Key is not 16 bytes in base64".into()),
    }
}

/// The listening side: reads the request and answers `101`, or a `400`
/// that says what is wrong (and fails).
pub(crate) async fn server<S>(s: &mut S) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = read_head(s).await?;
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let checked = match req.parse(&head) {
        Ok(httparse::Status::Complete(_)) => check_request(&req),
        Ok(httparse::Status::Partial) => Err("incomplete request".into()),
        Err(e) => Err(format!("malformed request: {e}")),
    };
    match checked {
        Ok(key) => {
            let response = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Accept: {}\r\n\r\n",
                accept_key(&key)
            );
            s.write_all(response.as_bytes())
                .await
                .context("sending the upgrade response")?;
            Ok(())
        }
        Err(why) => {
            let body = format!("edgemu mesh: not a websocket upgrade: {why}\n");
            let response = format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(response.as_bytes()).await;
            bail!("not a websocket upgrade: {why}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_of_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn client_and_server_agree_and_leave_the_next_bytes_unread() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let server = async {
            server(&mut b).await?;
            // A frame right behind the response stays for the framing layer.
            b.write_all(b"\x82\x01x").await?;
            anyhow::Ok(b)
        };
        let (c, s) = tokio::join!(client(&mut a, "h:1", "/mesh"), server);
        c.expect("client");
        let _b = s.expect("server");
        let mut next = [0u8; 3];
        a.read_exact(&mut next).await.expect("frame bytes");
        assert_eq!(&next, b"\x82\x01x");
    }

    async fn refused(request: &str) -> String {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        a.write_all(request.as_bytes()).await.expect("write");
        let err = server(&mut b).await.expect_err("refused").to_string();
        drop(b);
        let mut answer = String::new();
        a.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        err
    }

    #[tokio::test]
    async fn bad_requests_get_a_400_that_says_why() {
        let ok = "GET /mesh HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
        let e = refused(&ok.replace("GET", "POST")).await;
        assert!(e.contains("not GET"), "{e}");
        let e = refused(&ok.replace("Upgrade: websocket\r\n", "")).await;
        assert!(e.contains("Upgrade: websocket"), "{e}");
        let e = refused(&ok.replace("Version: 13", "Version: 8")).await;
        assert!(e.contains("not 13"), "{e}");
        let e = refused(&ok.replace("dGhlIHNhbXBsZSBub25jZQ==", "short")).await;
        assert!(e.contains("16 bytes"), "{e}");
        let e = refused("\x00\x01garbage\r\n\r\n").await;
        assert!(e.contains("malformed"), "{e}");
    }

    #[tokio::test]
    async fn an_endless_head_is_cut_off() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let writer = async move {
            let line = vec![b'a'; 1024];
            for _ in 0..16 {
                if a.write_all(&line).await.is_err() {
                    break;
                }
            }
        };
        let (_, r) = tokio::join!(writer, server(&mut b));
        let e = r.expect_err("too long").to_string();
        assert!(e.contains("longer than"), "{e}");
    }

    #[tokio::test]
    async fn a_wrong_accept_key_is_refused_by_the_client() {
        let (mut a, mut b) = tokio::io::duplex(64 * 1024);
        let fake = async move {
            read_head(&mut b).await.expect("request");
            b.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
            )
            .await
            .expect("write");
        };
        let (r, _) = tokio::join!(client(&mut a, "h", "/mesh"), fake);
        let e = r.expect_err("mismatch").to_string();
        assert!(e.contains("does not match"), "{e}");
    }
}
