//! Users as the trained retrieval model reads them (`up --model retriever`;
//! `examples/testbed/retriever/prompt.py` is the other side of this contract): a held-out
//! user's most recent items before the one to retrieve, each written as its semantic-ID code
//! and then its own id token ([`ID_BASE`] + its id in the interaction file), with [`SEP`]
//! between items, sent as `user.tokens` with `[SEP]` as the instruction; the item to
//! retrieve is the user's last one. Beauty's item `i` is catalog item `keys[i mod n]` (the
//! titled items by numeric key: the title `bench gr` gives it). Also the popularity baseline
//! and the Recall@10 / NDCG@10 of one answer.

use std::collections::HashMap;
use std::path::Path;

use recache::harness::RetrieveIndex;

use super::users::User;
use crate::error::BenchError;
use crate::gr::workload;
use crate::quality::split;
use crate::rng::Rng;

/// The separator token: one below the index's default token base, so no code uses it.
pub const SEP: u32 = 32767;
/// Item `i` of the interaction file is token `ID_BASE + i` (the ranker's convention).
pub const ID_BASE: u32 = 20480;
/// Ranking depth of the quality figures.
pub const AT: usize = 10;

/// Numeric keys of the titled items, sorted.
fn catalog_keys(items: &Path) -> Result<Vec<u64>, BenchError> {
    let text = std::fs::read_to_string(items)
        .map_err(BenchError::io(format!("reading {}", items.display())))?;
    let map: HashMap<String, serde_json::Value> = serde_json::from_str(&text)
        .map_err(|e| BenchError::Setup(format!("{}: not a JSON object: {e}", items.display())))?;
    let mut keys: Vec<u64> = (map.iter())
        .filter(|(_, v)| v["title"].as_str().is_some_and(|t| !t.trim().is_empty()))
        .filter_map(|(k, _)| k.parse().ok())
        .collect();
    keys.sort_unstable();
    Ok(keys)
}

/// The code users and the popularity ranking of one data set and catalog.
pub struct CodeUsers {
    pub users: Vec<User>,
    /// The [`AT`] catalog items most interacted with by users that are not held out.
    pub popular: Vec<String>,
}

/// `n` held-out users with at least 2 items (drawn with `seed`, without replacement), each
/// with their last `history` items before the last one, which is the item to retrieve.
pub fn load(
    data: &Path,
    items: &Path,
    index: &RetrieveIndex,
    n: usize,
    history: usize,
    seed: u64,
) -> Result<CodeUsers, BenchError> {
    let d = workload::load(data, items)?;
    let keys = catalog_keys(items)?;
    if keys.is_empty() || index.file.token_base <= SEP {
        return Err(BenchError::Setup(format!(
            "code prompts need titled items in {} and an index whose token_base is above {SEP}",
            items.display()
        )));
    }
    let code = |item: u64| -> Result<(String, &[u32]), BenchError> {
        let id = keys[(item % keys.len() as u64) as usize].to_string();
        let pos = index.by_id.get(&id).ok_or_else(|| {
            BenchError::Setup(format!("catalog item {id} is not in the retrieval index"))
        })?;
        Ok((id, &index.file.items[*pos].code))
    };
    let mut counts: HashMap<String, u64> = HashMap::new();
    for (uid, its) in &d.users {
        if !split::held_out(*uid) {
            for &i in its {
                *counts.entry(code(i)?.0).or_default() += 1;
            }
        }
    }
    let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let popular = ranked.into_iter().take(AT).map(|r| r.0).collect();
    let mut pool: Vec<&(u64, Vec<u64>)> = (d.users.iter())
        .filter(|(u, its)| split::held_out(*u) && its.len() >= 2)
        .collect();
    let mut rng = Rng::new(seed);
    let mut users = Vec::with_capacity(n.min(pool.len()));
    while users.len() < n && !pool.is_empty() {
        let (id, its) = pool.swap_remove(rng.below(pool.len()));
        let Some((last, past)) = its.split_last() else {
            continue;
        };
        let recent = &past[past.len().saturating_sub(history)..];
        let pairs = (recent.iter())
            .map(|&i| Ok((code(i)?.1, i)))
            .collect::<Result<Vec<_>, BenchError>>()?;
        let tokens = user_tokens(&pairs)?;
        users.push(User {
            id: id.to_string(),
            text: String::new(),
            tokens: Some(tokens),
            instruction: vec![SEP],
            target: Some(code(*last)?.0),
        });
    }
    if users.is_empty() {
        return Err(BenchError::Setup(format!(
            "{}: no held-out user with at least 2 items",
            data.display()
        )));
    }
    Ok(CodeUsers { users, popular })
}

/// `c(h1) id(h1) SEP … c(hn) id(hn)` of (code, item id) pairs: `/v1/retrieve`'s
/// `user.tokens` (`retriever/prompt.py`'s `user_tokens`).
pub fn user_tokens(history: &[(&[u32], u64)]) -> Result<Vec<u32>, BenchError> {
    let mut tokens = Vec::new();
    for (k, (code, i)) in history.iter().enumerate() {
        if k > 0 {
            tokens.push(SEP);
        }
        tokens.extend_from_slice(code);
        let id = (u32::try_from(*i).ok())
            .filter(|i| *i < SEP - ID_BASE)
            .ok_or_else(|| {
                BenchError::Setup(format!(
                    "item {i} has no id token (ids below {})",
                    SEP - ID_BASE
                ))
            })?;
        tokens.push(ID_BASE + id);
    }
    Ok(tokens)
}

/// One ranking's (recall, NDCG) at [`AT`] for `target`: 1 and 1/log2(1 + rank) when it is
/// among the first [`AT`] of `ranked`, else 0 and 0.
pub fn hit(ranked: &[Option<String>], target: &str) -> (f64, f64) {
    match (ranked.iter().take(AT)).position(|r| r.as_deref() == Some(target)) {
        Some(p) => (1.0, 1.0 / ((p + 2) as f64).log2()),
        None => (0.0, 0.0),
    }
}

/// Mean recall and NDCG at [`AT`] of the popularity ranking over `users`.
pub fn popularity(users: &[User], popular: &[String]) -> (f64, f64) {
    let ranked: Vec<Option<String>> = popular.iter().cloned().map(Some).collect();
    let (mut r, mut g, mut n) = (0.0, 0.0, 0.0);
    for t in users.iter().filter_map(|u| u.target.as_deref()) {
        let (a, b) = hit(&ranked, t);
        r += a;
        g += b;
        n += 1.0;
    }
    (r / f64::max(n, 1.0), g / f64::max(n, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_each_items_code_and_id_token_with_sep_between() {
        // The same case is asserted on the Python side (test_retriever_recipe.py).
        let got = user_tokens(&[(&[5, 6], 0), (&[7, 8, 9], 3)]).expect("tokens");
        assert_eq!(got, vec![5, 6, ID_BASE, SEP, 7, 8, 9, ID_BASE + 3]);
        assert!(user_tokens(&[(&[5], u64::from(SEP - ID_BASE))]).is_err());
    }

    #[test]
    fn a_hit_counts_by_its_rank_and_a_miss_or_an_invalid_item_is_zero() {
        let ranked = vec![None, Some("7".to_string()), Some("3".to_string())];
        assert_eq!(hit(&ranked, "7"), (1.0, 1.0 / 3f64.log2()));
        assert_eq!(hit(&ranked, "9"), (0.0, 0.0));
        let first = vec![Some("3".to_string())];
        assert_eq!(hit(&first, "3"), (1.0, 1.0));
    }
}
