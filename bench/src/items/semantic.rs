//! Semantic IDs for a catalog (`recache items index`): each item becomes a short code of
//! vocabulary tokens such that similar items share leading tokens, the shape generative
//! retrieval decodes (TIGER-style residual quantisation).
//!
//! Features are hashed TF-IDF vectors of the item's words and word pairs (title, brand and
//! categories; the description's first words at a lower weight), L2-normalised. Residual
//! k-means then gives level 1 the cluster of the item, level 2 the cluster of what level 1 did
//! not explain, and so on. Items whose codes still collide get one more, disambiguating token,
//! every member of the group (so no code is a prefix of another). Everything is deterministic
//! for a seed: items are ordered by id first, and k-means++ draws from `recache_hash`'s
//! SplitMix64.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use recache_hash::SplitMix64;
use serde::Serialize;
use serde_json::Value;

use recache::harness::{INDEX_FORMAT as FORMAT, IndexFile, IndexedItem, MAX_CHILDREN};

/// Lloyd iterations per level (k-means converges well before this on catalog sizes).
pub const ITERATIONS: usize = 20;
/// Words of the description used (it is long and noisy; the title carries most).
const DESCRIPTION_WORDS: usize = 40;
const DESCRIPTION_WEIGHT: f32 = 0.3;

/// How to build the codes.
#[derive(Debug, Clone)]
pub struct SemanticArgs {
    /// Code levels before disambiguation; 0: [`auto_levels`].
    pub levels: usize,
    pub codebook: usize,
    pub seed: u64,
    pub token_base: u32,
    pub dims: usize,
}

impl Default for SemanticArgs {
    fn default() -> Self {
        Self {
            levels: 0,
            codebook: 128,
            seed: 0,
            token_base: 32768,
            dims: 256,
        }
    }
}

/// What the build did.
#[derive(Debug, Clone, Serialize)]
pub struct BuildStats {
    pub items: usize,
    /// Distinct codes before disambiguation.
    pub distinct_codes: usize,
    /// Items sharing their code with another (they got a disambiguation token).
    pub collided_items: usize,
    pub max_group: usize,
    /// Codes used per level (of `codebook`).
    pub codebook_usage: Vec<usize>,
    /// Mean squared norm of what is left unexplained after each level (features have norm 1).
    pub residual_error: Vec<f64>,
    pub highest_token: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum SemanticError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is not an item file (a JSON object of {{\"<id>\": {{\"title\", ...}}}}): {why}"
    )]
    Parse { path: String, why: String },
    #[error("{0} has no items")]
    Empty(String),
    #[error("{flag}: {why}")]
    Arg { flag: &'static str, why: String },
    #[error(
        "{group} items share the code {code:?}; at most {MAX_CHILDREN} can be told apart by one \
         more token: raise --levels or --codebook"
    )]
    Collisions { group: usize, code: Vec<u32> },
}

impl SemanticArgs {
    fn check(&self) -> Result<(), SemanticError> {
        let arg = |flag, why: String| Err(SemanticError::Arg { flag, why });
        if self.levels > 8 {
            return arg(
                "--levels",
                format!("must be in 1..=8 (or auto); got {}", self.levels),
            );
        }
        if !(2..=MAX_CHILDREN).contains(&self.codebook) {
            return arg(
                "--codebook",
                format!(
                    "must be in 2..={MAX_CHILDREN} (one engine request scores at most {MAX_CHILDREN} tokens); got {}",
                    self.codebook
                ),
            );
        }
        if self.dims < 8 {
            return arg("--dims", format!("must be at least 8; got {}", self.dims));
        }
        let top =
            self.token_base as u64 + (self.levels.max(8) * self.codebook + MAX_CHILDREN) as u64;
        if top > u32::MAX as u64 {
            return arg(
                "--token-base",
                format!("{} + codes overflows a token id", self.token_base),
            );
        }
        Ok(())
    }
}

