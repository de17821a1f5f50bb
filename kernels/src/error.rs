//! Error type for argument validation of the kernels' inputs.

/// Why a kernel's inputs were rejected before launch (or by a CPU reference).
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// A shape, stride or scalar parameter is outside what the kernel supports.
    #[error("invalid argument `{name}`: {reason}")]
    InvalidArgument {
        /// Parameter name as it appears in the C ABI.
        name: &'static str,
        /// Human-readable explanation.
        reason: String,
    },
    /// A value read from an index array (slot, node, token) is out of range.
    #[error("index out of range in `{name}` at {at}: {value} not in [0, {bound})")]
    IndexOutOfRange {
        /// Array name.
        name: &'static str,
        /// Position in the array.
        at: usize,
        /// Offending value.
        value: i64,
        /// Exclusive upper bound.
        bound: i64,
    },
}

impl KernelError {
    /// Shorthand for [`KernelError::InvalidArgument`].
    pub fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            name,
            reason: reason.into(),
        }
    }
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, KernelError>;
