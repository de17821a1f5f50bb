//! A GR ranking trace in the segment format `recache bench gr --trace-out` writes (see
//! [`recache_eviction::trace`]), for tests and simulations without an engine. BAT §6.1's workload: users
//! drawn with replacement weighted by activity (history length); the profile is the history
//! minus its last item, `min_profile_tokens + (h - 2) · per_item` tokens (the longest history
//! fills `max_prompt_tokens`); candidates are the held-out item plus draws by item popularity
//! (interaction count), without replacement.
//!
//! Prefix per request (`--prefix`): `user` (user-as-prefix), `item` (item-as-prefix),
//! `agnostic` (user first when the profile has at least as many tokens as the candidates),
//! or `hotness` (BAT §5.3 without a cache to ask: user first when the profile is the longer
//! part *and* the user sent a request within the last `window` requests).
//!
//! Blocks (`block_tokens` each): a user-first request is one chain, the user's full profile
//! blocks (kind user; ids fixed per user, so they are shared by the user's requests), then
//! the candidates and instruction (kind items, then other; unique to the request, the
//! profile's partial last block included). An item-first request is one root chain per
//! candidate (kind item; ids fixed per item) and a root chain for the rest (profile after
//! the items, and instruction: kind other, unique).
//!
//! Population: an interaction file (`user item item ...` per line, e.g. Amazon Beauty;
//! users with at least 2 items, as `bench gr`) or, without one, a synthetic one (long-tailed history
//! lengths, Zipf item popularity).

use std::path::Path;

use super::rng::{Rng, cumulative};
use recache_eviction::BlockId;
use recache_eviction::hash::{FastMap, mix64};
use recache_eviction::trace::{Request, Segment, SegmentKind};

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    User,
    Item,
    Agnostic,
    Hotness,
}

/// Shape of the GR trace (defaults: `recache bench gr`'s).
#[derive(Debug, Clone, clap::Args)]
pub struct GrShape {
    /// Requests to generate.
    #[arg(long, default_value_t = 10_000)]
    pub requests: usize,
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    #[arg(long, default_value_t = 32)]
    pub block_tokens: usize,
    #[arg(long, default_value_t = 1024)]
    pub min_profile_tokens: usize,
    #[arg(long, default_value_t = 8192)]
    pub max_prompt_tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub instruction_tokens: usize,
    #[arg(long, value_enum, default_value_t = Prefix::Hotness)]
    pub prefix: Prefix,
    /// `hotness`: a user counts as hot after a request within this many requests.
    #[arg(long, default_value_t = 1_000)]
    pub window: u64,
    /// Synthetic population (no interaction file): users and items.
    #[arg(long, default_value_t = 20_000)]
    pub synth_users: usize,
    #[arg(long, default_value_t = 12_000)]
    pub synth_items: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("cannot read {0}")]
    Io(String, #[source] std::io::Error),
    #[error("{path}:{line}: expected `user item item ...` integers")]
    Parse { path: String, line: usize },
    #[error("{0}: no user with at least 2 items")]
    Empty(String),
    #[error("the shape leaves no room for a profile: {0}")]
    Shape(String),
}

/// Users (id, history in time order) and items' interaction counts.
pub struct Population {
    pub users: Vec<(u64, Vec<u64>)>,
    pub item_counts: FastMap<u64, u64>,
}

impl Population {
    /// Reads `user item item ...` lines; users with fewer than 2 items are skipped.
    pub fn from_file(path: &Path) -> Result<Self, GenError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| GenError::Io(name.clone(), e))?;
        let mut users = Vec::new();
        let mut item_counts = FastMap::default();
        for (i, line) in text.lines().enumerate() {
            let nums: Result<Vec<u64>, _> = line.split_whitespace().map(str::parse).collect();
            let nums = nums.map_err(|_| GenError::Parse {
                path: name.clone(),
                line: i + 1,
            })?;
            if nums.len() < 3 {
                continue;
            }
            for it in &nums[1..] {
                *item_counts.entry(*it).or_insert(0) += 1;
            }
            users.push((nums[0], nums[1..].to_vec()));
        }
        if users.is_empty() {
            return Err(GenError::Empty(name));
        }
        Ok(Self { users, item_counts })
    }

    /// A synthetic population: history lengths 3 + log-normal (median 5), items by Zipf(1).
    pub fn synthetic(users: usize, items: usize, rng: &mut Rng) -> Self {
        let zipf = cumulative(
            &(0..items.max(1))
                .map(|i| 1.0 / (i + 1) as f64)
                .collect::<Vec<_>>(),
        );
        let mut item_counts = FastMap::default();
        let users = (0..users.max(1) as u64)
            .map(|u| {
                let h = 3 + rng.lognormal(5.0, 0.9).round().min(200.0) as usize;
                let hist: Vec<u64> = (0..h).map(|_| rng.weighted(&zipf) as u64).collect();
                for it in &hist {
                    *item_counts.entry(*it).or_insert(0) += 1;
                }
                (u, hist)
            })
            .collect();
        Self { users, item_counts }
    }
}

