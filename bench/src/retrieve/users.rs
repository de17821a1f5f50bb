//! The bench's users: drawn from an interaction file, each rendered as the titles of their
//! most recent items (the held-out last one left out), as `bench gr` renders profiles.

use std::path::Path;

use super::args::RetrieveBenchArgs;
use crate::error::BenchError;
use crate::gr::workload;
use crate::rng::Rng;

/// One user's retrieval prompt text.
#[derive(Debug, Clone)]
pub struct User {
    pub id: String,
    pub text: String,
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
        });
    }
    Ok(out)
}
