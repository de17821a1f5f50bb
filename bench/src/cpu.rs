//! Where a measurement's CPU time went, by role, from `/proc` (Linux): each process's user +
//! system time (all its threads) and the machine's idle time, sampled before and after a run.
//! Roles: the engines' compute processes (`engine_compute`: `VLLM::EngineCore`, the scheduler,
//! plus `VLLM::Worker`, what runs the model; each also apart; SGLang's `sglang::scheduler`,
//! which runs the model in the scheduler's process on the CPU engine, is an engine core), their
//! API servers (each compute process's parent, and SGLang's detokenizer), the system under test (the
//! gateway's process tree: `recache serve` or a peer), this bench, and everything else. On a
//! machine where engines, gateway and load generator share few cores, this says whether a
//! system's extra per-request work takes cores the model needed.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

/// One process's line of `/proc/PID/stat`: (comm, ppid, utime + stime in ticks).
pub fn parse_stat(line: &str) -> Option<(String, u32, u64)> {
    // comm is in parentheses and may hold spaces or parentheses: split at the last ')'.
    let (head, rest) = line.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After comm: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((comm, ppid, ticks))
}

/// A sample: each live process's (comm, ppid, ticks) and the machine's idle ticks.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub procs: HashMap<u32, (String, u32, u64)>,
    pub idle_ticks: u64,
}

/// Reads every process now (processes that end between two samples are not counted).
pub fn sample() -> Sample {
    let mut procs = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(p) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|l| parse_stat(&l))
        {
            procs.insert(pid, p);
        }
    }
    // /proc/stat's first line: cpu user nice system idle iowait ...
    let idle_ticks = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<u64> = (s.lines().next()?.split_whitespace().skip(1))
                .filter_map(|x| x.parse().ok())
                .collect();
            Some(f.get(3)? + f.get(4).copied().unwrap_or(0))
        })
        .unwrap_or(0);
    Sample { procs, idle_ticks }
}

fn ticks_per_s() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

fn is_compute(comm: &str) -> bool {
    // comm is cut to 15 bytes: `sglang::scheduler` reads `sglang::schedul`.
    comm.starts_with("VLLM::EngineCor")
        || comm.starts_with("VLLM::Worker")
        || comm.starts_with("sglang::schedul")
}

/// The role of `pid` in `s`: `gateway` for `gateway`'s tree, `engine_worker` for vLLM's
/// model workers, `engine_core` for its engine-core processes (scheduler; with a separate
/// worker it waits on it), `engine_api` for the parents of either (`apis`), `bench` for
/// this process.
fn role(s: &Sample, apis: &HashSet<u32>, pid: u32, gateway: Option<u32>) -> &'static str {
    if pid == std::process::id() {
        return "bench";
    }
    if let Some(g) = gateway {
        // Up the parent chain (bounded: a chain never loops, but /proc is read live).
        let mut p = pid;
        for _ in 0..32 {
            if p == g {
                return "gateway";
            }
            match s.procs.get(&p) {
                Some((_, pp, _)) if *pp > 1 => p = *pp,
                _ => break,
            }
        }
    }
    let comm = s.procs.get(&pid).map_or("", |p| p.0.as_str());
    match comm {
        c if c.starts_with("VLLM::Worker") => "engine_worker",
        c if is_compute(c) => "engine_core",
        c if c.starts_with("sglang::detoken") => "engine_api",
        _ if apis.contains(&pid) => "engine_api",
        _ => "other",
    }
}

/// The parents of vLLM's compute processes: the API servers.
fn api_servers(s: &Sample) -> HashSet<u32> {
    (s.procs.values())
        .filter(|(c, _, _)| is_compute(c))
        .map(|(_, pp, _)| *pp)
        .collect()
}

/// CPU seconds by role between two samples, and the machine's idle seconds.
pub fn delta(before: &Sample, after: &Sample, gateway: Option<u32>) -> Value {
    let hz = ticks_per_s();
    let apis = api_servers(after);
    let mut by: HashMap<&str, f64> = HashMap::new();
    for (pid, (_, _, t1)) in &after.procs {
        let t0 = before.procs.get(pid).map_or(0, |p| p.2);
        *by.entry(role(after, &apis, *pid, gateway)).or_default() +=
            t1.saturating_sub(t0) as f64 / hz;
    }
    let idle = after.idle_ticks.saturating_sub(before.idle_ticks) as f64 / hz;
    let get = |k: &str| by.get(k).copied().unwrap_or(0.0);
    json!({
        "engine_compute": get("engine_core") + get("engine_worker"),
        "engine_core": get("engine_core"), "engine_worker": get("engine_worker"),
        "engine_api": get("engine_api"),
        "gateway": get("gateway"), "bench": get("bench"), "other": get("other"),
        "idle": idle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_names_parse() {
        let l = "42 (VLLM::EngineCor) S 7 42 42 0 -1 4194560 1 0 0 0 150 25 0 0 20 0 3";
        assert_eq!(parse_stat(l), Some(("VLLM::EngineCor".into(), 7, 175)));
        let l = "9 (a) b) R 1 9 9 0 -1 0 0 0 0 0 3 4 0 0 20 0 1";
        assert_eq!(parse_stat(l), Some(("a) b".into(), 1, 7)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn roles_follow_the_process_tree() {
        let mut s = Sample::default();
        s.procs.insert(10, ("python3".into(), 1, 0)); // an API server
        s.procs.insert(11, ("VLLM::EngineCor".into(), 10, 0));
        s.procs.insert(20, ("recache".into(), 1, 0)); // the gateway
        s.procs.insert(21, ("helper".into(), 20, 0));
        s.procs.insert(30, ("sshd".into(), 1, 0));
        s.procs.insert(12, ("VLLM::Worker_TP0".into(), 11, 0));
        let apis = api_servers(&s);
        assert_eq!(role(&s, &apis, 11, Some(20)), "engine_core");
        assert_eq!(role(&s, &apis, 12, Some(20)), "engine_worker");
        assert_eq!(role(&s, &apis, 10, Some(20)), "engine_api");
        assert_eq!(role(&s, &apis, 21, Some(20)), "gateway");
        assert_eq!(role(&s, &apis, 30, Some(20)), "other");
        assert_eq!(role(&s, &apis, 30, None), "other");
        // SGLang's CPU engine: the scheduler runs the model; the detokenizer serves.
        s.procs.insert(40, ("python".into(), 1, 0));
        s.procs.insert(41, ("sglang::schedul".into(), 40, 0));
        s.procs.insert(42, ("sglang::detoken".into(), 40, 0));
        let apis = api_servers(&s);
        assert_eq!(role(&s, &apis, 41, None), "engine_core");
        assert_eq!(role(&s, &apis, 42, None), "engine_api");
        assert_eq!(role(&s, &apis, 40, None), "engine_api");
    }
}
