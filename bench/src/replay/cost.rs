//! What a replayed policy costs in CPU, beside what it saves in hits: on a CPU engine recache
//! shares the cores with the model, so a policy whose steering costs more than its hits save
//! serves slower. A snapshot before and after each run gives, per run:
//!
//! - `recache_cpu_s`: this process's CPU time (the in-process recache: proxy, engine loop,
//!   LightGBM's trainer thread, and the replay's own client, alike for every policy);
//! - `loop_busy_s`: the engine loop thread's time by phase (`recache_kv_loop_busy_seconds_total`);
//! - `shim_steer_s`: the engine's shim's time steering allocations (its `ORDER.status`);
//! - `engine_cpu_s`: the CPU time of the engine: every process in the session of the process
//!   that wrote the shim's status (its `pid`; vLLM's API server, engine core and worker share
//!   one session when started detached, as the testbed does), or that process alone when it
//!   shares this process's session. Absent (null) when no shim status names a live process,
//!   or the engine changed during the run.
//!
//! CPU times come from `/proc/<pid>/stat` (Linux; clock ticks of 1/100 s, the kernel's
//! `USER_HZ` on every architecture Linux exports it for).

use std::path::Path;

use serde_json::{Value, json};

use crate::http::counter;
use recache::harness::Phase;
use recache::harness::shim_status;

/// `USER_HZ`: the unit of `/proc/<pid>/stat`'s utime and stime.
const TICKS_PER_S: f64 = 100.0;

/// `/proc/<pid>/stat` (`None`: this process), parsed.
fn stat(pid: Option<u32>) -> Option<Stat> {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// User + system CPU seconds of `pid` (`None`: this process), if `/proc` has it.
pub fn cpu_s(pid: Option<u32>) -> Option<f64> {
    stat(pid).map(|s| s.cpu_s)
}

/// The engine's session and the CPU seconds of its processes (see the module doc).
fn engine_cpu(pid: u32) -> Option<(u32, f64)> {
    let sid = stat(Some(pid))?.sid;
    if stat(None).is_none_or(|me| me.sid == sid) {
        return Some((sid, cpu_s(Some(pid))?));
    }
    let total = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| stat(Some(p)))
        .filter(|s| s.sid == sid)
        .map(|s| s.cpu_s)
        .sum();
    Some((sid, total))
}

/// What a run reads of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    sid: u32,
    cpu_s: f64,
}

/// Session id and utime + stime from a `/proc/<pid>/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from its closing parenthesis.
fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): the session is field 6, utime field 14, stime field 15.
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(Stat {
        sid: f.get(3)?.parse().ok()?,
        cpu_s: ticks / TICKS_PER_S,
    })
}

/// One point in time of every cost a run reports.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    recache_cpu_s: Option<f64>,
    loop_busy_s: Vec<(&'static str, f64)>,
    /// The pid that wrote the shim's status, and its steering seconds.
    shim_steer_s: Option<(u32, f64)>,
    /// The engine's session and its CPU seconds.
    engine: Option<(u32, f64)>,
}

impl Snapshot {
    /// Now, from the in-process recache's `metrics` text and the shim's status beside `order`.
    pub fn take(metrics: &str, order: Option<&Path>) -> Self {
        let status = order.and_then(shim_status::read);
        let engine_pid = status.as_ref().map(|s| s.pid).filter(|&p| p > 0);
        Self {
            engine: engine_pid.and_then(engine_cpu),
            recache_cpu_s: cpu_s(None),
            loop_busy_s: Phase::ALL
                .iter()
                .map(|p| {
                    let name = format!(
                        "recache_kv_loop_busy_seconds_total{{phase=\"{}\"}}",
                        p.as_str()
                    );
                    (p.as_str(), counter(metrics, &name))
                })
                .collect(),
            shim_steer_s: status.as_ref().map(|s| (s.pid, s.steer_s)),
        }
    }

    /// The costs between `self` (before the run) and `after`, as the row's fields. The
    /// engine's figures count only when both snapshots name the same engine session.
    pub fn until(&self, after: &Snapshot) -> Value {
        let d = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        let engine_cpu_s = match (self.engine, after.engine) {
            (Some((a, x)), Some((b, y))) if a == b => Some(y - x),
            _ => None,
        };
        let busy: serde_json::Map<String, Value> = after
            .loop_busy_s
            .iter()
            .map(|(k, v)| {
                let before = self.loop_busy_s.iter().find(|(b, _)| b == k).map(|x| x.1);
                (k.to_string(), json!(v - before.unwrap_or(0.0)))
            })
            .collect();
        json!({
            "recache_cpu_s": d(self.recache_cpu_s, after.recache_cpu_s),
            "loop_busy_s": busy,
            "shim_steer_s": after.shim_steer_s.map(|(pid, a)| match self.shim_steer_s {
                Some((was, b)) if was == pid => a - b,
                // Another process wrote it (the engine restarted, or the status came from a
                // process that opened the order but never steers): its count starts at zero.
                _ => a,
            }),
            "engine_cpu_s": engine_cpu_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names() {
        // Fields 14 and 15 (utime, stime) = 250 + 50 ticks.
        let line = "4242 (vllm (core) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100";
        assert_eq!(parse_stat(line), Some(Stat { sid: 3, cpu_s: 3.0 }));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        assert!(
            cpu_s(None).is_some_and(|s| s >= 0.0),
            "this process on Linux"
        );
        // In our own session only the process itself counts (not the test runner's shell).
        let me = std::process::id();
        assert_eq!(engine_cpu(me).map(|e| e.0), stat(None).map(|s| s.sid));
    }

    #[test]
    fn deltas_by_phase_and_only_for_the_same_engine() {
        let snap = |busy: f64, steer: Option<f64>, sid: Option<u32>, cpu: f64| Snapshot {
            recache_cpu_s: Some(cpu),
            loop_busy_s: vec![("arrivals", busy), ("publish", 2.0 * busy)],
            shim_steer_s: steer.map(|s| (sid.unwrap_or(0), s)),
            engine: sid.map(|s| (s, 10.0 * cpu)),
        };
        let v = snap(1.0, None, Some(7), 1.0).until(&snap(3.0, Some(0.5), Some(7), 4.0));
        assert_eq!(v["recache_cpu_s"], json!(3.0));
        assert_eq!(v["loop_busy_s"]["arrivals"], json!(2.0));
        assert_eq!(v["loop_busy_s"]["publish"], json!(4.0));
        assert_eq!(v["shim_steer_s"], json!(0.5));
        assert_eq!(v["engine_cpu_s"], json!(30.0));
        let restarted =
            snap(1.0, Some(1.0), Some(7), 1.0).until(&snap(1.0, Some(2.0), Some(8), 2.0));
        assert_eq!(restarted["engine_cpu_s"], Value::Null);
        assert_eq!(
            restarted["shim_steer_s"],
            json!(2.0),
            "a new writer counts from zero"
        );
        let same = snap(1.0, Some(1.0), Some(7), 1.0).until(&snap(1.0, Some(2.5), Some(7), 2.0));
        assert_eq!(same["shim_steer_s"], json!(1.5));
    }
}
