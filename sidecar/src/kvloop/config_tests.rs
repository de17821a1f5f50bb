//! Unit tests of `kvloop::config`.

use super::*;

fn events() -> KvLoopArgs {
    KvLoopArgs {
        kv_events: vec!["tcp://127.0.0.1:5557".into()],
        ..Default::default()
    }
}

#[test]
fn defaults_and_off_without_events() {
    assert_eq!(KvLoopArgs::default().try_resolve(), Ok(None));
    let c = events().try_resolve().expect("valid").expect("on");
    assert_eq!((c.engine_blocks, c.block_size), (1024, 32));
    let c = KvLoopArgs {
        publish: Some("file:///tmp/order".into()),
        kv_engine_blocks: Some(2),
        ..events()
    }
    .resolve()
    .expect("on");
    assert_eq!(c.publish, Some(PathBuf::from("/tmp/order")));
    assert_eq!(c.engine_blocks, 2);
}

#[test]
fn each_unusable_value_names_its_flag() {
    let cases = [
        (
            KvLoopArgs {
                kv_engine_blocks: Some(1),
                ..events()
            },
            "--kv-engine-blocks",
        ),
        (
            KvLoopArgs {
                kv_block_size: Some(0),
                ..events()
            },
            "--kv-block-size",
        ),
        (
            KvLoopArgs {
                sglang_priority: true,
                ..Default::default()
            },
            "--sglang-priority",
        ),
    ];
    for (args, setting) in cases {
        assert_eq!(args.try_resolve().expect_err(setting).setting, setting);
    }
}
