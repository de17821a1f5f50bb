//! The first-use compile path without a GPU: `compile::ptx_for` compiles with
//! NVRTC and writes the on-disk cache, and a second call is served from it.
//! Needs libnvrtc (kernels/check runs this with the wheel's); prints SKIP
//! and passes otherwise, or when nvcc-built PTX makes NVRTC unnecessary.

use recache_kernels::sources;
use recache_shim::compile::{self, CACHE_DIR_ENV};

#[test]
fn nvrtc_first_use_fills_and_reuses_disk_cache() {
    if let Err(e) = compile::ensure_nvrtc() {
        // kernels/check sets this: there a missing NVRTC is a failure.
        assert!(
            std::env::var_os("RECACHE_REQUIRE_NVRTC").is_none(),
            "{}",
            e.full_message()
        );
        println!("SKIP: {}", e.full_message());
        return;
    }
    if compile::prebuilt_ptx(sources::BEAM_TOPK.name).is_some() {
        println!("SKIP: PTX was prebuilt by nvcc; NVRTC is not used");
        return;
    }
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
