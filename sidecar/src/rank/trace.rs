//! GR block traces: what each ranking prompt asks of the engine's cache, written as the
//! Mooncake JSONL `recache sim --trace` reads, with GR `segments` (`recache_eviction::trace`),
//! so eviction policies can be compared offline on the traffic recache actually rewrote.
//!
//! A prompt's blocks are the engine loop's chain ids (`recache_hash::blocks`) of its full
//! `block`-token blocks. Each block is labelled by the part of the prompt that holds it whole:
//! the user's profile leading a user-first prompt (`user`, entity = user id), the candidate
//! items (`items`), or `other` (the instruction, the user after an item-first prompt's items,
//! and every block straddling two parts: their content is unique to this request). An item-first prompt's leading items that the item KV pool supplies are not the
//! engine's blocks: each is written as its own one-block chain (`item`, entity = item id,
//! `root`), the unit the pool keeps, and the rest of the prompt as a new chain of the blocks
//! that start after them. A request's `cache_salt` changes every engine block's id (the engine
//! shares blocks between equal salts only), not a pooled item's. Entity ids are the request's ids when they are integers, else a
//! hash of them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use recache_eviction::trace::{Request, Segment, SegmentKind, to_line};

use super::select::PrefixKind;
use recache_hash::blocks;

/// A ranking prompt's shape, as the trace needs it.
pub struct PromptShape<'a> {
    pub kind: PrefixKind,
    pub tokens: &'a [u32],
    /// Tokens of the user's profile.
    pub user_len: usize,
    /// Tokens of each item in prompt order, its label included.
    pub item_lens: &'a [usize],
    /// Item ids in prompt order.
    pub item_ids: &'a [&'a str],
    /// Leading items the item pool supplies (item-first prompts only).
    pub pooled: usize,
    /// Tokens the pool recompute setting sends again after the pooled items (counted with
    /// the items region).
    pub link: usize,
    pub user_id: &'a str,
    /// The request's `cache_salt`: the engine shares blocks only between equal salts.
    pub salt: Option<&'a str>,
}

/// An entity id: the id itself when it is an integer, else a hash of it.
pub fn entity(id: &str) -> u64 {
    id.parse()
        .unwrap_or_else(|_| recache_hash::finalize(recache_hash::fnv1a(id.bytes())))
}

/// The id of a pooled item's block: the same for every prompt holding the item.
fn pooled_block(item: u64) -> u64 {
    blocks::chain(
        blocks::ROOT ^ 0x706f_6f6c,
        &[item as u32, (item >> 32) as u32],
    )
}

/// Appends `n` blocks of (kind, entity) to `segs`, merging with the last segment when it is
/// the same part and no new chain starts.
fn push(segs: &mut Vec<Segment>, kind: SegmentKind, entity: Option<u64>, root: bool, n: usize) {
    match segs.last_mut() {
        Some(last) if !root && last.kind == kind && last.entity == entity => last.len += n,
        _ => segs.push(Segment {
            len: n,
            kind,
            entity,
            root,
        }),
    }
}

/// The trace line of one prompt arriving at `timestamp_ms`.
pub fn request(p: &PromptShape<'_>, block: usize, timestamp_ms: u64) -> Request {
    let block = block.max(1);
    let items_len: usize = p.item_lens.iter().sum::<usize>() + p.link;
    // Parts in prompt order: (kind, entity, start, end) in tokens.
    let user = (SegmentKind::User, Some(entity(p.user_id)));
    let items = (SegmentKind::Items, None);
    let (first, second, first_len) = match p.kind {
        PrefixKind::User => (user, items, p.user_len),
        PrefixKind::Item => (items, (SegmentKind::Other, None), items_len),
    };
    let second_end = p.user_len + items_len;
    let part_of = |start: usize, end: usize| {
        if end <= first_len {
            first
        } else if start >= first_len && end <= second_end {
            second
        } else {
            (SegmentKind::Other, None)
        }
    };
    let pooled = if p.kind == PrefixKind::Item {
        p.pooled.min(p.item_lens.len())
    } else {
        0
    };
    let pooled_tokens: usize = p.item_lens[..pooled].iter().sum();
    let mut hash_ids = Vec::new();
    let mut segs = Vec::new();
    for id in &p.item_ids[..pooled] {
        let e = entity(id);
        hash_ids.push(pooled_block(e));
        push(&mut segs, SegmentKind::Item, Some(e), true, 1);
    }
    let mut new_chain = pooled > 0;
    let salt = p.salt.map(|s| recache_hash::fnv1a(s.bytes()));
    for (i, id) in blocks::prompt_ids(p.tokens, block).into_iter().enumerate() {
        let start = i * block;
        if start < pooled_tokens {
            continue; // supplied by the pool, written above
        }
        let (kind, e) = part_of(start, start + block);
        hash_ids.push(salt.map_or(id, |s| recache_hash::mix64(id ^ s)));
        push(&mut segs, kind, e, new_chain, 1);
        new_chain = false;
    }
    Request {
        timestamp: Some(timestamp_ms),
        input_length: Some(p.tokens.len() as u64),
        output_length: Some(1),
        hash_ids,
        segments: Some(segs),
    }
}

/// Writes trace lines to a file as requests are prepared (`--rank-trace-out`).
pub struct TraceSink {
    path: PathBuf,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    block: usize,
    start: Instant,
}

impl TraceSink {
    pub fn create(path: &Path, block: usize) -> std::io::Result<Self> {
        let file = std::fs::File::create(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            out: Mutex::new(std::io::BufWriter::new(file)),
            block,
            start: Instant::now(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokens per traced block.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Milliseconds since the sink opened: the timestamp of a line written now.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Appends `p`, stamped now.
    pub fn record(&self, p: &PromptShape<'_>) {
        self.write(&request(p, self.block, self.now_ms()));
    }

    /// Appends one line. A write error is logged, never a request's failure: the trace is a
    /// by-product of serving.
    pub fn write(&self, req: &Request) {
        let line = to_line(req);
        let mut out = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Err(e) = writeln!(out, "{line}") {
            tracing::warn!(path = %self.path.display(), error = %e, "rank trace: write failed");
        }
    }

    pub fn flush(&self) -> std::io::Result<()> {
        match self.out.lock() {
            Ok(mut g) => g.flush(),
            Err(poisoned) => poisoned.into_inner().flush(),
        }
    }
}

impl Drop for TraceSink {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests;
