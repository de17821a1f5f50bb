//! `recache bench overhead`: how much latency and throughput recache costs in front of a fast
//! upstream. One run measures the static upstream directly and through a `recache serve` child
//! process (the real binary, as users run it): latency at concurrency 1, throughput at
//! `--concurrency`. Load generator, proxy and upstream share this machine's cores, as they do
//! in the wrk/nginx anchor quoted in the README.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::loadgen::{self, LoadResult};
use super::{BenchError, static_upstream};

#[derive(clap::Args, Debug)]
pub struct OverheadArgs {
    /// Measured time per phase (four phases: direct/proxied × concurrency 1/N)
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Connections for the throughput phases
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Use Debian's nginx (must be on PATH) as the static upstream instead of the built-in one
    #[arg(long)]
    pub nginx: bool,
}

pub async fn run(args: OverheadArgs) -> Result<(), BenchError> {
    let warmup = Duration::from_millis(500);
    let (upstream, _keep) = start_upstream(args.nginx)?;
    let proxy_addr = free_port()?;
    let mut proxy = ProxyChild::spawn(proxy_addr, upstream)?;
    wait_ready(proxy_addr, "/ready", &mut proxy.0).await?;
    let path = "/v1/models";
    let phase = |name: &'static str| eprintln!("bench overhead: {name} ...");
    phase("direct, concurrency 1");
    let direct_1 = loadgen::run(upstream, path, 1, warmup, args.duration).await?;
    phase("proxied, concurrency 1");
    let proxied_1 = loadgen::run(proxy_addr, path, 1, warmup, args.duration).await?;
    phase("direct, throughput");
    let direct_n = loadgen::run(upstream, path, args.concurrency, warmup, args.duration).await?;
    phase("proxied, throughput");
    let proxied_n = loadgen::run(proxy_addr, path, args.concurrency, warmup, args.duration).await?;
    drop(proxy);
    let errors = [&direct_1, &proxied_1, &direct_n, &proxied_n]
        .iter()
        .map(|r| r.errors)
        .sum::<u64>();
    let p = |r: &LoadResult, q| r.quantile_us(q);
    let out = json!({
        "direct_rps": direct_n.rps.round(),
        "proxied_rps": proxied_n.rps.round(),
        "ratio": (proxied_n.rps / direct_n.rps * 1000.0).round() / 1000.0,
        "direct_p50_us": p(&direct_1, 0.5),
        "proxied_p50_us": p(&proxied_1, 0.5),
        "added_p50_us": p(&proxied_1, 0.5) - p(&direct_1, 0.5),
        "added_p99_us": p(&proxied_1, 0.99) - p(&direct_1, 0.99),
        "direct_p99_us": p(&direct_1, 0.99),
        "proxied_p99_us": p(&proxied_1, 0.99),
        "concurrency": args.concurrency,
        "duration_s": args.duration.as_secs_f64(),
        "upstream": if args.nginx { "nginx" } else { "builtin" },
        "errors": errors,
    });
    println!("{out}");
    Ok(())
}

/// Keeps whichever upstream runs alive until dropped.
enum UpstreamGuard {
    Builtin(#[allow(dead_code)] static_upstream::StaticUpstream),
    Nginx(Child, #[allow(dead_code)] tempfile::TempDir),
}

impl Drop for UpstreamGuard {
    fn drop(&mut self) {
        if let UpstreamGuard::Nginx(child, _) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_upstream(nginx: bool) -> Result<(SocketAddr, UpstreamGuard), BenchError> {
    if !nginx {
        let up = static_upstream::spawn()?;
        return Ok((up.addr, UpstreamGuard::Builtin(up)));
    }
    let addr = free_port()?;
    let dir = tempfile::tempdir().map_err(BenchError::io("creating nginx prefix"))?;
    let conf = format!(
        "worker_processes 1; daemon off; pid {p}/nginx.pid; error_log stderr warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; server {{ listen {addr}; keepalive_requests 1000000;\n\
         location / {{ default_type application/json; return 200 '{body}'; }} }} }}\n",
        p = dir.path().display(),
        body = static_upstream::BODY,
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(BenchError::io("writing nginx.conf"))?;
    let child = Command::new("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .spawn()
        .map_err(BenchError::io("starting nginx (apt-get install nginx)"))?;
    Ok((addr, UpstreamGuard::Nginx(child, dir)))
}

/// `recache serve` as a child process, killed on drop.
struct ProxyChild(Child);

impl ProxyChild {
    fn spawn(listen: SocketAddr, upstream: SocketAddr) -> Result<Self, BenchError> {
        let exe = std::env::current_exe().map_err(BenchError::io("locating the recache binary"))?;
        let child = Command::new(exe)
            .args([
                "serve",
                "--listen",
                &listen.to_string(),
                "--upstream",
                &format!("http://{upstream}"),
            ])
            .args(["--health-interval", "1s"])
            .env("RECACHE_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .map_err(BenchError::io("starting recache serve"))?;
        Ok(Self(child))
    }
}

impl Drop for ProxyChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> Result<SocketAddr, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(BenchError::io("finding a free port"))?;
    l.local_addr()
        .map_err(BenchError::io("finding a free port"))
}

async fn wait_ready(addr: SocketAddr, path: &str, child: &mut Child) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BenchError::Setup(format!(
                "recache serve exited early: {status}"
            )));
        }
        let probe = loadgen::run(addr, path, 1, Duration::ZERO, Duration::from_millis(20)).await;
        if probe.is_ok_and(|r| r.requests > 0) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BenchError::Setup(format!(
        "recache on {addr} was not ready within 15 s"
    )))
}
