//! The bench crate's layering, checked on its files (each file is a module; `lib.rs` is the
//! root): references between modules form a DAG except between a module and its own
//! ancestors (a file and its submodules may refer to each other); those upward references
//! are listed here, so a new one is a decision, not an accident; and of the serving crate
//! only `recache::harness` is used (the benchmarks' documented way into it).
//! Reads `crate::`, `super::`, `self::` and child-module paths outside `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path of every non-test file under `src` (`""` for lib.rs), and its text.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.ends_with(".rs") || name == "main.rs" || name == "tests.rs" {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("read file");
            out.insert(parts.join("::"), text);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The code of a file: before `#[cfg(test)]`, without `//` comments.
fn code(text: &str) -> String {
    (text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines())
    .map(|l| l.split("//").next().unwrap_or_default())
    .collect::<Vec<_>>()
    .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path in `code` that starts with `crate`, `super`, `self` or one of `kids` (modules
/// declared in this file), as segments; `a::{b::c, d}` groups expanded.
fn paths(code: &str, kids: &BTreeSet<String>) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts =
            is_ident(chars[i]) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            segs.push(chars[s..j].iter().collect::<String>());
            if chars[j..].starts_with(&[':', ':']) && chars.get(j + 2).is_some_and(|c| is_ident(*c))
            {
                j += 2;
            } else {
                break;
            }
        }
        let head = segs[0].as_str();
        let ours = matches!(head, "crate" | "super" | "self") || kids.contains(head);
        if ours && chars[j..].starts_with(&[':', ':', '{']) {
            let end = (j + 3..chars.len())
                .find(|&k| chars[k] == '}')
                .unwrap_or(chars.len());
            let group: String = chars[j + 3..end].iter().collect();
            for item in group.split(',') {
                let mut p = segs.clone();
                p.extend(item.trim().split("::").map(str::trim).map(String::from));
                if p.last().is_some_and(|l| !l.is_empty()) {
                    out.push(p);
                }
            }
            i = end;
            continue;
        }
        if ours && segs.len() > 1 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// Modules declared (`mod x;`) in a file.
fn kids(code: &str) -> BTreeSet<String> {
    (code.lines())
        .filter_map(|l| {
            let l = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The module a path names: the longest known module prefix, from `me`'s point of view.
fn resolve(me: &str, path: &[String], known: &BTreeMap<String, String>) -> String {
    let mut at: Vec<&str> = if me.is_empty() {
        vec![]
    } else {
        me.split("::").collect()
    };
    let mut rest = path;
    match path[0].as_str() {
        "crate" => {
            at.clear();
            rest = &path[1..];
        }
        "self" => rest = &path[1..],
        _ => {}
    }
    while rest.first().is_some_and(|s| s == "super") {
        at.pop();
        rest = &rest[1..];
    }
    let mut best = at.join("::");
    for seg in rest {
        at.push(seg);
        let name = at.join("::");
        if !known.contains_key(&name) {
            break;
        }
        best = name;
    }
    best
}

fn is_ancestor(a: &str, b: &str) -> bool {
    (a.is_empty() && !b.is_empty()) || b.starts_with(&format!("{a}::"))
}

fn edges(known: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (me, text) in known {
        let code = code(text);
        let kids = kids(&code);
        let deps = out.entry(me.clone()).or_default();
        for p in paths(&code, &kids) {
            let to = resolve(me, &p, known);
            if &to != me {
                deps.insert(to);
            }
        }
    }
    out
}

fn name(m: &str) -> &str {
    if m.is_empty() { "<lib.rs>" } else { m }
}

/// A cycle among `edges` (upward references left out), if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut c = path[at..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if !is_ancestor(next, node)
                && let Some(c) = visit(next, edges, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

/// Upward references kept on purpose: a module that implements its parent's declared
/// interface (the parent's `Args`/error type is what the child is about).
const UPWARD: &[(&str, &str)] = &[];

#[test]
fn modules_form_a_dag_and_upward_references_are_listed() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    assert!(known.len() > 50, "found only {} modules", known.len());
    let edges = edges(&known);
    if let Some(c) = cycle(&edges) {
        let c: Vec<&str> = c.iter().map(|m| name(m)).collect();
        panic!("import cycle between bench modules: {}", c.join(" -> "));
    }
    let upward: Vec<(String, String)> = (edges.iter())
        .flat_map(|(m, deps)| deps.iter().map(move |d| (m.clone(), d.clone())))
        .filter(|(m, d)| is_ancestor(d, m))
        .filter(|(m, d)| !UPWARD.contains(&(m.as_str(), d.as_str())))
        .collect();
    assert!(
        upward.is_empty(),
        "modules that reach up into their ancestors (move what they use into a sibling, or list \
         it in UPWARD with why): {:?}",
        upward
            .iter()
            .map(|(m, d)| format!("{} -> {}", name(m), name(d)))
            .collect::<Vec<_>>()
    );
}

#[test]
fn only_the_harness_of_the_serving_crate_is_used() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (m, text) in modules(&src) {
        let code = code(&text);
        for (at, _) in code.match_indices("recache::") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue; // recache_eviction::, recache_hash::, ...
            }
            assert!(
                code[at..].starts_with("recache::harness"),
                "{}: {} (use recache::harness; add to it what is missing)",
                name(&m),
                code[at..].lines().next().unwrap_or_default()
            );
        }
    }
}

#[test]
fn the_reader_resolves_paths_groups_and_children() {
    let mut known = BTreeMap::new();
    for m in ["", "a", "a::b", "a::c", "d"] {
        known.insert(m.to_string(), String::new());
    }
    let text = "mod b;\nuse crate::{d, a::c::X};\nuse super::d::Y; // crate::zzz\nfn f() { b::g(); self::c::h() }\n#[cfg(test)]\nuse crate::a::b;";
    let code = code(text);
    let kids = kids(&code);
    let got: BTreeSet<String> = (paths(&code, &kids).iter())
        .map(|p| resolve("a", p, &known))
        .collect();
    let want: BTreeSet<String> = ["d", "a::c", "a::b"].map(String::from).into();
    assert_eq!(got, want);
    let mut e = BTreeMap::new();
    e.insert("a".to_string(), BTreeSet::from(["d".to_string()]));
    e.insert("d".to_string(), BTreeSet::from(["a::b".to_string()]));
    e.insert("a::b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle(&e), None, "a::b -> a is upward, not a cycle");
    e.insert("a::b".to_string(), BTreeSet::from(["d".to_string()]));
    assert!(cycle(&e).is_some(), "d -> a::b -> d is one");
}
