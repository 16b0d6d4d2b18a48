//! Plain HTTP on the control address: the dashboard page, its assets,
//! `/api/snapshot` and `/metrics`. A connection whose request asks for a
//! websocket upgrade is left untouched for the control socket.
//!
//! The request head is *peeked* (not read) to decide, so the websocket
//! handshake still sees every byte. Plain requests are answered once with
//! `Connection: close`: this is a status page and a scrape target, not a
//! web server. Heads are bounded ([`MAX_HEAD`]) and must arrive within the
//! control socket's upgrade timeout; only `GET` and `HEAD` are served.
//! Nothing here changes the run: commands go over the websocket, with the
//! token.

use super::{assets, Web};
use crate::host::supervisor::Supervisor;
use crate::metrics::{Format, TakeSnapshot};
use actix::Addr;
use edgemu_config::Cluster;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;

/// Longest wait for a snapshot from the host's supervisor.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(5);

/// The parts of a request head that decide what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// `Upgrade: websocket` was asked for.
    pub websocket: bool,
    /// The `/metrics` format the `Accept` header asks for.
    pub format: Format,
    /// The `Origin` header (a page of another origin asking).
    pub origin: Option<String>,
    /// Length of the head in bytes (to consume it before answering).
    pub len: usize,
}

/// Parses a complete request head; `Ok(None)` while it is incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let target = req.path.unwrap_or("/");
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q.to_string())),
                None => (target.to_string(), None),
            };
            let websocket = req.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("upgrade")
                    && std::str::from_utf8(h.value)
                        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
            });
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
            };
            let accept = header("accept");
            let origin = header("origin").map(str::to_string);
            Ok(Some(Head {
                method: req.method.unwrap_or("").to_string(),
                path,
                query,
                websocket,
                format: Format::from_accept(accept),
                origin,
                len,
            }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(format!("malformed HTTP request: {e}")),
    }
}

