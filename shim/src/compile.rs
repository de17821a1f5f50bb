//! Kernel sources -> PTX: the prebuilt PTX from `build.rs` (when `nvcc` was
//! found at build time), else NVRTC at first use, with an optional on-disk
//! cache. The CI check (`recache-kernels-check`) calls [`nvrtc_compile`], so
//! it exercises exactly this code path.

use crate::error::ShimError;
use cudarc::nvrtc::{CompileError, CompileOptions};
use recache_kernels::sources::{self, KernelSource};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Env var: explicit path to `libnvrtc.so*` (else the loader's search path).
pub const NVRTC_PATH_ENV: &str = "RECACHE_NVRTC_PATH";
/// Env var: directory for cached PTX (unset = memory-only caching).
pub const CACHE_DIR_ENV: &str = "RECACHE_KERNEL_CACHE_DIR";

/// PTX that `build.rs` produced with `nvcc` (empty when nvcc was absent).
pub fn prebuilt_ptx(module: &str) -> Option<&'static str> {
    let ptx = match module {
        "item_kv_scatter" => include_str!(concat!(env!("OUT_DIR"), "/item_kv_scatter.ptx")),
        "beam_topk" => include_str!(concat!(env!("OUT_DIR"), "/beam_topk.ptx")),
        _ => "",
    };
    (!ptx.is_empty()).then_some(ptx)
}

/// Make libnvrtc loadable: with `RECACHE_NVRTC_PATH` set, dlopen that file
/// first. cudarc then finds it by soname (`libnvrtc.so.12`), since the
/// dynamic loader returns an already-loaded library of the same soname.
pub fn ensure_nvrtc() -> Result<(), ShimError> {
    static PRELOAD: OnceLock<Result<(), String>> = OnceLock::new();
    let r = PRELOAD.get_or_init(|| {
        if let Ok(path) = std::env::var(NVRTC_PATH_ENV) {
            // SAFETY: loading NVRTC runs only its library initialisers.
            let lib = unsafe { libloading::Library::new(&path) }
                .map_err(|e| format!("{NVRTC_PATH_ENV}={path}: {e}"))?;
            // Kept loaded for the process lifetime, like cudarc's own handle.
            std::mem::forget(lib);
        }
        // SAFETY: only probes dlopen of the candidate names.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(format!(
                "libnvrtc not found (set {NVRTC_PATH_ENV} or LD_LIBRARY_PATH, \
                 e.g. to the lib dir of the nvidia-cuda-nvrtc-cu12 wheel)"
            ))
        }
    });
    r.clone().map_err(ShimError::NvrtcUnavailable)
}

/// FNV-1a, stable across Rust versions (std's hasher is not), for cache keys.
fn fnv1a(parts: &[&str]) -> u64 {
    // 0xff never occurs in UTF-8: it separates the parts.
    recache_hash::fnv1a(parts.iter().flat_map(|p| p.bytes().chain([0xff])))
}

fn cache_path(src: &KernelSource, arch: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(CACHE_DIR_ENV)?;
    let mut parts = vec![src.source, arch];
    parts.extend_from_slice(sources::NVRTC_OPTIONS);
    Some(PathBuf::from(dir).join(format!("{}-{arch}-{:016x}.ptx", src.name, fnv1a(&parts))))
}

/// Compile one source with NVRTC for virtual architecture `arch`
/// (`compute_XY`), with the options every path shares.
pub fn nvrtc_compile(src: &KernelSource, arch: &str) -> Result<String, ShimError> {
    ensure_nvrtc()?;
    let mut options: Vec<String> = sources::NVRTC_OPTIONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    options.push(format!("--gpu-architecture={arch}"));
    let opts = CompileOptions {
        options,
        name: Some(format!("{}.cu", src.name)),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(src.source, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(source) => {
            let log = match &source {
                CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            };
            Err(ShimError::Compile {
                module: src.name,
                arch: arch.to_string(),
                log,
                source,
            })
        }
    }
}

/// PTX for `src` on a device of virtual architecture `arch`: prebuilt, else
/// the disk cache, else NVRTC (written back to the disk cache, best effort).
pub fn ptx_for(src: &KernelSource, arch: &str) -> Result<String, ShimError> {
    if let Some(ptx) = prebuilt_ptx(src.name) {
        return Ok(ptx.to_string());
    }
    let path = cache_path(src, arch);
    if let Some(p) = &path {
        if let Ok(ptx) = std::fs::read_to_string(p) {
            return Ok(ptx);
        }
    }
    let ptx = nvrtc_compile(src, arch)?;
    // The cache is an optimisation: a read-only or full disk must not fail the load.
    let _ = cache_store(src, arch, &ptx);
    Ok(ptx)
}

/// Writes `ptx` (compiled from `src` for `arch`) where [`ptx_for`] looks for it under
/// `RECACHE_KERNEL_CACHE_DIR`; returns the file, or None when that variable is unset.
/// Write-then-rename, so concurrent processes never see a torn file.
pub fn cache_store(src: &KernelSource, arch: &str, ptx: &str) -> std::io::Result<Option<PathBuf>> {
    let Some(p) = cache_path(src, arch) else {
        return Ok(None);
    };
    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
    std::fs::create_dir_all(p.parent().unwrap_or(&p))?;
    std::fs::write(&tmp, ptx)?;
    std::fs::rename(&tmp, &p)?;
    Ok(Some(p))
}
