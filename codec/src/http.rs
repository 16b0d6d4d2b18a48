//! Header lookups shared by the HTTP heads this crate reads (the mesh's
//! websocket upgrade, an OpenAI backend's response).

/// The value of header `name` (case-insensitive), trimmed; `None` when it
/// is absent or not UTF-8.
pub(crate) fn header<'a>(headers: &'a [httparse::Header<'a>], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

/// Whether a comma-separated header value lists `token` (case-insensitive).
pub(crate) fn lists(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}
