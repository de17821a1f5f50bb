//! `recache bench overhead`: how much latency and throughput recache costs in front of a fast
//! upstream, side by side with nginx as a reverse proxy when asked. One run measures the
//! static upstream directly, through a `recache serve` child process (the real binary, as
//! users run it) and, with `--nginx-proxy`, through nginx: latency at concurrency 1,
//! throughput at `--concurrency`. Each repeat measures every target back to back (paired), and
//! the JSON gives the median over repeats with the range. Load generator, proxies and upstream
//! share this machine's cores. The load comes from wrk when it is on PATH (`--load auto`), the
//! tool nginx's numbers are usually quoted with, else from the built-in generator.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::BenchError;
use crate::stats::Spread;
use crate::{loadgen, static_upstream, wrk};

#[derive(clap::Args, Debug)]
pub struct OverheadArgs {
    /// Measured time per phase (phases: each target × concurrency 1 and N, per repeat)
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Connections for the throughput phases
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Use Debian's nginx (must be on PATH) as the static upstream instead of the built-in one
    #[arg(long)]
    pub nginx: bool,
    /// Also measure nginx as a reverse proxy (keep-alive upstream) in front of the same
    /// upstream, in the same run: the anchor recache's overhead is compared with
    #[arg(long)]
    pub nginx_proxy: bool,
    /// Load generator: auto (wrk when on PATH, else built-in), wrk or builtin
    #[arg(long, default_value = "auto", value_parser = ["auto", "wrk", "builtin"])]
    pub load: String,
    /// Rounds of paired measurements; the JSON reports medians and ranges
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
}

/// One phase's reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub errors: u64,
}

/// Whether `--load` (auto, wrk or builtin) means wrk.
pub(crate) fn use_wrk(load: &str) -> bool {
    match load {
        "wrk" => true,
        "builtin" => false,
        _ => wrk::available(),
    }
}

/// Targets measured in one run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Direct,
    Recache,
    Nginx,
}

pub async fn run(args: OverheadArgs) -> Result<(), BenchError> {
    let use_wrk = use_wrk(&args.load);
    let (upstream, _keep) = start_upstream(args.nginx)?;
    let proxy_addr = free_port()?;
    let mut proxy = ProxyChild::spawn(proxy_addr, upstream)?;
    wait_ready(proxy_addr, "/ready", &mut proxy.0).await?;
    let nginx = if args.nginx_proxy {
        let (addr, guard) = start_nginx(&format!("proxy_pass http://{upstream};"), Some(upstream))?;
        wait_up(addr).await?;
        Some((addr, guard))
    } else {
        None
    };
    let mut targets = vec![(Target::Direct, upstream), (Target::Recache, proxy_addr)];
    if let Some((addr, _)) = &nginx {
        targets.push((Target::Nginx, *addr));
    }
    let path = "/v1/models";
    // rounds[r][target] = (concurrency 1, concurrency N)
    let mut rounds: Vec<Vec<(Target, Sample, Sample)>> = Vec::new();
    for round in 1..=args.repeat {
        let mut this = Vec::new();
        for (target, addr) in &targets {
            eprintln!(
                "bench overhead: round {round}/{}, {target:?} ...",
                args.repeat
            );
            let one = measure(use_wrk, *addr, path, None, 1, args.duration).await?;
            let many = measure(use_wrk, *addr, path, None, args.concurrency, args.duration).await?;
            this.push((*target, one, many));
        }
        rounds.push(this);
    }
    drop(proxy);
    drop(nginx);
    println!("{}", report(&args, use_wrk, &rounds));
    Ok(())
}

