//! Unit tests of `itempool::catalog`.

use super::*;

#[test]
fn hottest_first_and_errors_name_the_line() {
    let text = "{\"id\": 7, \"tokens\": [1, 2], \"count\": 3}\n\n\
                {\"id\": \"x\", \"text\": \"lipstick\", \"count\": 9}\n\
                {\"id\": 8, \"tokens\": [4]}\n";
    let items = parse(text, "cat").expect("parse");
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["x", "7", "8"]);
    assert!(matches!(items[1].content, TextOrTokens::Tokens(ref t) if t == &[1, 2]));
    let bad = parse("{\"id\": 1, \"tokens\": [1]}\n{\"id\": 2}\n", "cat").unwrap_err();
    assert!(bad.starts_with("cat line 2:"), "{bad}");
    let unknown = parse("{\"id\": 1, \"tokens\": [1], \"price\": 2}\n", "cat").unwrap_err();
    assert!(unknown.contains("price"), "{unknown}");
}
