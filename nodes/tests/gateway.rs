//! The OpenAI-compatible gateway in a real-time run on two hosts, driven
//! as a client would: `/v1/models`, a chat completion, a streamed
//! completion with usage, two requests on one kept-alive connection, bad
//! requests answered with OpenAI errors, `/metrics` with vLLM's names, a
//! stream cut by killed servers ending in an error event (never a hang),
//! and one `requests.csv` row per request. The example file
//! `examples/openai-edge.toml` is checked to load as documented.

mod common;

use common::*;
use edgemu_nodes::run::load;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One HTTP response: status, headers (lower-case names), body (chunked
/// bodies decoded).
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream.
    fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

fn read_response(r: &mut BufReader<TcpStream>) -> Response {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("code");
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').expect("header line");
        headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    let get = |n: &str| headers.iter().find(|(h, _)| h == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v == "chunked") {
        loop {
            line.clear();
            r.read_line(&mut line).expect("chunk size");
            let n = usize::from_str_radix(line.trim(), 16).expect("hex size");
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).expect("chunk");
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let n: usize = get("content-length").map_or(0, |v| v.parse().expect("length"));
        body.resize(n, 0);
        r.read_exact(&mut body).expect("body");
    }
    Response {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

fn send(s: &mut TcpStream, method: &str, path: &str, body: Option<&Value>, close: bool) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n{body}",
        body.len(),
        if close { "close" } else { "keep-alive" }
    );
    s.write_all(req.as_bytes()).expect("send");
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s
}

fn call(port: u16, method: &str, path: &str, body: Option<Value>) -> Response {
    let mut s = connect(port);
    send(&mut s, method, path, body.as_ref(), true);
    read_response(&mut BufReader::new(s))
}

fn chat(max_tokens: u32, stream: bool) -> Value {
    json!({
        "model": "edge-test",
        "messages": [{"role": "user", "content": "How far is the edge?"}],
        "max_tokens": max_tokens,
        "stream": stream,
    })
}

/// A run on two hosts: gateway `gw` (with `gateway_keys`) on `phones`,
/// servers `s0` (RTX 3080) and `s1` (RTX 4090) behind 5 ms links and a
/// least-loaded scheduler with 100 ms slots on `edge`. Returns the file's
/// text, the gateway's HTTP port and `phones`' control port.
fn two_host_gateway(gateway_keys: &str) -> (String, u16, u16) {
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let (http, control) = (ports[3], ports[1]);
    let text = format!(
        r#"
[run]
name = "gw"
duration = "60s"
results = "results"
token_env = "EDGEMU_TEST_GATEWAY_TOKEN_UNSET"

[[hosts]]
name = "phones"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{control}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{}"

[[actors]]
name = "gw"
host = "phones"
kind = "gateway"
scheduler = "sched"
listen = "127.0.0.1:{http}"
{gateway_keys}

[[actors]]
name = "s0"
host = "edge"
kind = "server"
gpu = "rtx3080"

[[actors]]
name = "s1"
host = "edge"
kind = "server"
gpu = "rtx4090"

[[links]]
name = "gw-s0"
a = "gw"
b = "s0"
delay = "5ms"

[[links]]
name = "gw-s1"
a = "gw"
b = "s1"
delay = "5ms"
"#,
        ports[0], ports[2]
    ) + &scheduler_toml("edge", "100ms");
    (text, http, control)
}

#[test]
fn an_openai_client_is_served_through_the_emulated_edge() {
    let dir = temp_dir("gateway");
    let (text, http, control) = two_host_gateway(
        "served_model_name = \"edge-test\"\nmax_tokens = 8\nmax_output = 4000\ntimeout = \"20s\"",
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    let run = LiveRun::start(&cluster, "gw", control);
    wait_for_port(http, "the gateway");

    // The model list names the served id.
    let m = call(http, "GET", "/v1/models", None);
    assert_eq!(m.status, 200);
    assert_eq!(m.json()["data"][0]["id"], "edge-test");

    // A chat completion: the gateway's default of 8 tokens, all of them.
    let r = call(
        http,
        "POST",
        "/v1/chat/completions",
        Some(chat(8, false)).map(|mut v| {
            v.as_object_mut().unwrap().remove("max_tokens");
            v
        }),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        8,
        "one placeholder word per modeled token"
    );

    // A streamed completion with usage: one event per token (the link
    // delivers each iteration's token on its own), the finish, the usage,
    // then [DONE].
    let body = json!({"model": "edge-test", "prompt": "The edge", "max_tokens": 5,
        "stream": true, "stream_options": {"include_usage": true}});
    let r = call(http, "POST", "/v1/completions", Some(body));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let ev = r.events();
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{}", r.body);
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text.split_whitespace().count(), 5, "{}", r.body);
    assert_eq!(chunks.len(), 5 + 2, "{}", r.body);
    assert_eq!(chunks[5]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["usage"]["completion_tokens"], 5);
    assert_eq!(chunks[6]["usage"]["prompt_tokens"], 2, "8 bytes ≈ 2 tokens");

    // Two requests on one kept-alive connection.
    let mut s = connect(http);
    let mut reader = BufReader::new(s.try_clone().expect("clone"));
    for _ in 0..2 {
        send(
            &mut s,
            "POST",
            "/v1/chat/completions",
            Some(&chat(3, false)),
            false,
        );
        let r = read_response(&mut reader);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("connection"), Some("keep-alive"));
        assert_eq!(r.json()["usage"]["completion_tokens"], 3);
    }
    drop((s, reader));

    // Bad requests: OpenAI-style errors that say what is wrong.
    let bad = [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
            404,
            "does not exist",
        ),
        (
            "/v1/chat/completions",
            chat(5000, false),
            400,
            "at most 4000",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "edge-test", "messages": "hi"}),
            400,
            "messages",
        ),
        (
            "/v1/completions",
            json!({"model": "edge-test", "prompt": "x", "n": 3}),
            400,
            "`n` must be 1",
        ),
        ("/v1/embeddings", json!({}), 404, "no route"),
    ];
    for (path, body, status, says) in bad {
        let r = call(http, "POST", path, Some(body));
        assert_eq!(r.status, status, "{path}: {}", r.body);
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains(says), "{path}: {msg}");
    }
    let mut s = connect(http);
    s.write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 7\r\n\r\n{oops}}")
        .expect("send");
    let r = read_response(&mut BufReader::new(s));
    assert_eq!(r.status, 400);
    assert!(r.body.contains("not valid JSON"), "{}", r.body);

    // Metrics under vLLM's names, on the gateway and on the host.
    let m = call(http, "GET", "/metrics", None);
    assert!(
        m.body.contains(r#"vllm:request_success_total{model_name="edge-test",gateway="gw",finished_reason="length"} 4"#),
        "{}",
        m.body
    );
    assert!(m.body.contains(
        "vllm:time_to_first_token_seconds_count{model_name=\"edge-test\",gateway=\"gw\"} 4"
    ));

    // A long stream, then both servers are killed: the stream ends with
    // an error event and [DONE], well before the gateway's timeout.
    let mut s = connect(http);
    send(
        &mut s,
        "POST",
        "/v1/chat/completions",
        Some(&chat(3000, true)),
        true,
    );
    let mut reader = BufReader::new(s);
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("stream");
        assert!(n > 0, "the stream ended before its first token");
        if line.contains("\"delta\"") {
            break;
        }
    }
    for server in ["s0", "s1"] {
        let r = run.ask(json!({"cmd": "actor.kill", "actor": server}));
        assert_eq!(r["errors"], json!([]), "{r}");
    }
    let killed_at = Instant::now();
    let mut rest = String::new();
    reader
        .read_to_string(&mut rest)
        .expect("rest of the stream");
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "the stream ended promptly"
    );
    assert!(
        rest.contains(r#""error""#) && rest.contains("server killed"),
        "{rest}"
    );
    assert!(rest.contains("data: [DONE]"), "{rest}");

    // With the servers dead, a request fails rather than hangs.
    let r = call(http, "POST", "/v1/chat/completions", Some(chat(2, false)));
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.body.contains("server down") || r.body.contains("no assignment"),
        "{}",
        r.body
    );

    run.stop();

    // One row per request in the gateway's host's requests.csv.
    let reqs = requests(&dir.join("results/gw/phones/requests.csv"));
    assert_eq!(reqs.len(), 6, "every request the gateway took has a row");
    assert!(reqs.iter().all(|r| r.user == "gw"));
    assert_eq!(reqs.iter().filter(|r| r.outcome == "served").count(), 4);
    let failed: Vec<&str> = reqs
        .iter()
        .filter(|r| r.outcome == "failed")
        .map(|r| r.reason.as_str())
        .collect();
    assert!(failed.contains(&"server killed"), "{failed:?}");
    for r in reqs.iter().filter(|r| r.outcome == "served") {
        let e2e = r.e2e.expect("e2e");
        let parts: f64 = r.parts.iter().sum();
        assert!(
            e2e > parts + 0.004,
            "e2e {e2e} includes the 5 ms downlink beyond sched+upload+wait+prefill+decode {parts}"
        );
    }
}

