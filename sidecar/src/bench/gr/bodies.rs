//! From planned requests to `/v1/rank` bodies: item titles tokenized once on the engine, each
//! item's text fitted to `--item-tokens`, a user's profile from their history's item texts.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use super::http;
use super::workload::{self, Data, Planned};
use crate::bench::BenchError;
use crate::bench::HttpClient;

/// Token ids of each title in use, by title index.
pub struct Titles(HashMap<usize, Vec<u32>>);

impl Titles {
    /// Token ids by title index, already tokenized (tests; callers with their own tokenizer).
    pub fn from_map(tokens: HashMap<usize, Vec<u32>>) -> Self {
        Self(tokens)
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
        Ok(Self(out))
    }

    /// Item `i`'s text tokens as every request sends them (its title fitted to `n` tokens).
    pub fn item(&self, data: &Data, n: usize, i: u64) -> Vec<u32> {
        self.0
            .get(&data.title_of(i))
            .map(|t| workload::fit(t, n))
            .unwrap_or_default()
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
