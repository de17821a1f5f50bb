//! RoPE parameters and the fp32 rotation shared by the GPU kernel and its CPU
//! reference.
//!
//! Why the GPU and CPU agree closely: the inverse-frequency table is computed
//! once on the host (in f64, rounded to f32) and handed to the kernel by value,
//! the angle is one correctly rounded fp32 product `delta * inv_freq[i]`, and
//! the kernel is compiled with `--fmad=false`, so the only source of
//! difference is `sincosf` (CUDA: <= 2 ulp fp32) against the host libm.
//! [`rope_tolerance`] states the resulting bound.

use crate::dtype::KvDtype;
use crate::error::{KernelError, Result};

/// Largest rotary dimension the kernel's by-value frequency table holds.
pub const MAX_ROTARY_DIM: usize = 256;

/// How the rotary dimensions are paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum RopeStyle {
    /// NeoX / Llama / Qwen: element `i` pairs with `i + rotary_dim/2`.
    NeoX = 0,
    /// GPT-J: element `2i` pairs with `2i + 1`.
    GptJ = 1,
}

impl RopeStyle {
    /// Parse the C ABI code.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(Self::NeoX),
            1 => Some(Self::GptJ),
            _ => None,
        }
    }
}

/// RoPE configuration of one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    /// Leading dimensions of each head that are rotated (the rest are copied).
    pub rotary_dim: usize,
    /// Base θ (e.g. 1e6 for Qwen2, 1e4 for Llama-2).
    pub theta: f32,
    /// Pairing of rotated dimensions.
    pub style: RopeStyle,
}

impl RopeConfig {
    /// Check the config against a head dim. The kernel moves 8 elements per
    /// thread step, so both dims must be multiples of 8.
    pub fn validate(&self, head_dim: usize) -> Result<()> {
        if self.rotary_dim == 0 || self.rotary_dim % 8 != 0 {
            return Err(KernelError::invalid(
                "rotary_dim",
                format!("{} must be a positive multiple of 8", self.rotary_dim),
            ));
        }
        if self.rotary_dim > head_dim || self.rotary_dim > MAX_ROTARY_DIM {
            return Err(KernelError::invalid(
                "rotary_dim",
                format!(
                    "{} exceeds head_dim {head_dim} or {MAX_ROTARY_DIM}",
                    self.rotary_dim
                ),
            ));
        }
        if !(self.theta.is_finite() && self.theta > 1.0) {
            return Err(KernelError::invalid(
                "rope_theta",
                format!("{} must be finite and > 1", self.theta),
            ));
        }
        Ok(())
    }

    /// `inv_freq[i] = theta^(-2i/rotary_dim)` for `i < rotary_dim/2`, padded
    /// with zeros to the fixed table size the kernel takes by value.
    pub fn inv_freq_table(&self) -> [f32; MAX_ROTARY_DIM / 2] {
        let mut t = [0f32; MAX_ROTARY_DIM / 2];
        let half = self.rotary_dim / 2;
        for (i, slot) in t.iter_mut().enumerate().take(half) {
            let e = -((2 * i) as f64) / self.rotary_dim as f64;
            *slot = (self.theta as f64).powf(e) as f32;
        }
        t
    }

    /// `(cos, sin)` of `delta * inv_freq[i]` in fp32, as the kernel computes.
    pub fn cos_sin(&self, delta: i32) -> (Vec<f32>, Vec<f32>) {
        let table = self.inv_freq_table();
        let half = self.rotary_dim / 2;
        let mut cos = Vec::with_capacity(half);
        let mut sin = Vec::with_capacity(half);
        for f in &table[..half] {
            let angle = delta as f32 * *f;
            let (s, c) = angle.sin_cos();
            cos.push(c);
            sin.push(s);
        }
        (cos, sin)
    }

    /// Rotate one head (`head.len() == head_dim`) in place by the angles from
    /// [`RopeConfig::cos_sin`]. Elements past `rotary_dim` are untouched.
    /// The operation order (`x*c - y*s`, no FMA) matches the kernel.
    pub fn rotate(&self, head: &mut [f32], cos: &[f32], sin: &[f32]) {
        let half = self.rotary_dim / 2;
        for i in 0..half {
            let (a, b) = match self.style {
                RopeStyle::NeoX => (i, i + half),
                RopeStyle::GptJ => (2 * i, 2 * i + 1),
            };
            let (x, y) = (head[a], head[b]);
            head[a] = x * cos[i] - y * sin[i];
            head[b] = y * cos[i] + x * sin[i];
        }
    }
}

/// Allowed |gpu − cpu| for one rotated output element whose pair inputs were
/// `x` and `y` and whose CPU value is `expected` (all widened to fp32):
/// one storage ulp at the result (rounding may flip) plus 8 fp32 ulps of the
/// inputs' magnitude (sin/cos differ by a few fp32 ulps between CUDA's
/// `sincosf` and libm). Copies and V are compared bit-for-bit instead.
pub fn rope_tolerance(dtype: KvDtype, x: f32, y: f32, expected: f32) -> f32 {
    dtype.ulp(expected) + 8.0 * f32::EPSILON * (x.abs() + y.abs())
}
