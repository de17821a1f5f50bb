//! The GR request stream (BAT §6.2), built from any `user item item ...` interaction file and
//! any `{"<idx>": {"title": ...}}` item file; nothing here knows which data set it reads.
//! This is `--workload default`; `--workload bat` ([`super::workload_bat`]) shares everything
//! but who is drawn and when.
//!
//! - Active users: `users` distinct users drawn by activity (history length); requests then draw
//!   from them with replacement, again weighted by activity, so heavy users are the hot ones.
//! - Inter-arrival times: exponential with mean `1 / rate`.
//! - Profile: the user's history without its last item, rendered as item-title tokens, cycled
//!   to `min_profile + (h - 1) * per_item` tokens; `per_item` is set so the longest history in
//!   the file gives a prompt of `max_prompt_tokens`. Lengths are long-tailed like histories.
//! - Candidates: the held-out last item plus `candidates - 1` others drawn by item popularity
//!   (interaction count) without replacement; each item's text is its title truncated or cycled
//!   to `item_tokens` tokens. Item id `i` takes title `i mod #titles`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::BenchError;
use crate::rng::Rng;

/// The interaction file, parsed.
pub struct Data {
    /// (user id, item ids in time order), users with at least two interactions.
    pub users: Vec<(u64, Vec<u64>)>,
    /// Items ranked by interaction count.
    pub items: Vec<u64>,
    pub item_counts: Vec<u64>,
    /// Titles ordered by their numeric key.
    pub titles: Vec<String>,
}

pub fn load(data: &Path, items: &Path) -> Result<Data, BenchError> {
    let text = std::fs::read_to_string(data)
        .map_err(BenchError::io(format!("reading {}", data.display())))?;
    let mut users = Vec::new();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let nums: Result<Vec<u64>, _> = line.split_whitespace().map(str::parse).collect();
        let nums = nums.map_err(|e| {
            BenchError::Setup(format!(
                "{} line {}: expected `user item item ...` integers: {e}",
                data.display(),
                n + 1
            ))
        })?;
        if nums.len() < 3 {
            continue; // a user needs history plus a held-out item
        }
        for i in &nums[1..] {
            *counts.entry(*i).or_default() += 1;
        }
        users.push((nums[0], nums[1..].to_vec()));
    }
    if users.is_empty() {
        return Err(BenchError::Setup(format!(
            "{}: no user with at least two items",
            data.display()
        )));
    }
    let mut ranked: Vec<(u64, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let json = std::fs::read_to_string(items)
        .map_err(BenchError::io(format!("reading {}", items.display())))?;
    let map: HashMap<String, serde_json::Value> = serde_json::from_str(&json).map_err(|e| {
        BenchError::Setup(format!(
            "{}: not a JSON object of items: {e}",
            items.display()
        ))
    })?;
    let mut titled: Vec<(u64, String)> = map
        .iter()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v.get("title")?.as_str()?.to_string())))
        .filter(|(_, t)| !t.trim().is_empty())
        .collect();
    titled.sort();
    if titled.is_empty() {
        return Err(BenchError::Setup(format!(
            "{}: no item with a numeric key and a non-empty title",
            items.display()
        )));
    }
    Ok(Data {
        users,
        items: ranked.iter().map(|r| r.0).collect(),
        item_counts: ranked.iter().map(|r| r.1).collect(),
        titles: titled.into_iter().map(|t| t.1).collect(),
    })
}

/// Workload shape.
#[derive(Debug, Clone)]
pub struct Shape {
    pub requests: usize,
    pub users: usize,
    pub candidates: usize,
    pub item_tokens: usize,
    pub min_profile_tokens: usize,
    pub max_prompt_tokens: usize,
    pub instruction_tokens: usize,
    pub rate: f64,
}

/// One request of the stream; token ids of titles are filled in by the caller's tokenizer.
#[derive(Debug, Clone)]
pub struct Planned {
    pub at_s: f64,
    pub user: u64,
    /// History items (without the held-out one) and the profile's token length.
    pub history: Vec<u64>,
    pub profile_tokens: usize,
    /// Candidates, the held-out item first.
    pub items: Vec<u64>,
}

impl Data {
    pub fn title_of(&self, item: u64) -> usize {
        (item % self.titles.len() as u64) as usize
    }
}