/// The trace for `shape` over `pop` with `seed` (deterministic).
pub fn generate(shape: &GrShape, pop: &Population, seed: u64) -> Result<Vec<Request>, GenError> {
    let mut rng = Rng::new(seed);
    let bt = shape.block_tokens.max(1);
    let item_side = shape.candidates * (shape.item_tokens + 1);
    let max_profile = shape
        .max_prompt_tokens
        .checked_sub(item_side + shape.instruction_tokens + 8)
        .filter(|m| *m >= shape.min_profile_tokens)
        .ok_or_else(|| GenError::Shape(format!("{shape:?}")))?;
    let max_hist = pop.users.iter().map(|u| u.1.len()).max().unwrap_or(3);
    let per_item = (max_profile - shape.min_profile_tokens) as f64 / (max_hist - 2).max(1) as f64;
    let mut items: Vec<(u64, u64)> = pop.item_counts.iter().map(|(&i, &c)| (i, c)).collect();
    items.sort_unstable();
    let item_cum = cumulative(&items.iter().map(|x| x.1 as f64).collect::<Vec<_>>());
    let user_cum = cumulative(
        &pop.users
            .iter()
            .map(|u| u.1.len() as f64)
            .collect::<Vec<_>>(),
    );
    let candidates = shape.candidates.min(items.len());
    let item_blocks = shape.item_tokens.div_ceil(bt).max(1);
    let mut last_seen: FastMap<u64, u64> = FastMap::default();
    let mut unique: BlockId = 1 << 62;
    let mut out = Vec::with_capacity(shape.requests);
    for t in 0..shape.requests as u64 {
        let (user, hist) = &pop.users[rng.weighted(&user_cum)];
        let target = hist[hist.len() - 1];
        let profile = shape.min_profile_tokens as f64 + (hist.len() - 2) as f64 * per_item;
        let profile = profile.round() as usize;
        let mut cands = vec![target];
        while cands.len() < candidates {
            let it = items[rng.weighted(&item_cum)].0;
            if !cands.contains(&it) {
                cands.push(it);
            }
        }
        let longer = profile >= candidates * (shape.item_tokens + 1);
        let hot = last_seen.get(user).is_some_and(|&s| t - s <= shape.window);
        last_seen.insert(*user, t);
        let user_first = match shape.prefix {
            Prefix::User => true,
            Prefix::Item => false,
            Prefix::Agnostic => longer,
            Prefix::Hotness => longer && hot,
        };
        let mut fresh = |n: usize| -> Vec<BlockId> {
            (0..n)
                .map(|_| {
                    unique += 1;
                    unique
                })
                .collect()
        };
        let mut hash_ids = Vec::new();
        let mut segments = Vec::new();
        let mut seg = |ids: Vec<BlockId>, kind, entity, root, hash_ids: &mut Vec<BlockId>| {
            segments.push(Segment {
                len: ids.len(),
                kind,
                entity,
                root,
            });
            hash_ids.extend(ids);
        };
        let rest = item_side + shape.instruction_tokens;
        if user_first {
            let full = profile / bt;
            let ids = (0..full as u64)
                .map(|j| mix64(mix64(0x05e7 ^ user) ^ j))
                .collect();
            seg(ids, SegmentKind::User, Some(*user), false, &mut hash_ids);
            let tail = (profile - full * bt + item_side).div_ceil(bt);
            seg(fresh(tail), SegmentKind::Items, None, false, &mut hash_ids);
            let instr = shape.instruction_tokens.div_ceil(bt);
            seg(fresh(instr), SegmentKind::Other, None, false, &mut hash_ids);
        } else {
            for &it in &cands {
                let ids = (0..item_blocks as u64)
                    .map(|j| mix64(mix64(0x17e3 ^ it) ^ j))
                    .collect();
                seg(ids, SegmentKind::Item, Some(it), true, &mut hash_ids);
            }
            let n = (profile + shape.instruction_tokens).div_ceil(bt);
            seg(fresh(n), SegmentKind::Other, None, true, &mut hash_ids);
        }
        out.push(Request {
            timestamp: Some(t),
            input_length: Some((profile + rest) as u64),
            output_length: Some(1),
            hash_ids,
            segments: Some(segments),
        });
    }
    Ok(out)
}
