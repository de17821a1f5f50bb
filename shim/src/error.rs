//! The shim's error type and its mapping onto C ABI status codes.

use crate::status::RecacheStatus;
use recache_kernels::KernelError;

/// Everything that can stop a kernel from being loaded or launched.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// Shapes or parameters rejected before launch.
    #[error("invalid argument")]
    Invalid(#[source] KernelError),
    /// A null pointer where one is required.
    #[error("null pointer for `{0}`")]
    Null(&'static str),
    /// No libcuda, no device, or the driver refused to initialise.
    #[error("CUDA unavailable: {0}")]
    CudaUnavailable(String),
    /// Kernels need NVRTC (no prebuilt PTX) and libnvrtc could not be loaded.
    #[error("NVRTC unavailable: {0}")]
    NvrtcUnavailable(String),
    /// NVRTC rejected a kernel source.
    #[error("NVRTC failed to compile `{module}` for {arch}: {log}")]
    Compile {
        /// Kernel module name.
        module: &'static str,
        /// Target virtual architecture.
        arch: String,
        /// Compiler log.
        log: String,
        /// Underlying error.
        #[source]
        source: cudarc::nvrtc::CompileError,
    },
    /// A driver call failed.
    #[error("CUDA driver error during {what}")]
    Driver {
        /// What the shim was doing.
        what: &'static str,
        /// Driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// Loading an explicitly named library failed.
    #[error("cannot load {path}")]
    Library {
        /// Library path.
        path: String,
        /// Loader error.
        #[source]
        source: libloading::Error,
    },
    /// A panic was caught at the C boundary (a bug, reported not propagated).
    #[error("internal panic: {0}")]
    Panic(String),
}

impl From<KernelError> for ShimError {
    fn from(e: KernelError) -> Self {
        Self::Invalid(e)
    }
}

impl ShimError {
    /// Wrap a driver error with context.
    pub fn driver(what: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| Self::Driver { what, source }
    }

    /// Status code for the C ABI.
    pub fn status(&self) -> RecacheStatus {
        match self {
            Self::Invalid(_) | Self::Null(_) => RecacheStatus::InvalidArgument,
            Self::CudaUnavailable(_) => RecacheStatus::CudaUnavailable,
            Self::NvrtcUnavailable(_) | Self::Compile { .. } | Self::Library { .. } => {
                RecacheStatus::CompileFailed
            }
            Self::Driver { .. } => RecacheStatus::DriverError,
            Self::Panic(_) => RecacheStatus::Panic,
        }
    }

    /// The message with its whole `source` chain, for `recache_shim_last_error`.
    pub fn full_message(&self) -> String {
        let mut msg = self.to_string();
        if matches!(self, Self::Compile { .. }) {
            // The readable log is already in the message; cudarc's error
            // Display repeats it escaped.
            return msg;
        }
        let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(self);
        while let Some(e) = cur {
            msg.push_str(": ");
            msg.push_str(&e.to_string());
            cur = e.source();
        }
        msg
    }
}
