//! The compared modes as real `recache serve` children (the binary users run, as `bench soak`
//! does): `plain` is `--slo off`, `slo` is `--slo on`, both in front of the same engine and
//! killed on drop. Also the engine-side helpers between runs: waiting until the engine is
//! idle, and reading the SLO child's `recache_slo_*` metrics.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::{Map, Value};

use crate::error::BenchError;
use crate::http::HttpClient;
use crate::http::{counter, get_text};

/// A compared mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    Slo,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Slo => "slo",
        }
    }

    /// The value of `recache serve --slo`.
    fn flag(self) -> &'static str {
        match self {
            Mode::Plain => "off",
            Mode::Slo => "on",
        }
    }
}

/// `recache serve` as a child process, killed on drop.
pub struct ServeChild {
    child: Child,
    pub base: String,
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeChild {
    /// Starts the mode's child on a free loopback port and waits until it is ready.
    pub async fn start(
        http: &HttpClient,
        mode: Mode,
        upstream: &str,
        engine: recache_adapters::Engine,
    ) -> Result<Self, BenchError> {
        let listen = free_port()?;
        let exe = crate::recache_bin::path()?;
        let child = Command::new(exe)
            .args([
                "serve",
                "--listen",
                &listen.to_string(),
                "--upstream",
                upstream,
            ])
            .args(["--engine", engine.name(), "--slo", mode.flag()])
            // A CPU engine under overload answers its health probe late: do not eject it.
            .args(["--health-interval", "10s"])
            // Open-loop load comes from one address: the per-client limit must not refuse it.
            .args(["--max-in-flight-per-client", "0"])
            .env(
                "RECACHE_LOG",
                std::env::var("RECACHE_LOG").unwrap_or("warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(BenchError::io("starting recache serve"))?;
        let mut me = Self {
            child,
            base: format!("http://{listen}"),
        };
        me.wait_ready(http, mode).await?;
        Ok(me)
    }

    async fn wait_ready(&mut self, http: &HttpClient, mode: Mode) -> Result<(), BenchError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Setup(format!(
                    "recache serve --slo {} exited early ({status}); its stderr is above (a \
                     recache without `--slo` predates issue 17's deadline serving)",
                    mode.flag()
                )));
            }
            let probe = Request::get(format!("{}/ready", self.base)).body(Full::new(Bytes::new()));
            if let Ok(req) = probe
                && let Ok(resp) = http.request(req).await
                && resp.status().is_success()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(BenchError::Setup(format!(
            "recache serve --slo {} was not ready within 30 s (is the upstream healthy?)",
            mode.flag()
        )))
    }

    /// recache's `recache_slo_*` samples (histogram buckets left out), by series.
    pub async fn slo_metrics(&self, http: &HttpClient) -> Value {
        let text = get_text(http, &format!("{}/metrics", self.base))
            .await
            .unwrap_or_default();
        let mut out = Map::new();
        for line in text.lines().filter(|l| l.starts_with("recache_slo_")) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if series.contains("_bucket") {
                continue;
            }
            if let Ok(v) = value.parse::<f64>() {
                out.insert(series.to_string(), serde_json::json!(v));
            }
        }
        Value::Object(out)
    }
}

fn free_port() -> Result<SocketAddr, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(BenchError::io("finding a free port"))?;
    l.local_addr()
        .map_err(BenchError::io("finding a free port"))
}

/// Requests running or queued in the engine, from its gauges (vLLM or SGLang names); `None`
/// when its `/metrics` has neither.
pub async fn engine_busy(http: &HttpClient, upstream: &str) -> Option<f64> {
    let text = get_text(http, &format!("{upstream}/metrics")).await.ok()?;
    const GAUGES: [&str; 4] = [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
    ];
    let known = GAUGES.iter().any(|g| text.contains(g));
    known.then(|| GAUGES.iter().map(|g| counter(&text, g)).sum())
}

/// Waits (up to `limit`) until the engine has nothing running or queued, so a run does not
/// start on the previous run's leftovers. Returns the seconds waited.
pub async fn wait_idle(http: &HttpClient, upstream: &str, limit: Duration) -> f64 {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        match engine_busy(http, upstream).await {
            Some(n) if n > 0.0 => tokio::time::sleep(Duration::from_millis(250)).await,
            Some(_) => break,
            None => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                break;
            }
        }
    }
    t0.elapsed().as_secs_f64()
}
