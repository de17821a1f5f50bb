//! `--rank-item-catalog FILE`: the items to compute into the pool ahead of time, hottest first.
//!
//! One JSON object per line, `{"id": <string or integer>, "text": ".." | "tokens": [..],
//! "count": <n>}`: the id and content exactly as ranking requests send the item (the pool key
//! is the id's text, as in `/v1/rank`), `count` its popularity (interactions in a past period;
//! absent = 0). Blank lines are skipped; any other bad line is an error naming the line.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::engine::api::{self, Entity, TextOrTokens};

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
#[path = "catalog_tests.rs"]
mod tests;
