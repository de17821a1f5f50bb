//! HTTP-level fuzz targets against a real recache on loopback (harness: `tests/support`, in
//! front of a fake engine answering `{"ok":true}`): `http_openai` (mutated `/v1/completions`
//! and `/v1/chat/completions` bodies, `recache_rank` extension included), `http_rank`
//! (`/v1/rank` bodies) and `http_admin` (the admin API: methods, tokens, policy and routing
//! bodies). Properties: no panic and no dropped connection, no request over 1 s, every answer
//! ≥ 400 in OpenAI's error shape (`{"error": {"message", "type", "param", "code"}}`), and a
//! 4xx for every input the library's own parser rejects (`validate_body`, `rank::api::parse`,
//! `policy_slot::parse_body`, `Routing` + `check`).
//!
//! 2 s per target by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache --test fuzz_http -- --nocapture`.

#[path = "../../adapters/tests/fuzzkit/json.rs"]
mod fuzzjson;
#[path = "../../adapters/tests/fuzzkit/mod.rs"]
mod fuzzkit;
mod support;

use recache::client::route::Routing;
use recache_adapters::openai::{self, CHAT_COMPLETIONS, COMPLETIONS};
use serde_json::{Value, json};
use support::{FakeUpstream, TestProxy, json as up_json};

/// Asserts OpenAI's error shape on an answer of status ≥ 400.
fn assert_error_shape(status: u16, body: &[u8]) {
    let v: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{status} answer is not JSON ({e}): {}", body.escape_ascii()));
    let err = &v["error"];
    let ok = err["message"].is_string()
        && err["type"].is_string()
        && err
            .get("param")
            .is_some_and(|p| p.is_string() || p.is_null())
        && err
            .get("code")
            .is_some_and(|c| c.is_string() || c.is_null());
    assert!(ok, "{status} answer is not OpenAI-shaped: {v}");
}

/// A proxy in front of a fake engine, on a runtime of its own (the harness is synchronous).
fn start(admin: bool) -> (tokio::runtime::Runtime, FakeUpstream, TestProxy) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (up, proxy) = rt.block_on(async {
        let up = FakeUpstream::start(|_| async { up_json(r#"{"ok":true}"#) }).await;
        let proxy = TestProxy::start(&[up.url()], |a| {
            if admin {
                a.admin_token = Some("t0ken".into());
            }
        })
        .await;
        proxy.wait_ready().await;
        (up, proxy)
    });
    (rt, up, proxy)
}

/// Sends one request; returns (status, body). A dropped connection fails the execution.
async fn send(client: &reqwest::Client, req: reqwest::RequestBuilder) -> (u16, Vec<u8>) {
    let resp = client
        .execute(req.build().expect("request"))
        .await
        .expect("recache answered");
    let status = resp.status().as_u16();
    (status, resp.bytes().await.expect("answer body").to_vec())
}

fn raw(seeds: &[Value]) -> Vec<Vec<u8>> {
    seeds.iter().map(|v| v.to_string().into_bytes()).collect()
}

fn rank_seeds() -> Vec<Value> {
    vec![
        json!({"model": "m", "user": {"id": "u", "text": "hi"},
               "items": [{"id": "a", "tokens": [1, 2]}, {"id": 7, "text": "x"}], "top_k": 1}),
        json!({"user": {"id": 5, "tokens": [3]}, "items": [{"id": "b", "tokens": [4]}],
               "instruction": [9, 9], "mode": "item_prefix", "cache_salt": "s"}),
    ]
}

#[test]
fn http_openai() {
    let (rt, _up, proxy) = start(false);
    let client = reqwest::Client::new();
    let rank = json!({"user": {"id": "u", "tokens": [1]}, "items": [{"id": "a", "tokens": [2]}]});
    let seeds = vec![
        json!({"model": "m", "prompt": "hello", "max_tokens": 4, "stream": false}),
        json!({"model": "m", "prompt": [[1, 2], [3]], "temperature": 0.5, "stop": ["a"]}),
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}),
        json!({"model": "m", "recache_rank": rank, "max_tokens": 1}),
    ];
    let raw = raw(&seeds);
    fuzzkit::run(
        "http_openai",
        |rng| {
            let mut b = vec![rng.below(2) as u8];
            b.extend(fuzzjson::input(rng, &seeds, &raw));
            b
        },
        |input| {
            let path = if input[0] == 0 {
                COMPLETIONS
            } else {
                CHAT_COMPLETIONS
            };
            let body = input[1..].to_vec();
            let rejected = openai::validate_body(path, &body).is_err();
            let ranked = serde_json::from_slice::<Value>(&body)
                .is_ok_and(|v| v.get("recache_rank").is_some());
            let req = client
                .post(proxy.url(path))
                .header("content-type", "application/json");
            let (status, answer) = rt.block_on(send(&client, req.body(body)));
            if rejected && !(ranked && path == COMPLETIONS) {
                assert!(
                    (400..500).contains(&status),
                    "a body validate_body rejects: {status}"
                );
            }
            if status >= 400 {
                assert_error_shape(status, &answer);
            }
        },
    );
}

