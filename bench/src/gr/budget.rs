//! How one KV memory budget splits between the item KV pool and the engine's own cache (which
//! holds the running requests and the cached user prefixes): BAT's decision.
//!
//! BAT §5.1 sets the item pool aside at initialisation and gives the rest to user caches; §5.3
//! states the objective behind both: with limited cache, keep what is accessed most often per
//! unit of cache space. A cached item saves its τ tokens on every request that has it and
//! costs τ tokens of memory, so its value per token is its access frequency f_i (requests that
//! contain it / requests); a cached user prefix saves τ_u tokens on every *repeat* visit and
//! costs τ_u, so its value per token is the user's repeat frequency f_u. [`split`] first
//! reserves the engine's working set (tokens of the requests in flight, which no policy can
//! give away), then fills the rest greedily by value per token from both lists (items before
//! users at equal value: a pooled item serves every user) and returns the pool's share.
//! Objects the past period never read (value 0) are not taken: memory no object earns stays
//! with the engine, whose own cache (LRU on vLLM) then keeps what the past period did not
//! foresee — the uncached suffixes of recent prompts that churn between a regular's visits,
//! users it did not have — rather than pooling items nobody asked for.
//! Frequencies come from a past period of traffic (BAT §5.2 step 2: "access frequency
//! distribution from a past period"), never from the stream being measured.

/// One cacheable object: expected reuses per request and its size in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demand {
    pub freq: f64,
    pub tokens: u64,
}

/// What the split is decided from.
#[derive(Debug, Clone, Copy)]
pub struct SplitInput<'a> {
    /// Total KV bytes (engine cache + pool).
    pub kv_bytes: u64,
    /// KV bytes of one token (all layers, K and V).
    pub token_bytes: u64,
    /// Bytes of one token in the item pool (`token_bytes`, or less where the pool keeps
    /// its K/V in fewer bits: `--pool-codec int8|int4`).
    pub pool_token_bytes: u64,
    /// Tokens the engine needs for the requests in flight (concurrency × longest prompt).
    pub working_tokens: u64,
    /// Catalog items, any order: per-request access frequency and tokens (label included).
    pub items: &'a [Demand],
    /// Users: repeat visits per request and profile tokens.
    pub users: &'a [Demand],
}

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Indices into `items` of the items to pool, most valuable first.
    pub pool: Vec<usize>,
    /// Indices into `users` of the users whose prefixes went into the engine's share.
    pub users: Vec<usize>,
    pub pool_bytes: u64,
    /// Everything else: the engine's KV cache.
    pub engine_bytes: u64,
    /// Tokens of user prefixes that went into the engine's share by value.
    pub user_tokens: u64,
    /// Value per token of the first object that did not fit (0 when every object of value did).
    pub threshold: f64,
}

/// Why a budget cannot be split.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplitError {
    #[error(
        "{kv_bytes} KV bytes hold {have} tokens, fewer than the {need} the requests in flight need"
    )]
    TooSmall { kv_bytes: u64, have: u64, need: u64 },
    #[error("KV bytes per token must be positive")]
    NoTokenBytes,
}

