//! `--rank-item-catalog FILE`: the items to compute into the pool ahead of time, hottest first.
//!
//! One JSON object per line, `{"id": <string or integer>, "text": ".." | "tokens": [..],
//! "count": <n>}`: the id and content exactly as ranking requests send the item (the pool key
//! is the id's text, as in `/v1/rank`), `count` its popularity (interactions in a past period;
//! absent = 0). Blank lines are skipped; any other bad line is an error naming the line.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::rank::api::{self, Entity, TextOrTokens};

/// One catalog item.
#[derive(Debug, Clone)]
pub struct CatalogItem {
    /// The id's text form (the request-side item key).
    pub key: String,
    pub content: TextOrTokens,
    pub count: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    id: Value,
    text: Option<String>,
    tokens: Option<Vec<u32>>,
    #[serde(default)]
    count: u64,
}

/// Parses catalog text; items come back hottest first (ties in file order).
pub fn parse(text: &str, origin: &str) -> Result<Vec<CatalogItem>, String> {
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{origin} line {}", n + 1);
        let l: Line = serde_json::from_str(line).map_err(|e| format!("{}: {e}", at()))?;
        let entity = Entity {
            id: l.id,
            text: l.text,
            tokens: l.tokens,
        };
        let checked = api::check(entity, "item").map_err(|e| format!("{}: {e}", at()))?;
        items.push(CatalogItem {
            key: checked.key,
            content: checked.content,
            count: l.count,
        });
    }
    items.sort_by_key(|i| std::cmp::Reverse(i.count));
    Ok(items)
}

pub fn load(path: &Path) -> Result<Vec<CatalogItem>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--rank-item-catalog {}: {e}", path.display()))?;
    parse(&text, &format!("--rank-item-catalog {}", path.display()))
}

#[cfg(test)]
mod tests {
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
}
