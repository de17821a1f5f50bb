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
    /// The walk's start: node 0, or leaf 0 (`!0`) for a single-leaf tree.
    fn root(&self) -> i32 {
        if self.nodes.is_empty() { -1 } else { 0 }
    }

    /// One step from internal node `i` (>= 0) on row `x`: the child, negative for leaf `!i`.
    #[inline(always)]
    fn step(&self, i: i32, x: &[f32]) -> i32 {
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
        if go_left { n.left } else { n.right }
    }

    fn leaf_at(&self, i: i32) -> f64 {
        self.leaf.get((!i) as usize).copied().unwrap_or(0.0)
    }

    fn eval(&self, x: &[f32]) -> f64 {
        let mut i = self.root();
        while i >= 0 {
            i = self.step(i, x);
        }
        self.leaf_at(i)
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

    /// Sum of the trees' outputs on row `x`. Four trees are walked in lockstep: one walk is a
    /// chain of dependent loads and compares, so interleaving four keeps the core busy
    /// instead of waiting on each level. Leaves are added in tree order, so the sum is the
    /// same as tree by tree (tested against that).
    pub fn predict(&self, x: &[f32]) -> f64 {
        let mut sum = -0.0; // the start `Iterator::sum` uses for floats
        let mut chunks = self.trees.chunks_exact(4);
        for c in &mut chunks {
            let mut i = [c[0].root(), c[1].root(), c[2].root(), c[3].root()];
            // Leaves are negative: some walk is still inside its tree while the AND is >= 0.
            while (i[0] & i[1] & i[2] & i[3]) >= 0 {
                for (t, at) in c.iter().zip(i.iter_mut()) {
                    if *at >= 0 {
                        *at = t.step(*at, x);
                    }
                }
            }
            for (t, &at) in c.iter().zip(&i) {
                sum += t.leaf_at(at);
            }
        }
        for t in chunks.remainder() {
            sum += t.eval(x);
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::Ensemble;

    /// A random tree in LightGBM's text format with `n` internal nodes: node `k` hangs from a
    /// free child slot of an earlier node, the free slots left are leaves; every missing type
    /// and default direction occurs.
    fn tree_text(id: usize, n: usize, rng: &mut impl FnMut() -> u64) -> String {
        let leaf_value = |rng: &mut dyn FnMut() -> u64| (rng() % 1000) as f64 / 7.0 - 70.0;
        if n == 0 {
            return format!(
                "Tree={id}\nnum_leaves=1\nleaf_value={}\n\n",
                leaf_value(rng)
            );
        }
        let mut child: Vec<[Option<i32>; 2]> = vec![[None, None]; n];
        for k in 1..n {
            let free: Vec<(usize, usize)> = (0..k)
                .flat_map(|p| [(p, 0), (p, 1)])
                .filter(|&(p, side)| child[p][side].is_none())
                .collect();
            let (p, side) = free[(rng() % free.len() as u64) as usize];
            child[p][side] = Some(k as i32);
        }
        let mut leaves = 0i32;
        let mut side_list = |side: usize, child: &mut Vec<[Option<i32>; 2]>| -> Vec<String> {
            (0..n)
                .map(|k| {
                    *child[k][side].get_or_insert_with(|| {
                        leaves += 1;
                        !(leaves - 1)
                    })
                })
                .map(|c| c.to_string())
                .collect()
        };
        let left = side_list(0, &mut child);
        let right = side_list(1, &mut child);
        let col = |f: &mut dyn FnMut() -> String| (0..n).map(|_| f()).collect::<Vec<_>>().join(" ");
        let feat = col(&mut || (rng() % 6).to_string());
        let thr = col(&mut || format!("{}", (rng() % 200) as f64 / 10.0 - 5.0));
        let dec = col(&mut || ((rng() % 3) << 2 | (rng() % 2) << 1).to_string());
        let leaf = (0..n + 1)
            .map(|_| leaf_value(rng).to_string())
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "Tree={id}\nnum_leaves={}\nsplit_feature={feat}\nthreshold={thr}\n\
             decision_type={dec}\nleft_child={}\nright_child={}\nleaf_value={leaf}\n\n",
            n + 1,
            left.join(" "),
            right.join(" "),
        )
    }

    #[test]
    fn lockstep_walk_equals_tree_by_tree() {
        let mut s = 0x9e3779b97f4a7c15u64;
        let mut rng = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for trees in [1usize, 4, 6, 9, 32] {
            let mut text = String::new();
            for id in 0..trees {
                let n = if id == 2 { 0 } else { (rng() % 12) as usize };
                text += &tree_text(id, n, &mut rng);
            }
            text += "end of trees\n";
            let model = Ensemble::parse(&text).expect("parse");
            for _ in 0..500 {
                let row: Vec<f32> = (0..6)
                    .map(|_| match rng() % 8 {
                        0 => f32::NAN,
                        1 => 0.0,
                        _ => (rng() % 200) as f32 / 10.0 - 5.0,
                    })
                    .collect();
                let tree_by_tree: f64 = model.trees.iter().map(|t| t.eval(&row)).sum();
                let (a, b) = (model.predict(&row), tree_by_tree);
                assert_eq!(a.to_bits(), b.to_bits(), "{trees} trees, row {row:?}");
            }
        }
    }
}
