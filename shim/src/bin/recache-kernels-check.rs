//! CI check without a GPU: compile every kernel with NVRTC through the
//! loader's own code path ([`recache_shim::compile::nvrtc_compile`]) for each
//! CI architecture and write `<module>.<sm>.ptx` into the output directory,
//! for `ptxas` to assemble (see `kernels/check`). Exits non-zero on failure.
//!
//! Usage: `recache-kernels-check <out-dir>`; libnvrtc from `LD_LIBRARY_PATH`
//! or `RECACHE_NVRTC_PATH`. With `RECACHE_KERNEL_CACHE_DIR` set it also writes
//! each PTX into that cache ([`recache_shim::compile::cache_store`]), where the
//! loader looks first, so a GPU host without NVRTC (or with an NVRTC the shim's
//! bindings do not match) can load the kernels from a cache prepared elsewhere.

use recache_kernels::sources;
use recache_shim::compile::{cache_store, nvrtc_compile};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: recache-kernels-check <out-dir>");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("cannot create {}: {e}", out.display());
        return ExitCode::from(2);
    }
    let mut failed = false;
    for src in sources::ALL {
        for (arch, sm) in sources::CI_ARCHS {
            match nvrtc_compile(src, arch) {
                Ok(ptx) => {
                    let path = out.join(format!("{}.{sm}.ptx", src.name));
                    let missing: Vec<_> = src
                        .entry_points
                        .iter()
                        .filter(|e| !ptx.contains(&format!(".entry {e}(")))
                        .collect();
                    if !missing.is_empty() {
                        eprintln!(
                            "FAIL {} {arch}: PTX lacks entry points {missing:?}",
                            src.name
                        );
                        failed = true;
                    } else if let Err(e) = std::fs::write(&path, &ptx) {
                        eprintln!("FAIL writing {}: {e}", path.display());
                        failed = true;
                    } else {
                        println!("nvrtc ok  {} {arch} -> {}", src.name, path.display());
                        match cache_store(src, arch, &ptx) {
                            Ok(Some(c)) => println!("cached    {}", c.display()),
                            Ok(None) => {}
                            Err(e) => {
                                eprintln!("FAIL caching {} {arch}: {e}", src.name);
                                failed = true;
                            }
                        }
                    }
                }
                Err(e) => {
                    eprintln!("FAIL {} {arch}: {}", src.name, e.full_message());
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
