//! Server-sent events as an OpenAI-compatible server streams a completion:
//! [`SseReader`] splits the bytes into events' `data:` payloads, however
//! they were cut by the reads, and [`parse_event`] reads one. Anything
//! malformed is an error that says what, never a panic.

/// What one server-sent event says.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The text of the next token(s).
    Text(String),
    /// `data: [DONE]`.
    Done,
    /// An event with no text (a role or usage chunk).
    Empty,
}

/// Reads one `data:` payload.
pub fn parse_event(data: &str) -> Result<Event, String> {
    if data.trim() == "[DONE]" {
        return Ok(Event::Done);
    }
    let v: serde_json::Value = serde_json::from_str(data)
        .map_err(|e| format!("an event is not JSON ({e}): {}", cut(data)))?;
    if let Some(err) = v.get("error") {
        return Err(format!(
            "the backend reported an error: {}",
            cut(&err.to_string())
        ));
    }
    match v["choices"].get(0).and_then(|c| c.get("text")) {
        Some(serde_json::Value::String(t)) if !t.is_empty() => Ok(Event::Text(t.clone())),
        _ => Ok(Event::Empty),
    }
}

fn cut(s: &str) -> String {
    s.chars().take(200).collect()
}

/// Largest event a stream may hold before its blank line: far more than a
/// completion chunk's JSON, and a bound on what a backend that never ends
/// an event can make the reader keep.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Splits a byte stream into server-sent events' `data:` payloads.
#[derive(Default)]
pub struct SseReader {
    pending: Vec<u8>,
    /// How far `pending` has been searched for an event's end (each byte is
    /// looked at once, however the stream is cut).
    scanned: usize,
}

impl SseReader {
    /// The complete events' data in `bytes` (with what came before); an
    /// error when an event grows past [`MAX_EVENT_BYTES`].
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = find_event_end(&self.pending, self.scanned) {
            let event: Vec<u8> = self.pending.drain(..end.1).collect();
            self.scanned = 0;
            let text = String::from_utf8_lossy(&event[..end.0]);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        // A terminator may begin in the last 3 bytes: search them again.
        self.scanned = self.pending.len().saturating_sub(3);
        if self.pending.len() > MAX_EVENT_BYTES {
            return Err(format!(
                "an event of over {MAX_EVENT_BYTES} bytes without its end"
            ));
        }
        Ok(out)
    }
}

/// (end of the event's text, end including the blank line), searching
/// from `from`.
fn find_event_end(b: &[u8], from: usize) -> Option<(usize, usize)> {
    for i in from..b.len() {
        if b[i..].starts_with(b"\r\n\r\n") {
            return Some((i, i + 4));
        }
        if b[i..].starts_with(b"\n\n") {
            return Some((i, i + 2));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_across_reads_and_parsed() {
        let mut r = SseReader::default();
        assert_eq!(r.push(b"data: {\"choices\":[{\"text\":\"He"), Ok(vec![]));
        let ev = r
            .push(b"llo\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\r\n\r\n: comment\n\ndata: [DONE]\n\n")
            .unwrap_or_default();
        assert_eq!(ev.len(), 3);
        assert_eq!(parse_event(&ev[0]), Ok(Event::Text("Hello".into())));
        assert_eq!(parse_event(&ev[1]), Ok(Event::Empty));
        assert_eq!(parse_event(&ev[2]), Ok(Event::Done));
        assert!(parse_event("{oops").unwrap_err().contains("not JSON"));
        let e = parse_event(r#"{"error": {"message": "overloaded"}}"#).unwrap_err();
        assert!(e.contains("overloaded"), "{e}");
    }

    #[test]
    fn an_end_cut_across_reads_is_found_and_an_endless_event_is_refused() {
        let mut r = SseReader::default();
        let mut seen = vec![];
        for part in [&b"data: a\r"[..], b"\n", b"\r", b"\ndata: b\n", b"\n"] {
            seen.extend(r.push(part).unwrap_or_default());
        }
        assert_eq!(seen, ["a", "b"]);
        let mut r = SseReader::default();
        let big = vec![b'x'; 64 << 10];
        let mut refused = false;
        for _ in 0..(MAX_EVENT_BYTES / big.len() + 2) {
            if r.push(&big).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused, "an event without an end must be refused");
    }
}
