//! `bench gr --testbed`: the engines the modes run on, started and stopped with the testbed's
//! own scripts (`examples/testbed/up` / `down`), one instance per memory layout (KV blocks,
//! item pool bytes), kept up across modes and rounds so paired runs need no restart, and all
//! stopped when the benchmark ends (also on error, by `Drop`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench::BenchError;

/// A memory layout one engine is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    pub kv_blocks: u64,
    /// Host bytes of the item pool's connector; 0 = no connector.
    pub pool_bytes: u64,
}

/// A running engine of the testbed.
#[derive(Debug, Clone)]
pub struct Instance {
    pub name: String,
    pub upstream: String,
    pub kv_events: Option<String>,
}

/// The engines started so far.
pub struct Testbed {
    dir: PathBuf,
    /// KV bytes of one 32-token block, to size vLLM's CPU KV space.
    block_bytes: u64,
    started: Vec<(Layout, Instance)>,
}

impl Testbed {
    pub fn new(dir: &Path, block_bytes: u64) -> Result<Self, BenchError> {
        if !dir.join("up").is_file() {
            return Err(BenchError::Setup(format!(
                "--testbed: no {}/up (run from the repository root or set --testbed-dir)",
                dir.display()
            )));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            block_bytes,
            started: Vec::new(),
        })
    }

    /// The engine for `layout`, started now if it is not running yet (a minute or two).
    pub fn get(&mut self, layout: Layout) -> Result<Instance, BenchError> {
        if let Some((_, i)) = self.started.iter().find(|(l, _)| *l == layout) {
            return Ok(i.clone());
        }
        let name = format!(
            "gr-{}b-{}m",
            layout.kv_blocks,
            layout.pool_bytes.div_ceil(1 << 20)
        );
        let mut cmd = Command::new(self.dir.join("up"));
        cmd.args([
            "--name",
            &name,
            "--kv-blocks",
            &layout.kv_blocks.to_string(),
        ]);
        if layout.pool_bytes > 0 {
            cmd.args([
                "--item-pool",
                "--item-pool-bytes",
                &layout.pool_bytes.to_string(),
            ]);
        }
        // vLLM's CPU KV space (GiB) must hold the blocks; the block count is the real cap.
        let gib = (layout.kv_blocks * self.block_bytes).div_ceil(1 << 30) + 1;
        cmd.env("VLLM_CPU_KVCACHE_SPACE", gib.to_string());
        eprintln!(
            "bench gr: starting testbed engine {name} ({} KV blocks, pool {} bytes) ...",
            layout.kv_blocks, layout.pool_bytes
        );
        let out = cmd
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(BenchError::io(format!("running {}/up", self.dir.display())))?;
        if !out.status.success() {
            return Err(BenchError::Setup(format!(
                "{}/up --name {name} failed ({})",
                self.dir.display(),
                out.status
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        let instance = Instance {
            upstream: field("UPSTREAM=").ok_or_else(|| {
                BenchError::Setup(format!(
                    "{}/up printed no UPSTREAM= line",
                    self.dir.display()
                ))
            })?,
            kv_events: field("KV_EVENTS="),
            name,
        };
        self.started.push((layout, instance.clone()));
        Ok(instance)
    }

    /// Stops every engine this testbed started.
    pub fn stop_all(&mut self) {
        for (_, i) in self.started.drain(..) {
            let status = Command::new(self.dir.join("down"))
                .args(["--name", &i.name])
                .stdout(std::process::Stdio::null())
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                eprintln!(
                    "bench gr: warning: could not stop testbed engine {}",
                    i.name
                );
            }
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop_all();
    }
}
