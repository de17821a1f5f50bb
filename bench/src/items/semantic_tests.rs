//! Semantic IDs: deterministic for a seed, valid as an index, collisions disambiguated,
//! similar items sharing their first code, and errors naming the file or flag.

use std::io::Write;

use super::*;
use recache::harness::RetrieveIndex;

/// Two families of titles (lipsticks, drill bits) with small variations.
fn catalog(n: usize) -> tempfile::NamedTempFile {
    let mut map = serde_json::Map::new();
    for i in 0..n {
        let title = if i % 2 == 0 {
            format!("Matte lipstick shade {} long lasting red lip colour", i % 7)
        } else {
            format!("Cobalt drill bit set {} mm steel metal drilling", i % 5)
        };
        map.insert(
            i.to_string(),
            serde_json::json!({"title": title, "brand": "", "categories": ""}),
        );
    }
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(serde_json::Value::Object(map).to_string().as_bytes())
        .expect("write");
    f
}

fn build(f: &tempfile::NamedTempFile, args: &SemanticArgs) -> (IndexFile, BuildStats) {
    build_index(f.path(), args, &mut |_, _| {}).expect("build")
}

fn small() -> SemanticArgs {
    SemanticArgs {
        levels: 2,
        codebook: 4,
        dims: 64,
        ..Default::default()
    }
}

#[test]
fn deterministic_valid_and_disambiguated() {
    let f = catalog(40);
    let (a, stats) = build(&f, &small());
    let (b, _) = build(&f, &small());
    assert_eq!(a, b, "same seed, same codes");
    let (c, _) = build(&f, &SemanticArgs { seed: 9, ..small() });
    assert_eq!(c.items.len(), 40);
    let idx = RetrieveIndex::new(a.clone()).expect("a valid index");
    assert_eq!(idx.file.items.len(), 40);
    // 40 items in 4x4 codes: some must collide, and all of a group get one more token.
    assert!(stats.collided_items > 0 && stats.max_group > 1);
    let long = a.items.iter().filter(|i| i.code.len() == 3).count();
    assert_eq!(long, stats.collided_items);
    assert!(
        a.items
            .iter()
            .all(|i| i.code[0] >= 32768 && i.code[0] < 32768 + 4)
    );
    assert!(
        a.items
            .iter()
            .all(|i| i.code[1] >= 32772 && i.code[1] < 32776)
    );
    assert_eq!(stats.residual_error.len(), 2);
    assert!(stats.residual_error[1] <= stats.residual_error[0] + 1e-9);
}

#[test]
fn similar_titles_share_the_first_code() {
    let f = catalog(40);
    let (a, _) = build(
        &f,
        &SemanticArgs {
            codebook: 2,
            ..small()
        },
    );
    let first = |i: usize| a.items[i].code[0];
    // Items are in id order: even ids are lipsticks, odd ones drill bits.
    let same = (0..40).step_by(2).filter(|&i| first(i) == first(0)).count();
    let cross = (1..40).step_by(2).filter(|&i| first(i) == first(0)).count();
    assert!(
        same == 20 && cross == 0,
        "same family {same}/20, other family {cross}/20"
    );
}

#[test]
fn errors_name_the_file_or_flag() {
    let missing = build_index(Path::new("/no/such/items.json"), &small(), &mut |_, _| {});
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("/no/such/items.json")
    );
    let mut empty = tempfile::NamedTempFile::new().expect("tempfile");
    empty.write_all(b"{}").expect("write");
    let e = build_index(empty.path(), &small(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("has no items"), "{e}");
    let mut bad = tempfile::NamedTempFile::new().expect("tempfile");
    bad.write_all(b"[1, 2]").expect("write");
    let e = build_index(bad.path(), &small(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("is not an item file"), "{e}");
    let f = catalog(4);
    for (args, flag) in [
        (
            SemanticArgs {
                levels: 9,
                ..small()
            },
            "--levels",
        ),
        (
            SemanticArgs {
                codebook: 129,
                ..small()
            },
            "--codebook",
        ),
        (SemanticArgs { dims: 2, ..small() }, "--dims"),
        (
            SemanticArgs {
                token_base: u32::MAX - 10,
                ..small()
            },
            "--token-base",
        ),
    ] {
        let e = build_index(f.path(), &args, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().starts_with(flag), "{e}");
    }
}

#[test]
fn auto_levels_are_the_fewest_whose_codes_outnumber_the_items() {
    assert_eq!(auto_levels(100, 128), 1);
    assert_eq!(auto_levels(3686, 128), 2);
    assert_eq!(auto_levels(3686, 64), 2);
    assert_eq!(auto_levels(20_000, 128), 3);
    assert_eq!(auto_levels(40, 4), 3);
    let f = catalog(40);
    let (a, _) = build(
        &f,
        &SemanticArgs {
            levels: 0,
            ..small()
        },
    );
    assert_eq!(a.levels, 3, "auto: 4^3 = 64 codes >= 40 items");
}