/// A gateway whose HTTP has a thread of its own serves as the default one
/// does, and a request still open at the gateway's `timeout` is answered
/// 504 then (its deadline is one of many behind the actor's one timer),
/// while requests that end sooner are served in between.
#[test]
fn a_gateway_on_its_own_thread_times_out_what_runs_too_long() {
    let dir = temp_dir("gateway-own");
    let (text, http, control) = two_host_gateway(
        "http_thread = \"own\"\nserved_model_name = \"edge-test\"\nmax_output = 4000\ntimeout = \"3s\"",
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    assert!(cluster.describe().contains("(HTTP on its own thread)"));
    let run = LiveRun::start(&cluster, "gw", control);
    wait_for_port(http, "the gateway");

    let long = std::thread::spawn(move || {
        let started = Instant::now();
        let r = call(
            http,
            "POST",
            "/v1/chat/completions",
            Some(chat(4000, false)),
        );
        (r, started.elapsed())
    });
    for _ in 0..3 {
        let r = call(http, "POST", "/v1/chat/completions", Some(chat(4, false)));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["usage"]["completion_tokens"], 4);
    }
    let (r, took) = long.join().expect("the long request's thread");
    assert_eq!(r.status, 504, "{}", r.body);
    assert!(r.body.contains("timeout"), "{}", r.body);
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(10),
        "answered at the gateway's 3 s timeout, not {took:?}"
    );
    run.stop();
    let reqs = requests(&dir.join("results/gw/phones/requests.csv"));
    assert_eq!(reqs.len(), 4, "one row per request");
    assert_eq!(reqs.iter().filter(|r| r.outcome == "served").count(), 3);
    assert!(reqs
        .iter()
        .any(|r| r.outcome == "failed" && r.reason == "timeout"));
}

