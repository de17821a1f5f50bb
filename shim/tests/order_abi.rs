//! The eviction-order reader through its C ABI: fresh / stale / absent / torn files, batch
//! rank lookup, NULL handling, and re-reading after the writer replaces the file.

use std::ffi::CString;
use std::time::{SystemTime, UNIX_EPOCH};

use recache_adapters::order::Order;
use recache_shim::order_ffi::*;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn write(path: &std::path::Path, publish_unix_ms: u64, victims: Vec<u64>) {
    let bytes = Order {
        publish_unix_ms,
        generation: 4,
        seq: 1,
        victims,
    }
    .encode();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

fn refresh(h: *mut recache_shim::order::OrderReader) -> (i32, u64, u64) {
    let (mut st, mut n, mut g) = (-1, 0u64, 0u64);
    // SAFETY: live handle, valid out pointers.
    let rc = unsafe { recache_order_refresh(h, 2000, &mut st, &mut n, &mut g) };
    assert_eq!(rc, 0);
    (st, n, g)
}

#[test]
fn reads_ranks_and_tells_fresh_stale_absent() {
    let dir = std::env::temp_dir().join(format!("recache-order-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("order.bin");
    let _ = std::fs::remove_file(&path);
    let c = CString::new(path.to_str().expect("utf8")).expect("cstring");
    // SAFETY: NUL-terminated path.
    let h = unsafe { recache_order_open(c.as_ptr()) };
    assert!(!h.is_null());
    assert_eq!(refresh(h).0, 2, "absent");

    write(&path, now_ms(), vec![30, 10, 20]);
    assert_eq!(refresh(h), (0, 3, 4), "fresh");
    let hashes = [10u64, 99, 30, 20];
    let mut ranks = [0u64; 4];
    // SAFETY: 4 values each.
    let rc = unsafe { recache_order_ranks(h, hashes.as_ptr(), 4, ranks.as_mut_ptr()) };
    assert_eq!(rc, 0);
    assert_eq!(ranks, [1, u64::MAX, 0, 2]);
    let listed = |h| {
        let (mut n, mut v) = (0u64, 0u64);
        // SAFETY: count and version first (no copy), then a copy into room for 8.
        let rc = unsafe { recache_order_hashes(h, std::ptr::null_mut(), 0, &mut n, &mut v) };
        assert_eq!(rc, 0);
        let mut out = [0u64; 8];
        let rc =
            unsafe { recache_order_hashes(h, out.as_mut_ptr(), 8, &mut n, std::ptr::null_mut()) };
        assert_eq!(rc, 0);
        (out[..n as usize].to_vec(), v)
    };
    let (hashes_now, v1) = listed(h);
    assert_eq!(hashes_now, vec![30, 10, 20], "evict-first first");
    assert_eq!(refresh(h).1, 3);
    assert_eq!(listed(h).1, v1, "unchanged file: same version");
    // A replacement the reader must see whatever the clock's granularity: a new inode (the
    // rename) and a new size, not only a later mtime.
    write(&path, now_ms(), vec![7, 8, 9, 10]);
    refresh(h);
    let (hashes_now, v2) = listed(h);
    assert_eq!(
        (hashes_now, v2 > v1),
        (vec![7, 8, 9, 10], true),
        "new file: new version"
    );
    let mut two = [0u64; 2];
    // SAFETY: room for 2: a short copy.
    assert_eq!(
        unsafe {
            recache_order_hashes(
                h,
                two.as_mut_ptr(),
                2,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        },
        0
    );
    assert_eq!(two, [7, 8]);

    write(&path, now_ms() - 60_000, vec![1]);
    assert_eq!(refresh(h).0, 1, "stale");

    std::fs::write(&path, b"RCORDER1 torn").expect("torn");
    assert_eq!(refresh(h).0, 2, "torn is absent");

    // NULLs are argument errors, never crashes.
    let mut st = 0;
    // SAFETY: NULL handle / NULL arrays are rejected by contract.
    unsafe {
        assert_eq!(
            recache_order_refresh(
                std::ptr::null_mut(),
                1,
                &mut st,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ),
            1
        );
        assert_eq!(
            recache_order_ranks(h, std::ptr::null(), 2, ranks.as_mut_ptr()),
            1
        );
        assert_eq!(
            recache_order_ranks(h, std::ptr::null(), 0, std::ptr::null_mut()),
            0
        );
        assert_eq!(
            recache_order_hashes(
                h,
                std::ptr::null_mut(),
                3,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ),
            1
        );
        assert!(recache_order_open(std::ptr::null()).is_null());
        recache_order_close(h);
        recache_order_close(std::ptr::null_mut());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
