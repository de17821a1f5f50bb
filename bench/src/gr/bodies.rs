//! From planned requests to `/v1/rank` bodies: item titles tokenized once on the engine, each
//! item's text fitted to `--item-tokens`, a user's profile from their history's item texts.
//! With an item-id base (`bench quality --item-id-base N`) an item's text starts with its own
//! token `N + id`, as a GR model with item tokens reads it, and the title fills the rest.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use super::workload::{self, Data, Planned};
use crate::error::BenchError;
use crate::http;
use crate::http::HttpClient;

/// Token ids of each title in use, by title index, and the item-id token base if any.
pub struct Titles {
    titles: HashMap<usize, Vec<u32>>,
    id_base: Option<u32>,
}

impl Titles {
    /// Token ids by title index, already tokenized (tests; callers with their own tokenizer).
    pub fn from_map(tokens: HashMap<usize, Vec<u32>>) -> Self {
        Self {
            titles: tokens,
            id_base: None,
        }
    }

    /// Items' texts start with the token `base + id` (`None`: titles alone).
    pub fn with_id_base(mut self, base: Option<u32>) -> Self {
        self.id_base = base;
        self
    }

    /// Tokenizes every title of `items` on the engine (8 at a time).
    pub async fn tokenize(
        client: &HttpClient,
        upstream: &str,
        model: &str,
        data: &Data,
        items: impl Iterator<Item = u64>,
    ) -> Result<Self, BenchError> {
        let titles: BTreeSet<usize> = items.map(|i| data.title_of(i)).collect();
        eprintln!(
            "bench gr: tokenizing {} item titles on the engine ...",
            titles.len()
        );
        let titles: Vec<usize> = titles.into_iter().collect();
        let mut out = HashMap::new();
        for chunk in titles.chunks(8) {
            let mut set = tokio::task::JoinSet::new();
            for &t in chunk {
                let (client, up, model) = (client.clone(), upstream.to_string(), model.to_string());
                let text = data.titles[t].clone();
                set.spawn(async move { (t, http::tokenize(&client, &up, &model, &text).await) });
            }
            while let Some(j) = set.join_next().await {
                let (t, tokens) =
                    j.map_err(|e| BenchError::Setup(format!("tokenizer task: {e}")))?;
                out.insert(t, tokens?);
            }
        }
        Ok(Self::from_map(out))
    }

    /// Item `i`'s text tokens as every request sends them: its title fitted to `n` tokens, or
    /// with an id base its id token and the title fitted to `n - 1`.
    pub fn item(&self, data: &Data, n: usize, i: u64) -> Vec<u32> {
        let title = |n| {
            self.titles
                .get(&data.title_of(i))
                .map(|t| workload::fit(t, n))
                .unwrap_or_default()
        };
        match self.id_base {
            None => title(n),
            // Saturating: an id past the vocabulary reaches the engine as one, which rejects
            // it (a 400 naming the token), rather than wrapping to some small, valid token.
            Some(base) => {
                std::iter::once(base.saturating_add(u32::try_from(i).unwrap_or(u32::MAX)))
                    .chain(title(n.saturating_sub(1)))
                    .collect()
            }
        }
    }

    /// The `/v1/rank` body of one planned request (mode and salt are set per run).
    pub fn body(&self, p: &Planned, data: &Data, n: usize, model: &str) -> Arc<Value> {
        let history: Vec<u32> = p
            .history
            .iter()
            .flat_map(|&i| self.item(data, n, i))
            .collect();
        let items: Vec<Value> = p
            .items
            .iter()
            .map(|&i| json!({"id": i, "tokens": self.item(data, n, i)}))
            .collect();
        Arc::new(json!({
            "model": model,
            "user": {"id": p.user, "tokens": workload::fit(&history, p.profile_tokens)},
            "items": items,
            "top_k": 10,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Data {
        Data {
            users: vec![(1, vec![3, 5, 8])],
            items: vec![3, 5, 8],
            item_counts: vec![1, 1, 1],
            titles: vec!["a".into(), "b".into()],
        }
    }

    #[test]
    fn an_item_id_base_puts_the_items_own_token_first() {
        let map = HashMap::from([(0, vec![10, 11]), (1, vec![20, 21, 22])]);
        let d = data();
        let plain = Titles::from_map(map.clone());
        assert_eq!(plain.item(&d, 4, 5), vec![20, 21, 22, 20]);
        let ids = Titles::from_map(map).with_id_base(Some(1000));
        assert_eq!(ids.item(&d, 4, 5), vec![1005, 20, 21, 22]);
        assert_eq!(ids.item(&d, 1, 8), vec![1008]);
        // An id past u32 saturates (the engine then rejects it) instead of wrapping.
        assert_eq!(ids.item(&d, 1, u64::MAX), vec![u32::MAX]);
    }
}
