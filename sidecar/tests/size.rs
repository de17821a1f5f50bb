//! The serving crate's size, checked: `sidecar/src` at most 18,206 lines outside test files
//! (`tests.rs`, `*_tests.rs`; inline `#[cfg(test)]` modules count), ranking (`src/rank`) at
//! most 5,000 of them, and no function on the `/v1/rank` path longer than 80 lines. The count
//! is `find sidecar/src -name '*.rs' ! -name 'tests.rs' ! -name '*_tests.rs' | xargs cat | wc -l`.

use std::path::{Path, PathBuf};

const MAX_SRC_LINES: usize = 18_206;
const MAX_RANK_LINES: usize = 5_000;
const MAX_FN_LINES: usize = 80;

/// The files of `/v1/rank`'s path (under src), or folders all of whose files are.
const RANK_PATH: [&str; 20] = [
    "rank/handler.rs",
    "rank/api.rs",
    "rank/pipeline",
    "rank/engine.rs",
    "rank/layout.rs",
    "rank/pooled.rs",
    "rank/readout.rs",
    "rank/popularity.rs",
    "rank/item_prefix.rs",
    "rank/select",
    "rank/trace.rs",
    "rank/vocab.rs",
    "rank/guard",
    "engine",
    "itempool/mod.rs",
    "itempool/replicas.rs",
    "itempool/cold.rs",
    "itempool/fill.rs",
    "itempool/recompute.rs",
    "itempool/hrcs.rs",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn is_test_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Every non-test `.rs` file under `dir` (or `dir` itself when it is one).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            out.push(path);
        }
    }
}

/// Lines as `wc -l` counts them (newlines).
fn lines_under(dir: &Path) -> usize {
    let mut all = Vec::new();
    files(dir, &mut all);
    (all.iter())
        .map(|p| {
            std::fs::read_to_string(p)
                .expect("read")
                .matches('\n')
                .count()
        })
        .sum()
}

#[test]
fn the_serving_crate_and_ranking_stay_within_their_line_budgets() {
    let total = lines_under(&src());
    let rank = lines_under(&src().join("rank"));
    assert!(
        total <= MAX_SRC_LINES,
        "sidecar/src has {total} non-test lines, over {MAX_SRC_LINES}"
    );
    assert!(
        rank <= MAX_RANK_LINES,
        "sidecar/src/rank has {rank} non-test lines, over {MAX_RANK_LINES}"
    );
}

/// Functions in rustfmt'd `text` and their lengths in lines (signature to closing brace):
/// (first line, name, lines). A `fn` line ending its signature with `;` has no body.
fn functions(text: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let head = &trimmed[..at];
        let words = [
            "pub",
            "pub(crate)",
            "pub(super)",
            "async",
            "const",
            "unsafe",
        ];
        if !head.split_whitespace().all(|w| words.contains(&w)) {
            continue;
        }
        let name: String = (trimmed[at + 3..].chars())
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The signature ends at the first line ending in `{` (a body) or `;` (none).
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = if lines[open].trim_end().ends_with('}') {
            open
        } else {
            let end = format!("{indent}}}");
            (open..lines.len())
                .find(|&j| lines[j].trim_end() == end)
                .unwrap_or(lines.len() - 1)
        };
        out.push((i + 1, name, close - i + 1));
    }
    out
}

#[test]
fn no_function_on_the_rank_path_is_over_80_lines() {
    let mut all = Vec::new();
    for part in RANK_PATH {
        files(&src().join(part), &mut all);
    }
    let mut long = Vec::new();
    for path in &all {
        let text = std::fs::read_to_string(path).expect("read");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (line, name, n) in functions(code) {
            if n > MAX_FN_LINES {
                long.push(format!("{}:{line} {name}: {n} lines", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_FN_LINES} lines: {long:#?}");
}

#[test]
fn the_reader_measures_bodies_and_skips_declarations() {
    let text = "fn a() {\n    x();\n}\n\npub async fn b(\n    y: u8,\n) -> u8 {\n    y\n}\n\
                trait T {\n    fn c(&self);\n    fn d(&self) {}\n}\n";
    let got: Vec<(String, usize)> = (functions(text).into_iter())
        .map(|(_, name, n)| (name, n))
        .collect();
    assert_eq!(
        got,
        [("a".into(), 3), ("b".into(), 5), ("d".into(), 1)] as [(String, usize); 3]
    );
}
