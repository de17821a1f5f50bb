//! Unit tests of `kvloop::shim_status`.

use super::*;

#[test]
fn states_from_the_files_the_shim_writes() {
    let dir = std::env::temp_dir().join(format!("recache-shim-status-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let order = dir.join("order.bin");
    assert_eq!(ShimState::of(read(&order).as_ref()), ShimState::Absent);
    let write = |body: &str| std::fs::write(path_for(&order), body).expect("write");
    // As order_reader.py writes it on open, then after checks.
    write(
        r#"{"engine": "vllm", "pid": 7, "fresh": false, "checked": false, "unix_ms": 1000, "steered": 0, "fallbacks": 0, "errors": 0, "went_stale": 0}"#,
    );
    let s = read(&order).expect("status");
    assert_eq!(ShimState::of(Some(&s)), ShimState::Installed);
    assert_eq!((s.pid, s.steer_s), (7, 0.0), "an older shim: no steer_s");
    assert_eq!(
        age(&s, UNIX_EPOCH + Duration::from_secs(3)),
        Duration::from_secs(2)
    );
    write(
        r#"{"engine": "vllm", "fresh": true, "checked": true, "unix_ms": 2000, "went_stale": 0, "steer_s": 1.25}"#,
    );
    let s = read(&order).expect("status");
    assert_eq!(
        (ShimState::of(Some(&s)), s.steer_s),
        (ShimState::Fresh, 1.25)
    );
    write(
        r#"{"engine": "sglang", "fresh": false, "checked": true, "unix_ms": 3000, "went_stale": 2}"#,
    );
    let s = read(&order).expect("status");
    assert_eq!(
        (ShimState::of(Some(&s)), s.went_stale),
        (ShimState::Stale, 2)
    );
    write("{\"engine\": \"vl");
    assert_eq!(
        ShimState::of(read(&order).as_ref()),
        ShimState::Absent,
        "torn: none"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