#[test]
fn the_example_edge_loads_with_its_gateway() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/openai-edge.toml");
    let cluster = load(&path).expect("examples/openai-edge.toml loads");
    let gw = cluster
        .actors
        .iter()
        .find_map(|a| match &a.kind {
            edgemu_config::ActorKind::Gateway(g) => Some(g),
            _ => None,
        })
        .expect("a gateway");
    assert_eq!(gw.listen.to_string(), "127.0.0.1:8000");
    assert_eq!(gw.served_model_name, "edgemu-modeled");
    assert!(cluster
        .describe()
        .contains("OpenAI-compatible gateway on http://127.0.0.1:8000"));
}

/// With the model's tokenizer at the gateway and SmolLM2 on the server,
/// the prompt reaches the model as its real tokens and the answer comes
/// back as the model's text, ended by the model (`stop`).
#[test]
fn a_real_model_answers_through_the_gateway() {
    if edgemu_tokenizer::resolve_model_path(None).is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI must have the model (scripts/fetch-model.sh)"
        );
        eprintln!("skipped: SmolLM2 absent");
        return;
    }
    let dir = temp_dir("gateway-real");
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let (http, control) = (ports[3], ports[1]);
    let text = format!(
        r#"
[run]
name = "gwr"
duration = "120s"
results = "results"
token_env = "EDGEMU_TEST_GATEWAY_TOKEN_UNSET"

[[hosts]]
name = "phones"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{control}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{}"

[[actors]]
name = "gw"
host = "phones"
kind = "gateway"
scheduler = "sched"
listen = "127.0.0.1:{http}"
model = "smollm2"

[[actors]]
name = "sched"
host = "edge"
kind = "scheduler"
servers = ["e0"]
slot = "100ms"

[[actors]]
name = "e0"
host = "edge"
kind = "server"
backend = "real"
gpu = "rtx4090"
"#,
        ports[0], ports[2]
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    let run = LiveRun::start(&cluster, "gwr", control);
    wait_for_port(http, "the gateway");
    let question = "What is the capital of France?";
    let body = json!({
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 24,
    });
    let mut s = connect(http);
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    send(&mut s, "POST", "/v1/chat/completions", Some(&body), true);
    let r = read_response(&mut BufReader::new(s));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let answer = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(answer.contains("Paris"), "{answer}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    // The prompt went as the chat template's real tokens.
    let path = edgemu_tokenizer::resolve_model_path(None).expect("model");
    let meta = edgemu_tokenizer::GgufMetadata::open(&path).expect("gguf");
    let tok = edgemu_tokenizer::Tokenizer::from_gguf(&meta).expect("tokenizer");
    let tpl = edgemu_tokenizer::ChatTemplate::from_jinja(
        meta.string("tokenizer.chat_template").expect("template"),
    )
    .expect("chatml");
    let prompt = tpl.render(
        &[edgemu_tokenizer::ChatMessage::new("user", question)],
        true,
    );
    assert_eq!(v["usage"]["prompt_tokens"], tok.encode(&prompt).len());
    run.stop();
}

/// A server with `backend = "openai"` whose serving stack is another
/// running OpenAI-compatible server (here a second edgemu cluster's
/// gateway, with modeled servers): a client's chat through the first
/// gateway comes back with the backend's text, token by token; a user's
/// request of given lengths is served in full (`ignore_eos`); killing the
/// backend fails the request in flight with the backend's reason.
#[test]
fn an_external_openai_server_serves_as_an_edge_server() {
    let dir = temp_dir("gateway-external");
    let p: Vec<u16> = (0..8).map(|_| free_port()).collect();
    // The backend: one host, a gateway in front of two modeled servers.
    let backend = format!(
        r#"
[run]
name = "backend"
duration = "60s"
results = "results"
token_env = "EDGEMU_TEST_GATEWAY_TOKEN_UNSET"

[[hosts]]
name = "b"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[actors]]
name = "bgw"
host = "b"
kind = "gateway"
scheduler = "sched"
listen = "127.0.0.1:{}"
served_model_name = "remote-model"
max_output = 4000
"#,
        p[0], p[1], p[2]
    ) + &scheduler_toml("b", "50ms")
        + "\n[[actors]]\nname = \"s0\"\nhost = \"b\"\nkind = \"server\"\ngpu = \"rtx4090\"\n\n[[actors]]\nname = \"s1\"\nhost = \"b\"\nkind = \"server\"\ngpu = \"rtx4090\"\n";
    // The edge: a gateway and a user on `phones`, one server on `edge`
    // whose backend is the cluster above.
    let http = p[5];
    let edge = format!(
        r#"
[run]
name = "edge"
duration = "60s"
results = "results"
token_env = "EDGEMU_TEST_GATEWAY_TOKEN_UNSET"

[[hosts]]
name = "phones"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{}"

[[actors]]
name = "gw"
host = "phones"
kind = "gateway"
scheduler = "esched"
listen = "127.0.0.1:{http}"

[[actors]]
name = "u0"
host = "phones"
kind = "user"
scheduler = "esched"
max_input = 20
max_output = 6
stop = "1500ms"

[[actors]]
name = "esched"
host = "edge"
kind = "scheduler"
servers = ["ext"]
slot = "100ms"

[[actors]]
name = "ext"
host = "edge"
kind = "server"
backend = "openai"
url = "http://127.0.0.1:{}/v1"
model = "remote-model"
gpu = "rtx3090"
timeout = "20s"

[[links]]
name = "gw-ext"
a = "gw"
b = "ext"
delay = "5ms"
"#,
        p[3], p[4], p[6], p[2]
    );
    let load_at = |name: &str, text: &str| {
        let cfg = write(&dir, name, text);
        load(&cfg).expect("load")
    };
    let b = load_at("backend.toml", &backend);
    let e = load_at("edge.toml", &edge);
    assert!(e
        .describe()
        .contains("OpenAI-compatible backend: model \"remote-model\""));
    let backend_run = LiveRun::start(&b, "b", p[1]);
    let edge_run = LiveRun::start(&e, "e", p[4]);
    wait_for_port(http, "the gateway");

    // The backend's text, streamed through the edge server and gateway.
    let body = json!({"model": "edgemu-modeled", "max_tokens": 6, "stream": true,
        "messages": [{"role": "user", "content": "hello"}]});
    let r = call(http, "POST", "/v1/chat/completions", Some(body));
    assert_eq!(r.status, 200, "{}", r.body);
    let ev = r.events();
    let text: String = ev
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, " edge token model link server cell", "{}", r.body);
    assert!(ev.len() >= 6 + 2, "one event per token: {}", r.body);

    // Wait for the user's requests (issued until 1.5 s) to be answered.
    std::thread::sleep(Duration::from_millis(2500));

    // A long request, then the backend's servers are killed: it fails.
    let mut s = connect(http);
    send(
        &mut s,
        "POST",
        "/v1/chat/completions",
        Some(&json!({"model": "edgemu-modeled",
        "max_tokens": 2000, "stream": true, "messages": [{"role": "user", "content": "x"}]})),
        true,
    );
    let mut reader = BufReader::new(s);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("stream");
        assert!(n > 0, "the stream ended before its first token: {seen}");
        seen.push_str(&line);
        if line.contains("\"content\"") {
            break;
        }
    }
    for server in ["s0", "s1"] {
        backend_run.ask(json!({"cmd": "actor.kill", "actor": server}));
    }
    let mut rest = String::new();
    reader
        .read_to_string(&mut rest)
        .expect("rest of the stream");
    assert!(
        rest.contains("backend: the backend reported an error"),
        "{rest}"
    );

    edge_run.stop();
    backend_run.stop();
    let reqs = requests(&dir.join("results/e/phones/requests.csv"));
    let user: Vec<&RequestRow> = reqs.iter().filter(|r| r.user == "u0").collect();
    assert!(!user.is_empty());
    assert!(
        user.iter()
            .all(|r| r.outcome == "served" && r.server == "ext"),
        "{:?}",
        user.iter()
            .map(|r| (r.slot, &r.outcome, &r.server, &r.reason))
            .collect::<Vec<_>>()
    );
    let slots =
        std::fs::read_to_string(dir.join("results/e/edge/server_slots.csv")).expect("slots");
    assert!(
        slots.lines().any(|l| l.contains(",ext,rtx3090,openai,")),
        "{slots}"
    );
}

