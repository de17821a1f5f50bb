//! vLLM's KV cache events, decoded from the ZMQ wire format into typed values, and the
//! sequence-number bookkeeping that tells a consumer when it has lost events.
//!
//! Wire format (vLLM 0.32, `ZmqEventPublisher`): three frames — topic, an 8-byte big-endian
//! sequence number, and a msgpack `EventBatch` encoded as an array `[ts, [events...],
//! dp_rank?]`. Each event is a msgpack map tagged by `"type"`: `BlockStored` (`block_hashes`,
//! `parent_block_hash`, `token_ids`, `block_size`, ...), `BlockRemoved` (`block_hashes`),
//! `AllBlocksCleared`. Hashes are u64 (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`, the default) or
//! raw bytes; bytes are folded to the same u64 vLLM's int mode would give (low 64 bits, big
//! endian), so the mirror is keyed identically either way.

use rmpv::Value;

/// A KV block hash as the engine publishes it.
pub type BlockHash = u64;

/// One cache event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Full blocks entered the prefix cache, chained: `block_hashes[0]`'s parent is
    /// `parent`, each next block's parent is the one before it. `token_ids` holds the
    /// tokens of all of them, `block_size` per block.
    BlockStored {
        block_hashes: Vec<BlockHash>,
        parent: Option<BlockHash>,
        token_ids: Vec<u32>,
        block_size: u32,
    },
    /// Blocks left the prefix cache (evicted, or hash reset).
    BlockRemoved { block_hashes: Vec<BlockHash> },
    /// The whole prefix cache was reset.
    AllBlocksCleared,
}

/// One published batch: the engine's sequence number and its events.
#[derive(Debug, Clone, PartialEq)]
pub struct KvBatch {
    pub seq: u64,
    pub ts: f64,
    pub events: Vec<KvEvent>,
}

/// Why a message could not be decoded. The subscriber logs and counts these; it never stops.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("expected 3 frames (topic, seq, payload), got {0}")]
    Frames(usize),
    #[error("sequence frame must be 8 bytes, got {0}")]
    SeqLen(usize),
    #[error("payload is not msgpack")]
    Msgpack(#[source] rmpv::decode::Error),
    #[error("malformed event batch: {0}")]
    Shape(String),
}

fn shape(msg: impl Into<String>) -> DecodeError {
    DecodeError::Shape(msg.into())
}

/// Decodes one multipart message (`[topic, seq, payload]`).
pub fn decode_frames<B: AsRef<[u8]>>(frames: &[B]) -> Result<KvBatch, DecodeError> {
    if frames.len() != 3 {
        return Err(DecodeError::Frames(frames.len()));
    }
    let seq = decode_seq(frames[1].as_ref())?;
    let (ts, events) = decode_payload(frames[2].as_ref())?;
    Ok(KvBatch { seq, ts, events })
}

