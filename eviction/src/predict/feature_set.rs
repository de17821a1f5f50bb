//! Which feature columns the learned predictor uses: named sets, combined with `+`
//! (`base`, `base+gr`, `gr`, `base+gr+future`), chosen by configuration (a policy parameter
//! such as `laru:features=base+gr`, or `recache sim --features`), never hard-coded.
//!
//! Every row is built with every column ([`ALL`] wide, in the order below); a set picks the
//! columns a model is trained on and reads. Training projects the window onto the set's
//! columns and the trained trees are re-indexed onto full rows
//! ([`super::trees::Ensemble::remap_features`]), so prediction needs no copy.
//!
//! - `base` ([`BASE`] columns): today's 31, per block (inter-access deltas, decayed counters,
//!   depth, tokens, fill, request length, hit length, blocks from the end, conversation gaps,
//!   counts). The default.
//! - `gr` ([`GR`] columns): the block's entity context from a GR trace: segment kind,
//!   user-first flag, position in the segment and from its end, the entity's (user's or
//!   item's) accesses in decayed windows, its last two gaps and its count.
//! - `future` ([`FUTURE`] columns): true-future columns for an upper bound only (the
//!   simulator and `bench predictor` have the trace's future; a server never does): gaps until
//!   this chain's tip and this entity are next accessed.
//! - `age` ([`AGE`] column): the block's idle age when the prediction is made. Without it a
//!   row describes a block at its access and the model predicts the gap from there; with it,
//!   training rows are repeated at idle ages 0, 4, 16, ... (labelled with the time left),
//!   and a block is predicted at decision time from its current age, again each time its
//!   age reaches the next of those steps ([`super::features::next_age_step`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub const BASE: usize = 31;
pub const GR: usize = 12;
pub const FUTURE: usize = 2;
pub const AGE: usize = 1;
/// Width of a full row.
pub const ALL: usize = BASE + GR + FUTURE + AGE;
/// The `age` column's index in a full row.
pub const AGE_COL: usize = BASE + GR + FUTURE;

const NAMES: [(&str, u8); 4] = [("base", 1), ("gr", 2), ("future", 4), ("age", 8)];

/// A set of named feature groups (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FeatureSet(u8);

impl Default for FeatureSet {
    fn default() -> Self {
        Self::BASE
    }
}

impl FeatureSet {
    pub const BASE: Self = Self(1);
    pub const GR: Self = Self(2);
    pub const FUTURE: Self = Self(4);
    pub const AGE: Self = Self(8);

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Indices into a full row, in row order.
    pub fn columns(self) -> Vec<usize> {
        let mut v = Vec::new();
        for (set, range) in [
            (Self::BASE, 0..BASE),
            (Self::GR, BASE..BASE + GR),
            (Self::FUTURE, BASE + GR..AGE_COL),
            (Self::AGE, AGE_COL..ALL),
        ] {
            if self.contains(set) {
                v.extend(range);
            }
        }
        v
    }

    /// Valid group names, for error messages.
    pub fn valid_names() -> String {
        NAMES.map(|n| n.0).join(", ")
    }
}

/// An unknown or empty feature-set name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown feature set {0:?} (groups joined by '+': {valid})", valid = FeatureSet::valid_names())]
pub struct FeatureSetError(pub String);

impl FromStr for FeatureSet {
    type Err = FeatureSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bits = 0;
        for part in s.split('+').map(str::trim) {
            let Some(&(_, b)) = NAMES.iter().find(|(n, _)| *n == part) else {
                return Err(FeatureSetError(s.to_string()));
            };
            bits |= b;
        }
        Ok(Self(bits))
    }
}

impl TryFrom<String> for FeatureSet {
    type Error = FeatureSetError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<FeatureSet> for String {
    fn from(f: FeatureSet) -> Self {
        f.to_string()
    }
}

impl fmt::Display for FeatureSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = NAMES
            .iter()
            .filter(|(_, b)| self.0 & b != 0)
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join("+"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_print_and_pick_columns() {
        let s: FeatureSet = "base+gr".parse().expect("valid");
        assert_eq!(s.to_string(), "base+gr");
        assert_eq!(s.columns().len(), BASE + GR);
        let g: FeatureSet = "gr".parse().expect("valid");
        assert_eq!(g.columns().first(), Some(&BASE));
        assert_eq!(
            FeatureSet::default().columns(),
            (0..BASE).collect::<Vec<_>>()
        );
        assert!("base+bogus".parse::<FeatureSet>().is_err());
        assert!("".parse::<FeatureSet>().is_err());
        let json = serde_json::to_string(&s).expect("ser");
        assert_eq!(json, "\"base+gr\"");
        assert_eq!(serde_json::from_str::<FeatureSet>(&json).expect("de"), s);
    }
}
