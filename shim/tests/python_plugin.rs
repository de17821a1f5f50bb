//! Runs the Python plugin's no-GPU test (`python/tests/test_no_gpu.py`)
//! against the cdylib next to this test binary (built here if `cargo test`
//! did not), so the ctypes
//! bindings are checked against the real C ABI. Needs `python3` on PATH (or
//! `$PYTHON`), as tests/prereqs does; without one it fails and says so.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn python_plugin_imports_and_reports_unavailable_without_gpu() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/<this test> -> target/<profile>/librecache_shim.so
    let exe = std::env::current_exe().expect("test exe path");
    let lib = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("librecache_shim.so"))
        .expect("target dir");
    if !lib.exists() {
        // `cargo test` builds only the rlib; build the cdylib (same profile,
        // same target dir: cargo has released its build lock by now).
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "recache-shim", "--lib"])
            .current_dir(&manifest);
        if lib
            .parent()
            .and_then(|p| p.file_name())
            .is_some_and(|n| n == "release")
        {
            cmd.arg("--release");
        }
        if let Some(target) = lib.parent().and_then(|p| p.parent()) {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        let st = cmd.status().expect("run cargo build for the cdylib");
        assert!(st.success(), "cargo build -p recache-shim --lib failed");
    }
    assert!(lib.exists(), "cdylib not built at {}", lib.display());
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(manifest.join("python/tests/test_no_gpu.py"))
        .env("PYTHONPATH", manifest.join("python"))
        .env("RECACHE_SHIM_LIB", &lib)
        .env(
            "RECACHE_EXPECT_NO_GPU",
            if recache_shim::loader::driver_available().is_err() {
                "1"
            } else {
                "0"
            },
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("running {python} (set PYTHON to a python3): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "python plugin test failed:\n{text}");
}
