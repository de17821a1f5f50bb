//! A GR ranking trace with real return times: MovieLens-100k's timestamped ratings (the
//! `ml-100k.inter` file the `recbole` wheel ships; `examples/data/install-ml100k` installs it
//! and prints its path) replayed in time order.
//!
//! A user's ratings no more than `session_gap` seconds apart form one session; each session
//! is one user-first ranking request, sent at the session's first rating, whose profile is
//! the user's history before it (`profile_tokens` of user context, then `item_tokens` per
//! rated item, in time order, at most `max_profile_tokens`), followed by `candidates`
//! candidate items and an instruction. The profile only grows, so a returning user's
//! request extends the prefix of their previous one, as a conversation's next turn does,
//! but with real return times (median about 4 days, a daily period). `session_gap 0`
//! makes each rating time its own request.
//!
//! Blocks (`block_tokens` each) are laid out as `gen_trace gr` lays out a user-first request:
//! the profile's full blocks (kind user, ids fixed per user and position, so shared by the
//! user's requests), then the profile's partial block and the candidates (kind items), then
//! the instruction (kind other), both unique to the request. The candidates (in a ranking
//! service: the session's item and popular ones) are not drawn: in a user-first prompt the
//! candidate run is unique to the request whatever items it holds, so only their number
//! reaches the trace. The trace is the file's: `--seed` does not change it. `timestamp` is
//! the session's unix time in milliseconds.

use std::path::{Path, PathBuf};

use super::gr::GenError;
use recache_eviction::BlockId;
use recache_eviction::hash::{FastMap, mix64};
use recache_eviction::trace::{Request, Segment, SegmentKind};

/// Shape of the MovieLens-100k replay (block layout as `gen_trace gr`'s defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct Ml100kShape {
    /// Ratings of a user at most this many seconds apart are one session (one request).
    #[arg(long, default_value_t = 1800)]
    pub session_gap: u64,
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    #[arg(long, default_value_t = 32)]
    pub block_tokens: usize,
    /// Tokens of user context before the rated items.
    #[arg(long, default_value_t = 256)]
    pub profile_tokens: usize,
    /// Most profile tokens (the oldest items are kept: the prefix never changes).
    #[arg(long, default_value_t = 6144)]
    pub max_profile_tokens: usize,
    #[arg(long, default_value_t = 64)]
    pub instruction_tokens: usize,
}

/// One rating: user, item, unix time in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interaction {
    pub user: u64,
    pub item: u64,
    pub time: u64,
}

/// Reads a RecBole `.inter` file (tab-separated `user item rating timestamp`, a typed header
/// line first): every line after the header must hold four numbers.
pub fn read_inter(path: &Path) -> Result<Vec<Interaction>, GenError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| GenError::Io(name.clone(), e))?;
    let bad = |line| GenError::Parse {
        path: name.clone(),
        line,
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(u), Some(it), Some(t)) = (f.first(), f.get(1), f.get(3)) else {
            return Err(bad(i + 1));
        };
        let t: f64 = t.parse().map_err(|_| bad(i + 1))?;
        out.push(Interaction {
            user: u.parse().map_err(|_| bad(i + 1))?,
            item: it.parse().map_err(|_| bad(i + 1))?,
            time: t.max(0.0) as u64,
        });
    }
    if out.is_empty() {
        return Err(GenError::Empty(name));
    }
    Ok(out)
}

/// Where `examples/data/install-ml100k` puts the file: `$RECACHE_ML100K_VENV` (default
/// `~/.cache/recache-data/venv-recbole`), `lib/python*/site-packages/recbole/...`.
pub fn find_inter() -> Option<PathBuf> {
    let venv = std::env::var_os("RECACHE_ML100K_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/recache-data/venv-recbole"))
        })?;
    let mut libs: Vec<PathBuf> = std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    libs.sort();
    libs.into_iter()
        .map(|l| l.join("site-packages/recbole/dataset_example/ml-100k/ml-100k.inter"))
        .find(|p| p.is_file())
}

/// The replay of `inters` (any order; sorted here by time, then user, then item).
pub fn generate(shape: &Ml100kShape, inters: &[Interaction]) -> Result<Vec<Request>, GenError> {
    let bt = shape.block_tokens.max(1);
    if shape.max_profile_tokens < shape.profile_tokens {
        return Err(GenError::Shape(format!("{shape:?}")));
    }
    let cap_items = (shape.max_profile_tokens - shape.profile_tokens) / shape.item_tokens.max(1);
    let mut sorted = inters.to_vec();
    sorted.sort_unstable_by_key(|x| (x.time, x.user, x.item));
    // Per user: items so far, time of the last rating.
    let mut users: FastMap<u64, (usize, u64)> = FastMap::default();
    let mut unique: BlockId = 1 << 62;
    let mut out = Vec::new();
    for x in &sorted {
        let (hist, last) = users.entry(x.user).or_insert((0, u64::MAX));
        let new_session = *last == u64::MAX || x.time > *last + shape.session_gap;
        *last = x.time;
        if !new_session {
            *hist += 1;
            continue;
        }
        let profile = shape.profile_tokens + (*hist).min(cap_items) * shape.item_tokens;
        *hist += 1;
        let full = profile / bt;
        let mut hash_ids: Vec<BlockId> = (0..full as u64)
            .map(|j| mix64(mix64(0x0100_0c0d ^ x.user) ^ j))
            .collect();
        let item_side = shape.candidates * (shape.item_tokens + 1);
        let tail = (profile - full * bt + item_side).div_ceil(bt);
        let instr = shape.instruction_tokens.div_ceil(bt);
        for _ in 0..tail + instr {
            unique += 1;
            hash_ids.push(unique);
        }
        let seg = |len, kind, entity| Segment {
            len,
            kind,
            entity,
            root: false,
        };
        out.push(Request {
            timestamp: Some(x.time.saturating_mul(1000)),
            input_length: Some((profile + item_side + shape.instruction_tokens) as u64),
            output_length: Some(1),
            hash_ids,
            segments: Some(vec![
                seg(full, SegmentKind::User, Some(x.user)),
                seg(tail, SegmentKind::Items, None),
                seg(instr, SegmentKind::Other, None),
            ]),
        });
    }
    Ok(out)
}
