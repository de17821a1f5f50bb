//! `recache bench ARGS` runs `recache-bench ARGS` from the `recache` executable's folder (as
//! git runs `git-foo`): every argument passed as given, its output and exit status the
//! command's; without it, a clear error naming the binary and how to build it. `recache sim
//! --plot` goes the same way (the plot is drawn there); `recache sim` without it runs here.
//! A copy of the built `recache` runs in a temporary folder beside a stand-in `recache-bench`.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// Held while a test writes an executable and while it spawns one. A child forked by one
/// test thread keeps a copy of every descriptor open in the process until it execs, so an
/// executable another thread is still writing stays open for writing in that child, and
/// running it fails with ETXTBSY ("Text file busy"): writes and forks must not overlap.
static EXEC: Mutex<()> = Mutex::new(());

/// A folder with a copy of `recache` and, when `stand_in` is given, a `recache-bench` script.
fn folder(name: &str, stand_in: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir()
        .expect("temp dir");
    let recache = dir.path().join("recache");
    let _exec = EXEC.lock().unwrap_or_else(|e| e.into_inner());
    std::fs::copy(env!("CARGO_BIN_EXE_recache"), &recache).expect("copy recache");
    if let Some(script) = stand_in {
        let bench = dir.path().join("recache-bench");
        std::fs::write(&bench, script).expect("write the stand-in");
        std::fs::set_permissions(&bench, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    (dir, recache)
}

fn run(recache: &Path, args: &[&str]) -> Output {
    let child = {
        let _exec = EXEC.lock().unwrap_or_else(|e| e.into_inner());
        Command::new(recache)
            .args(args)
            .env("RECACHE_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run recache")
    };
    child.wait_with_output().expect("recache's output")
}

/// Prints each argument on its own line and exits 7.
const ECHO: &str = "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\necho err >&2\nexit 7\n";

#[test]
fn bench_runs_the_binary_beside_recache_with_every_argument_and_its_status() {
    let (_dir, recache) = folder("handoff", Some(ECHO));
    let args = ["bench", "gr", "--help", "--rates", "0.5,2", "--x", "a b"];
    let out = run(&recache, &args);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines, &args[1..], "arguments after `bench`, as given");
    assert_eq!(String::from_utf8_lossy(&out.stderr).trim(), "err");
}

#[test]
fn a_missing_bench_binary_is_a_clear_error() {
    let (_dir, recache) = folder("handoff-missing", None);
    let out = run(&recache, &["bench", "soak", "--minutes", "1"]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("recache-bench")
            && err.contains("cargo build --release -p recache -p recache-bench"),
        "{err}"
    );
}

#[test]
fn sim_hands_over_only_to_plot() {
    let (dir, recache) = folder("handoff-sim", Some(ECHO));
    let trace = dir.path().join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"hash_ids\": [1, 2]}\n{\"hash_ids\": [1, 2, 3]}\n",
    )
    .expect("trace");
    let trace = trace.to_string_lossy().into_owned();
    let plotted = run(&recache, &["sim", "--trace", &trace, "--plot", "p.png"]);
    assert_eq!(plotted.status.code(), Some(7), "{plotted:?}");
    let lines = String::from_utf8_lossy(&plotted.stdout);
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines, ["sim", "--trace", trace.as_str(), "--plot", "p.png"]);
    let here = run(
        &recache,
        &[
            "sim",
            "--trace",
            &trace,
            "--policies",
            "lru",
            "--capacity-blocks",
            "2",
            "--json",
        ],
    );
    assert!(here.status.success(), "{here:?}");
    let rows: serde_json::Value = serde_json::from_slice(&here.stdout).expect("JSON rows");
    assert_eq!(rows[0]["policy"], "lru", "{rows}");
}
