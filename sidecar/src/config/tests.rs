//! Settings resolution: precedence of flag, environment, file and default, and every
//! unusable value refused naming its flag.
use super::*;
use std::io::Write;

#[test]
fn flags_override_file_which_overrides_defaults() {
    let mut f = tempfile::NamedTempFile::new().expect("tmp");
    writeln!(f, "listen = \"127.0.0.1:9000\"\nupstream = [\"http://a:1\"]\ndrain_timeout = \"5s\"\nmax_body_bytes = 10").expect("write");
    let args = ServeArgs {
        config: Some(f.path().into()),
        max_body_bytes: Some(20),
        ..Default::default()
    };
    let c = args.resolve().expect("resolve");
    assert_eq!(c.listen.port(), 9000);
    assert_eq!(c.max_body_bytes, 20);
    assert_eq!(c.drain_timeout, Duration::from_secs(5));
    assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    assert_eq!(c.upstreams[0].to_string(), "http://a:1/");
    assert_eq!(c.limits, crate::limits::Limits::default());
    let args = ServeArgs {
        upstream: vec!["http://b:2".into()],
        ..args
    };
    assert_eq!(
        args.resolve().expect("resolve").upstreams[0].host(),
        Some("b")
    );
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("tmp");
    writeln!(f, "upstream = [\"http://a:1\"]\n{text}").expect("write");
    f
}

fn from_file(f: &tempfile::NamedTempFile) -> ServeArgs {
    ServeArgs {
        config: Some(f.path().into()),
        ..Default::default()
    }
}

#[test]
fn each_unusable_value_names_its_setting() {
    let on = "kv_events = \"tcp://e:1\"\n";
    let cases = [
        ("max_body_bytes = 0", "--max-body-bytes"),
        ("connect_timeout = \"0s\"", "--connect-timeout"),
        ("upstream_timeout = \"0s\"", "--upstream-timeout"),
        ("health_interval = \"0ms\"", "--health-interval"),
        ("rank_window = 0", "--rank-window"),
        ("rank_max_items = 0", "--rank-max-items"),
        (
            "rank_item_pool = 4\nrank_item_pool_fills = 0",
            "--rank-item-pool-fills",
        ),
        ("rank_item_pool_refresh = -1.0", "--rank-item-pool-refresh"),
        ("rank_item_catalog = \"c.jsonl\"", "--rank-item-catalog"),
        ("sglang_priority = true", "--sglang-priority"),
        (&format!("{on}kv_engine_blocks = 1"), "--kv-engine-blocks"),
        (&format!("{on}kv_block_size = 0"), "--kv-block-size"),
        ("max_header_bytes = 10", "--max-header-bytes"),
        ("slo_dispatch_threshold = 1.5", "--slo-dispatch-threshold"),
        ("rank_pool_after_user = true", "--rank-pool-after-user"),
        ("slo_rank_deadline = \"0ms\"", "--slo-rank-deadline"),
        (
            "engine = \"sglang\"\nslo_engine_priority = true",
            "--slo-engine-priority",
        ),
    ];
    for (text, setting) in cases {
        match from_file(&file(text)).resolve() {
            Err(e @ ConfigError::Invalid { .. }) => {
                assert!(e.to_string().starts_with(setting), "{text}: {e}")
            }
            other => panic!("{text}: expected {setting} refused, got {other:?}"),
        }
    }
    let err = from_file(&file("connect_timeout = \"soon\"")).resolve();
    assert!(matches!(
        err,
        Err(ConfigError::Duration {
            key: "connect_timeout",
            ..
        })
    ));
    let err = from_file(&file("eviction_policy = \"nope\"")).resolve();
    assert!(
        err.expect_err("policy")
            .to_string()
            .starts_with("--eviction-policy")
    );
}

#[test]
fn every_flag_but_config_is_a_file_key_and_no_other() {
    let keys: Vec<String> = serve_command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| *l != "config")
        .map(|l| l.replace('-', "_"))
        .collect();
    for key in &keys {
        // A table fits no setting, so a known key fails on its type, an unknown on its name.
        let err = toml::from_str::<FileConfig>(&format!("{key} = {{}}")).expect_err(key);
        assert!(!err.to_string().contains("unknown field"), "{key}: {err}");
    }
    let err = toml::from_str::<FileConfig>("no_such_key = 1").expect_err("unknown");
    let text = err.to_string();
    let expected = text
        .split("expected one of")
        .nth(1)
        .expect("serde lists the keys");
    let mut listed: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    listed.sort_unstable();
    keys.sort_unstable();
    assert_eq!(listed, keys);
}

#[test]
fn the_admin_token_never_shows_in_debug_output() {
    let args = ServeArgs {
        upstream: vec!["http://a:1".into()],
        admin_token: Some("hunter2-token".into()),
        ..Default::default()
    };
    let config = args.resolve().expect("resolve");
    assert_eq!(
        config.admin_token.as_ref().map(Secret::expose),
        Some("hunter2-token")
    );
    assert!(!format!("{config:?}").contains("hunter2"));
}

#[test]
fn rejects_unusable_settings_with_a_reason() {
    assert!(matches!(
        ServeArgs::default().resolve(),
        Err(ConfigError::NoUpstream)
    ));
    for url in ["https://a:1", "a:1", "http://a:1/?x=1"] {
        let err = parse_upstream(url).expect_err(url);
        assert!(err.to_string().contains("not usable"), "{err}");
    }
    let mut f = tempfile::NamedTempFile::new().expect("tmp");
    writeln!(f, "upstreams = []").expect("write");
    let args = ServeArgs {
        config: Some(f.path().into()),
        ..Default::default()
    };
    assert!(matches!(args.resolve(), Err(ConfigError::Parse { .. })));
}
