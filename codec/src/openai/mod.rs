//! OpenAI's API at edgemu's edge: request bodies and responses
//! ([`api`]), the HTTP request head a gateway reads ([`http_head`]), the
//! response head and body an `openai` backend's client reads
//! ([`response`]), and the server-sent events an external serving stack
//! streams back ([`sse`]). Pure functions over outside bytes, fuzzed
//! (`codec/fuzz`, target `openai_http`).

pub mod api;
pub mod http_head;
pub mod response;
pub mod sse;
