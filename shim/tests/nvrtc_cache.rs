//! The first-use compile path without a GPU: `compile::ptx_for` compiles with
//! NVRTC and writes the on-disk cache, and a second call is served from it.
//! Needs libnvrtc, so it is `#[ignore]`d: kernels/check runs it with
//! `--include-ignored` against the wheel's libnvrtc (and `RECACHE_SHIM_NO_NVCC=1`,
//! so nvcc-built PTX does not bypass the NVRTC path). Run anywhere else, a
//! missing NVRTC or prebuilt PTX is a failure that names the cause.

use recache_kernels::sources;
use recache_shim::compile::{self, CACHE_DIR_ENV};

#[test]
#[ignore = "needs libnvrtc (kernels/check runs it with --include-ignored)"]
fn nvrtc_first_use_fills_and_reuses_disk_cache() {
    if let Err(e) = compile::ensure_nvrtc() {
        panic!("{}", e.full_message());
    }
    assert!(
        compile::prebuilt_ptx(sources::BEAM_TOPK.name).is_none(),
        "PTX was prebuilt by nvcc, so NVRTC is not used: build with RECACHE_SHIM_NO_NVCC=1"
    );
    let dir = std::env::temp_dir().join(format!("recache-ptx-cache-{}", std::process::id()));
    // SAFETY: this test binary has one test, so no other thread reads the env.
    unsafe { std::env::set_var(CACHE_DIR_ENV, &dir) };
    let first = compile::ptx_for(&sources::BEAM_TOPK, "compute_80").expect("NVRTC compile");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("cache dir")
        .flatten()
        .collect();
    assert_eq!(files.len(), 1, "one cached PTX file");
    // Tamper with the cached file: the second call must return the cached text.
    std::fs::write(files[0].path(), "// cached\n").expect("rewrite");
    let second = compile::ptx_for(&sources::BEAM_TOPK, "compute_80").expect("cache hit");
    assert_eq!(second, "// cached\n");
    assert!(first.contains(".entry recache_beam_select("));
    let _ = std::fs::remove_dir_all(&dir);
}
