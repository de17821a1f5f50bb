//! Unit tests of `retrieve::index`.

use super::*;

fn file(codes: &[(&str, &[u32])]) -> IndexFile {
    IndexFile {
        format: FORMAT,
        method: "test".into(),
        levels: 2,
        codebook: 4,
        seed: 0,
        token_base: 100,
        items: codes
            .iter()
            .map(|(id, c)| IndexedItem {
                id: id.to_string(),
                code: c.to_vec(),
            })
            .collect(),
    }
}

#[test]
fn loads_leaves_and_subtree_counts() {
    let idx = RetrieveIndex::new(file(&[
        ("a", &[100, 104]),
        ("b", &[100, 105, 108]),
        ("c", &[100, 105, 109]),
        ("d", &[101, 104]),
    ]))
    .expect("valid");
    assert_eq!(idx.subtree_items[0], 4);
    assert_eq!(idx.depth, 3);
    assert_eq!(idx.highest_token, 109);
    let b = idx.trie.walk(&[100, 105, 108]).expect("path");
    assert_eq!(idx.item_at(b).map(|i| i.id.as_str()), Some("b"));
    let mid = idx.trie.walk(&[100, 105]).expect("path");
    assert_eq!(idx.subtree_items[mid as usize], 2);
    assert!(idx.item_at(mid).is_none());
}

#[test]
fn refuses_duplicates_prefixes_and_other_formats() {
    let dup = RetrieveIndex::new(file(&[("a", &[100, 104]), ("b", &[100, 104])]));
    assert!(dup.unwrap_err().to_string().contains("same code"));
    let pre = RetrieveIndex::new(file(&[("a", &[100]), ("b", &[100, 104])]));
    assert!(pre.unwrap_err().to_string().contains("prefix"));
    let twice = RetrieveIndex::new(file(&[("a", &[100]), ("a", &[101])]));
    assert!(twice.unwrap_err().to_string().contains("twice"));
    let mut f = file(&[("a", &[100])]);
    f.format = 9;
    assert!(
        RetrieveIndex::new(f)
            .unwrap_err()
            .to_string()
            .contains("format 9")
    );
}