/// What every planner shares: a request's profile length and candidates for a drawn user.
pub(crate) struct Builder<'a> {
    data: &'a Data,
    shape: &'a Shape,
    /// Profile tokens per history item beyond the first.
    per_item: f64,
    item_cum: Vec<f64>,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(data: &'a Data, shape: &'a Shape) -> Result<Self, BenchError> {
        let max_hist = data.users.iter().map(|u| u.1.len() - 1).max().unwrap_or(1);
        let item_side = shape.candidates * (shape.item_tokens + 1) + shape.instruction_tokens;
        let max_profile = shape.max_prompt_tokens.saturating_sub(item_side + 8);
        if max_profile < shape.min_profile_tokens || shape.candidates > data.items.len() {
            return Err(BenchError::Setup(format!(
                "--max-prompt-tokens {} leaves {max_profile} profile tokens after {} candidates \
                 of {} tokens (need at least --min-profile-tokens {}), or the data has fewer \
                 than {} items",
                shape.max_prompt_tokens,
                shape.candidates,
                shape.item_tokens,
                shape.min_profile_tokens,
                shape.candidates
            )));
        }
        let per_item =
            (max_profile - shape.min_profile_tokens) as f64 / (max_hist.max(2) - 1) as f64;
        let counts: Vec<f64> = data.item_counts.iter().map(|&c| c as f64).collect();
        Ok(Self {
            data,
            shape,
            per_item,
            item_cum: Rng::cumulative(&counts),
        })
    }

    /// Users' activity (history length): the weight both planners draw users by.
    pub(crate) fn activity(&self) -> Vec<f64> {
        self.data.users.iter().map(|u| u.1.len() as f64).collect()
    }

    /// The request of user `data.users[idx]` arriving at `at_s`.
    pub(crate) fn request(&self, rng: &mut Rng, at_s: f64, idx: usize) -> Planned {
        let (user, hist) = &self.data.users[idx];
        let (history, target) = hist.split_at(hist.len() - 1);
        let mut items = vec![target[0]];
        while items.len() < self.shape.candidates {
            let it = self.data.items[rng.weighted(&self.item_cum)];
            if !items.contains(&it) {
                items.push(it);
            }
        }
        let profile =
            self.shape.min_profile_tokens as f64 + (history.len() - 1) as f64 * self.per_item;
        Planned {
            at_s,
            user: *user,
            history: history.to_vec(),
            profile_tokens: profile.round() as usize,
            items,
        }
    }
}

/// The default stream: `shape.users` active users, requests among them by activity.
pub fn plan(data: &Data, shape: &Shape, seed: u64) -> Result<Vec<Planned>, BenchError> {
    let builder = Builder::new(data, shape)?;
    let mut rng = Rng::new(seed);
    let activity = builder.activity();
    let mut pool = Vec::new();
    let mut taken = vec![false; data.users.len()];
    let cum = Rng::cumulative(&activity);
    while pool.len() < shape.users.min(data.users.len()) {
        let i = rng.weighted(&cum);
        if !taken[i] {
            taken[i] = true;
            pool.push(i);
        }
    }
    let pool_cum = Rng::cumulative(&pool.iter().map(|&i| activity[i]).collect::<Vec<_>>());
    let mut at = 0.0;
    let mut out = Vec::with_capacity(shape.requests);
    for _ in 0..shape.requests {
        at += rng.exponential(shape.rate);
        let idx = pool[rng.weighted(&pool_cum)];
        out.push(builder.request(&mut rng, at, idx));
    }
    Ok(out)
}

/// Who the stream reaches: distinct users, and the share of requests whose user already
/// appeared earlier in it (what a user-prefix cache can hit at best, capacity aside).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Population {
    pub distinct_users: usize,
    pub returning_share: f64,
}

pub fn population(plan: &[Planned]) -> Population {
    let mut seen = std::collections::HashSet::new();
    let returning = plan.iter().filter(|p| !seen.insert(p.user)).count();
    Population {
        distinct_users: seen.len(),
        returning_share: returning as f64 / plan.len().max(1) as f64,
    }
}

/// `tokens` cycled or cut to exactly `n` ids (an empty input gives an empty output).
pub fn fit(tokens: &[u32], n: usize) -> Vec<u32> {
    tokens.iter().copied().cycle().take(n).collect()
}
