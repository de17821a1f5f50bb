//! The benchmarks' own plain HTTP/1 client ([`HttpClient`]): load generation against a URL
//! (recache or an engine, whichever a mode measures), JSON POSTs, metric scrapes and the
//! engine calls every benchmark needs (its first model, tokenize). Calls recache itself makes
//! to engines go through `recache::client::EngineClient`; a benchmark must be able to bypass it.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use serde_json::{Value, json};

use crate::error::BenchError;

/// A pooled HTTP/1 client over plain TCP.
pub type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// POSTs JSON; returns the status and the answer as JSON (text wrapped in a string if not JSON).
pub async fn post(
    client: &HttpClient,
    url: &str,
    body: &Value,
) -> Result<(u16, Value), BenchError> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| BenchError::Setup(format!("{url}: {e}")))?;
    let resp = client
        .request(req)
        .await
        .map_err(|e| BenchError::Setup(format!("POST {url}: {e}")))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| BenchError::Setup(format!("reading {url}: {e}")))?
        .to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Ok((status, value))
}

/// POSTs a streaming JSON request and reads the answer to its end: (status, milliseconds to
/// the first body bytes — the first token of an SSE stream —, milliseconds to the end).
pub async fn post_stream_timed(
    client: &HttpClient,
    url: &str,
    body: &Value,
) -> Result<(u16, f64, f64), BenchError> {
    let t = post_stream_timed_full(client, url, body).await?;
    Ok((t.status, t.first_ms, t.total_ms))
}

/// What [`post_stream_timed_full`] read.
#[derive(Debug, Clone)]
pub struct StreamTimed {
    pub status: u16,
    pub first_ms: f64,
    pub total_ms: f64,
    /// The body's first 300 bytes when the status is not 2xx (why it failed).
    pub error_body: Option<String>,
}

/// As [`post_stream_timed`], keeping the start of an error answer's body.
pub async fn post_stream_timed_full(
    client: &HttpClient,
    url: &str,
    body: &Value,
) -> Result<StreamTimed, BenchError> {
    let req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| BenchError::Setup(format!("{url}: {e}")))?;
    let sent = std::time::Instant::now();
    let resp = client
        .request(req)
        .await
        .map_err(|e| BenchError::Setup(format!("POST {url}: {e}")))?;
    let status = resp.status().as_u16();
    let failed = !resp.status().is_success();
    let mut body = resp.into_body();
    let mut first = None;
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BenchError::Setup(format!("reading {url}: {e}")))?;
        if let Some(d) = frame.data_ref() {
            if !d.is_empty() && first.is_none() {
                first = Some(sent.elapsed().as_secs_f64() * 1000.0);
            }
            if failed && kept.len() < 300 {
                kept.extend_from_slice(&d[..d.len().min(300 - kept.len())]);
            }
        }
    }
    let total = sent.elapsed().as_secs_f64() * 1000.0;
    Ok(StreamTimed {
        status,
        first_ms: first.unwrap_or(total),
        total_ms: total,
        error_body: failed.then(|| String::from_utf8_lossy(&kept).into_owned()),
    })
}

pub async fn get_text(client: &HttpClient, url: &str) -> Result<String, BenchError> {
    let uri = url
        .parse()
        .map_err(|e| BenchError::Setup(format!("{url}: {e}")))?;
    let resp = client
        .get(uri)
        .await
        .map_err(|e| BenchError::Setup(format!("GET {url}: {e}")))?;
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| BenchError::Setup(format!("reading {url}: {e}")))?
        .to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into())
}

/// A counter from the engine's Prometheus text, summed over label sets.
pub fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The first served model of the engine.
pub async fn first_model(client: &HttpClient, upstream: &str) -> Result<String, BenchError> {
    let text = get_text(client, &format!("{upstream}/v1/models")).await?;
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| BenchError::Setup(format!("{upstream}/v1/models lists no model: {text}")))
}

pub async fn tokenize(
    client: &HttpClient,
    upstream: &str,
    model: &str,
    text: &str,
) -> Result<Vec<u32>, BenchError> {
    let body = json!({"model": model, "prompt": text, "add_special_tokens": false});
    let (status, v) = post(client, &format!("{upstream}/tokenize"), &body).await?;
    v["tokens"]
        .as_array()
        .and_then(|a| a.iter().map(|t| t.as_u64().map(|t| t as u32)).collect())
        .ok_or_else(|| BenchError::Setup(format!("{upstream}/tokenize answered {status}: {v}")))
}
