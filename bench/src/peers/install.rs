//! The peer gateways, installed pinned from PyPI into a cached venv on first use: both ship a
//! Rust binary in their wheel (`bin/sglang-router`, `bin/vllm-router`). A venv that already
//! has both pinned versions is used as it is; a registry that cannot be reached is an error
//! that says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::args::Peer;
use crate::error::BenchError;

/// The pinned releases the comparison runs (the versions).
pub const PINS: [(&str, &str); 2] = [("sglang-router", "0.3.2"), ("vllm-router", "0.1.17")];

/// The venv when none is given: beside the testbed's engine venvs.
pub fn default_venv() -> PathBuf {
    let home = std::env::var_os("RECACHE_TESTBED_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
            Path::new(&home).join(".cache/recache-testbed")
        });
    home.join("venv-peers")
}

/// The binary of `peer` in `venv`.
pub fn binary(venv: &Path, peer: Peer) -> PathBuf {
    venv.join("bin").join(match peer {
        Peer::SglangRouter => "sglang-router",
        Peer::VllmRouter => "vllm-router",
    })
}

/// The file that records what the venv holds, written after a successful install.
fn stamp(venv: &Path) -> PathBuf {
    venv.join("recache-peers.pins")
}

fn pins_text() -> String {
    PINS.iter().map(|(n, v)| format!("{n}=={v}\n")).collect()
}

/// Makes sure `venv` holds the pinned peers; installs them when it does not.
pub fn ensure(venv: &Path) -> Result<(), BenchError> {
    if std::fs::read_to_string(stamp(venv)).ok().as_deref() == Some(pins_text().as_str())
        && [Peer::SglangRouter, Peer::VllmRouter]
            .iter()
            .all(|p| binary(venv, *p).is_file())
    {
        return Ok(());
    }
    eprintln!(
        "bench peers: installing {} into {} (PyPI; once) ...",
        pins_text().trim().replace('\n', ", "),
        venv.display()
    );
    if !venv.join("bin/pip").is_file() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(venv),
            "creating the peers' venv (python3 -m venv)",
        )?;
    }
    let specs: Vec<String> = PINS.iter().map(|(n, v)| format!("{n}=={v}")).collect();
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--disable-pip-version-check", "-q"])
            .args(&specs),
        "installing the peers from PyPI (is the registry reachable?)",
    )?;
    for p in [Peer::SglangRouter, Peer::VllmRouter] {
        if !binary(venv, p).is_file() {
            return Err(BenchError::Setup(format!(
                "the installed wheel has no {}",
                binary(venv, p).display()
            )));
        }
    }
    std::fs::write(stamp(venv), pins_text()).map_err(BenchError::io("writing the pins stamp"))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), BenchError> {
    let out = cmd.output().map_err(BenchError::io(what.to_string()))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(6).collect();
    Err(BenchError::Setup(format!(
        "{what}: {} ({})",
        tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        out.status
    )))
}
