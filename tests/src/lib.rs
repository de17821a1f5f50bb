//! Harness for tests that run against real engines.
//!
//! # Layout
//!
//! - [`Testbed`]: one engine instance started by `examples/testbed/up --name NAME`, parsed from
//!   its `UPSTREAM=` / `MODEL=` / `KV_EVENTS=` lines and stopped with `examples/testbed/down`.
//! - [`Proxy`]: recache's server, in this process, on `127.0.0.1:0` in front of testbeds.
//! - [`Engine`]: which testbed engine a suite body runs against, so one body per behaviour
//!   serves both (its instance names, `up` flags and recache's serve arguments).
//! - [`wait_for`]: how a test waits for an event (poll with a deadline, fail naming it), the
//!   workspace's one (`recache-testkit`, shared with the sidecar's and the adapters' tests).
//!
//! Every engine test is `#[ignore = "needs the real engine (tests/run runs it with
//! --include-ignored)"]`: plain `cargo test` lists them as ignored (nothing asserted, and it says
//! so); `tests/run` installs the testbeds and runs them with `--include-ignored`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use recache::config::ServeArgs;
use recache::local::LocalServer;
use recache::service::AppState;

pub mod pool;
pub mod store;
pub use recache_testkit::wait_for;

/// Health-probe interval (and probe limit) for recache in front of the SGLang testbed: its
/// HTTP loop stalls for seconds during prefills on a busy 2-core CI machine, and at the default
/// 2 s two missed probes take the only replica out mid-test (seen: a 503 on a probe request).
pub const SGLANG_HEALTH_INTERVAL: Duration = Duration::from_secs(10);

/// The testbed engine a suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Vllm,
    Sglang,
}

impl Engine {
    /// Testbed instance name for `what`: `it-WHAT` (vLLM) or `it-sgl-WHAT` (SGLang). tests/run
    /// stops leftovers by these prefixes.
    pub fn instance(self, what: &str) -> String {
        match self {
            Engine::Vllm => format!("it-{what}"),
            Engine::Sglang => format!("it-sgl-{what}"),
        }
    }

    /// The `examples/testbed/up` flags that select this engine.
    pub fn up_flags(self) -> &'static [&'static str] {
        match self {
            Engine::Vllm => &[],
            Engine::Sglang => &["--engine", "sglang"],
        }
    }

    /// Starts testbed instance `what` of this engine with `extra` flags.
    pub fn testbed(self, what: &str, extra: &[&str]) -> Testbed {
        let args: Vec<&str> = self.up_flags().iter().chain(extra).copied().collect();
        Testbed::up(&self.instance(what), &args)
    }

    /// recache's serve arguments in front of `upstreams` of this engine: vLLM as
    /// [`Proxy::start`] (default engine, 500 ms probes); SGLang with `--engine sglang` and
    /// [`SGLANG_HEALTH_INTERVAL`].
    pub fn serve_args(self, upstreams: &[&str]) -> ServeArgs {
        let upstream = upstreams.iter().map(|u| u.to_string()).collect();
        match self {
            Engine::Vllm => ServeArgs {
                upstream,
                health_interval: Some(Duration::from_millis(500)),
                ..Default::default()
            },
            Engine::Sglang => ServeArgs {
                upstream,
                engine: "sglang".parse().ok(),
                health_interval: Some(SGLANG_HEALTH_INTERVAL),
                ..Default::default()
            },
        }
    }
}

/// The testbed's cache (`RECACHE_TESTBED_HOME`, default `~/.cache/recache-testbed`).
pub fn testbed_home() -> PathBuf {
    std::env::var_os("RECACHE_TESTBED_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/recache-testbed"))
        })
        .unwrap_or_default()
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A running engine instance of the testbed.
#[derive(Debug)]
pub struct Testbed {
    pub name: String,
    pub upstream: String,
    pub model: String,
    pub kv_events: String,
}

impl Testbed {
    /// Starts instance `name` (stopping a leftover one first) and waits until it is ready.
    pub fn up(name: &str, extra: &[&str]) -> Testbed {
        Testbed::up_with_env(name, extra, &[])
    }

