//! # Layout
//!
//! `recache-kernels` owns recache's CUDA C++ kernels (under `cuda/`, embedded
//! here as strings) and a CPU reference implementation of each, so that the
//! GPU code has an oracle that runs everywhere, CI included.
//!
//! - [`sources`]: the `.cu` sources, their entry-point names and the NVRTC
//!   options every compile path (build-time `nvcc`, first-use NVRTC, the CI
//!   check) must use.
//! - [`dtype`]: the two KV storage dtypes (fp16, bf16) and their rounding.
//! - [`rope`]: RoPE parameters, the inverse-frequency table and the fp32
//!   rotation both implementations share; the stated tolerance.
//! - [`scatter`]: item-KV segment descriptors, layout validation and the CPU
//!   reference of the scatter + re-rotation kernel.
//! - [`trie`]: the CSR trie of valid semantic-id tuples.
//! - [`beam`]: the candidate ordering key and the CPU references of the
//!   constrained beam top-k (early-terminated min-heap, brute force, and a
//!   mirror of the GPU's threshold selection).
//! - [`step`]: a search step whose beams each offer a few tokens, posed as a beam top-k
//!   over a step-local vocabulary and trie (retrieval's steps).
//! - [`testing`]: a seeded PRNG and random-input builders shared by the CPU
//!   and GPU parity tests.
//! - [`error`]: the crate's error type.
//!
//! Nothing here touches CUDA; the loader lives in the `recache-shim` crate.

pub mod beam;
pub mod beam_mirror;
pub mod dtype;
pub mod error;
pub mod rope;
pub mod scatter;
pub mod sources;
pub mod step;
pub mod testing;
pub mod trie;

pub use error::KernelError;
