//! Runs the Python plugin's no-GPU test (`python/tests/test_no_gpu.py`)
//! against the cdylib next to this test binary (built here, into
//! `target/shim-cdylib/`, if `cargo test` did not), so the ctypes
//! bindings are checked against the real C ABI. Needs `python3` on PATH (or
//! `$PYTHON`), as tests/prereqs does; without one it fails and says so.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn python_plugin_imports_and_reports_unavailable_without_gpu() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/<profile>/deps/<this test> -> target/<profile>/librecache_shim.so
    let exe = std::env::current_exe().expect("test exe path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let mut lib = profile_dir.join("librecache_shim.so");
    if !lib.exists() {
        // `cargo test` builds only the rlib; build the cdylib. Into a target dir of its own:
        // this crate's outputs carry no hash in their names (it is also a cdylib), so a
        // build resolved for `-p recache-shim` alone would overwrite the rlib that crates
        // depending on it (the sidecar) were just linked against, while this `cargo test`
        // still has doc tests to build against them.
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let own = profile_dir
            .parent()
            .map(|t| t.join("shim-cdylib"))
            .expect("target dir");
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "recache-shim", "--lib"])
            .current_dir(&manifest)
            .env("CARGO_TARGET_DIR", &own);
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build for the cdylib");
        assert!(st.success(), "cargo build -p recache-shim --lib failed");
        lib = own
            .join(if release { "release" } else { "debug" })
            .join("librecache_shim.so");
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
