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

/// Splits a byte stream into server-sent events' `data:` payloads.
#[derive(Default)]
pub struct SseReader {
    pending: Vec<u8>,
}

impl SseReader {
    /// The complete events' data in `bytes` (with what came before).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = find_event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end.1).collect();
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
        out
    }
}

/// (end of the event's text, end including the blank line).
fn find_event_end(b: &[u8]) -> Option<(usize, usize)> {
    for i in 0..b.len() {
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
        assert!(r.push(b"data: {\"choices\":[{\"text\":\"He").is_empty());
        let ev = r.push(b"llo\"}]}\n\ndata: {\"choices\":[{\"text\":\"\"}]}\r\n\r\n: comment\n\ndata: [DONE]\n\n");
        assert_eq!(ev.len(), 3);
        assert_eq!(parse_event(&ev[0]), Ok(Event::Text("Hello".into())));
        assert_eq!(parse_event(&ev[1]), Ok(Event::Empty));
        assert_eq!(parse_event(&ev[2]), Ok(Event::Done));
        assert!(parse_event("{oops").unwrap_err().contains("not JSON"));
        let e = parse_event(r#"{"error": {"message": "overloaded"}}"#).unwrap_err();
        assert!(e.contains("overloaded"), "{e}");
    }
}
