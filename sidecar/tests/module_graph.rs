//! The serving core's layering, checked: no import cycle between the crate's top-level
//! modules (a module and its own submodules may refer to each other; across modules the
//! dependencies must form a DAG, e.g. `service` → `proxy` → `rank` → `itempool` → `engine` →
//! `client`, never back), and the edges that keep the parts narrow: the item pool, the engine
//! calls and retrieval know nothing of ranking, the proxy takes from ranking only its
//! completions extension. Reads `crate::` paths in `sidecar/src` outside `#[cfg(test)]` code
//! and test files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            let text = std::fs::read_to_string(&path).expect("read file");
            out.push((path.display().to_string(), text));
        }
    }
}

/// A unit-test file (`tests.rs`, `x_tests.rs`): test code, like `#[cfg(test)]` blocks.
fn is_test_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name == "tests.rs" || name.ends_with("_tests.rs")
}

/// Top-level module of a file under src (None for lib.rs / main.rs).
fn top_of(src: &Path, file: &str) -> Option<String> {
    let rel = Path::new(file).strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// `text` without its `#[cfg(test)]` tail and its comments.
fn code_of(text: &str) -> String {
    text.split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level modules named by `crate::` paths in `text` (grouped `crate::{a, b}` included).
fn referenced(text: &str) -> BTreeSet<String> {
    names_after(&code_of(text), "crate::")
}

/// The names that follow `prefix` in `code` (grouped `prefix{a, b}` included), lower-case
/// ones only for a plain path (`crate::Body` and the like are items, not modules) unless
/// `prefix` names a module (then its items count too).
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let items_too = prefix != "crate::";
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // Lower-case names are modules; `crate::Body` and the like are items of lib.rs.
        if items_too || name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            out.insert(name);
        }
    }
    out
}

/// Each top-level module's source files (path, text), test code aside.
fn modules() -> BTreeMap<String, Vec<(String, String)>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (file, text) in files {
        if let Some(top) = top_of(&src, &file) {
            out.entry(top).or_default().push((file, text));
        }
    }
    out
}

/// The top-level modules each one imports.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (top, files) in modules() {
        let deps = edges.entry(top.clone()).or_default();
        for (_, text) in &files {
            deps.extend(referenced(text).into_iter().filter(|d| *d != top));
        }
    }
    edges
}

#[test]
fn top_level_modules_form_a_dag() {
    let edges = edges();
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let cycle = visit(node, &edges, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "import cycle between top-level modules: {}",
            cycle.unwrap_or_default().join(" -> ")
        );
    }
    // The layering this test protects: nothing below the server reaches up into it.
    for (module, deps) in &edges {
        if !["server", "local"].contains(&module.as_str()) {
            assert!(
                !deps.contains("service"),
                "{module} imports the service (pass it what it uses instead)"
            );
        }
    }
}

/// The edges that keep the parts narrow.
#[test]
fn the_pool_engine_calls_and_retrieval_know_nothing_of_ranking() {
    let edges = edges();
    let imports = |m: &str| edges.get(m).cloned().unwrap_or_default();
    let forbid = |m: &str, never: &[&str]| {
        for n in never {
            assert!(
                !imports(m).contains(*n),
                "{m} imports {n}; its deps: {:?}",
                imports(m)
            );
        }
    };
    // The item pool reaches the engine through `engine::EngineHandle`, never its users.
    forbid(
        "itempool",
        &["rank", "retrieve", "proxy", "service", "server", "config"],
    );
    // recache's own engine calls and the shared request parts sit below both endpoints.
    forbid(
        "engine",
        &["rank", "retrieve", "itempool", "proxy", "service", "kvloop"],
    );
    forbid("retrieve", &["rank", "itempool", "proxy", "service"]);
    // The engine loop and the client hash blocks and placements with `recache_hash`.
    forbid("kvloop", &["rank", "itempool", "client", "engine"]);
    forbid(
        "client",
        &["rank", "itempool", "engine", "retrieve", "proxy"],
    );
    // The proxy takes from ranking its completions extension (and the state it runs on),
    // nothing of its API types or errors.
    let mut from_rank = BTreeSet::new();
    for (_, text) in modules().get("proxy").into_iter().flatten() {
        from_rank.extend(names_after(&code_of(text), "crate::rank::"));
    }
    let allowed: BTreeSet<String> = ["Ranker", "extension"].map(String::from).into();
    assert!(
        from_rank.is_subset(&allowed),
        "proxy uses rank's {from_rank:?}; only {allowed:?} belong there"
    );
    // Nothing of the pool takes ranking's state.
    for (file, text) in modules().get("itempool").into_iter().flatten() {
        assert!(
            !code_of(text).contains("Ranker"),
            "{file} takes `Ranker`: the pool gets `engine::EngineHandle`"
        );
    }
}

#[test]
fn the_reader_sees_grouped_and_plain_paths() {
    let text = "use crate::{a::X, b};\nuse crate::c::d; // crate::y\n//! see crate::y\nfn f() -> crate::Body { crate::e::g() }\n#[cfg(test)]\nuse crate::z;";
    let got: Vec<String> = referenced(text).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "e"]);
}
