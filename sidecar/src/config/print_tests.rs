//! Unit tests of `config::print`.

use std::io::Write;

use super::*;

#[test]
fn says_where_each_value_came_from() {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    writeln!(f, "rank_window = 12\nadmin_token = \"s3cret\"").expect("write");
    let path = f.path().to_str().expect("utf-8");
    let m = serve_command()
        .try_get_matches_from([
            "serve",
            "--config",
            path,
            "--upstream",
            "http://a:1,http://b:2",
            "--slo",
            "off",
        ])
        .expect("flags");
    let text = describe(&m).expect("described");
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {text}"))
            .to_string()
    };
    assert!(
        line("upstream").contains("http://a:1,http://b:2")
            && line("upstream").ends_with("# flag --upstream")
    );
    assert!(line("slo").contains("off") && line("slo").ends_with("# flag --slo"));
    assert!(line("rank_window").contains("12") && line("rank_window").ends_with("# file"));
    assert!(line("admin_token").contains("<hidden>") && !text.contains("s3cret"));
    assert!(
        line("health_interval").contains("2s") && line("health_interval").ends_with("# default")
    );
    assert!(line("sglang_priority").contains("off"));
}
