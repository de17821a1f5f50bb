//! The serving core's layering, checked: no import cycle between the crate's top-level
//! modules (a module and its own submodules may refer to each other; across modules the
//! dependencies must form a DAG, e.g. `service` → `proxy` → `rank` → `client`, never back).
//! Reads `crate::` paths in `sidecar/src` outside `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read file");
            out.push((path.display().to_string(), text));
        }
    }
}

/// Top-level module of a file under src (None for lib.rs / main.rs).
fn top_of(src: &Path, file: &str) -> Option<String> {
    let rel = Path::new(file).strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// Top-level modules named by `crate::` paths in `text` (grouped `crate::{a, b}` included).
fn referenced(text: &str) -> BTreeSet<String> {
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
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
        if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            out.insert(name);
        }
    }
    out
}

#[test]
fn top_level_modules_form_a_dag() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in &files {
        let Some(top) = top_of(&src, file) else {
            continue;
        };
        let deps = edges.entry(top.clone()).or_default();
        deps.extend(referenced(text).into_iter().filter(|d| *d != top));
    }
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

#[test]
fn the_reader_sees_grouped_and_plain_paths() {
    let text = "use crate::{a::X, b};\nuse crate::c::d; // crate::y\n//! see crate::y\nfn f() -> crate::Body { crate::e::g() }\n#[cfg(test)]\nuse crate::z;";
    let got: Vec<String> = referenced(text).into_iter().collect();
    assert_eq!(got, ["a", "b", "c", "e"]);
}
