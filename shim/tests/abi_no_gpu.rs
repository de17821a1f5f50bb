//! The C ABI on any machine: status codes, last-error messages and argument
//! validation, none of which may need a GPU. Where CUDA is absent (CI), the
//! kernels must report `CudaUnavailable` with a reason instead of failing.

use recache_shim::RecacheStatus;
use recache_shim::ffi::*;
use recache_shim::loader::driver_available;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    let n = unsafe { recache_shim_last_error(null_mut(), 0) };
    let mut buf = vec![0u8; n + 1];
    let m = unsafe { recache_shim_last_error(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(m, n);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn availability_reports_reason_without_gpu() {
    let st = recache_shim_kernels_available(0);
    match driver_available() {
        Err(_) => {
            assert_eq!(st, RecacheStatus::CudaUnavailable as i32);
            let msg = last_error();
            assert!(msg.contains("CUDA unavailable"), "{msg}");
            println!("kernels unavailable as expected here: {msg}");
        }
        Ok(()) => println!(
            "driver present; kernels_available -> {st} ({})",
            last_error()
        ),
    }
    assert_eq!(recache_shim_abi_version(), 2);
}

#[test]
fn bad_arguments_are_rejected_before_touching_cuda() {
    let layers = [16u64];
    let st = unsafe {
        recache_item_kv_scatter(
            0,
            null_mut(),
            7,
            1,
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            2,
            128,
            10,
            10,
            16,
            4096,
            256,
            128,
            1,
            null(),
            null(),
            null(),
            null(),
            null(),
            0,
            0,
            128,
            1e6,
            0,
        )
    };
    assert_eq!(st, RecacheStatus::InvalidArgument as i32);
    assert!(last_error().contains("dtype"), "{}", last_error());

    let st = unsafe {
        recache_item_kv_scatter(
            0,
            null_mut(),
            1,
            1,
            null(),
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            2,
            128,
            10,
            10,
            16,
            4096,
            256,
            128,
            1,
            null(),
            null(),
            null(),
            null(),
            null(),
            0,
            0,
            128,
            1e6,
            0,
        )
    };
    assert_eq!(st, RecacheStatus::InvalidArgument as i32);
    assert!(last_error().contains("src_k_layers"));

    // head_dim not a multiple of 8.
    let st = unsafe {
        recache_item_kv_scatter(
            0,
            null_mut(),
            1,
            1,
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            2,
            100,
            10,
            10,
            16,
            4096,
            256,
            128,
            1,
            null(),
            null(),
            null(),
            null(),
            null(),
            0,
            0,
            96,
            1e6,
            0,
        )
    };
    assert_eq!(st, RecacheStatus::InvalidArgument as i32);

    let st = unsafe {
        recache_beam_topk(
            0,
            null_mut(),
            null(),
            4096,
            100,
            100,
            null(),
            null(),
            null(),
            null(),
            null(),
            1,
            4,
            null_mut(),
            0,
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
        )
    };
    assert_eq!(st, RecacheStatus::InvalidArgument as i32);
    assert!(last_error().contains("beam_width"));
    assert_eq!(recache_beam_topk_workspace_bytes(512, 512), 512 * 512 * 8);
    assert_eq!(recache_beam_topk_workspace_bytes(-1, 512), 0);
}

#[test]
fn success_clears_the_last_error() {
    let _ = recache_shim_kernels_available(-1);
    assert!(!last_error().is_empty());
    // An empty scatter (0 segments) is a valid no-op that never loads CUDA.
    let layers = [16u64];
    let st = unsafe {
        recache_item_kv_scatter(
            0,
            null_mut(),
            1,
            1,
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            layers.as_ptr(),
            2,
            128,
            10,
            10,
            16,
            4096,
            256,
            128,
            0,
            null(),
            null(),
            null(),
            null(),
            null(),
            0,
            0,
            128,
            1e6,
            0,
        )
    };
    assert_eq!(st, RecacheStatus::Ok as i32);
    assert_eq!(last_error(), "");
}
