//! Where the `recache` binary is: beside this one (`recache-bench` is installed and built next
//! to it, as `recache` finds `recache-bench`). The benchmarks that measure a real `recache
//! serve` process (`overhead`, `soak`, `slo`) start it from here.

use std::path::PathBuf;

use crate::error::BenchError;

/// The `recache` executable in this executable's folder.
pub fn path() -> Result<PathBuf, BenchError> {
    let exe = std::env::current_exe().map_err(BenchError::io("locating recache-bench"))?;
    let bin = exe.with_file_name(format!("recache{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        return Err(BenchError::Setup(format!(
            "this benchmark runs `recache serve`, and there is no recache binary beside {}: \
             build both with `cargo build --release -p recache -p recache-bench`",
            exe.display()
        )));
    }
    Ok(bin)
}