/// llama.cpp's server (PyPI `llama-cpp-python[server]`, SmolLM2's GGUF) as
/// an edge server's serving stack: a chat through the gateway is answered
/// by llama.cpp with the model's own text. Runs where that package and the
/// model are installed (CI does not build llama.cpp: ~5 min on 2 cores; it
/// runs the same path against an edgemu gateway above).
/// A child process killed when the test ends, however it ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn llama_cpp_serves_as_an_edge_server_where_installed() {
    let has = std::process::Command::new("python3")
        .args(["-c", "import llama_cpp.server"])
        .status()
        .is_ok_and(|s| s.success());
    let Ok(model) = edgemu_tokenizer::resolve_model_path(None) else {
        eprintln!("skipped: SmolLM2 absent");
        return;
    };
    if !has {
        eprintln!(
            "skipped: python3 has no llama_cpp.server (pip install 'llama-cpp-python[server]')"
        );
        return;
    }
    let p: Vec<u16> = (0..5).map(|_| free_port()).collect();
    let llama = p[4];
    let server = KillOnDrop(
        std::process::Command::new("python3")
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(&model)
            .args(["--port", &llama.to_string(), "--n_ctx", "2048"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start llama.cpp's server"),
    );
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", llama)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "llama.cpp never listened"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dir = temp_dir("gateway-llama");
    let http = p[3];
    let text = format!(
        r#"
[run]
name = "llama"
duration = "60s"
results = "results"
token_env = "EDGEMU_TEST_GATEWAY_TOKEN_UNSET"

[[hosts]]
name = "phones"
listen = "127.0.0.1:{}"
control = "127.0.0.1:{}"

[[hosts]]
name = "edge"
listen = "127.0.0.1:{}"

[[actors]]
name = "gw"
host = "phones"
kind = "gateway"
scheduler = "sched"
listen = "127.0.0.1:{http}"
model = "smollm2"

[[actors]]
name = "sched"
host = "edge"
kind = "scheduler"
servers = ["llama"]
slot = "100ms"

[[actors]]
name = "llama"
host = "edge"
kind = "server"
backend = "openai"
url = "http://127.0.0.1:{llama}/v1"
model = "smollm2"

[[links]]
name = "gw-llama"
a = "gw"
b = "llama"
delay = "10ms"
"#,
        p[0], p[1], p[2]
    );
    let cfg = write(&dir, "cluster.toml", &text);
    let cluster = load(&cfg).expect("load");
    let run = LiveRun::start(&cluster, "l", p[1]);
    wait_for_port(http, "the gateway");
    let r = call(
        http,
        "POST",
        "/v1/chat/completions",
        Some(json!({"model": "SmolLM2-135M-Instruct", "max_tokens": 24,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]})),
    );
    // The same prompt asked of llama.cpp directly (the gateway renders
    // the chat with SmolLM2's template and sends the text).
    let meta = edgemu_tokenizer::GgufMetadata::open(&model).expect("gguf");
    let tpl = edgemu_tokenizer::ChatTemplate::from_jinja(
        meta.string("tokenizer.chat_template").expect("template"),
    )
    .expect("chatml");
    let prompt = tpl.render(
        &[edgemu_tokenizer::ChatMessage::new(
            "user",
            "What is the capital of France?",
        )],
        true,
    );
    let direct = call(
        llama,
        "POST",
        "/v1/completions",
        Some(json!({"model": "smollm2", "prompt": prompt, "max_tokens": 24, "temperature": 0})),
    );
    drop(server);
    run.stop();
    assert_eq!(r.status, 200, "{}", r.body);
    let answer = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let expected = direct.json()["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!answer.is_empty());
    assert_eq!(answer, expected, "through the edge vs llama.cpp directly");
}
