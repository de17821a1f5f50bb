//! CSR trie of valid item ids (semantic-id tuples), the constraint the beam
//! top-k kernel reads.
//!
//! Node `n`'s children are `child_token[row_ptr[n]..row_ptr[n+1]]` (sorted
//! ascending, so the kernel can binary-search a token) and the matching
//! `child_node` entries. Node 0 is the root. A beam sits on a node; its
//! allowed next tokens are that node's children.

use crate::error::{KernelError, Result};
use std::collections::BTreeMap;

/// Compressed-sparse-row trie, exactly the three device arrays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trie {
    /// `[num_nodes + 1]` offsets into the child arrays.
    pub row_ptr: Vec<i32>,
    /// `[nnz]` token of each edge, ascending within a row.
    pub child_token: Vec<i32>,
    /// `[nnz]` node reached through each edge.
    pub child_node: Vec<i32>,
}

impl Trie {
    /// Build from item ids (token tuples). Nodes are numbered breadth-first.
    pub fn from_items(items: &[Vec<u32>]) -> Self {
        // Map-based construction first; BTreeMap keeps children sorted.
        let mut kids: Vec<BTreeMap<u32, usize>> = vec![BTreeMap::new()];
        for item in items {
            let mut n = 0;
            for &t in item {
                let next = kids.len();
                let e = *kids[n].entry(t).or_insert(next);
                if e == next {
                    kids.push(BTreeMap::new());
                }
                n = e;
            }
        }
        // Renumber breadth-first so nodes of one level are contiguous.
        let mut order = vec![0usize];
        let mut new_id = vec![usize::MAX; kids.len()];
        new_id[0] = 0;
        let mut i = 0;
        while i < order.len() {
            for &c in kids[order[i]].values() {
                new_id[c] = order.len();
                order.push(c);
            }
            i += 1;
        }
        let mut t = Trie {
            row_ptr: vec![0],
            ..Default::default()
        };
        for &old in &order {
            for (&tok, &c) in &kids[old] {
                t.child_token.push(tok as i32);
                t.child_node.push(new_id[c] as i32);
            }
            t.row_ptr.push(t.child_token.len() as i32);
        }
        t
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.row_ptr.len().saturating_sub(1)
    }

    /// `(tokens, nodes)` of node `n`'s children; empty for invalid `n`.
    pub fn children(&self, n: i32) -> (&[i32], &[i32]) {
        if n < 0 || n as usize >= self.num_nodes() {
            return (&[], &[]);
        }
        let (a, b) = (
            self.row_ptr[n as usize] as usize,
            self.row_ptr[n as usize + 1] as usize,
        );
        (&self.child_token[a..b], &self.child_node[a..b])
    }

    /// The node `code` leads to from the root, if it is in the trie.
    pub fn walk(&self, code: &[u32]) -> Option<i32> {
        let mut node = 0i32;
        for &t in code {
            let (toks, kids) = self.children(node);
            node = kids[toks.binary_search(&(t as i32)).ok()?];
        }
        Some(node)
    }

    /// Each node's parent (-1 for the root).
    pub fn parents(&self) -> Vec<i32> {
        let mut parent = vec![-1i32; self.num_nodes()];
        for node in 0..self.num_nodes() as i32 {
            self.children(node)
                .1
                .iter()
                .for_each(|&k| parent[k as usize] = node);
        }
        parent
    }

    /// Check CSR well-formedness and that every token is below `vocab`.
    pub fn validate(&self, vocab: usize) -> Result<()> {
        if self.row_ptr.first() != Some(&0) {
            return Err(KernelError::invalid("trie_row_ptr", "must start at 0"));
        }
        let nnz = self.child_token.len();
        if self.child_node.len() != nnz || *self.row_ptr.last().unwrap_or(&0) as usize != nnz {
            return Err(KernelError::invalid(
                "trie",
                "row_ptr/child arrays disagree",
            ));
        }
        let nodes = self.num_nodes() as i64;
        for n in 0..self.num_nodes() {
            let (a, b) = (self.row_ptr[n], self.row_ptr[n + 1]);
            if b < a {
                return Err(KernelError::invalid("trie_row_ptr", "not monotone"));
            }
            let row = &self.child_token[a as usize..b as usize];
            if row.windows(2).any(|w| w[0] >= w[1]) {
                return Err(KernelError::invalid(
                    "trie_child_token",
                    "row not strictly ascending",
                ));
            }
        }
        for (at, &t) in self.child_token.iter().enumerate() {
            if t < 0 || t as usize >= vocab {
                let (value, bound) = (t as i64, vocab as i64);
                return Err(KernelError::IndexOutOfRange {
                    name: "trie_child_token",
                    at,
                    value,
                    bound,
                });
            }
        }
        for (at, &c) in self.child_node.iter().enumerate() {
            if c < 0 || c as i64 >= nodes {
                let value = c as i64;
                return Err(KernelError::IndexOutOfRange {
                    name: "trie_child_node",
                    at,
                    value,
                    bound: nodes,
                });
            }
        }
        Ok(())
    }
}
