//! `recache serve` settings from the outside: the TOML file reaches the ranking and engine-loop
//! settings, flag beats environment beats file, docs/configuration.md's table (every setting,
//! with its variable and TOML key) matches the flags clap knows (a flag added without its row,
//! or a row left after a flag went, fails), README.md's compact configuration table names only
//! flags clap knows, and README.md's example file resolves.
//!
//! Its own test binary, so the environment variables set here reach no other test.

use std::io::Write;
use std::path::PathBuf;

use clap::FromArgMatches;
use recache::config::{ServeArgs, serve_command};
use recache::rank::select::SelectorConfig;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("tmp");
    writeln!(f, "upstream = [\"http://a:1\"]\n{text}").expect("write");
    f
}

#[test]
fn file_sets_ranking_and_engine_loop_settings() {
    let f = file(
        "rank_selector = \"user-prefix\"\nrank_max_items = 5\nrank_item_pool = 8\n\
         rank_item_catalog = \"c.jsonl\"\nkv_events = \"tcp://e:1\"\n\
         kv_engine_blocks = 100\npublish = \"file:///tmp/o\"\nsglang_priority = true",
    );
    let c = ServeArgs {
        config: Some(f.path().into()),
        ..Default::default()
    }
    .resolve()
    .expect("resolve");
    assert_eq!(c.rank.selector, SelectorConfig::UserPrefix);
    assert_eq!(c.rank.max_items, 5);
    assert_eq!(c.rank.item_pool.map(|p| p.items), Some(8));
    assert_eq!(c.rank.item_catalog, Some(PathBuf::from("c.jsonl")));
    let k = c.kvloop.expect("engine loop on");
    assert_eq!((k.kv_events.as_str(), k.engine_blocks), ("tcp://e:1", 100));
    assert_eq!(k.publish, Some(PathBuf::from("/tmp/o")));
    assert!(k.sglang_priority);
}

#[test]
fn flag_beats_environment_beats_file() {
    let f = file(
        "rank_window = 10\nrank_label_base = 300\nkv_events = \"tcp://e:1\"\n\
         kv_engine_blocks = 100\nkv_block_size = 4",
    );
    // SAFETY: the only test in this binary that touches the environment.
    unsafe {
        std::env::set_var("RECACHE_RANK_WINDOW", "20");
        std::env::set_var("RECACHE_RANK_LABEL_BASE", "400");
        std::env::set_var("RECACHE_KV_ENGINE_BLOCKS", "200");
    }
    let path = f.path().to_str().expect("utf-8 path");
    let matches = serve_command()
        .try_get_matches_from(["serve", "--config", path, "--rank-window", "30"])
        .expect("flags");
    let c = ServeArgs::from_arg_matches(&matches)
        .expect("args")
        .resolve()
        .expect("resolve");
    let SelectorConfig::Bat { window, .. } = c.rank.selector else {
        panic!("bat is the default selector");
    };
    assert_eq!(window, 30, "flag beats environment and file");
    assert_eq!(c.rank.label_base, 400, "environment beats file");
    let k = c.kvloop.expect("engine loop on");
    assert_eq!(k.engine_blocks, 200, "environment beats file");
    assert_eq!(k.block_size, 4, "file beats default");
}

/// The `recache serve` configuration section of README.md.
fn readme_section() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let section = readme
        .split("\n## `recache serve` configuration")
        .nth(1)
        .expect("configuration section");
    section
        .split("\n## ")
        .next()
        .unwrap_or_default()
        .to_string()
}

/// docs/configuration.md, the page with every setting.
fn configuration_page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
    std::fs::read_to_string(path).expect("docs/configuration.md")
}

/// The cells of a configuration table's rows (the lines starting with "| `--").
fn table_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|l| {
            // `\|` inside a cell is an escaped bar, not a column break.
            l.replace("\\|", "/").split('|').map(String::from).collect()
        })
        .collect()
}

/// The rows of docs/configuration.md's table, as (flag cell, env cell, TOML key cell).
fn configuration_page_rows() -> Vec<(String, String, String)> {
    table_rows(&configuration_page())
        .into_iter()
        .map(|cells| {
            assert!(cells.len() >= 7, "five columns: {cells:?}");
            (cells[1].clone(), cells[2].clone(), cells[3].clone())
        })
        .collect()
}

/// `--name`s (or `RECACHE_NAME`s) written in backticks in `cell`.
fn names_in(cell: &str, start: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_whitespace().next())
        .filter(|word| word.starts_with(start))
        .map(String::from)
        .collect()
}

/// `--name` of every long flag `recache serve` takes.
fn clap_flags() -> Vec<String> {
    (serve_command().get_arguments())
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

#[test]
fn configuration_page_table_matches_clap() {
    let rows = configuration_page_rows();
    let listed = |column: fn(&(String, String, String)) -> &String, start: &str| -> Vec<String> {
        rows.iter()
            .flat_map(|r| names_in(column(r), start))
            .collect()
    };
    let (flags, envs, keys) = (
        listed(|r| &r.0, "--"),
        listed(|r| &r.1, "RECACHE_"),
        listed(|r| &r.2, ""),
    );
    let command = serve_command();
    let mut known = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let flag = format!("--{long}");
        assert!(
            flags.contains(&flag),
            "docs/configuration.md's table lacks {flag}"
        );
        let env = arg.get_env().expect("every serve flag has a variable");
        let env = env.to_str().expect("ascii");
        assert!(
            envs.iter().any(|e| e == env),
            "docs/configuration.md's table lacks {env} ({flag})"
        );
        if long != "config" {
            let key = long.replace('-', "_");
            assert!(
                keys.contains(&key),
                "docs/configuration.md's table lacks TOML key {key} ({flag})"
            );
        }
        known.push((flag, env.to_string(), long.replace('-', "_")));
    }
    for flag in &flags {
        assert!(
            known.iter().any(|(f, _, _)| f == flag),
            "docs/configuration.md lists {flag}, clap has no such flag"
        );
    }
    for env in &envs {
        assert!(
            known.iter().any(|(_, e, _)| e == env),
            "docs/configuration.md lists {env}, clap reads no such variable"
        );
    }
    for key in &keys {
        assert!(
            known.iter().any(|(_, _, k)| k == key),
            "docs/configuration.md lists TOML key {key}, no flag has it"
        );
    }
}

#[test]
fn readme_compact_table_names_only_known_flags() {
    let rows = table_rows(&readme_section());
    assert!(
        !rows.is_empty(),
        "README's configuration section has a table"
    );
    let known = clap_flags();
    for cells in &rows {
        let flags = names_in(&cells[1], "--");
        assert!(!flags.is_empty(), "a row without a flag: {cells:?}");
        for flag in flags {
            assert!(
                known.contains(&flag),
                "README's table lists {flag}, clap has no such flag"
            );
        }
    }
}

#[test]
fn readme_example_file_resolves() {
    let section = readme_section();
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a TOML example");
    let mut f = tempfile::NamedTempFile::new().expect("tmp");
    f.write_all(example.as_bytes()).expect("write");
    let c = ServeArgs {
        config: Some(f.path().into()),
        ..Default::default()
    }
    .resolve()
    .expect("README's example file resolves");
    assert_eq!(c.upstreams.len(), 2);
    assert!(c.kvloop.is_some() && c.rank.item_pool.is_some());
}
