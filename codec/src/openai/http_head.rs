//! An HTTP/1.1 request head as the gateway reads it from a client: method,
//! path (query cut), body length, whether the body is chunked, keep-alive,
//! and the `Authorization` header. A malformed head is an error that says
//! what is wrong, never a panic.

/// One parsed request head.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub content_length: usize,
    pub chunked: bool,
    pub keep_alive: bool,
    pub authorization: Option<String>,
    pub len: usize,
}

/// Parses a request head; `Ok(None)` while incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed HTTP request: {e}")),
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let content_length = match header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| format!("Content-Length {v:?} is not a number"))?,
    };
    let chunked =
        header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let connection = header("connection")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let http11 = req.version == Some(1);
    let keep_alive = if http11 {
        !connection.contains("close")
    } else {
        connection.contains("keep-alive")
    };
    let path = req.path.unwrap_or("/");
    let path = path.split_once('?').map_or(path, |(p, _)| p).to_string();
    Ok(Some(Head {
        method: req.method.unwrap_or("").to_string(),
        path,
        content_length,
        chunked,
        keep_alive,
        authorization: header("authorization"),
        len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_say_length_keep_alive_and_key() {
        let h = parse_head(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nAuthorization: Bearer k\r\n\r\n{}")
            .unwrap()
            .unwrap();
        assert_eq!(h.path, "/v1/chat/completions");
        assert_eq!(
            (h.content_length, h.keep_alive, h.chunked),
            (12, true, false)
        );
        assert_eq!(h.authorization.as_deref(), Some("Bearer k"));
        assert_eq!(h.len, 96, "the head ends before the body");
        let h = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let h = parse_head(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
        assert!(parse_head(b"GET / HTTP/1.1\r\nHost").unwrap().is_none());
        assert!(parse_head(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse_head(b"\x00\x01 nonsense\r\n\r\n").is_err());
    }
}