/// Reads `items_path` and builds the index; `progress(done, total)` after each k-means pass.
pub fn build_index(
    items_path: &Path,
    args: &SemanticArgs,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(IndexFile, BuildStats), SemanticError> {
    args.check()?;
    let path = items_path.display().to_string();
    let text = std::fs::read_to_string(items_path).map_err(|source| SemanticError::Io {
        path: path.clone(),
        source,
    })?;
    let map: BTreeMap<String, Value> =
        serde_json::from_str(&text).map_err(|e| SemanticError::Parse {
            path: path.clone(),
            why: e.to_string(),
        })?;
    if map.is_empty() {
        return Err(SemanticError::Empty(path));
    }
    let mut items: Vec<(String, Value)> = map.into_iter().collect();
    // Numeric ids in numeric order when all are numbers, else lexical: the order (and so the
    // codes) must not depend on how the file happens to list them.
    if items.iter().all(|(k, _)| k.parse::<u64>().is_ok()) {
        items.sort_by_key(|(k, _)| k.parse::<u64>().unwrap_or(0));
    }
    let args = &SemanticArgs {
        levels: match args.levels {
            0 => auto_levels(items.len(), args.codebook),
            l => l,
        },
        ..args.clone()
    };
    let features = features(&items, args.dims);
    let codes = residual_kmeans(&features, args, progress);
    assemble(
        items.into_iter().map(|(k, _)| k).collect(),
        codes,
        &features,
        args,
    )
}

/// The fewest levels whose codes outnumber the items (`codebook^levels >= items`), at most 8.
/// Every level costs a retrieval one more beam step, and each step's calls recompute every
/// beam's code so far (a prefix cache keeps whole blocks only), so the tree is kept as shallow
/// as the catalog allows; items that still share a code are told apart by one more token.
/// (Measured on the 3,686-item catalog at beam width 32: 2 levels x 128 computed 1.09x a
/// greedy decode's tokens, 3 x 64 1.21x; docs/retrieve.md.)
pub fn auto_levels(items: usize, codebook: usize) -> usize {
    let mut levels = 1;
    let mut codes = codebook.max(2) as u128;
    while codes < items as u128 && levels < 8 {
        levels += 1;
        codes *= codebook.max(2) as u128;
    }
    levels
}

/// Hashed TF-IDF of words and word pairs, L2-normalised; `[n][dims]`.
fn features(items: &[(String, Value)], dims: usize) -> Vec<Vec<f32>> {
    let words = |v: &Value| -> Vec<String> {
        v.as_str()
            .unwrap_or_default()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let mut docs: Vec<Vec<(usize, f32, f32)>> = Vec::with_capacity(items.len());
    let mut df = vec![0u32; dims];
    for (_, v) in items {
        let mut terms: Vec<(String, f32)> = Vec::new();
        for (field, weight) in [("title", 1.0), ("brand", 1.0), ("categories", 1.0)] {
            let w = words(&v[field]);
            terms.extend(w.iter().map(|t| (t.clone(), weight)));
            terms.extend(w.windows(2).map(|p| (format!("{} {}", p[0], p[1]), weight)));
        }
        let desc = words(&v["description"]);
        terms.extend(
            desc.into_iter()
                .take(DESCRIPTION_WORDS)
                .map(|t| (t, DESCRIPTION_WEIGHT)),
        );
        let mut tf: HashMap<usize, (f32, f32)> = HashMap::new();
        for (t, w) in terms {
            let h = recache_hash::fnv1a(t.bytes());
            // Sign from a separate bit keeps hash collisions from only ever adding up.
            let sign = if recache_hash::mix64(h) & 1 == 0 {
                1.0
            } else {
                -1.0
            };
            let e = tf.entry((h % dims as u64) as usize).or_insert((0.0, sign));
            e.0 += w;
        }
        for d in tf.keys() {
            df[*d] += 1;
        }
        let mut doc: Vec<(usize, f32, f32)> = tf.into_iter().map(|(d, (w, s))| (d, w, s)).collect();
        doc.sort_by_key(|e| e.0);
        docs.push(doc);
    }
    let n = items.len() as f32;
    docs.into_iter()
        .map(|doc| {
            let mut x = vec![0f32; dims];
            for (d, w, s) in doc {
                x[d] = s * w * ((1.0 + n) / (1.0 + df[d] as f32)).ln();
            }
            let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                x.iter_mut().for_each(|v| *v /= norm);
            }
            x
        })
        .collect()
}

fn dist2(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Balanced assignment: every cluster takes at most `ceil(n / k)` items, the closest
/// (point, centre) pairs first. Plain nearest-centre assignment collapses on sparse text
/// features: the points are nearly orthogonal, so the centre closest to most of them is the
/// mean of many (a short vector), one cluster swallows most items at every level and their
/// codes collide (measured on the 3,686-item catalog: 583 distinct codes of 3 levels x 64).
/// Balanced k-means is what OneRec's RQ-Kmeans uses for the same reason.
fn balanced_assign(x: &[Vec<f32>], centroids: &[Vec<f32>]) -> Vec<usize> {
    let (n, k) = (x.len(), centroids.len());
    let cap = n.div_ceil(k);
    let mut pairs: Vec<(f32, u32, u32)> = Vec::with_capacity(n * k);
    for (i, r) in x.iter().enumerate() {
        for (c, m) in centroids.iter().enumerate() {
            pairs.push((dist2(r, m), i as u32, c as u32));
        }
    }
    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut assign = vec![usize::MAX; n];
    let mut load = vec![0usize; k];
    let mut left = n;
    for (_, i, c) in pairs {
        let (i, c) = (i as usize, c as usize);
        if assign[i] == usize::MAX && load[c] < cap {
            assign[i] = c;
            load[c] += 1;
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    assign
}

/// Codes per level (`[n][levels]`, 0-based within the codebook).
fn residual_kmeans(
    x: &[Vec<f32>],
    args: &SemanticArgs,
    progress: &mut dyn FnMut(usize, usize),
) -> Vec<Vec<usize>> {
    let (n, k) = (x.len(), args.codebook.min(x.len()));
    let total = args.levels * ITERATIONS;
    let mut residual: Vec<Vec<f32>> = x.to_vec();
    let mut codes: Vec<Vec<usize>> = vec![Vec::with_capacity(args.levels); n];
    for level in 0..args.levels {
        let mut rng = SplitMix64::new(args.seed ^ (level as u64).wrapping_mul(0x9e37_79b9));
        // k-means++: each next centre drawn with probability proportional to squared distance.
        let mut centroids = vec![residual[(rng.next_u64() % n as u64) as usize].clone()];
        let mut d2: Vec<f32> = residual.iter().map(|r| dist2(r, &centroids[0])).collect();
        while centroids.len() < k {
            let sum: f64 = d2.iter().map(|&v| v as f64).sum();
            let pick = if sum <= 0.0 {
                (rng.next_u64() % n as u64) as usize
            } else {
                let mut r = rng.unit() * sum;
                d2.iter()
                    .position(|&v| {
                        r -= v as f64;
                        r <= 0.0
                    })
                    .unwrap_or(n - 1)
            };
            centroids.push(residual[pick].clone());
            let c = centroids.len() - 1;
            for (i, r) in residual.iter().enumerate() {
                d2[i] = d2[i].min(dist2(r, &centroids[c]));
            }
        }
        let mut assign = vec![0usize; n];
        for iter in 0..ITERATIONS {
            assign = balanced_assign(&residual, &centroids);
            let dims = residual[0].len();
            let mut sums = vec![vec![0f32; dims]; k];
            let mut counts = vec![0usize; k];
            for (i, r) in residual.iter().enumerate() {
                counts[assign[i]] += 1;
                sums[assign[i]].iter_mut().zip(r).for_each(|(s, v)| *s += v);
            }
            for c in 0..k {
                if counts[c] > 0 {
                    centroids[c] = sums[c].iter().map(|s| s / counts[c] as f32).collect();
                }
            }
            progress(level * ITERATIONS + iter + 1, total);
        }
        for (i, r) in residual.iter_mut().enumerate() {
            let c = assign[i];
            codes[i].push(c);
            r.iter_mut().zip(&centroids[c]).for_each(|(v, m)| *v -= m);
        }
    }
    codes
}

fn assemble(
    ids: Vec<String>,
    codes: Vec<Vec<usize>>,
    x: &[Vec<f32>],
    args: &SemanticArgs,
) -> Result<(IndexFile, BuildStats), SemanticError> {
    let cb = args.codebook as u32;
    let token = |level: usize, c: usize| args.token_base + level as u32 * cb + c as u32;
    let mut groups: BTreeMap<Vec<u32>, Vec<usize>> = BTreeMap::new();
    for (i, c) in codes.iter().enumerate() {
        let t: Vec<u32> = c.iter().enumerate().map(|(l, &c)| token(l, c)).collect();
        groups.entry(t).or_default().push(i);
    }
    let mut out: Vec<Option<IndexedItem>> = vec![None; ids.len()];
    let (mut collided, mut max_group) = (0, 0);
    for (code, members) in &groups {
        if members.len() > MAX_CHILDREN {
            return Err(SemanticError::Collisions {
                group: members.len(),
                code: code.clone(),
            });
        }
        max_group = max_group.max(members.len());
        let shared = members.len() > 1;
        collided += if shared { members.len() } else { 0 };
        for (d, &i) in members.iter().enumerate() {
            let mut c = code.clone();
            if shared {
                c.push(token(args.levels, d));
            }
            out[i] = Some(IndexedItem {
                id: ids[i].clone(),
                code: c,
            });
        }
    }
    let items: Vec<IndexedItem> = out.into_iter().flatten().collect();
    let usage = (0..args.levels)
        .map(|l| {
            let mut used: Vec<usize> = codes.iter().map(|c| c[l]).collect();
            used.sort_unstable();
            used.dedup();
            used.len()
        })
        .collect();
    let highest_token = items
        .iter()
        .flat_map(|i| i.code.iter())
        .copied()
        .max()
        .unwrap_or(0);
    let stats = BuildStats {
        items: items.len(),
        distinct_codes: groups.len(),
        collided_items: collided,
        max_group,
        codebook_usage: usage,
        residual_error: residual_errors(x, &codes, args),
        highest_token,
    };
    let file = IndexFile {
        format: FORMAT,
        method: format!(
            "residual k-means ({} levels x {} codes, {ITERATIONS} Lloyd iterations, k-means++) \
             over {}-dim hashed TF-IDF of title/brand/categories words and pairs; collisions \
             disambiguated by one more token",
            args.levels, args.codebook, args.dims
        ),
        levels: args.levels,
        codebook: args.codebook,
        seed: args.seed,
        token_base: args.token_base,
        items,
    };
    Ok((file, stats))
}

/// Mean squared norm left after each level, recomputed from the codes' cluster means.
fn residual_errors(x: &[Vec<f32>], codes: &[Vec<usize>], args: &SemanticArgs) -> Vec<f64> {
    let mut residual = x.to_vec();
    let dims = x.first().map_or(0, Vec::len);
    (0..args.levels)
        .map(|l| {
            let mut sums = vec![vec![0f32; dims]; args.codebook];
            let mut counts = vec![0usize; args.codebook];
            for (r, c) in residual.iter().zip(codes) {
                counts[c[l]] += 1;
                sums[c[l]].iter_mut().zip(r).for_each(|(s, v)| *s += v);
            }
            for (r, c) in residual.iter_mut().zip(codes) {
                let n = counts[c[l]].max(1) as f32;
                r.iter_mut().zip(&sums[c[l]]).for_each(|(v, s)| *v -= s / n);
            }
            residual
                .iter()
                .map(|r| r.iter().map(|v| (v * v) as f64).sum::<f64>())
                .sum::<f64>()
                / residual.len().max(1) as f64
        })
        .collect()
}

#[cfg(test)]
#[path = "semantic_tests.rs"]
mod tests;
