//! Finding the driver and loading the kernel modules, once per device per
//! process.
//!
//! cudarc's `CudaContext::new` panics when libcuda is missing (dynamic
//! loading resolves the library lazily), so [`driver_available`] probes with
//! `cudarc::driver::sys::is_culib_present()` before any driver call.
//! `CudaContext::new` retains the device's *primary* context, the same one
//! PyTorch's runtime uses, so device pointers and streams from the engine are
//! valid in it.

use crate::compile;
use crate::error::ShimError;
use cudarc::driver::{CudaContext, CudaFunction};
use recache_kernels::sources;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The loaded kernels of one device.
pub struct Kernels {
    /// Primary context of the device.
    pub ctx: Arc<CudaContext>,
    /// Scatter entry points indexed by `dtype * 2 + style` (see `sources`).
    pub scatter: [CudaFunction; 4],
    /// Per-beam candidate kernel.
    pub beam_candidates: CudaFunction,
    /// Global selection kernel.
    pub beam_select: CudaFunction,
}

/// Whether libcuda can be loaded and initialised with at least one device;
/// `Err` carries the reason. Cached: the answer does not change in a process.
pub fn driver_available() -> Result<(), ShimError> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: only probes dlopen of libcuda's candidate names.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err("libcuda not found (no NVIDIA driver on this machine)".into());
            }
            cudarc::driver::result::init().map_err(|e| format!("cuInit failed: {e}"))?;
            match CudaContext::device_count() {
                Ok(n) if n > 0 => Ok(()),
                Ok(_) => Err("driver present but no CUDA device".into()),
                Err(e) => Err(format!("cuDeviceGetCount failed: {e}")),
            }
        })
        .clone()
        .map_err(ShimError::CudaUnavailable)
}

fn virtual_arch(ctx: &CudaContext) -> Result<String, ShimError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(ShimError::driver("compute capability query"))?;
    if major < 8 {
        return Err(ShimError::CudaUnavailable(format!(
            "device is sm_{major}{minor}; the kernels need sm_80 or newer (bf16 conversions)"
        )));
    }
    Ok(format!("compute_{major}{minor}"))
}

fn load(ordinal: usize) -> Result<Kernels, ShimError> {
    driver_available()?;
    let ctx = CudaContext::new(ordinal).map_err(ShimError::driver("primary context retain"))?;
    let arch = virtual_arch(&ctx)?;
    let mut modules = Vec::new();
    for src in sources::ALL {
        // An NVRTC older than the device may not know its arch: fall back to
        // the baseline PTX, which the driver JIT-compiles forward.
        let ptx = compile::ptx_for(src, &arch).or_else(|e| match e {
            ShimError::Compile { .. } if arch != sources::MIN_ARCH => {
                compile::ptx_for(src, sources::MIN_ARCH)
            }
            e => Err(e),
        })?;
        let module = ctx
            .load_module(ptx.into())
            .map_err(ShimError::driver("module load (PTX JIT)"))?;
        modules.push(module);
    }
    let f = |m: usize, name: &str| {
        modules[m]
            .load_function(name)
            .map_err(ShimError::driver("kernel lookup"))
    };
    let s = sources::ITEM_KV_SCATTER.entry_points;
    let b = sources::BEAM_TOPK.entry_points;
    Ok(Kernels {
        scatter: [f(0, s[0])?, f(0, s[1])?, f(0, s[2])?, f(0, s[3])?],
        beam_candidates: f(1, b[0])?,
        beam_select: f(1, b[1])?,
        ctx,
    })
}

/// The kernels of device `ordinal`, loading (and compiling) them on first use.
/// Failures are not cached, so a transient error can be retried.
pub fn kernels(ordinal: usize) -> Result<Arc<Kernels>, ShimError> {
    static LOADED: OnceLock<Mutex<HashMap<usize, Arc<Kernels>>>> = OnceLock::new();
    let map = LOADED.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked mid-insert; the map
    // itself is still consistent.
    let mut guard = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = guard.get(&ordinal) {
        return Ok(k.clone());
    }
    let k = Arc::new(load(ordinal)?);
    guard.insert(ordinal, k.clone());
    Ok(k)
}
