//! A pure-Rust evaluator for LightGBM's text model format (numerical splits).
//!
//! Why: LightGBM's `Booster` is neither `Send` nor `Sync`, so it stays on the
//! trainer thread; the trainer dumps the model as text and this parsed copy
//! is what the request path evaluates, with no FFI call and no thread hop.
//! Semantics follow LightGBM's `Tree::NumericalDecision`: bit 1 of
//! `decision_type` is "default left", bits 2-3 the missing type (0 none,
//! 1 zero, 2 NaN); otherwise `x <= threshold` goes left.

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model text: {0}")]
    Format(String),
    #[error("model has categorical splits, which this evaluator does not support")]
    Categorical,
    #[error("model has non-finite values")]
    NonFinite,
}

/// One split, laid out together so a walk touches one cache line per node.
#[derive(Debug, Clone, Copy)]
struct Node {
    threshold: f64,
    feature: u32,
    left: i32,
    right: i32,
    /// Bit 1: default left; bits 2-3: missing type.
    decision: u8,
}

#[derive(Debug, Clone, Default)]
struct Tree {
    nodes: Vec<Node>,
    leaf: Vec<f64>,
}

impl Tree {
    fn eval(&self, x: &[f32]) -> f64 {
        if self.nodes.is_empty() {
            return self.leaf.first().copied().unwrap_or(0.0);
        }
        let mut i = 0i32;
        while i >= 0 {
            let n = &self.nodes[i as usize];
            let mut v = f64::from(x.get(n.feature as usize).copied().unwrap_or(f32::NAN));
            let missing = (n.decision >> 2) & 3;
            if v.is_nan() && missing != 2 {
                v = 0.0;
            }
            let is_missing = (missing == 1 && v.abs() <= 1e-35) || (missing == 2 && v.is_nan());
            let go_left = if is_missing {
                n.decision & 2 != 0
            } else {
                v <= n.threshold
            };
            i = if go_left { n.left } else { n.right };
        }
        self.leaf[(!i) as usize]
    }
}

/// Tree arrays as they appear in the model text.
#[derive(Debug, Default)]
struct RawTree {
    feature: Vec<u32>,
    threshold: Vec<f64>,
    decision: Vec<u8>,
    left: Vec<i32>,
    right: Vec<i32>,
    leaf: Vec<f64>,
}

impl RawTree {
    fn build(self) -> Result<Tree, ModelError> {
        let n = self.feature.len();
        let ok = [
            self.threshold.len(),
            self.decision.len(),
            self.left.len(),
            self.right.len(),
        ]
        .iter()
        .all(|&l| l == n)
            && self.leaf.len() == n + 1
            && self
                .left
                .iter()
                .chain(&self.right)
                .all(|&c| c < n as i32 && (!c) < (n as i32 + 1));
        if !ok {
            return Err(ModelError::Format("inconsistent tree arrays".into()));
        }
        if !self
            .leaf
            .iter()
            .chain(&self.threshold)
            .all(|v| v.is_finite())
        {
            return Err(ModelError::NonFinite);
        }
        let nodes = (0..n)
            .map(|i| Node {
                threshold: self.threshold[i],
                feature: self.feature[i],
                left: self.left[i],
                right: self.right[i],
                decision: self.decision[i],
            })
            .collect();
        Ok(Tree {
            nodes,
            leaf: self.leaf,
        })
    }
}

/// A parsed tree ensemble; prediction is the sum of the trees' outputs
/// (identity link: regression objective).
#[derive(Debug, Clone, Default)]
pub struct Ensemble {
    trees: Vec<Tree>,
}

fn list<T: std::str::FromStr>(v: &str) -> Result<Vec<T>, ModelError> {
    v.split_whitespace()
        .map(|t| {
            t.parse()
                .map_err(|_| ModelError::Format(format!("bad number {t:?}")))
        })
        .collect()
}

impl Ensemble {
    /// Parses `Booster::save_string` output.
    pub fn parse(text: &str) -> Result<Self, ModelError> {
        let mut raw = Vec::new();
        let mut cur: Option<RawTree> = None;
        for line in text.lines() {
            if line.starts_with("Tree=") {
                raw.extend(cur.take());
                cur = Some(RawTree::default());
                continue;
            }
            if line.starts_with("end of trees") {
                break;
            }
            let (Some(t), Some((k, v))) = (cur.as_mut(), line.split_once('=')) else {
                continue;
            };
            match k {
                "split_feature" => t.feature = list(v)?,
                "threshold" => t.threshold = list(v)?,
                "decision_type" => t.decision = list(v)?,
                "left_child" => t.left = list(v)?,
                "right_child" => t.right = list(v)?,
                "leaf_value" => t.leaf = list(v)?,
                "num_cat" if v.trim() != "0" => return Err(ModelError::Categorical),
                _ => {}
            }
        }
        raw.extend(cur);
        let trees = raw
            .into_iter()
            .map(RawTree::build)
            .collect::<Result<Vec<_>, _>>()?;
        if trees.is_empty() {
            return Err(ModelError::Format("no trees".into()));
        }
        Ok(Self { trees })
    }

    /// Re-indexes split features: a model trained on columns `cols` of a wider row (feature
    /// `i` was column `cols[i]`) then reads full rows directly. An index outside `cols` is an
    /// error (the model was not trained on that projection).
    pub fn remap_features(mut self, cols: &[usize]) -> Result<Self, ModelError> {
        for n in self.trees.iter_mut().flat_map(|t| t.nodes.iter_mut()) {
            let c = cols.get(n.feature as usize).ok_or_else(|| {
                ModelError::Format(format!(
                    "split feature {} outside {} columns",
                    n.feature,
                    cols.len()
                ))
            })?;
            n.feature = *c as u32;
        }
        Ok(self)
    }

    pub fn num_trees(&self) -> usize {
        self.trees.len()
    }

    pub fn predict(&self, x: &[f32]) -> f64 {
        self.trees.iter().map(|t| t.eval(x)).sum()
    }
}
