//! What an OpenAI-compatible serving stack answers a streaming request, as
//! the `openai` backend's client reads it: the response head
//! ([`parse_response_head`]: status, chunked or not) and then the body
//! ([`BodyDecoder`]: the chunked transfer coding undone, or the bytes as
//! they come until the connection ends), whose bytes go on to
//! [`super::sse::SseReader`]. No I/O: the client feeds whatever it read, in
//! pieces cut anywhere.
//!
//! A backend is outside input: a head longer than [`RESPONSE_HEAD_LIMIT`],
//! a chunk-size line longer than [`CHUNK_LINE_LIMIT`], a size that is not
//! hex or a chunk not followed by its CRLF is an error that says what,
//! never a panic, and nothing here holds more than a line of the body (a
//! chunk's data passes through as it arrives, whatever size it declares).

use crate::http::{header, lists};

/// Largest response head.
pub const RESPONSE_HEAD_LIMIT: usize = 16 * 1024;
/// Largest chunk-size line (a few hex digits and maybe an extension).
pub const CHUNK_LINE_LIMIT: usize = 256;

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    /// `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// Bytes of the head (the body starts there).
    pub len: usize,
}

/// Parses a response head from the start of `buf`; `Ok(None)` while it is
/// incomplete and within [`RESPONSE_HEAD_LIMIT`].
pub fn parse_response_head(buf: &[u8]) -> Result<Option<ResponseHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > RESPONSE_HEAD_LIMIT => {
            return Err(format!(
                "the answer's head is over {} KiB",
                RESPONSE_HEAD_LIMIT / 1024
            ))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("a malformed HTTP answer: {e}")),
    };
    if len > RESPONSE_HEAD_LIMIT {
        return Err(format!(
            "the answer's head is over {} KiB",
            RESPONSE_HEAD_LIMIT / 1024
        ));
    }
    let status = resp.code.ok_or("an HTTP answer without a status")?;
    let chunked = lists(header(resp.headers, "transfer-encoding"), "chunked");
    Ok(Some(ResponseHead {
        status,
        chunked,
        len,
    }))
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// This many bytes of a chunk's data to pass on.
    Data(u64),
    /// The CRLF after a chunk's data: how many of its bytes are still due.
    DataEnd(u8),
    /// The last chunk was read: the body is over (a trailer is not read).
    Done,
}

/// A response body's decoder: [`BodyDecoder::chunked`] undoes the chunked
/// transfer coding; [`BodyDecoder::identity`] passes bytes on unchanged (the
/// body ends when the connection does).
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    chunked: bool,
    state: Chunk,
    line: Vec<u8>,
}

impl BodyDecoder {
    pub fn chunked() -> Self {
        BodyDecoder {
            chunked: true,
            state: Chunk::Size,
            line: Vec::new(),
        }
    }

    pub fn identity() -> Self {
        BodyDecoder {
            chunked: false,
            state: Chunk::Size,
            line: Vec::new(),
        }
    }

    /// For a parsed head.
    pub fn for_head(head: &ResponseHead) -> Self {
        if head.chunked {
            Self::chunked()
        } else {
            Self::identity()
        }
    }

