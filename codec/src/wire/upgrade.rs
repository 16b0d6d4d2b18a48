//! The HTTP/1.1 upgrade that opens a mesh websocket (RFC 6455 §4), as pure
//! functions over the request and response heads (the I/O is the mesh's).
//!
//! The dialing host sends `GET /mesh` with `Upgrade: websocket`, a random
//! 16-byte `Sec-WebSocket-Key` in base64 and version 13
//! ([`client_request`]); the listening host checks it ([`check_request`])
//! and answers `101 Switching Protocols` with `Sec-WebSocket-Accept =
//! base64(SHA-1(key ‖ GUID))` ([`accept_response`]) or a `400` that says
//! why ([`refusal_response`]); the dialer checks the answer
//! ([`check_response`]). Any standard websocket client can open a session
//! this way. Heads come from peers: every check returns an error, never
//! panics (fuzzed by `codec/fuzz`'s `ws_upgrade`).

use crate::http::{header, lists};
use base64::Engine as _;
use sha1::{Digest, Sha1};

/// RFC 6455's key suffix.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Headers a head may have.
const MAX_HEADERS: usize = 32;

/// Why an upgrade request or response was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("websocket upgrade refused: {why}")]
pub struct UpgradeRefused {
    pub why: String,
    /// The request asked for another websocket version (answered `426`
    /// with the version spoken here, RFC 6455 §4.4).
    pub wrong_version: bool,
}

fn refused(why: impl Into<String>) -> UpgradeRefused {
    UpgradeRefused {
        why: why.into(),
        wrong_version: false,
    }
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// A fresh `Sec-WebSocket-Key` from 16 random bytes.
pub fn new_key(random: [u8; 16]) -> String {
    base64::engine::general_purpose::STANDARD.encode(random)
}

/// The dialer's request for `path` on `host` (the `Host` header).
pub fn client_request(host: &str, path: &str, key: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// A parse of a whole head (`what`: request or response), or why not.
fn whole(parsed: httparse::Result<usize>, what: &str) -> Result<(), UpgradeRefused> {
    match parsed {
        Ok(httparse::Status::Complete(_)) => Ok(()),
        Ok(httparse::Status::Partial) => Err(refused(format!("incomplete {what}"))),
        Err(e) => Err(refused(format!("malformed {what}: {e}"))),
    }
}

/// Checks a request head (through its blank line); returns its key.
pub fn check_request(head: &[u8]) -> Result<String, UpgradeRefused> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    whole(req.parse(head), "request")?;
    if req.method != Some("GET") {
        return Err(refused(format!(
            "method {:?}, not GET",
            req.method.unwrap_or("")
        )));
    }
    if req.version != Some(1) {
        return Err(refused("not HTTP/1.1"));
    }
    if !lists(header(req.headers, "upgrade"), "websocket") {
        return Err(refused("no `Upgrade: websocket`"));
    }
    if !lists(header(req.headers, "connection"), "upgrade") {
        return Err(refused("no `Connection: Upgrade`"));
    }
    if header(req.headers, "sec-websocket-version") != Some("13") {
        return Err(UpgradeRefused {
            wrong_version: true,
            ..refused("Sec-WebSocket-Version is not 13")
        });
    }
    let key =
        header(req.headers, "sec-websocket-key").ok_or_else(|| refused("no Sec-WebSocket-Key"))?;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(k) if k.len() == 16 => Ok(key.to_string()),
        _ => Err(refused("Sec-WebSocket-Key is not 16 bytes in base64")),
    }
}

/// The `101` answer to a request with `key`.
pub fn accept_response(key: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key)
    )
}

/// The answer to a refused request: `426` naming version 13 when another
/// version was asked for, `400` otherwise; the body says why.
pub fn refusal_response(refusal: &UpgradeRefused) -> String {
    let body = format!("edgemu mesh: not a websocket upgrade: {}\n", refusal.why);
    let status = if refusal.wrong_version {
        "426 Upgrade Required\r\nSec-WebSocket-Version: 13"
    } else {
        "400 Bad Request"
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Checks the answer (head through its blank line) to a request with `key`.
pub fn check_response(head: &[u8], key: &str) -> Result<(), UpgradeRefused> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    whole(resp.parse(head), "response")?;
    if resp.code != Some(101) {
        return Err(refused(format!(
            "answered {} {}",
            resp.code.unwrap_or(0),
            resp.reason.unwrap_or("")
        )));
    }
    if !lists(header(resp.headers, "upgrade"), "websocket") {
        return Err(refused("response without `Upgrade: websocket`"));
    }
    if !lists(header(resp.headers, "connection"), "upgrade") {
        return Err(refused("response without `Connection: Upgrade`"));
    }
    match header(resp.headers, "sec-websocket-accept") {
        Some(a) if a == accept_key(key) => Ok(()),
        Some(a) => Err(refused(format!(
            "Sec-WebSocket-Accept {a:?} does not match the key"
        ))),
        None => Err(refused("response without Sec-WebSocket-Accept")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    #[test]
    fn accept_key_of_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(accept_key(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn a_request_and_its_answer_check_out() {
        let key = new_key([7; 16]);
        let req = client_request("h:1", "/mesh", &key);
        assert_eq!(check_request(req.as_bytes()), Ok(key.clone()));
        assert_eq!(
            check_response(accept_response(&key).as_bytes(), &key),
            Ok(())
        );
        let other = new_key([8; 16]);
        let e = check_response(accept_response(&other).as_bytes(), &key).unwrap_err();
        assert!(e.why.contains("does not match"), "{e}");
        let e = check_response(refusal_response(&refused("x")).as_bytes(), &key).unwrap_err();
        assert!(e.why.contains("400"), "{e}");
        let no_connection = accept_response(&key).replace("Connection: Upgrade\r\n", "");
        let e = check_response(no_connection.as_bytes(), &key).unwrap_err();
        assert!(e.why.contains("Connection"), "{e}");
    }

    #[test]
    fn bad_requests_say_why() {
        let ok = client_request("h", "/mesh", KEY);
        let why = |r: String| check_request(r.as_bytes()).unwrap_err().why;
        assert!(why(ok.replace("GET", "POST")).contains("not GET"));
        assert!(why(ok.replace("Upgrade: websocket\r\n", "")).contains("Upgrade: websocket"));
        assert!(why(ok.replace("Connection: Upgrade\r\n", "")).contains("Connection"));
        let v8 = check_request(ok.replace("Version: 13", "Version: 8").as_bytes()).unwrap_err();
        assert!(v8.wrong_version && v8.why.contains("not 13"));
        let answer = refusal_response(&v8);
        assert!(answer.starts_with("HTTP/1.1 426") && answer.contains("Sec-WebSocket-Version: 13"));
        assert!(refusal_response(&refused("x")).starts_with("HTTP/1.1 400"));
        assert!(why(ok.replace(KEY, "short")).contains("16 bytes"));
        assert!(why(ok.replace("HTTP/1.1", "HTTP/1.0")).contains("HTTP/1.1"));
        assert!(why("\x00\x01garbage\r\n\r\n".into()).contains("malformed"));
        assert!(why("GET / HTTP/1.1\r\n".into()).contains("incomplete"));
    }
}
