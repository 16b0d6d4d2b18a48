//! What an OpenAI client or serving stack can send a gateway or an
//! `openai` server, as any bytes: the HTTP request head, the request body
//! for both endpoints, and a server-sent event stream split at any point.
//! Never a panic; a body that checks out renders the responses it needs.
#![no_main]

use edgemu_codec::openai::api::{self, Endpoint, Reply, Usage};
use edgemu_codec::openai::http_head::parse_head;
use edgemu_codec::openai::sse::{parse_event, SseReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(h)) = parse_head(data) {
        assert!(h.len <= data.len());
        let body = &data[h.len..];
        for e in [Endpoint::Completions, Endpoint::Chat] {
            if api::parse(e, body, "m").is_ok() {
                let r = Reply::new(e, 7, 0, "m");
                let _ = r.complete("x", "stop", Usage { prompt: 1, completion: 1 });
                let _ = r.chunk("x", true, None);
            }
        }
    }
    for e in [Endpoint::Completions, Endpoint::Chat] {
        let _ = api::parse(e, data, "m");
    }
    let cut = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let mut sse = SseReader::default();
    for chunk in [&data[..cut], &data[cut..]] {
        for ev in sse.push(chunk).unwrap_or_default() {
            let _ = parse_event(&ev);
        }
    }
});