    /// Appends the body bytes in `input` to `out`. Returns true once a
    /// chunked body's last chunk has been read (what follows it is not
    /// looked at); an identity body never ends here.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<bool, String> {
        if !self.chunked {
            out.extend_from_slice(input);
            return Ok(false);
        }
        while !input.is_empty() {
            match self.state {
                Chunk::Done => break,
                Chunk::Size => {
                    let (line, rest, whole) = match input.iter().position(|&b| b == b'\n') {
                        Some(i) => (&input[..=i], &input[i + 1..], true),
                        None => (input, &input[input.len()..], false),
                    };
                    if self.line.len() + line.len() > CHUNK_LINE_LIMIT {
                        return Err(format!("a chunk-size line over {CHUNK_LINE_LIMIT} bytes"));
                    }
                    self.line.extend_from_slice(line);
                    input = rest;
                    if whole {
                        let n = chunk_size(&self.line)?;
                        self.line.clear();
                        self.state = if n == 0 { Chunk::Done } else { Chunk::Data(n) };
                    }
                }
                Chunk::Data(left) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        Chunk::DataEnd(2)
                    } else {
                        Chunk::Data(left)
                    };
                }
                Chunk::DataEnd(due) => {
                    let want = if due == 2 { b'\r' } else { b'\n' };
                    if input[0] != want {
                        return Err("a chunk's data is not followed by CRLF".into());
                    }
                    input = &input[1..];
                    self.state = if due == 2 {
                        Chunk::DataEnd(1)
                    } else {
                        Chunk::Size
                    };
                }
            }
        }
        Ok(self.state == Chunk::Done)
    }
}

/// The size of a chunk-size line (hex, then maybe `;extension`, then CRLF).
fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let text = String::from_utf8_lossy(line);
    let size = text.trim().split(';').next().unwrap_or("").trim();
    u64::from_str_radix(size, 16).map_err(|_| {
        format!(
            "a bad chunk size {:?}",
            size.chars().take(32).collect::<String>()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_say_status_and_chunking_and_where_the_body_starts() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: gzip, Chunked\r\n\r\nbody";
        let h = parse_response_head(raw).unwrap().unwrap();
        assert_eq!((h.status, h.chunked), (200, true));
        assert_eq!(&raw[h.len..], b"body");
        let h = parse_response_head(b"HTTP/1.0 404 Not Found\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.chunked), (404, false));
        assert_eq!(
            parse_response_head(b"HTTP/1.1 200 OK\r\nX: y").unwrap(),
            None
        );
        assert!(parse_response_head(b"\x00 nonsense\r\n\r\n").is_err());
        // An endless head is refused once it passes the limit.
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.resize(RESPONSE_HEAD_LIMIT + 1, b'a');
        assert!(parse_response_head(&long).is_err());
    }

    /// Decodes `body` fed in pieces of `step` bytes.
    fn decode(body: &[u8], step: usize) -> Result<(Vec<u8>, bool), String> {
        let mut d = BodyDecoder::chunked();
        let mut out = Vec::new();
        let mut ended = false;
        for piece in body.chunks(step) {
            ended = d.push(piece, &mut out)?;
        }
        Ok((out, ended))
    }

    #[test]
    fn a_chunked_body_decodes_the_same_however_it_is_cut() {
        let body = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\nafter";
        for step in 1..=body.len() {
            let (out, ended) = decode(body, step).unwrap();
            assert_eq!(out, b"hello, world", "step {step}");
            assert!(ended, "step {step}");
        }
        let (out, ended) = decode(b"5\r\nhel", 3).unwrap();
        assert_eq!((out.as_slice(), ended), (&b"hel"[..], false));
    }

    #[test]
    fn a_bad_chunk_is_an_error() {
        assert!(decode(b"zz\r\nhello\r\n", 4).is_err(), "not hex");
        assert!(
            decode(b"5\r\nhelloXY", 4).is_err(),
            "no CRLF after the data"
        );
        let long = vec![b'1'; CHUNK_LINE_LIMIT + 1];
        assert!(decode(&long, 7).is_err(), "an endless size line");
        assert!(
            decode(b"ffffffffffffffffffff\r\n", 5).is_err(),
            "a size past u64"
        );
        // A huge declared chunk is passed through as it arrives, not held.
        let (out, ended) = decode(b"7fffffffffffffff\r\nabc", 2).unwrap();
        assert_eq!((out.as_slice(), ended), (&b"abc"[..], false));
    }

    #[test]
    fn an_identity_body_passes_through() {
        let mut d = BodyDecoder::identity();
        let mut out = Vec::new();
        assert!(!d.push(b"data: x\n\n", &mut out).unwrap());
        assert_eq!(out, b"data: x\n\n");
    }
}
