//! One request's prefill as vLLM itself measured it: its `/metrics` scraped before and after
//! the request (nothing else in flight). The time is the prefill histogram's sum (vLLM 0.32:
//! from the request's first scheduling to its first token, both engine-core timestamps); the
//! prompt's split is `vllm:prompt_tokens_by_source_total` (computed, local prefix-cache hit,
//! KV connector), which the scheduler sets per request as it admits it. vLLM records a
//! request's stats as its output is processed, which can be just after the answer leaves;
//! [`around`] polls until the histogram's count has moved, with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use recache_adapters::vllm;

use crate::error::BenchError;
use crate::http::{self, HttpClient};

/// How long after its answer a request's stats may take to reach `/metrics`.
const STATS_LIMIT: Duration = Duration::from_secs(10);

/// The counters read from one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scrape {
    pub prefill_s: f64,
    pub prefills: f64,
    pub prompt_tokens: f64,
    pub computed: f64,
    pub local_hits: f64,
    /// Tokens a KV connector supplied.
    pub external_hits: f64,
}

/// The value of `name` summed over its label sets that have every label of `labels` (e.g.
/// `source="local_compute"`), or None when no line matches.
fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut lines = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .peekable();
    lines.peek()?;
    Some(
        lines
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

impl Scrape {
    /// The counters of a vLLM `/metrics` text; the error names a missing metric.
    pub fn parse(text: &str) -> Result<Self, String> {
        let need = |name: &str, source: Option<&str>| {
            let label = source.map(|s| format!("source=\"{s}\""));
            let labels: Vec<&str> = label.iter().map(String::as_str).collect();
            metric(text, name, &labels).ok_or_else(|| {
                let what = label.map_or(name.to_string(), |l| format!("{name}{{{l}}}"));
                format!("the engine's /metrics has no {what} (is it vLLM 0.32?)")
            })
        };
        let by_source = |s| need(vllm::METRIC_PROMPT_TOKENS_BY_SOURCE, Some(s));
        Ok(Self {
            prefill_s: need(vllm::METRIC_PREFILL_SECONDS, None)?,
            prefills: need(vllm::METRIC_PREFILL_COUNT, None)?,
            prompt_tokens: need(vllm::METRIC_PROMPT_TOKENS, None)?,
            computed: by_source(vllm::SOURCE_COMPUTED)?,
            local_hits: by_source(vllm::SOURCE_LOCAL_HIT)?,
            external_hits: by_source(vllm::SOURCE_EXTERNAL)?,
        })
    }

    pub async fn read(client: &HttpClient, metrics_url: &str) -> Result<Self, BenchError> {
        let text = http::get_text(client, metrics_url).await?;
        Self::parse(&text).map_err(|e| BenchError::Setup(format!("{metrics_url}: {e}")))
    }
}

/// What one request moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delta {
    pub prefill_s: f64,
    /// Prefills observed: exactly 1 for a clean measurement.
    pub prefills: u64,
    pub prompt_tokens: u64,
    /// Tokens the engine computed: always a suffix of the prompt (the prefix cache and the
    /// connector both supply a prefix).
    pub computed: u64,
    pub local_hits: u64,
    pub external_hits: u64,
}

impl Delta {
    pub fn between(before: &Scrape, after: &Scrape) -> Self {
        let d = |a: f64, b: f64| (a - b).max(0.0).round() as u64;
        Self {
            prefill_s: (after.prefill_s - before.prefill_s).max(0.0),
            prefills: d(after.prefills, before.prefills),
            prompt_tokens: d(after.prompt_tokens, before.prompt_tokens),
            computed: d(after.computed, before.computed),
            local_hits: d(after.local_hits, before.local_hits),
            external_hits: d(after.external_hits, before.external_hits),
        }
    }

    /// Tokens already in KV when the computed ones ran.
    pub fn prefix(&self) -> u64 {
        self.local_hits + self.external_hits
    }

    /// The split adds up to the prompt (vLLM's invariant; false if the counters were read
    /// mid-update).
    pub fn consistent(&self) -> bool {
        self.computed + self.prefix() == self.prompt_tokens
    }
}

/// Runs `send` (one request, nothing else in flight) between two scrapes of `metrics_url`;
/// the second waits until vLLM has recorded the request's prefill.
pub async fn around<T, F>(
    client: &HttpClient,
    metrics_url: &str,
    send: F,
) -> Result<(T, Delta), BenchError>
where
    F: Future<Output = Result<T, BenchError>>,
{
    let before = Scrape::read(client, metrics_url).await?;
    let out = send.await?;
    let t0 = Instant::now();
    loop {
        let after = Scrape::read(client, metrics_url).await?;
        let delta = Delta::between(&before, &after);
        if delta.prefills >= 1 && delta.prompt_tokens > 0 && delta.consistent() {
            return Ok((out, delta));
        }
        if t0.elapsed() > STATS_LIMIT {
            return Err(BenchError::Setup(format!(
                "{metrics_url}: {} did not move within {}s of the request's answer",
                vllm::METRIC_PREFILL_COUNT,
                STATS_LIMIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.
vllm:request_prefill_time_seconds_sum{engine=\"0\",model_name=\"m\"} 1.5
vllm:request_prefill_time_seconds_count{engine=\"0\",model_name=\"m\"} 3.0
vllm:request_prefill_time_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"m\"} 1.0
vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 5000.0
vllm:prompt_tokens_by_source_total{engine=\"0\",model_name=\"m\",source=\"local_compute\"} 3976.0
vllm:prompt_tokens_by_source_total{engine=\"0\",model_name=\"m\",source=\"local_cache_hit\"} 1024.0
vllm:prompt_tokens_by_source_total{engine=\"0\",model_name=\"m\",source=\"external_kv_transfer\"} 0.0
";

    #[test]
    fn scrape_reads_the_counters_and_names_a_missing_one() {
        let s = Scrape::parse(TEXT).expect("all there");
        assert_eq!(
            s,
            Scrape {
                prefill_s: 1.5,
                prefills: 3.0,
                prompt_tokens: 5000.0,
                computed: 3976.0,
                local_hits: 1024.0,
                external_hits: 0.0,
            }
        );
        let err = Scrape::parse("vllm:prompt_tokens_total 1\n").expect_err("incomplete");
        assert!(err.contains("request_prefill_time_seconds_sum"), "{err}");
        let no_source: String = TEXT
            .lines()
            .filter(|l| !l.contains("external"))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = Scrape::parse(&no_source).expect_err("no connector source");
        assert!(err.contains("source=\"external_kv_transfer\""), "{err}");
    }

    #[test]
    fn delta_splits_the_prompt_into_prefix_and_computed() {
        let before = Scrape::parse(TEXT).expect("parse");
        let after = Scrape {
            prefill_s: 1.75,
            prefills: 4.0,
            prompt_tokens: 8100.0,
            computed: 3976.0 + 1136.0,
            local_hits: 1024.0 + 64.0,
            external_hits: 1900.0,
        };
        let d = Delta::between(&before, &after);
        assert_eq!((d.prefills, d.prompt_tokens), (1, 3100));
        assert!((d.prefill_s - 0.25).abs() < 1e-12);
        assert_eq!((d.computed, d.prefix()), (1136, 1964));
        assert!(d.consistent());
        let torn = Delta {
            computed: 1000,
            ..d
        };
        assert!(!torn.consistent());
    }
}