    /// As [`Testbed::up`], with extra environment for `up` (which passes it to the engine).
    pub fn up_with_env(name: &str, extra: &[&str], env: &[(&str, &str)]) -> Testbed {
        down(name);
        let out = Command::new(repo_root().join("examples/testbed/up"))
            .args(["--name", name])
            .args(extra)
            // The tests are written for the tiny model (the ranker where they pass --model):
            // a shell's RECACHE_TESTBED_MODEL, meant for the benches, must not swap it.
            .env_remove("RECACHE_TESTBED_MODEL")
            .envs(env.iter().copied())
            .output()
            .expect("running examples/testbed/up");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "testbed {name} failed to start ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("testbed printed no {key}= line:\n{stdout}"))
                .to_string()
        };
        Testbed {
            name: name.into(),
            upstream: field("UPSTREAM"),
            model: field("MODEL"),
            kv_events: field("KV_EVENTS"),
        }
    }

    /// The port the engine listens on.
    pub fn port(&self) -> String {
        self.upstream
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// The last `lines` lines of the engine's log (for a failing test's message).
    pub fn log_tail(&self, lines: usize) -> String {
        let log = testbed_home()
            .join("run")
            .join(&self.name)
            .join("server.log");
        let text =
            std::fs::read_to_string(&log).unwrap_or_else(|e| format!("({}: {e})", log.display()));
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops the engine (SIGTERM to its process group).
    pub fn down(&self) {
        down(&self.name);
    }

    /// Kills the engine at once (SIGKILL to its process group after a zero grace period), so
    /// open streams are cut rather than finished by a graceful shutdown.
    pub fn kill(&self) {
        let _ = Command::new(repo_root().join("examples/testbed/down"))
            .args(["--name", &self.name, "--timeout", "0"])
            .status();
    }

    /// SIGKILLs the engine and starts it again under the same name on the same HTTP and
    /// KV-event ports (`extra`: its `up` flags), so a recache in front of it sees the same
    /// replica die and return with nothing cached.
    pub fn kill_and_restart(&self, extra: &[&str]) -> Testbed {
        self.kill();
        let events_port = (self.kv_events.rsplit(':').next())
            .unwrap_or_default()
            .to_string();
        let port = self.port();
        let mut flags: Vec<&str> = extra.to_vec();
        flags.extend(["--port", &port, "--kv-events-port", &events_port]);
        Testbed::up(&self.name, &flags)
    }

    /// Reads one counter from the engine's own `/metrics` (summed over label sets).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.upstream))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

fn down(name: &str) {
    let _ = Command::new(repo_root().join("examples/testbed/down"))
        .args(["--name", name])
        .status();
}

/// recache serving in this process.
pub struct Proxy {
    pub base: String,
    pub state: Arc<AppState>,
    _server: LocalServer,
}

impl Proxy {
    pub async fn start(upstreams: &[&str]) -> Proxy {
        Proxy::start_with(&Engine::Vllm.serve_args(upstreams)).await
    }

    /// Starts recache with `args` and waits until it is ready.
    pub async fn start_with(args: &ServeArgs) -> Proxy {
        let server = LocalServer::start(args).await.expect("start recache");
        let proxy = Proxy {
            base: server.base(),
            state: server.state.clone(),
            _server: server,
        };
        proxy.wait_ready(Duration::from_secs(30)).await;
        proxy
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `/ready`'s JSON body (whatever its status).
    pub async fn ready(&self) -> serde_json::Value {
        let resp = reqwest::get(self.url("/ready")).await.expect("/ready");
        resp.json().await.expect("/ready json")
    }

    /// `/metrics` as text.
    pub async fn metrics_text(&self) -> String {
        let resp = reqwest::get(self.url("/metrics")).await.expect("/metrics");
        resp.text().await.expect("/metrics text")
    }

    /// POSTs a ranking request to `/v1/rank`, expects 200 and returns the answer.
    pub async fn rank(&self, body: &serde_json::Value) -> serde_json::Value {
        let resp = reqwest::Client::new()
            .post(self.url("/v1/rank"))
            .json(body)
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("json")
    }

    /// Waits until `/ready` lists these routing-mirror states, in replica order.
    pub async fn wait_mirrors(&self, want: &[&str], limit: Duration) {
        let url = self.url("/ready");
        wait_for(
            format_args!("routing mirrors {want:?}"),
            limit,
            async || {
                let v: serde_json::Value = match reqwest::get(&url).await {
                    Ok(r) if r.status() == 200 => r.json().await.unwrap_or_default(),
                    _ => serde_json::Value::Null,
                };
                let got: Vec<&str> = v["upstreams"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|u| u["mirror"].as_str()).collect())
                    .unwrap_or_default();
                if got == want {
                    Ok(())
                } else {
                    Err(format!("/ready {v}"))
                }
            },
        )
        .await
    }

    /// Waits until the engine loop receives the engine's KV events: `ping(k)` sends the test's
    /// k-th ping (a prompt sharing no block with the test's others) and returns its token ids;
    /// pings go on until the mirror holds one. A ZMQ subscription takes a moment to reach the
    /// publisher, and what is published before is lost: the pings sent until then stay
    /// unknown to the mirror.
    pub async fn wait_kv_events(&self, mut ping: impl AsyncFnMut(u32) -> Vec<u32>) {
        let kv = self.state.kvloop.as_ref().expect("engine loop on");
        let mut sent: Vec<Vec<u32>> = Vec::new();
        wait_for(
            "the engine loop receiving KV events (a ping prompt in the mirror)",
            Duration::from_secs(60),
            async || {
                sent.push(ping(sent.len() as u32).await);
                let held = sent
                    .iter()
                    .any(|p| kv.cached_prefix(p.clone()).is_some_and(|(n, _)| n > 0));
                if held {
                    Ok(())
                } else {
                    Err(format!("{} pings sent, none mirrored", sent.len()))
                }
            },
        )
        .await
    }

    /// Waits until `/ready` is 200.
    pub async fn wait_ready(&self, limit: Duration) {
        let url = self.url("/ready");
        wait_for(
            format_args!("recache at {} ready", self.base),
            limit,
            async || match reqwest::get(&url).await {
                Ok(r) if r.status() == 200 => Ok(()),
                Ok(r) => Err(format!("/ready {}", r.status())),
                Err(e) => Err(e.to_string()),
            },
        )
        .await
    }
}
