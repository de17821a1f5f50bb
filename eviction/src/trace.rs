//! Trace loading and writing. Mooncake format: one JSON object per line,
//! `{"timestamp","input_length","output_length","hash_ids":[...]}`.
//!
//! GR traces (written by `recache bench gr --trace-out`) add an optional
//! `segments` list that splits `hash_ids` into parts, each with what it holds:
//! `{"len": n, "kind": "user"|"item"|"items"|"other", "entity": id?, "root": bool?}`.
//! A segment with `"root": true` starts a new chain from the root of the
//! prefix tree (a pooled item is computed alone, so it is its own one-block
//! chain); otherwise it continues the previous segment's chain. The first
//! segment always starts at the root. Lens sum to `hash_ids.len()`. Without
//! `segments` the request is one chain (plain Mooncake), so every reader that
//! ignores the field still reads a GR trace.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BlockId;
use crate::policy::EntityCtx;

/// What a segment of a GR request holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentKind {
    /// A user's profile (the user-as-prefix part); `entity` is the user id.
    User,
    /// One pooled item, computed alone; `entity` is the item id.
    Item,
    /// A run of candidate items inside a prompt (not one entity).
    Items,
    /// Anything else: the instruction, the user after an item-first prefix.
    Other,
}

/// One part of a request's blocks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Segment {
    pub len: usize,
    pub kind: SegmentKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<u64>,
    /// Starts a new chain from the root (else continues the previous one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root: bool,
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Request {
    #[serde(default)]
    pub timestamp: Option<u64>,
    #[serde(default)]
    pub input_length: Option<u64>,
    #[serde(default)]
    pub output_length: Option<u64>,
    pub hash_ids: Vec<BlockId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<Segment>>,
}

impl Request {
    /// The request's chains: split at every root segment (one chain without segments).
    /// Returns (start, end) ranges into `hash_ids`.
    pub fn chains(&self) -> Vec<(usize, usize)> {
        let Some(segs) = &self.segments else {
            return vec![(0, self.hash_ids.len())];
        };
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut at = 0;
        for (i, s) in segs.iter().enumerate() {
            match out.last_mut() {
                Some(last) if !s.root && i > 0 => last.1 = at + s.len,
                _ => out.push((at, at + s.len)),
            }
            at += s.len;
        }
        out.retain(|(a, b)| b > a);
        out
    }

    /// Whether the request puts the user first: its first user or pooled-item segment
    /// decides (None without segments, or with neither kind).
    pub fn user_first(&self) -> Option<bool> {
        self.segments.as_ref()?.iter().find_map(|s| match s.kind {
            SegmentKind::User => Some(true),
            SegmentKind::Item => Some(false),
            _ => None,
        })
    }

    /// Each block's entity context (empty without segments): feature input for GR traffic.
    pub fn entities(&self) -> Vec<EntityCtx> {
        let Some(segs) = &self.segments else {
            return Vec::new();
        };
        let user_first = self.user_first();
        segs.iter()
            .flat_map(|s| {
                (0..s.len).map(move |i| EntityCtx {
                    kind: s.kind,
                    entity: s.entity,
                    user_first,
                    seg_pos: i as u32,
                    seg_len: s.len as u32,
                })
            })
            .collect()
    }

    /// The segment of each block (None without segments).
    pub fn block_segments(&self) -> Option<Vec<&Segment>> {
        let segs = self.segments.as_ref()?;
        Some(
            segs.iter()
                .flat_map(|s| std::iter::repeat_n(s, s.len))
                .collect(),
        )
    }
}

/// Tokens per block of a trace, for the predictor's token columns: the power of two nearest
/// the median of `input_length / blocks` over the requests that have an input length and no
/// pooled items (a pooled item is one block of any length); 512 (Mooncake's) when none does.
pub fn block_tokens(requests: &[Request]) -> u32 {
    let mut per: Vec<f64> = requests
        .iter()
        .filter(|r| !r.hash_ids.is_empty())
        .filter(|r| {
            r.segments
                .as_ref()
                .is_none_or(|s| s.iter().all(|s| s.kind != SegmentKind::Item))
        })
        .filter_map(|r| Some(r.input_length? as f64 / r.hash_ids.len() as f64))
        .collect();
    if per.is_empty() {
        return 512;
    }
    per.sort_by(f64::total_cmp);
    let median = per[per.len() / 2].max(1.0);
    let exp = median.log2().round().clamp(0.0, 20.0) as u32;
    1 << exp
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a mooncake request")]
    Parse {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}:{line}: segment lengths sum to {sum}, but the request has {blocks} hash_ids")]
    Segments {
        path: PathBuf,
        line: usize,
        sum: usize,
        blocks: usize,
    },
    #[error("trace {0} has no requests")]
    Empty(PathBuf),
}

/// Reads a Mooncake JSONL trace (GR segments included); blank lines are
/// skipped, a bad line is an error naming its (1-based) line number.
pub fn load_mooncake(path: &Path) -> Result<Vec<Request>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = serde_json::from_str(&line).map_err(|source| TraceError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            source,
        })?;
        if let Some(segs) = &req.segments {
            let sum = segs.iter().fold(0usize, |a, s| a.saturating_add(s.len));
            if sum != req.hash_ids.len() {
                return Err(TraceError::Segments {
                    path: path.to_path_buf(),
                    line: i + 1,
                    sum,
                    blocks: req.hash_ids.len(),
                });
            }
        }
        out.push(req);
    }
    if out.is_empty() {
        return Err(TraceError::Empty(path.to_path_buf()));
    }
    Ok(out)
}

/// One trace line (no newline), as [`load_mooncake`] reads it back.
pub fn to_line(req: &Request) -> String {
    // A struct of integers, strings and bools always serialises.
    serde_json::to_string(req).unwrap_or_default()
}