#[test]
fn http_rank() {
    let (rt, _up, proxy) = start(false);
    let client = reqwest::Client::new();
    let max_items = proxy.state.ranker.rank.config.max_items;
    let seeds = rank_seeds();
    let raw = raw(&seeds);
    fuzzkit::run(
        "http_rank",
        |rng| fuzzjson::input(rng, &seeds, &raw),
        |input| {
            let rejected = recache::rank::api::parse(input, max_items).is_err();
            let req = client.post(proxy.url("/v1/rank")).body(input.to_vec());
            let (status, answer) = rt.block_on(send(&client, req));
            if rejected {
                assert!(
                    (400..500).contains(&status),
                    "a body rank::api::parse rejects: {status}"
                );
            }
            if status >= 400 {
                assert_error_shape(status, &answer);
            }
        },
    );
}

#[test]
fn http_admin() {
    let (rt, _up, proxy) = start(true);
    let client = reqwest::Client::new();
    let seeds = vec![
        json!({"policy": "lfu"}),
        json!({"policy": "laru", "lambda_min_misses": 4}),
        json!({"routing": "prefix", "balance": 0.3}),
        json!({"routing": "round_robin"}),
    ];
    let raw = raw(&seeds);
    let paths = ["/admin/eviction-policy", "/admin/routing"];
    fuzzkit::run(
        "http_admin",
        |rng| {
            // Byte 0: path (bit 0), method (bits 1-2), token (bits 3-4).
            let mut b = vec![rng.next_u64() as u8];
            b.extend(fuzzjson::input(rng, &seeds, &raw));
            b
        },
        |input| {
            let (op, body) = (input[0], input[1..].to_vec());
            let path = paths[usize::from(op & 1)];
            let method = [
                http_put(),
                reqwest::Method::GET,
                reqwest::Method::DELETE,
                http_put(),
            ][usize::from(op >> 1 & 3)]
            .clone();
            let token = ["t0ken", "t0ken", "wrong", ""][usize::from(op >> 3 & 3)];
            let mut req = client
                .request(method.clone(), proxy.url(path))
                .body(body.clone());
            if !token.is_empty() {
                req = req.bearer_auth(token);
            }
            let (status, answer) = rt.block_on(send(&client, req));
            let want: &[u16] = match (token, &method) {
                ("t0ken", &reqwest::Method::GET) => &[200],
                ("t0ken", &reqwest::Method::DELETE) => &[405],
                // 413 past the admin API's 64 KiB body limit.
                ("t0ken", _) if !parses(path, &body) => &[400, 413],
                ("t0ken", _) => &[200, 400, 413],
                _ => &[401],
            };
            assert!(
                want.contains(&status),
                "{method} {path} with token {token:?}: {status}, want {want:?}"
            );
            if status >= 400 {
                assert_error_shape(status, &answer);
            }
        },
    );
}

fn http_put() -> reqwest::Method {
    reqwest::Method::PUT
}

/// Whether the admin API's own parser takes `body` for `path`.
fn parses(path: &str, body: &[u8]) -> bool {
    if path == "/admin/routing" {
        serde_json::from_slice::<Routing>(body).is_ok_and(|r| r.check().is_ok())
    } else {
        recache::policy_slot::parse_body(body).is_ok()
    }
}

/// `http_wire`: mutated raw request heads and bodies on one connection (the lean HTTP/1 path
/// and its hand-over to hyper). Properties: recache answers or closes within the hang limit,
/// never stalls waiting for bytes a complete message did not announce, and a fresh connection
/// is still served normally after every input.
#[test]
fn http_wire() {
    use std::io::{Read, Write};
    let (rt, _up, proxy) = start(false);
    let seeds: Vec<Vec<u8>> = vec![
        b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
        b"POST /v1/x?q=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
        b"POST /v1/x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
            .to_vec(),
        b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(),
        b"GET /v1/a HTTP/1.1\r\nhost: x\r\n\r\nGET /v1/b HTTP/1.0\r\n\r\n".to_vec(),
    ];
    let addr = proxy.addr;
    fuzzkit::run(
        "http_wire",
        |rng| {
            let seed = rng.pick(&seeds).clone();
            fuzzkit::mutate(rng, &seed, &seeds)
        },
        |input| {
            let mut conn = std::net::TcpStream::connect(addr).expect("connect");
            conn.set_read_timeout(Some(std::time::Duration::from_millis(300)))
                .expect("timeout");
            let _ = conn.write_all(input);
            // Half-close: a head or body cut short is recache's to end, not to wait on.
            let _ = conn.shutdown(std::net::Shutdown::Write);
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            let started = std::time::Instant::now();
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut =>
                    {
                        // Every complete request was answered; only keep-alive is left open.
                        break;
                    }
                    Err(_) => break,
                }
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(2),
                    "answer too slow"
                );
            }
            if !answer.is_empty() {
                assert!(
                    answer.starts_with(b"HTTP/1."),
                    "not an HTTP answer: {}",
                    answer.escape_ascii()
                );
            }
            let client = reqwest::Client::new();
            let (status, _) = rt.block_on(send(&client, client.get(proxy.url("/v1/models"))));
            assert_eq!(status, 200, "recache still serves after the input");
        },
    );
}
