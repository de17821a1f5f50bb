//! The eviction-order file recache publishes for the engine-side shim: which cached blocks
//! the engine should evict first, by block hash, stamped with when it was made.
//!
//! One writer (recache) replaces the file atomically (write a temp file, rename), any number
//! of readers (the shim in each engine process) re-read it when it changes. A reader that
//! finds it missing, torn, or older than its age limit ignores it and the engine keeps its
//! native order, so the engine never waits on recache. Layout, little endian:
//!
//! ```text
//! magic "RCORDER1" | publish_unix_ms u64 | generation u64 | seq u64 | count u64
//! | count x block hash u64 (evict-first first) | fnv1a-64 of everything before u64
//! ```

/// File magic; the digit is the format version.
pub const MAGIC: &[u8; 8] = b"RCORDER1";
const HEADER: usize = 8 + 8 * 4;

/// A decoded order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Order {
    /// Unix milliseconds when recache made it (the reader's staleness check).
    pub publish_unix_ms: u64,
    /// The policy generation it came from (changes on an admin hot-swap).
    pub generation: u64,
    /// Publish counter of this recache process.
    pub seq: u64,
    /// Block hashes, the one to evict first first.
    pub victims: Vec<u64>,
}

/// Why bytes are not a valid order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("order file too short ({0} bytes)")]
    Short(usize),
    #[error("not an order file (bad magic or version)")]
    Magic,
    #[error("order file length {got} does not match its count (want {want})")]
    Length { got: usize, want: usize },
    #[error("order file checksum mismatch (torn or corrupt)")]
    Checksum,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    recache_hash::fnv1a(bytes.iter().copied())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Order {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 8 * self.victims.len() + 8);
        out.extend_from_slice(MAGIC);
        for v in [
            self.publish_unix_ms,
            self.generation,
            self.seq,
            self.victims.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for h in &self.victims {
            out.extend_from_slice(&h.to_le_bytes());
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parses and verifies bytes written by [`Order::encode`].
    pub fn decode(b: &[u8]) -> Result<Self, OrderError> {
        if b.len() < HEADER + 8 {
            return Err(OrderError::Short(b.len()));
        }
        if &b[..8] != MAGIC {
            return Err(OrderError::Magic);
        }
        let count = u64_at(b, 32);
        let want = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(8))
            .and_then(|c| c.checked_add(HEADER + 8))
            .ok_or(OrderError::Length {
                got: b.len(),
                want: usize::MAX,
            })?;
        if b.len() != want {
            return Err(OrderError::Length { got: b.len(), want });
        }
        if fnv1a(&b[..want - 8]) != u64_at(b, want - 8) {
            return Err(OrderError::Checksum);
        }
        Ok(Self {
            publish_unix_ms: u64_at(b, 8),
            generation: u64_at(b, 16),
            seq: u64_at(b, 24),
            victims: (0..count as usize)
                .map(|i| u64_at(b, HEADER + 8 * i))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let o = Order {
            publish_unix_ms: 1_700_000_000_000,
            generation: 3,
            seq: 9,
            victims: vec![5, u64::MAX, 0],
        };
        let b = o.encode();
        assert_eq!(Order::decode(&b), Ok(o));
        assert_eq!(Order::decode(&b[..10]), Err(OrderError::Short(10)));
        let mut bad = b.clone();
        bad[45] ^= 1;
        assert_eq!(Order::decode(&bad), Err(OrderError::Checksum));
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(Order::decode(&bad), Err(OrderError::Magic));
        assert!(matches!(
            Order::decode(&b[..b.len() - 8]),
            Err(OrderError::Length { .. })
        ));
    }
}
