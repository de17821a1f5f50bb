//! The retrieval index file (`recache items index --out INDEX`, read by `recache serve
//! --retrieve-index INDEX`): every catalog item's semantic ID as vocabulary token ids, and the
//! prefix trie the constrained beam search walks.
//!
//! The file is JSON so that it can be inspected and diffed; the trie is rebuilt on load (it is
//! a pure function of the codes), which also re-checks what a hand-edited file could break:
//! two items with one code, a code that is a prefix of another, a node with more children
//! than one engine scoring request can ask for.

use std::collections::HashMap;
use std::path::Path;

use recache_kernels::trie::Trie;
use serde::{Deserialize, Serialize};

/// Version of the file layout; a file of another version is refused with both numbers.
pub const FORMAT: u32 = 1;

/// Most children one trie node may have: vLLM returns log-probabilities for at most 128
/// `logprob_token_ids` per request, and one request scores one beam's next tokens.
pub const MAX_CHILDREN: usize = 128;

/// One catalog item and its code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexedItem {
    /// The item's id as the catalog names it (the key in the items file).
    pub id: String,
    /// Vocabulary token ids, `levels` of them, plus one disambiguation token when the first
    /// `levels` collide with another item's.
    pub code: Vec<u32>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexFile {
    pub format: u32,
    /// How the codes were made (free text for people; not interpreted).
    pub method: String,
    /// Code levels before disambiguation.
    pub levels: usize,
    /// Codes per level.
    pub codebook: usize,
    /// Seed the codes were made with.
    pub seed: u64,
    /// Level `l`'s code `c` is token `token_base + l * codebook + c`; disambiguation token `d`
    /// is `token_base + levels * codebook + d`.
    pub token_base: u32,
    pub items: Vec<IndexedItem>,
}

/// Why an index cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a retrieval index: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("retrieval index {0}")]
    Invalid(String),
}

/// A loaded index: the items, their trie, and which item each leaf node is.
#[derive(Debug)]
pub struct RetrieveIndex {
    pub file: IndexFile,
    pub trie: Trie,
    /// Trie node -> item position in `file.items`, for the leaves.
    pub leaf_item: HashMap<i32, usize>,
    /// Item id -> its position.
    pub by_id: HashMap<String, usize>,
    /// Items in each node's subtree (for pruning a subtree whose items are all excluded).
    pub subtree_items: Vec<u32>,
    /// Parent of each node (-1 for the root).
    pub parent: Vec<i32>,
    /// The highest token id any code uses (checked against the served model).
    pub highest_token: u32,
    /// The deepest code's length.
    pub depth: usize,
}

impl RetrieveIndex {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, IndexError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| IndexError::Io {
            path: p.clone(),
            source,
        })?;
        let file: IndexFile =
            serde_json::from_str(&text).map_err(|source| IndexError::Parse { path: p, source })?;
        Self::new(file)
    }

    /// Builds the trie and the lookups, refusing a file that cannot be searched correctly.
    pub fn new(file: IndexFile) -> Result<Self, IndexError> {
        let bad = |m: String| Err(IndexError::Invalid(m));
        if file.format != FORMAT {
            return bad(format!(
                "has format {}, this recache reads {FORMAT}",
                file.format
            ));
        }
        if file.items.is_empty() {
            return bad("has no items".into());
        }
        let mut by_id = HashMap::with_capacity(file.items.len());
        for (i, it) in file.items.iter().enumerate() {
            if it.code.is_empty() {
                return bad(format!("item {:?} has an empty code", it.id));
            }
            if by_id.insert(it.id.clone(), i).is_some() {
                return bad(format!("lists item {:?} twice", it.id));
            }
        }
        let codes: Vec<Vec<u32>> = file.items.iter().map(|it| it.code.clone()).collect();
        let trie = Trie::from_items(&codes);
        let n = trie.num_nodes();
        let widest = (0..n as i32).map(|node| trie.children(node).0.len()).max();
        if let Some(w) = widest.filter(|&w| w > MAX_CHILDREN) {
            return bad(format!(
                "has a node with {w} children; one engine request scores at most \
                 {MAX_CHILDREN} (use a smaller --codebook)"
            ));
        }
        let parent = trie.parents();
        let mut leaf_item = HashMap::with_capacity(file.items.len());
        let mut subtree_items = vec![0u32; n];
        for (i, it) in file.items.iter().enumerate() {
            let node = trie.walk(&it.code).ok_or_else(|| {
                IndexError::Invalid(format!("item {:?}: code not in its own trie", it.id))
            })?;
            if !trie.children(node).0.is_empty() {
                return bad(format!(
                    "item {:?}'s code is a prefix of another item's code",
                    it.id
                ));
            }
            if let Some(other) = leaf_item.insert(node, i) {
                return bad(format!(
                    "items {:?} and {:?} have the same code",
                    file.items[other].id, it.id
                ));
            }
            let mut at = node;
            while at >= 0 {
                subtree_items[at as usize] += 1;
                at = parent[at as usize];
            }
        }
        let highest_token = codes.iter().flatten().copied().max().unwrap_or(0);
        let depth = codes.iter().map(Vec::len).max().unwrap_or(0);
        Ok(Self {
            file,
            trie,
            leaf_item,
            by_id,
            subtree_items,
            parent,
            highest_token,
            depth,
        })
    }

    /// The item a node ends, if it is a leaf.
    pub fn item_at(&self, node: i32) -> Option<&IndexedItem> {
        self.leaf_item.get(&node).map(|&i| &self.file.items[i])
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
