//! KV storage dtypes and the fp32 <-> storage conversions the CPU reference
//! uses. Both round to nearest-even, like `cvt.rn.{f16,bf16}.f32` on the GPU.

use half::{bf16, f16};

/// Element type of the KV cache and the item pool (both must match).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum KvDtype {
    /// IEEE binary16.
    F16 = 0,
    /// bfloat16.
    Bf16 = 1,
}

impl KvDtype {
    /// Parse the C ABI code.
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(Self::F16),
            1 => Some(Self::Bf16),
            _ => None,
        }
    }

    /// Widen raw storage bits to fp32 (exact).
    pub fn to_f32(self, bits: u16) -> f32 {
        match self {
            Self::F16 => f16::from_bits(bits).to_f32(),
            Self::Bf16 => bf16::from_bits(bits).to_f32(),
        }
    }

    /// Round fp32 to storage bits, nearest-even.
    pub fn from_f32(self, x: f32) -> u16 {
        match self {
            Self::F16 => f16::from_f32(x).to_bits(),
            Self::Bf16 => bf16::from_f32(x).to_bits(),
        }
    }

    /// Distance between `x` (finite, |x| as stored) and the next representable
    /// storage value away from zero: one unit in the last place.
    pub fn ulp(self, x: f32) -> f32 {
        let a = x.abs();
        let (mant_bits, min_normal_exp) = match self {
            Self::F16 => (10, -14),
            Self::Bf16 => (7, -126),
        };
        let exp = if a == 0.0 {
            min_normal_exp
        } else {
            (a.log2().floor() as i32).max(min_normal_exp)
        };
        2f32.powi(exp - mant_bits)
    }
}
