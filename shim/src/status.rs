//! C ABI status codes, the per-thread last-error message, and the guard that
//! turns `Result`s and panics into status codes at the boundary.

use crate::error::ShimError;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Return codes of every fallible `recache_*` function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum RecacheStatus {
    /// Success.
    Ok = 0,
    /// Bad shape, parameter or null pointer; nothing was launched.
    InvalidArgument = 1,
    /// No CUDA driver or device; the engine should run without the kernels.
    CudaUnavailable = 2,
    /// NVRTC missing or a kernel failed to compile/load.
    CompileFailed = 3,
    /// A CUDA driver call (module load, launch) failed.
    DriverError = 4,
    /// A Rust panic was caught; a bug in the shim.
    Panic = 5,
}

thread_local! {
    // Per thread, like errno: concurrent engine threads don't clobber each other.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Record `msg` as this thread's last error.
pub fn set_last_error(msg: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = msg);
}

/// This thread's last error message (empty after a success).
pub fn last_error() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

/// Run `f`, mapping `Ok` to [`RecacheStatus::Ok`], errors to their status
/// (message saved), and panics to [`RecacheStatus::Panic`] so no unwind
/// crosses the C boundary.
pub fn guard(f: impl FnOnce() -> Result<(), ShimError>) -> i32 {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        Err(ShimError::Panic(msg))
    });
    match r {
        Ok(()) => {
            set_last_error(String::new());
            RecacheStatus::Ok as i32
        }
        Err(e) => {
            set_last_error(e.full_message());
            e.status() as i32
        }
    }
}
