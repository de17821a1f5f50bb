//! wrk as the overhead benchmark's load generator (when it is on PATH): the same tool the
//! nginx anchor numbers come from, so recache and nginx are measured alike. Runs
//! `wrk -t1 -cC -dD --latency URL` (with a Lua script setting method and body for a POST) and
//! reads requests/s, p50, p99 and errors off its report.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::error::BenchError;

/// What one wrk run reported.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkResult {
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub errors: u64,
}

/// True when `wrk` can be started.
pub fn available() -> bool {
    Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty())
}

/// Loads `addr` with GET `path` over `concurrency` connections for `duration`.
pub fn run(
    addr: SocketAddr,
    path: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<WrkResult, BenchError> {
    run_with(addr, path, None, concurrency, duration)
}

/// As [`run`], POSTing the JSON `body` when given.
pub fn run_with(
    addr: SocketAddr,
    path: &str,
    body: Option<&str>,
    concurrency: usize,
    duration: Duration,
) -> Result<WrkResult, BenchError> {
    let secs = duration.as_secs().max(1);
    let mut cmd = Command::new("wrk");
    cmd.args([
        "-t1",
        &format!("-c{concurrency}"),
        &format!("-d{secs}s"),
        "--latency",
    ]);
    // Kept until wrk exits.
    let script = match body {
        Some(b) => {
            let f = tempfile::NamedTempFile::new().map_err(BenchError::io("wrk script"))?;
            std::fs::write(f.path(), post_script(b)).map_err(BenchError::io("wrk script"))?;
            cmd.arg("-s").arg(f.path());
            Some(f)
        }
        None => None,
    };
    let out = cmd
        .arg(format!("http://{addr}{path}"))
        .output()
        .map_err(BenchError::io("starting wrk (apt-get install wrk)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::Setup(format!(
            "wrk exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    drop(script);
    parse(&text).ok_or_else(|| BenchError::Setup(format!("cannot read wrk's report:\n{text}")))
}

/// The Lua script that makes every wrk request a POST of `body`.
fn post_script(body: &str) -> String {
    // A Lua long string holds any JSON; the level of `=` keeps `]]` in the body harmless.
    format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.body = [==[{body}]==]\n"
    )
}

/// Reads wrk's `--latency` report.
pub fn parse(report: &str) -> Option<WrkResult> {
    let mut r = WrkResult {
        rps: f64::NAN,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        errors: 0,
    };
    for line in report.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(v)) => r.rps = v.parse().ok()?,
            (Some("50%"), Some(v)) => r.p50_us = micros(v)?,
            (Some("99%"), Some(v)) => r.p99_us = micros(v)?,
            (Some("Non-2xx"), _) => r.errors += line.rsplit(' ').next()?.parse::<u64>().ok()?,
            (Some("Socket"), Some("errors:")) => {
                // "Socket errors: connect 0, read 0, write 0, timeout 0"
                r.errors += line
                    .split(',')
                    .filter_map(|p| p.trim().rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    (!r.rps.is_nan() && !r.p50_us.is_nan()).then_some(r)
}

fn micros(v: &str) -> Option<f64> {
    let split = v.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "us" => n,
        "ms" => n * 1e3,
        "s" => n * 1e6,
        "m" => n * 60e6,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_latency_report() {
        let report = "Running 3s test @ http://127.0.0.1:1/v1/models
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    52.14us  120.00us   4.43ms   99.00%
  Latency Distribution
     50%   26.00us
     75%   30.00us
     90%   40.00us
     99%    1.43ms
  73061 requests in 3.00s, 16.44MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  24353.91
Transfer/sec:      5.48MB
";
        let r = parse(report).expect("parsed");
        assert_eq!(r.rps, 24353.91);
        assert_eq!((r.p50_us, r.p99_us), (26.0, 1430.0));
        assert_eq!(r.errors, 7);
        assert!(parse("garbage").is_none());
    }
}
