//! Where a retrieval step's beam top-k runs: recache's CUDA kernel when this machine has a
//! usable GPU (`recache_shim::beam_host`), else — and whenever a launch fails — the kernel's
//! CPU reference, which gives the same choices (the GPU parity test asserts bit-equal
//! outputs). Chosen once per process, off the request path's hot loop; the choice is logged.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use recache_kernels::beam::{BeamChoice, BeamStep, beam_topk_reference};

/// Which implementation serves the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeamDevice {
    /// The CPU reference.
    Cpu,
    /// The CUDA kernel on device 0.
    Cuda,
}

/// The device this process uses, probed on first call: the CUDA driver must load and the
/// kernels compile for device 0.
pub fn device() -> BeamDevice {
    static DEVICE: OnceLock<BeamDevice> = OnceLock::new();
    *DEVICE.get_or_init(|| {
        let probe = recache_shim::loader::driver_available()
            .and_then(|()| recache_shim::loader::kernels(0).map(|_| ()));
        match probe {
            Ok(()) => {
                tracing::info!("retrieval beam top-k: recache's CUDA kernel on device 0");
                BeamDevice::Cuda
            }
            Err(e) => {
                tracing::info!(
                    "retrieval beam top-k: CPU reference (no usable GPU: {})",
                    e.full_message()
                );
                BeamDevice::Cpu
            }
        }
    })
}

/// One step's choices, best first (`beam_width` entries, padding included).
pub fn select(step: &BeamStep<'_>) -> Option<Vec<BeamChoice>> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if device() == BeamDevice::Cuda {
        match recache_shim::beam_host::beam_topk_device(0, step) {
            Ok(choices) => return Some(choices),
            Err(e) if !WARNED.swap(true, Ordering::Relaxed) => tracing::warn!(
                "retrieval beam top-k on the GPU failed, using the CPU reference: {}",
                e.full_message()
            ),
            Err(_) => {}
        }
    }
    beam_topk_reference(step).ok().map(|r| r.choices)
}

#[cfg(test)]
#[path = "topk_tests.rs"]
mod tests;
