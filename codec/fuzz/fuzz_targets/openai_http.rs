//! What an OpenAI client or serving stack can send a gateway or an
//! `openai` server, as any bytes: the HTTP request head, the request body
//! for both endpoints, a backend's response head and (chunked) body, and a
//! server-sent event stream, each split at any point. Never a panic; a body
//! that checks out renders the responses it needs.
#![no_main]

use edgemu_codec::openai::api::{self, Endpoint, Reply, Usage};
use edgemu_codec::openai::http_head::parse_head;
use edgemu_codec::openai::response::{parse_response_head, BodyDecoder, RESPONSE_HEAD_LIMIT};
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
    // A backend's answer as the `openai` client reads it: head, body (both
    // codings), events; a chunked body cut at `cut` decodes as it does whole.
    if let Ok(Some(h)) = parse_response_head(data) {
        assert!(h.len <= data.len() && h.len <= RESPONSE_HEAD_LIMIT);
        let body = &data[h.len..];
        let mut d = BodyDecoder::for_head(&h);
        let mut out = Vec::new();
        if d.push(body, &mut out).is_ok() {
            let _ = SseReader::default().push(&out);
        }
    }
    let (mut whole, mut split) = (BodyDecoder::chunked(), BodyDecoder::chunked());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let at_once = whole.push(data, &mut a);
    let mut in_two = split.push(&data[..cut], &mut b);
    if matches!(in_two, Ok(false)) {
        in_two = split.push(&data[cut..], &mut b);
    }
    if let (Ok(e1), Ok(e2)) = (&at_once, &in_two) {
        assert_eq!((e1, &a), (e2, &b));
    }
    assert_eq!(at_once.is_ok(), in_two.is_ok());
});