pub fn split(input: &SplitInput<'_>) -> Result<Split, SplitError> {
    if input.token_bytes == 0 || input.pool_token_bytes == 0 {
        return Err(SplitError::NoTokenBytes);
    }
    let have = input.kv_bytes / input.token_bytes;
    // Bytes, since a pooled token and a cached one need not take the same.
    let mut free = have
        .checked_sub(input.working_tokens)
        .ok_or(SplitError::TooSmall {
            kv_bytes: input.kv_bytes,
            have,
            need: input.working_tokens,
        })?
        * input.token_bytes;
    // A pooled token's size in engine tokens: value per engine token's worth of bytes.
    let item_size = input.pool_token_bytes as f64 / input.token_bytes as f64;
    // (value per unit of memory, is a user, index); items first at equal value.
    let mut all: Vec<(f64, bool, usize)> = input
        .items
        .iter()
        .enumerate()
        .map(|(i, d)| (d.freq.max(0.0) / item_size, false, i))
        .chain(
            input
                .users
                .iter()
                .enumerate()
                .map(|(i, d)| (d.freq.max(0.0), true, i)),
        )
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut out = Split {
        pool: Vec::new(),
        users: Vec::new(),
        pool_bytes: 0,
        engine_bytes: 0,
        user_tokens: 0,
        threshold: 0.0,
    };
    for (value, is_user, i) in all {
        if value <= 0.0 {
            // Nothing the past period read: what no object earns stays with the engine.
            break;
        }
        let (tokens, bytes) = match is_user {
            true => (input.users[i].tokens, input.token_bytes),
            false => (input.items[i].tokens, input.pool_token_bytes),
        };
        if tokens * bytes > free {
            // A smaller object further down may still fit, but it is worth less per byte
            // than this one; the budget's edge is here.
            out.threshold = value;
            break;
        }
        free -= tokens * bytes;
        if is_user {
            out.user_tokens += tokens;
            out.users.push(i);
        } else {
            out.pool.push(i);
            out.pool_bytes += tokens * bytes;
        }
    }
    out.engine_bytes = input.kv_bytes - out.pool_bytes;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(freq: f64, tokens: u64) -> Demand {
        Demand { freq, tokens }
    }

    #[test]
    fn hot_items_before_colder_users_and_the_working_set_first() {
        let items = [d(0.2, 10), d(0.01, 10), d(0.5, 10)];
        let users = [d(0.05, 30), d(0.0, 40)];
        let input = SplitInput {
            kv_bytes: 100 * 2,
            token_bytes: 2,
            pool_token_bytes: 2,
            working_tokens: 40,
            items: &items,
            users: &users,
        };
        // 60 tokens to give: item 2 (0.5), item 0 (0.2), user 0 (0.05, 30) -> 10 left;
        // item 1 (0.01, 10) fits exactly; user 1 does not.
        let s = split(&input).expect("split");
        assert_eq!(s.pool, vec![2, 0, 1]);
        assert_eq!(s.pool_bytes, 60);
        assert_eq!(s.engine_bytes, 140);
        assert_eq!(s.user_tokens, 30);
        assert_eq!(s.users, vec![0]);
        assert_eq!(s.threshold, 0.0);
    }

    #[test]
    fn a_hot_user_displaces_cold_items() {
        let items = [d(0.001, 10), d(0.3, 10)];
        let users = [d(0.1, 20)];
        let input = SplitInput {
            kv_bytes: 30,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 0,
            items: &items,
            users: &users,
        };
        let s = split(&input).expect("split");
        assert_eq!(s.pool, vec![1]);
        assert_eq!(s.user_tokens, 20);
        assert_eq!(s.engine_bytes, 20);
    }

    #[test]
    fn objects_nobody_read_stay_out() {
        let items = [d(0.3, 10), d(0.0, 10)];
        let users = [d(0.0, 10)];
        let input = SplitInput {
            kv_bytes: 100,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 0,
            items: &items,
            users: &users,
        };
        let s = split(&input).expect("split");
        assert_eq!((s.pool, s.users, s.engine_bytes), (vec![0], vec![], 90));
    }

    #[test]
    fn stops_at_the_first_object_that_does_not_fit() {
        let items = [d(0.3, 10), d(0.2, 50), d(0.1, 5)];
        let input = SplitInput {
            kv_bytes: 40,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 0,
            items: &items,
            users: &[],
        };
        let s = split(&input).expect("split");
        assert_eq!(s.pool, vec![0]);
        assert_eq!(s.threshold, 0.2);
    }

    /// A pool that keeps a token in a quarter of the bytes makes an item worth four times
    /// as much per byte: it now beats a user that beat it token for token.
    #[test]
    fn a_smaller_pool_token_is_worth_more_per_byte() {
        let (items, users) = ([d(0.06, 10)], [d(0.1, 10)]);
        let input = |pool_token_bytes| SplitInput {
            kv_bytes: 12 * 4,
            token_bytes: 4,
            pool_token_bytes,
            working_tokens: 0,
            items: &items,
            users: &users,
        };
        let full = split(&input(4)).expect("split");
        assert_eq!((full.pool, full.users), (vec![], vec![0]));
        let small = split(&input(1)).expect("split");
        assert_eq!((small.pool, small.users), (vec![0], vec![]));
        assert_eq!((small.pool_bytes, small.engine_bytes), (10, 38));
    }

    #[test]
    fn refuses_a_budget_below_the_working_set() {
        let input = SplitInput {
            kv_bytes: 10,
            token_bytes: 1,
            pool_token_bytes: 1,
            working_tokens: 11,
            items: &[],
            users: &[],
        };
        assert!(matches!(
            split(&input),
            Err(SplitError::TooSmall { need: 11, .. })
        ));
        let zero = SplitInput {
            token_bytes: 0,
            pool_token_bytes: 0,
            ..input
        };
        assert_eq!(split(&zero), Err(SplitError::NoTokenBytes));
    }
}
