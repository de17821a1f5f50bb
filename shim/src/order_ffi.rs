//! The C ABI of the eviction-order reader ([`crate::order`]): open, refresh, batch rank
//! lookup, a copy of the listed hashes, close. Status codes and the panic guard are the shim's ([`crate::status`]).

use std::ffi::{CStr, c_char};
use std::path::PathBuf;

use crate::ShimError;
use crate::order::OrderReader;
use crate::status::guard;

/// Opens a reader for the order file at `path` (it need not exist yet). Returns NULL if
/// `path` is NULL or not UTF-8.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string valid for the duration of the call. The
/// handle must be released with [`recache_order_close`] and used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_order_open(path: *const c_char) -> *mut OrderReader {
    if path.is_null() {
        return std::ptr::null_mut();
    }
    let opened = std::panic::catch_unwind(|| {
        // SAFETY: non-null and NUL-terminated per this function's contract.
        let s = unsafe { CStr::from_ptr(path) }.to_str().ok()?;
        Some(Box::into_raw(Box::new(OrderReader::new(PathBuf::from(s)))))
    });
    opened.ok().flatten().unwrap_or(std::ptr::null_mut())
}

/// Releases a reader. NULL is ignored.
///
/// # Safety
/// `h` must be NULL or a handle from [`recache_order_open`] not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_order_close(h: *mut OrderReader) {
    if !h.is_null() {
        // SAFETY: a live handle from `recache_order_open` per the contract.
        drop(unsafe { Box::from_raw(h) });
    }
}

/// Re-reads the order if the file changed and reports its state for the age limit
/// `max_age_ms`: 0 fresh, 1 stale, 2 absent/invalid (in `*out_state`), with the number of
/// listed blocks and the policy generation (0 when absent).
///
/// # Safety
/// `h` must be a live handle; the out pointers must be valid for writes (any may be NULL
/// except `out_state`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_order_refresh(
    h: *mut OrderReader,
    max_age_ms: u64,
    out_state: *mut i32,
    out_count: *mut u64,
    out_generation: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: a live handle used by one thread, per the contract.
        let r = unsafe { h.as_mut() }.ok_or(ShimError::Null("h"))?;
        if out_state.is_null() {
            return Err(ShimError::Null("out_state"));
        }
        r.refresh();
        let state = r.state(max_age_ms);
        let (count, generation) = r
            .order()
            .map_or((0, 0), |o| (o.victims.len() as u64, o.generation));
        // SAFETY: valid for writes per the contract (NULLs skipped).
        unsafe {
            *out_state = state as i32;
            if let Some(c) = out_count.as_mut() {
                *c = count;
            }
            if let Some(g) = out_generation.as_mut() {
                *g = generation;
            }
        }
        Ok(())
    })
}

/// Writes the rank of each of `n` hashes (0 = evict first; `UINT64_MAX` = not listed) to
/// `out_ranks`. Works on whatever order was last read, fresh or not: check the state first.
///
/// # Safety
/// `h` must be a live handle; `hashes` and `out_ranks` must each point to `n` u64 values
/// (they may be NULL when `n` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_order_ranks(
    h: *const OrderReader,
    hashes: *const u64,
    n: usize,
    out_ranks: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { h.as_ref() }.ok_or(ShimError::Null("h"))?;
        if n == 0 {
            return Ok(());
        }
        if hashes.is_null() {
            return Err(ShimError::Null("hashes"));
        }
        if out_ranks.is_null() {
            return Err(ShimError::Null("out_ranks"));
        }
        // SAFETY: both point to `n` u64 values per the contract.
        let (hs, out) = unsafe {
            (
                std::slice::from_raw_parts(hashes, n),
                std::slice::from_raw_parts_mut(out_ranks, n),
            )
        };
        for (o, h) in out.iter_mut().zip(hs) {
            *o = r.rank(*h);
        }
        Ok(())
    })
}

/// The order last read: its listed hashes (evict-first first) and a version that changes
/// whenever that order does. Writes the count to `*out_count` and the version to
/// `*out_version` (either may be NULL), and the first `min(cap, count)` hashes to `out` (NULL
/// when `cap` is 0: ask for the count and version first, then copy only when the version
/// moved). No order held: count 0. Works on whatever was last read: check its state first.
///
/// # Safety
/// `h` must be a live handle; `out` must point to `cap` writable u64 values (NULL when `cap`
/// is 0); the out pointers must be NULL or valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_order_hashes(
    h: *const OrderReader,
    out: *mut u64,
    cap: usize,
    out_count: *mut u64,
    out_version: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: a live handle per the contract.
        let r = unsafe { h.as_ref() }.ok_or(ShimError::Null("h"))?;
        let listed: &[u64] = r.order().map_or(&[], |o| &o.victims);
        if cap > 0 {
            if out.is_null() {
                return Err(ShimError::Null("out"));
            }
            let n = cap.min(listed.len());
            // SAFETY: `out` points to `cap` >= n writable values per the contract.
            unsafe { std::slice::from_raw_parts_mut(out, n) }.copy_from_slice(&listed[..n]);
        }
        // SAFETY: NULL or valid for writes per the contract.
        unsafe {
            if let Some(c) = out_count.as_mut() {
                *c = listed.len() as u64;
            }
            if let Some(v) = out_version.as_mut() {
                *v = r.version();
            }
        }
        Ok(())
    })
}
