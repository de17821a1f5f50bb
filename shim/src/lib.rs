//! # Layout
//!
//! `recache-shim` loads recache's CUDA kernels (sources in `recache-kernels`)
//! and exposes them to inference engines through a C ABI.
