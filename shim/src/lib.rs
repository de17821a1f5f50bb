//! # Layout
//!
//! `recache-shim` loads recache's CUDA kernels (sources and CPU references in
//! `recache-kernels`) through cudarc with dynamic loading, and exposes them to
//! inference engines through a C ABI (`include/recache_shim.h`) and a thin
//! Python plugin (`python/recache_shim`). It builds, links and loads on
//! machines without CUDA; there every entry point reports
//! `RECACHE_ERR_CUDA_UNAVAILABLE` instead of failing.
//!
//! - [`status`]: status codes, per-thread last error, the panic guard.
//! - [`error`]: [`ShimError`] and its status mapping.
//! - [`compile`]: prebuilt PTX (`build.rs`, nvcc) or NVRTC at first use, disk cache.
//! - [`loader`]: libcuda probe, primary context, module load per device.
//! - [`launch`]: argument validation and launches on the caller's stream.
//! - [`beam_host`]: one beam top-k step on the GPU from host data (generative retrieval's
//!   caller; the CPU reference is its fallback).
//! - [`ffi`]: the `extern "C"` functions.
//! - [`host_ffi`]: the scatter's CPU reference behind the kernel's C arguments, on host
//!   memory (tests the item-pool connector's GPU-layout arithmetic without a GPU).
//! - [`order`], [`order_ffi`]: the reader of the eviction order recache publishes, and its
//!   C ABI (used by `python/recache_shim/eviction.py` to steer vLLM's block eviction).

pub mod beam_host;
pub mod compile;
pub mod error;
pub mod ffi;
pub mod host_ffi;
pub mod launch;
pub mod loader;
pub mod order;
pub mod order_ffi;
pub mod status;

pub use error::ShimError;
pub use status::RecacheStatus;
