//! Unit tests of `limits`.

use super::*;

#[test]
fn zero_turns_limits_off_and_tiny_heads_are_refused() {
    assert_eq!(
        LimitArgs::default().try_resolve().expect("defaults"),
        Limits::default()
    );
    let off = LimitArgs {
        header_read_timeout: Some(Duration::ZERO),
        max_in_flight_per_client: Some(0),
        ..Default::default()
    }
    .try_resolve()
    .expect("off");
    assert_eq!(off.header_read_timeout, None);
    assert_eq!(off.max_in_flight_per_client, None);
    let err = LimitArgs {
        max_header_bytes: Some(100),
        ..Default::default()
    }
    .try_resolve()
    .expect_err("tiny");
    assert_eq!(err.setting, "--max-header-bytes");
}
