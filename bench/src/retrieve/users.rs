//! The bench's users: drawn from an interaction file, each rendered as the titles of their
//! most recent items (the held-out last one left out), as `bench gr` renders profiles; or, for
//! the trained retrieval model, as their items' codes ([`super::codes`]).

use std::path::Path;

use serde_json::{Value, json};

use super::args::RetrieveBenchArgs;
use crate::error::BenchError;
use crate::gr::workload;
use crate::rng::Rng;

/// One user's retrieval prompt: text (the default instruction follows), or token ids with
/// their own instruction tokens.
#[derive(Debug, Clone, Default)]
pub struct User {
    pub id: String,
    pub text: String,
    pub tokens: Option<Vec<u32>>,
    /// The instruction tokens that follow `tokens`.
    pub instruction: Vec<u32>,
    /// The catalog id of the item to retrieve, where quality is measured.
    pub target: Option<String>,
}

impl User {
    /// `/v1/retrieve`'s `user` and `instruction` fields for this user (None: the default).
    pub fn request(&self) -> (Value, Option<Value>) {
        match &self.tokens {
            Some(t) => (
                json!({"id": self.id, "tokens": t}),
                Some(json!(self.instruction)),
            ),
            None => (json!({"id": self.id, "text": self.text}), None),
        }
    }

    /// The prompt recache builds before padding: its tokens for a code user; None for text.
    pub fn base_tokens(&self) -> Option<Vec<u32>> {
        let mut t = self.tokens.clone()?;
        t.extend_from_slice(&self.instruction);
        Some(t)
    }
}

/// `args.users` users with at least two history items, drawn without replacement.
pub fn load(args: &RetrieveBenchArgs) -> Result<Vec<User>, BenchError> {
    load_from(&args.data, &args.items, args.users, args.history, args.seed)
}

/// `n` users of `data` (titles from `items`) with at least two history items, drawn with
/// `seed` without replacement, each with their `history` most recent items.
pub fn load_from(
    data: &Path,
    items: &Path,
    n: usize,
    history: usize,
    seed: u64,
) -> Result<Vec<User>, BenchError> {
    let path = data;
    let data = workload::load(data, items)?;
    let mut pool: Vec<&(u64, Vec<u64>)> = data.users.iter().filter(|(_, h)| h.len() >= 3).collect();
    if pool.is_empty() || n == 0 {
        return Err(BenchError::Setup(format!(
            "{}: need at least 1 user and users with at least 3 items",
            path.display()
        )));
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n.min(pool.len()));
    while out.len() < n && !pool.is_empty() {
        let (id, items) = pool.swap_remove(rng.below(pool.len()));
        let past = &items[..items.len() - 1];
        let recent = &past[past.len().saturating_sub(history)..];
        let titles: Vec<&str> = recent
            .iter()
            .map(|i| data.titles[data.title_of(*i)].as_str())
            .collect();
        out.push(User {
            id: id.to_string(),
            text: format!("The user bought, in order: {}.", titles.join("; ")),
            ..User::default()
        });
    }
    Ok(out)
}
