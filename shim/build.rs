//! Compile the kernels to PTX with `nvcc` when one is available (`$NVCC`,
//! `$CUDA_HOME/bin/nvcc` or `nvcc` on PATH). Without nvcc, or with
//! `RECACHE_SHIM_NO_NVCC=1`, empty files are written and the shim compiles
//! with NVRTC at first use instead. Never fails the build over CUDA.

use std::path::{Path, PathBuf};
use std::process::Command;

fn find_nvcc() -> Option<PathBuf> {
    if std::env::var_os("RECACHE_SHIM_NO_NVCC").is_some() {
        return None;
    }
    let mut cands: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("NVCC") {
        cands.push(p.into());
    }
    if let Some(h) = std::env::var_os("CUDA_HOME") {
        cands.push(Path::new(&h).join("bin/nvcc"));
    }
    cands.push("nvcc".into());
    cands.into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn main() {
    for v in ["NVCC", "CUDA_HOME", "RECACHE_SHIM_NO_NVCC"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=../kernels/cuda");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let nvcc = find_nvcc();
    for src in recache_kernels::sources::ALL {
        let ptx = out.join(format!("{}.ptx", src.name));
        let cu = out.join(format!("{}.cu", src.name));
        let built = nvcc.as_ref().is_some_and(|nvcc| {
            std::fs::write(&cu, src.source).is_ok()
                && Command::new(nvcc)
                    .args(["--ptx", "-std=c++17", "--fmad=false"])
                    .arg(format!("-arch={}", recache_kernels::sources::MIN_ARCH))
                    .arg("-o")
                    .arg(&ptx)
                    .arg(&cu)
                    .status()
                    .is_ok_and(|s| s.success())
        });
        if !built {
            if nvcc.is_some() {
                println!(
                    "cargo:warning=nvcc failed on {}; falling back to NVRTC at first use",
                    src.name
                );
            }
            std::fs::write(&ptx, "").expect("write placeholder PTX");
        }
    }
}