/// The 8-byte big-endian sequence frame.
pub fn decode_seq(frame: &[u8]) -> Result<u64, DecodeError> {
    let bytes: [u8; 8] = frame
        .try_into()
        .map_err(|_| DecodeError::SeqLen(frame.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// The msgpack `EventBatch` payload: `(ts, events)`. Unknown event types are skipped (a
/// newer vLLM may add some); a known type with a bad field is an error for the whole batch.
pub fn decode_payload(mut payload: &[u8]) -> Result<(f64, Vec<KvEvent>), DecodeError> {
    let value = rmpv::decode::read_value(&mut payload).map_err(DecodeError::Msgpack)?;
    let Value::Array(items) = value else {
        return Err(shape("batch is not an array"));
    };
    let ts = items.first().and_then(Value::as_f64).unwrap_or_default();
    let Some(Value::Array(raw)) = items.get(1) else {
        return Err(shape("batch has no event list"));
    };
    let mut events = Vec::with_capacity(raw.len());
    for ev in raw {
        if let Some(ev) = decode_event(ev)? {
            events.push(ev);
        }
    }
    Ok((ts, events))
}

fn field<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn decode_event(ev: &Value) -> Result<Option<KvEvent>, DecodeError> {
    // msgspec tagged structs: a map with "type"; array_like structs would be [tag, ...].
    let Value::Map(map) = ev else {
        return Err(shape("event is not a map"));
    };
    let kind = field(map, "type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Ok(Some(match kind {
        "BlockStored" => {
            let block_hashes = hashes(field(map, "block_hashes"), "block_hashes")?;
            let parent = match field(map, "parent_block_hash") {
                None | Some(Value::Nil) => None,
                Some(v) => Some(hash(v).ok_or_else(|| shape("bad parent_block_hash"))?),
            };
            let token_ids = match field(map, "token_ids") {
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or_else(|| shape("bad token_ids"))?,
                _ => return Err(shape("BlockStored without token_ids")),
            };
            let block_size = field(map, "block_size")
                .and_then(Value::as_u64)
                .and_then(|b| u32::try_from(b).ok())
                .filter(|&b| b > 0)
                .ok_or_else(|| shape("bad block_size"))?;
            KvEvent::BlockStored {
                block_hashes,
                parent,
                token_ids,
                block_size,
            }
        }
        "BlockRemoved" => KvEvent::BlockRemoved {
            block_hashes: hashes(field(map, "block_hashes"), "block_hashes")?,
        },
        "AllBlocksCleared" => KvEvent::AllBlocksCleared,
        _ => return Ok(None),
    }))
}

fn hashes(v: Option<&Value>, name: &str) -> Result<Vec<BlockHash>, DecodeError> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .map(hash)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| shape(format!("bad {name}"))),
        _ => Err(shape(format!("missing {name}"))),
    }
}

/// A hash as u64: ints as they are, bytes folded like vLLM's int mode (low 64 bits, BE).
fn hash(v: &Value) -> Option<BlockHash> {
    match v {
        Value::Integer(i) => i.as_u64().or_else(|| i.as_i64().map(|x| x as u64)),
        Value::Binary(b) => {
            let tail = &b[b.len().saturating_sub(8)..];
            Some(tail.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
        }
        _ => None,
    }
}

/// What the next sequence number says about the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// The first batch seen, or exactly the expected next one.
    InOrder,
    /// Batches `expected..got` were lost (slow subscriber, dropped frames).
    Gap { expected: u64, got: u64 },
    /// The sequence went back: the engine restarted (its counter starts at 0 again), so
    /// every cached block it had is gone.
    Restart { last: u64, got: u64 },
    /// The batch just applied, again: skip it.
    Duplicate,
}

/// Tracks the publisher's sequence numbers.
#[derive(Debug, Default, Clone)]
pub struct SeqTracker {
    last: Option<u64>,
}

impl SeqTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The last sequence number applied.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// Classifies `seq` and records it (a duplicate is not recorded).
    pub fn check(&mut self, seq: u64) -> SeqCheck {
        let verdict = match self.last {
            None => SeqCheck::InOrder,
            // checked_add: a frame claiming seq u64::MAX must not overflow (found by
            // adapters/tests/fuzz.rs: it panicked the subscriber in debug builds).
            Some(last) if last.checked_add(1) == Some(seq) => SeqCheck::InOrder,
            Some(last) if seq > last => SeqCheck::Gap {
                expected: last + 1,
                got: seq,
            },
            Some(last) if seq == last => SeqCheck::Duplicate,
            // ZMQ does not reorder one connection, and vLLM numbers batches from 0 per
            // publisher: going back means a new engine process, not a late frame.
            Some(last) => SeqCheck::Restart { last, got: seq },
        };
        if verdict != SeqCheck::Duplicate {
            self.last = Some(seq);
        }
        verdict
    }

    /// Forgets the stream (after a resync from scratch).
    pub fn reset(&mut self) {
        self.last = None;
    }
}
