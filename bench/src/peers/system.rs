//! The systems compared: recache (the real `recache serve` binary, as users run it) and each
//! peer gateway (its own binary from the peers' venv), each a child process in front of the
//! same replicas, started for one measurement and stopped (killed) when dropped. Each gets
//! its own Prometheus port: both peers default to 29000 and would collide.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::args::Peer;
use super::install;
use crate::error::BenchError;
use crate::http;
use crate::overhead::free_port;

/// One system of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    Recache,
    /// recache with `--retrieve-in-engine off`: the retrieve workload's other design
    /// (recache's own beam loop, one batched engine call per step).
    RecacheLoop,
    Peer(Peer),
    /// The engine itself, no gateway: the retrieve workload on one replica (vLLM's own beam
    /// search, the bar `/v1/retrieve` is held to).
    Direct,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Recache => "recache",
            System::RecacheLoop => "recache-loop",
            System::Peer(Peer::SglangRouter) => "sglang-router",
            System::Peer(Peer::VllmRouter) => "vllm-router",
            System::Direct => "vllm-direct",
        }
    }
}

/// How recache is configured for a workload (the peers always run `--policy cache_aware`).
#[derive(Debug, Clone, Default)]
pub struct RecacheSetup {
    /// `--routing` [recache's default when None].
    pub routing: Option<String>,
    /// One `--kv-events` per replica (routing mirrors), or none.
    pub kv_events: Vec<String>,
    /// More `recache serve` arguments (the retrieve workload's `--retrieve-index`, the gr
    /// workload's ranking and item pool settings).
    pub extra: Vec<String>,
}

/// A running system, killed on drop (nothing to kill for [`System::Direct`]).
pub struct Running {
    pub system: System,
    pub addr: SocketAddr,
    child: Option<Child>,
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The system's process (none for [`System::Direct`]): its tree is `cpu`'s gateway.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `system` in front of `replicas` and waits until it answers its readiness route.
pub async fn start(
    system: System,
    venv: &Path,
    replicas: &[String],
    recache: &RecacheSetup,
) -> Result<Running, BenchError> {
    if system == System::Direct {
        let one = match replicas {
            [one] => one
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .parse()
                .ok(),
            _ => None,
        };
        return match one {
            Some(addr) => Ok(Running {
                system,
                addr,
                child: None,
            }),
            None => Err(BenchError::Setup(format!(
                "{} needs exactly one replica at http://HOST:PORT (--replicas 1), not {replicas:?}",
                system.name()
            ))),
        };
    }
    let addr = free_port()?;
    let mut cmd = match system {
        System::Recache | System::RecacheLoop => {
            let mut c = Command::new(crate::recache_bin::path()?);
            c.args(["serve", "--listen", &addr.to_string()]);
            for r in replicas {
                c.args(["--upstream", r]);
            }
            for e in &recache.kv_events {
                c.args(["--kv-events", e]);
            }
            if let Some(r) = &recache.routing {
                c.args(["--routing", r]);
            }
            c.args(&recache.extra);
            if system == System::RecacheLoop {
                c.args(["--retrieve-in-engine", "off"]);
            }
            // Busy CPU engines answer probes late; a missed 2 s probe would eject a replica.
            c.args(["--health-interval", "10s"])
                // RECACHE_BENCH_RECACHE_LOG: recache's log filter in a diagnosis run (e.g.
                // `warn,recache::route=debug`: every routing decision on the bench's stderr).
                .env(
                    "RECACHE_LOG",
                    std::env::var("RECACHE_BENCH_RECACHE_LOG").unwrap_or_else(|_| "warn".into()),
                );
            c
        }
        System::Direct => unreachable!("answered above"),
        System::Peer(peer) => {
            let mut c = Command::new(install::binary(venv, peer));
            if peer == Peer::SglangRouter {
                c.arg("launch");
            }
            let metrics = free_port()?;
            c.args(["--host", "127.0.0.1", "--port", &addr.port().to_string()])
                .arg("--worker-urls")
                .args(replicas)
                .args(["--policy", "cache_aware", "--log-level", "error"])
                .args(["--prometheus-port", &metrics.port().to_string()]);
            c
        }
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(BenchError::io(format!("starting {}", system.name())))?;
    let path = match system {
        System::Recache | System::RecacheLoop => "/ready",
        System::Peer(_) | System::Direct => "/health",
    };
    let client = http::client();
    let url = format!("http://{addr}{path}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BenchError::Setup(format!(
                "{} exited while starting: {status}",
                system.name()
            )));
        }
        if let Ok(uri) = url.parse()
            && let Ok(resp) = client.get(uri).await
            && resp.status().is_success()
        {
            return Ok(Running {
                system,
                addr,
                child: Some(child),
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Setup(format!(
                "{} on {addr} did not answer {path} within 60 s",
                system.name()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