/// Waits for the request head without consuming it. `Ok(None)`: the head
/// is malformed, too large or the peer closed (the websocket handshake then
/// answers it as before).
pub async fn peek_head(tcp: &TcpStream, timeout: Duration) -> std::io::Result<Option<Head>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_HEAD];
    loop {
        let n = tokio::time::timeout_at(deadline, tcp.peek(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head"))??;
        if n == 0 {
            return Ok(None);
        }
        match parse_head(&buf[..n]) {
            Ok(Some(h)) => return Ok(Some(h)),
            Err(_) => return Ok(None),
            Ok(None) if n == buf.len() => return Ok(None),
            // The rest of the head is on its way: peek returns at once while
            // anything is buffered, so wait a little before looking again.
            Ok(None) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "request head",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

/// A response before it is written.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// The page of another host of the run (its origin) may read this.
    pub allow_origin: Option<String>,
}

impl Response {
    fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            content_type,
            body: body.into(),
            allow_origin: None,
        }
    }
    /// Lets the dashboard of another host of the run read this response.
    fn for_origin(mut self, origin: Option<&str>, cluster: &Cluster) -> Self {
        self.allow_origin = origin
            .filter(|o| is_run_origin(o, cluster))
            .map(str::to_string);
        self
    }

    fn text(status: u16, body: &str) -> Self {
        Response::new(status, "text/plain; charset=utf-8", body.as_bytes())
    }

    fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            503 => "Service Unavailable",
            _ => "Error",
        }
    }

    /// The bytes on the wire (no body for `HEAD`).
    pub fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
            self.status,
            self.reason(),
            self.content_type,
            self.body.len()
        );
        if self.content_type.starts_with("text/html") {
            // The page loads only its own assets; it talks to this host's
            // websocket and reads the other hosts' snapshots.
            out.push_str("Content-Security-Policy: default-src 'self'; connect-src 'self' ws: wss: http: https:; img-src 'self' data:; frame-ancestors 'none'\r\n");
        }
        if let Some(origin) = &self.allow_origin {
            // The dashboard of another host of the run reads this one.
            out.push_str(&format!(
                "Access-Control-Allow-Origin: {origin}\r\nVary: Origin\r\n"
            ));
        }
        out.push_str("Connection: close\r\n\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// Whether `origin` is the dashboard of a host of this run: its control
/// address, or — for a control listening on all addresses — that port on
/// loopback or on an address the file names for one of the run's hosts
/// (`listen`, `advertise`, `control`). Any other name is refused: with
/// `0.0.0.0` a page at `http://anything:PORT` is not the run's page.
pub fn is_run_origin(origin: &str, cluster: &Cluster) -> bool {
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let Some((name, port)) = rest.rsplit_once(':') else {
        return false;
    };
    let named = |ip: std::net::IpAddr| {
        ip.is_loopback()
            || cluster.hosts.iter().any(|h| {
                [Some(h.listen), h.control]
                    .into_iter()
                    .flatten()
                    .map(|a| a.ip())
                    .chain(h.advertise.ip())
                    .any(|a| !a.is_unspecified() && a == ip)
            })
    };
    // A host advertised by DNS name (a pod's) is the run's page by that name.
    let dns_named = cluster.hosts.iter().any(
        |h| matches!(&h.advertise, edgemu_config::PeerAddr::Name { host, .. } if host == name),
    );
    let ip = name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .ok();
    let known = name == "localhost" || dns_named || ip.is_some_and(named);
    cluster.hosts.iter().filter_map(|h| h.control).any(|addr| {
        rest == addr.to_string()
            || (addr.ip().is_unspecified() && known && port == addr.port().to_string())
    })
}

/// `since=N` from a query string.
fn since(query: Option<&str>) -> u64 {
    query
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("since="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Answers one plain HTTP request and closes the connection.
pub async fn serve(mut tcp: TcpStream, head: Head, web: &Web, sup: &Addr<Supervisor>) {
    // Consume the head we peeked, so closing does not reset the connection.
    let mut consumed = vec![0u8; head.len];
    if tcp.read_exact(&mut consumed).await.is_err() {
        return;
    }
    let head_only = head.method == "HEAD";
    let response = if head.method != "GET" && !head_only {
        Response::text(
            405,
            "only GET and HEAD are served here; commands go over the control websocket\n",
        )
    } else {
        route(&head, web, sup).await
    };
    let bytes = response.to_bytes(head_only);
    let write = async {
        tcp.write_all(&bytes).await?;
        tcp.shutdown().await
    };
    if let Err(e) = tokio::time::timeout(Duration::from_secs(10), write).await {
        tracing::debug!("dashboard response not written: {e}");
    }
}

async fn route(head: &Head, web: &Web, sup: &Addr<Supervisor>) -> Response {
    if let Some((content_type, body)) = assets::get(&head.path) {
        return Response::new(200, content_type, body);
    }
    match head.path.as_str() {
        "/metrics" => match tokio::time::timeout(SNAPSHOT_TIMEOUT, sup.send(TakeSnapshot)).await {
            Ok(Ok(snapshot)) => match web.metrics.encode_as(&snapshot, head.format) {
                Ok(text) => Response::new(200, head.format.content_type(), text)
                    .for_origin(head.origin.as_deref(), &web.cluster),
                Err(e) => Response::text(503, &format!("encoding metrics: {e}\n")),
            },
            _ => Response::text(503, "the host did not answer (run ending?)\n"),
        },
        "/api/snapshot" => {
            match tokio::time::timeout(SNAPSHOT_TIMEOUT, sup.send(TakeSnapshot)).await {
                Ok(Ok(snapshot)) => {
                    let v = web.snapshot_json(&snapshot, since(head.query.as_deref()));
                    Response::new(200, "application/json", v.to_string())
                        .for_origin(head.origin.as_deref(), &web.cluster)
                }
                _ => Response::text(503, "the host did not answer (run ending?)\n"),
            }
        }
        _ => Response::text(404, "not found; try / or /metrics\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_told_apart() {
        let ws = b"GET /?token=x HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
        let h = parse_head(ws).expect("ok").expect("complete");
        assert!(h.websocket);
        assert_eq!(h.path, "/");
        assert_eq!(h.query.as_deref(), Some("token=x"));
        assert_eq!(h.len, ws.len());

        let get = b"GET /api/snapshot?since=5 HTTP/1.1\r\nHost: a\r\n\r\n";
        let h = parse_head(get).expect("ok").expect("complete");
        assert!(!h.websocket);
        assert_eq!(h.method, "GET");
        assert_eq!(since(h.query.as_deref()), 5);

        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
        assert!(parse_head(b"\x00\x01garbage\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn a_head_that_arrives_in_pieces_is_peeked_whole_and_not_consumed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.write_all(b"GET /metrics HTTP/1.1\r\nHo")
                .await
                .expect("w");
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.write_all(b"st: a\r\nAccept: application/openmetrics-text\r\n\r\n")
                .await
                .expect("w");
            c
        });
        let (server, _) = listener.accept().await.expect("accept");
        let head = peek_head(&server, Duration::from_secs(5))
            .await
            .expect("peek")
            .expect("head");
        assert_eq!(head.path, "/metrics");
        assert_eq!(head.format, Format::OpenMetrics);
        assert!(!head.websocket);
        // Still unread: the websocket handshake would see every byte.
        let mut buf = vec![0u8; head.len];
        let n = server.peek(&mut buf).await.expect("peek again");
        assert_eq!(n, head.len);
        drop(client.await);
    }

    #[tokio::test]
    async fn a_silent_client_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let r = peek_head(&server, Duration::from_millis(50)).await;
        assert!(r.is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut));
    }

    #[test]
    fn responses_close_and_state_their_length() {
        let r = Response::text(404, "nope\n");
        let bytes = String::from_utf8(r.to_bytes(false)).expect("utf8");
        assert!(bytes.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(bytes.contains("Content-Length: 5\r\n"));
        assert!(bytes.contains("Connection: close\r\n"));
        assert!(bytes.ends_with("\r\n\r\nnope\n"));
        let head = String::from_utf8(r.to_bytes(true)).expect("utf8");
        assert!(head.ends_with("\r\n\r\n"));
        let html = Response::new(200, "text/html; charset=utf-8", "<p>");
        let text = String::from_utf8(html.to_bytes(false)).expect("utf8");
        assert!(text.contains("Content-Security-Policy: default-src 'self'"));
        assert!(!text.contains("Access-Control-Allow-Origin"));
    }

    #[test]
    fn only_pages_of_the_runs_hosts_may_read_across_origins() {
        let text = "[run]\nduration = \"1s\"\n[[hosts]]\nname = \"a\"\nlisten = \"127.0.0.1:7101\"\ncontrol = \"127.0.0.1:7201\"\n[[hosts]]\nname = \"b\"\nlisten = \"127.0.0.1:7102\"\ncontrol = \"0.0.0.0:7202\"\n";
        let c = Cluster::from_str(text, std::path::Path::new("t.toml")).expect("cluster");
        assert!(is_run_origin("http://127.0.0.1:7201", &c));
        assert!(is_run_origin("http://127.0.0.1:7202", &c));
        assert!(is_run_origin("http://localhost:7202", &c));
        assert!(is_run_origin("http://[::1]:7202", &c));
        // 0.0.0.0 is not "any origin with that port".
        assert!(!is_run_origin("http://box.lan:7202", &c));
        assert!(!is_run_origin("http://evil.example:7202", &c));
        assert!(!is_run_origin("http://10.9.9.9:7202", &c));
        assert!(!is_run_origin("http://127.0.0.1:7101", &c));
        assert!(!is_run_origin("http://127.0.0.1:7202x", &c));
        assert!(!is_run_origin("http://evil.example", &c));
        assert!(!is_run_origin("https://127.0.0.1:7201", &c));
        let r = Response::text(200, "x").for_origin(Some("http://127.0.0.1:7201"), &c);
        let bytes = String::from_utf8(r.to_bytes(false)).expect("utf8");
        assert!(bytes.contains("Access-Control-Allow-Origin: http://127.0.0.1:7201\r\n"));
        let r = Response::text(200, "x").for_origin(Some("http://evil.example"), &c);
        assert!(r.allow_origin.is_none());
    }
}
