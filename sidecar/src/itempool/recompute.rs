//! Serve-time recovery for the pooled layout (`--rank-pool-recompute SPEC`, the `/v1/rank`
//! field `pool_recompute`, `PUT /admin/rank-pool-recompute`): which pooled item tokens the
//! engine computes again in context, and where pooled K sits in RoPE position space.
//!
//! A pooled item's K/V was computed alone (BAT §4.2); what it misses is its context. vLLM's
//! connector contract lets external KV be only a leading run of the prompt, so nothing inside
//! that run can be recomputed in place (CacheBlend and EPIC patch the engine's attention for
//! that). What a connector can do:
//! - `link:k=N` (EPIC's LegoLink, moved out of place): the first N tokens of each pooled item
//!   (its label first) are sent again right after the pooled run and computed there in
//!   context, where every later token sees them. N tokens per pooled item are computed.
//! - `pos=true`: each pooled segment's K is re-rotated to its true position in the prompt (the
//!   connector's segment `pos`), so the pooled run reads like an item-first prompt with a
//!   block mask (Block-Attention's layout) instead of every item at one shared start. No
//!   token is computed.
//! - `none`: the pooled run as filled, at the shared start position.
//!
//! Spelling: `METHOD[:key=value...]`, e.g. `none`, `none:pos=true`, `link:k=2`,
//! `link:k=1:pos=true`. Parsed once (flag, admin, request) into [`RecomputeSpec`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most link tokens per pooled item: beyond this the pool saves little.
pub const MAX_LINK: usize = 64;

/// What is recomputed of each pooled item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    #[default]
    None,
    /// The first `k` tokens of each pooled item, again after the pooled run.
    Link { k: usize },
}

/// One recompute setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecomputeSpec {
    pub method: Method,
    /// Pooled K re-rotated to the item's true position (else the shared start, 0).
    pub true_positions: bool,
}

/// A spec that cannot be used, with why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "pool recompute '{spec}': {why} (expected none, link:k=N with 1 <= N <= {MAX_LINK}, each optionally with :pos=true|shared)"
)]
pub struct BadSpec {
    pub spec: String,
    pub why: String,
}

impl RecomputeSpec {
    /// The tokens sent again after the pooled run, in order: for each pooled item (label +
    /// item tokens, in prompt order) its first k.
    pub fn link_tokens(&self, pooled: &[&[u32]]) -> Vec<u32> {
        match self.method {
            Method::None => Vec::new(),
            Method::Link { k } => pooled
                .iter()
                .flat_map(|t| &t[..k.min(t.len())])
                .copied()
                .collect(),
        }
    }

    /// Tokens sent again for a pooled segment of `len` tokens (label included).
    pub fn link_count(&self, len: usize) -> usize {
        match self.method {
            Method::None => 0,
            Method::Link { k } => k.min(len),
        }
    }

    /// The RoPE position of a pooled segment starting at prompt token `start`.
    pub fn segment_pos(&self, start: usize) -> usize {
        if self.true_positions { start } else { 0 }
    }
}

impl FromStr for RecomputeSpec {
    type Err = BadSpec;

    fn from_str(s: &str) -> Result<Self, BadSpec> {
        let bad = |why: String| BadSpec {
            spec: s.to_string(),
            why,
        };
        let mut parts = s.trim().split(':');
        let name = parts.next().unwrap_or_default();
        let mut k = None;
        let mut true_positions = false;
        for kv in parts {
            let (key, value) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("'{kv}' is not key=value")))?;
            match key {
                "k" => {
                    let n: usize = value
                        .parse()
                        .map_err(|_| bad(format!("k '{value}' is not a whole number")))?;
                    if !(1..=MAX_LINK).contains(&n) {
                        return Err(bad(format!("k must be 1 to {MAX_LINK}")));
                    }
                    k = Some(n);
                }
                "pos" => {
                    true_positions = match value {
                        "true" => true,
                        "shared" => false,
                        _ => return Err(bad(format!("pos '{value}' is neither true nor shared"))),
                    }
                }
                _ => return Err(bad(format!("unknown key '{key}'"))),
            }
        }
        let method = match (name, k) {
            ("none", None) => Method::None,
            ("none", Some(_)) => return Err(bad("none takes no k".into())),
            ("link", Some(k)) => Method::Link { k },
            ("link", None) => return Err(bad("link needs k=N".into())),
            (other, _) => return Err(bad(format!("unknown method '{other}'"))),
        };
        Ok(Self {
            method,
            true_positions,
        })
    }
}

impl fmt::Display for RecomputeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.method {
            Method::None => write!(f, "none")?,
            Method::Link { k } => write!(f, "link:k={k}")?,
        }
        if self.true_positions {
            write!(f, ":pos=true")?;
        }
        Ok(())
    }
}

impl Serialize for RecomputeSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RecomputeSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[path = "recompute_tests.rs"]
mod tests;