/// One phase: `path` loaded at `concurrency` for `duration` (a POST of the JSON `body` when
/// given), by wrk or the built-in generator.
pub(crate) async fn measure(
    use_wrk: bool,
    addr: SocketAddr,
    path: &str,
    body: Option<&str>,
    concurrency: usize,
    duration: Duration,
) -> Result<Sample, BenchError> {
    if use_wrk {
        // wrk has no warm-up: a short unmeasured run opens the connections first.
        let _ = wrk::run_with(addr, path, body, concurrency, Duration::from_secs(1))?;
        let r = wrk::run_with(addr, path, body, concurrency, duration)?;
        return Ok(Sample {
            rps: r.rps,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            errors: r.errors,
        });
    }
    let warmup = Duration::from_millis(500);
    let body = body.map(|b| bytes::Bytes::from(b.to_string()));
    let r = loadgen::run_with(addr, path, body, concurrency, warmup, duration).await?;
    Ok(Sample {
        rps: r.rps,
        p50_us: r.quantile_us(0.5),
        p99_us: r.quantile_us(0.99),
        errors: r.errors,
    })
}

/// Median and range of `xs` (the `bench gr` summary's [`Spread`]).
fn stats(xs: Vec<f64>) -> (f64, [f64; 2]) {
    let s = Spread::of(xs);
    (s.median, [s.min, s.max])
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The JSON line: the original fields (medians now), ranges, and the nginx comparison.
fn report(args: &OverheadArgs, use_wrk: bool, rounds: &[Vec<(Target, Sample, Sample)>]) -> Value {
    let get = |r: &Vec<(Target, Sample, Sample)>, t: Target| {
        r.iter().find(|x| x.0 == t).map(|x| (x.1, x.2))
    };
    let series = |t: Target,
                  f: &dyn Fn(&Sample, &Sample, &Sample, &Sample) -> f64|
     -> Option<(f64, [f64; 2])> {
        let xs: Option<Vec<f64>> = rounds
            .iter()
            .map(|r| {
                let (d1, dn) = get(r, Target::Direct)?;
                let (p1, pn) = get(r, t)?;
                Some(f(&d1, &dn, &p1, &pn))
            })
            .collect();
        xs.map(stats)
    };
    let errors: u64 = rounds
        .iter()
        .flatten()
        .map(|x| x.1.errors + x.2.errors)
        .sum();
    let med = |t: Target, f: &dyn Fn(&Sample, &Sample, &Sample, &Sample) -> f64| {
        series(t, f).map(|s| s.0)
    };
    let ratio = |_: &Sample, dn: &Sample, _: &Sample, pn: &Sample| pn.rps / dn.rps;
    let added50 = |d1: &Sample, _: &Sample, p1: &Sample, _: &Sample| p1.p50_us - d1.p50_us;
    let added99 = |d1: &Sample, _: &Sample, p1: &Sample, _: &Sample| p1.p99_us - d1.p99_us;
    let (r_med, r_range) = series(Target::Recache, &ratio).unwrap_or((f64::NAN, [f64::NAN; 2]));
    let (a_med, a_range) = series(Target::Recache, &added50).unwrap_or((f64::NAN, [f64::NAN; 2]));
    let pick = |t: Target, f: fn(&Sample, &Sample) -> f64| {
        med(t, &|_, _, p1, pn| f(p1, pn)).unwrap_or(f64::NAN)
    };
    let mut out = json!({
        "direct_rps": pick(Target::Direct, |_, n| n.rps).round(),
        "proxied_rps": pick(Target::Recache, |_, n| n.rps).round(),
        "ratio": round3(r_med),
        "ratio_range": [round3(r_range[0]), round3(r_range[1])],
        "direct_p50_us": pick(Target::Direct, |o, _| o.p50_us),
        "proxied_p50_us": pick(Target::Recache, |o, _| o.p50_us),
        "added_p50_us": a_med,
        "added_p50_us_range": a_range,
        "added_p99_us": med(Target::Recache, &added99),
        "direct_p99_us": pick(Target::Direct, |o, _| o.p99_us),
        "proxied_p99_us": pick(Target::Recache, |o, _| o.p99_us),
        "concurrency": args.concurrency,
        "duration_s": args.duration.as_secs_f64(),
        "repeat": args.repeat,
        "upstream": if args.nginx { "nginx" } else { "builtin" },
        "load": if use_wrk { "wrk" } else { "builtin" },
        "errors": errors,
    });
    if let (Some((nr, nr_range)), Some((na, na_range))) = (
        series(Target::Nginx, &ratio),
        series(Target::Nginx, &added50),
    ) {
        out["nginx_proxy"] = json!({
            "proxied_rps": pick(Target::Nginx, |_, n| n.rps).round(),
            "ratio": round3(nr),
            "ratio_range": [round3(nr_range[0]), round3(nr_range[1])],
            "proxied_p50_us": pick(Target::Nginx, |o, _| o.p50_us),
            "added_p50_us": na,
            "added_p50_us_range": na_range,
            "added_p99_us": med(Target::Nginx, &added99),
        });
        // Paired per round: is recache at or better than nginx in the same round?
        out["recache_vs_nginx"] = json!({
            "added_p50_us_minus_nginx": a_med - na,
            "ratio_minus_nginx": round3(r_med - nr),
            "added_p50_at_or_below_nginx": a_med <= na,
            "ratio_at_or_above_nginx": r_med >= nr,
        });
    }
    out
}

/// Keeps whichever upstream runs alive until dropped.
enum UpstreamGuard {
    Builtin(#[allow(dead_code)] static_upstream::StaticUpstream),
    Nginx(Child, tempfile::TempDir),
}

impl Drop for UpstreamGuard {
    fn drop(&mut self) {
        if let UpstreamGuard::Nginx(child, dir) = self {
            // SIGKILL would reach only the master and orphan its worker, which keeps the port
            // (and any inherited pipe) open: ask the master to stop its workers first.
            let _ = Command::new("nginx")
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .args(["-s", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
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
    let body = format!(
        "default_type application/json; return 200 '{}';",
        static_upstream::BODY
    );
    start_nginx(&body, None)
}

/// Debian's nginx, one worker, serving `location / { LOCATION }` on a free port; with
/// `upstream`, `LOCATION` proxies there over a keep-alive pool (as a production reverse
/// proxy is configured), so it is compared with recache's pooled client on equal terms.
fn start_nginx(
    location: &str,
    upstream: Option<SocketAddr>,
) -> Result<(SocketAddr, UpstreamGuard), BenchError> {
    let addr = free_port()?;
    let dir = tempfile::tempdir().map_err(BenchError::io("creating nginx prefix"))?;
    let (pool, location) = match upstream {
        Some(up) => (
            format!("upstream up {{ server {up}; keepalive 64; keepalive_requests 1000000; }}"),
            "proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\";"
                .to_string(),
        ),
        None => (String::new(), location.to_string()),
    };
    let conf = format!(
        "worker_processes 1; daemon off; pid {p}/nginx.pid; error_log stderr warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; {pool} server {{ listen {addr}; keepalive_requests 1000000;\n\
         location / {{ {location} }} }} }}\n",
        p = dir.path().display(),
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).map_err(BenchError::io("writing nginx.conf"))?;
    let child = Command::new("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(BenchError::io("starting nginx (apt-get install nginx)"))?;
    Ok((addr, UpstreamGuard::Nginx(child, dir)))
}

/// Waits until `addr` answers a GET (nginx starts in milliseconds; 5 s is generous).
async fn wait_up(addr: SocketAddr) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let probe = loadgen::run(addr, "/", 1, Duration::ZERO, Duration::from_millis(20)).await;
        if probe.is_ok_and(|r| r.requests > 0) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(BenchError::Setup(format!(
        "nginx on {addr} did not answer within 5 s"
    )))
}

/// `recache serve` as a child process, killed on drop.
struct ProxyChild(Child);

impl ProxyChild {
    fn spawn(listen: SocketAddr, upstream: SocketAddr) -> Result<Self, BenchError> {
        let exe = crate::recache_bin::path()?;
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

pub(crate) fn free_port() -> Result<SocketAddr, BenchError> {
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
