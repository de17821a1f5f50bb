//! The bench's users: drawn from an interaction file, each rendered as the titles of their
//! most recent items (the held-out last one left out), as `bench gr` renders profiles.

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
    let data = workload::load(&args.data, &args.items)?;
    let mut pool: Vec<&(u64, Vec<u64>)> = data.users.iter().filter(|(_, h)| h.len() >= 3).collect();
    if pool.is_empty() || args.users == 0 {
        return Err(BenchError::Setup(format!(
            "{}: need --users >= 1 and users with at least 3 items",
            args.data.display()
        )));
    }
    let mut rng = Rng::new(args.seed);
    let mut out = Vec::with_capacity(args.users.min(pool.len()));
    while out.len() < args.users && !pool.is_empty() {
        let (id, items) = pool.swap_remove(rng.below(pool.len()));
        let history = &items[..items.len() - 1];
        let recent = &history[history.len().saturating_sub(args.history)..];
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
