//! `recache bench synth`: a synthetic second data set for `bench gr`, in the same two formats
//! as the shared Amazon data (`user item item ...` lines, `{"<idx>": {"title": ...}}` items),
//! with a much more skewed item popularity than Beauty's (top 10% of items: ~43% of
//! interactions), closer to the concentrated e-commerce traffic BAT's *Industry* set models.
//!
//! - Items: Zipf(`--zipf`) over popularity rank; ids are a seeded permutation of the ranks so
//!   that nothing downstream can confuse an id with a rank. Item `i` has title key `i`.
//! - Histories: `3 + round(lognormal)` items, capped at 200, with the lognormal's mean set so
//!   the mean history is about `--mean-history` (long-tailed like real activity); the items of
//!   one history are distinct.
//! - Titles: 3 to 5 words from fixed word lists plus a model code, seeded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::error::BenchError;
use crate::rng::Rng;

/// Shortest history: one profile item plus the held-out one is what `bench gr` needs; 3 keeps
/// every user usable with a little room, like Beauty's 5-core filtering does.
const MIN_HISTORY: usize = 3;
const MAX_HISTORY: usize = 200;
/// Lognormal sigma of the history length beyond the minimum: a long tail without letting the
/// cap swallow much of the mass at the default mean.
const SIGMA: f64 = 1.0;

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    /// Interaction file to write (`user_id item_id item_id ...` per line)
    #[arg(long)]
    pub out_data: PathBuf,
    /// Item file to write (JSON `{"<idx>": {"title": ...}}`)
    #[arg(long)]
    pub out_items: PathBuf,
    /// Users (lines) to write, ids 1..=N
    #[arg(long, default_value_t = 20000)]
    pub users: usize,
    /// Catalog size: item ids 0..N, one title each (the Zipf tail leaves some unused)
    #[arg(long, default_value_t = 30000)]
    pub items: usize,
    /// Zipf exponent of item popularity by rank (0 = uniform)
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Mean history length (items per user); more than 3
    #[arg(long, default_value_t = 9.0)]
    pub mean_history: f64,
    /// Seed of every draw (same seed, same files)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// What `run` prints, one JSON line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    pub users: usize,
    pub items: usize,
    /// Distinct items that occur in some history (Zipf's tail leaves many unused).
    pub items_seen: usize,
    pub interactions: usize,
    /// Share of interactions on the most popular 10% of the items that occur, as measured on
    /// Beauty (0.43).
    pub top10_share: f64,
    pub mean_history: f64,
}

/// Histories (user `u` is `histories[u - 1]`) and titles (item `i` is `titles[i]`).
pub struct Synth {
    pub histories: Vec<Vec<u64>>,
    pub titles: Vec<String>,
}

const ADJ: &[&str] = &[
    "Compact",
    "Heavy-Duty",
    "Digital",
    "Portable",
    "Stainless",
    "Wireless",
    "Precision",
    "Adjustable",
    "Industrial",
    "Mini",
    "Professional",
    "Waterproof",
    "Ceramic",
    "Magnetic",
];
const MATERIAL: &[&str] = &[
    "Steel", "Aluminum", "Nylon", "Brass", "Silicone", "Carbon", "Copper", "Glass", "Rubber",
    "Titanium",
];
const NOUN: &[&str] = &[
    "Clamp",
    "Sensor",
    "Valve",
    "Caliper",
    "Drill Bit",
    "Multimeter",
    "Gasket",
    "Fitting",
    "Thermometer",
    "Relay",
    "Spring Kit",
    "Bracket",
    "Pump",
    "Filter",
    "Wrench",
    "Beaker",
];
const EXTRA: &[&str] = &[
    "Set",
    "Pack of 10",
    "with Case",
    "Replacement",
    "Kit",
    "2-Pack",
];

fn pick(rng: &mut Rng, words: &[&'static str]) -> &'static str {
    words[rng.below(words.len())]
}

fn title(rng: &mut Rng) -> String {
    let mut t = format!(
        "{} {} {}",
        pick(rng, ADJ),
        pick(rng, MATERIAL),
        pick(rng, NOUN)
    );
    // Three to five words and a code: token lengths vary as real titles' do.
    for _ in 0..rng.below(3) {
        let _ = write!(t, " {}", pick(rng, EXTRA));
    }
    let code = (b'A' + rng.below(26) as u8) as char;
    let _ = write!(t, " {code}-{}", 100 + rng.below(900));
    t
}

pub fn generate(args: &SynthArgs) -> Result<Synth, BenchError> {
    let bad = |m: String| Err(BenchError::Setup(m));
    if args.users == 0 || args.items < MIN_HISTORY {
        return bad(format!("--users must be > 0 and --items >= {MIN_HISTORY}"));
    }
    if !(args.zipf.is_finite() && args.zipf >= 0.0) {
        return bad("--zipf must be finite and >= 0".into());
    }
    if !(args.mean_history.is_finite() && args.mean_history > MIN_HISTORY as f64) {
        return bad(format!(
            "--mean-history must be > {MIN_HISTORY} (the shortest history)"
        ));
    }
    let mut rng = Rng::new(args.seed);
    let mut ids: Vec<u64> = (0..args.items as u64).collect();
    rng.shuffle(&mut ids);
    let weights: Vec<f64> = (1..=args.items)
        .map(|r| (r as f64).powf(-args.zipf))
        .collect();
    let cum = Rng::cumulative(&weights);
    // E[exp(mu + SIGMA z)] = exp(mu + SIGMA²/2) = the mean length beyond the minimum.
    let mu = (args.mean_history - MIN_HISTORY as f64).ln() - SIGMA * SIGMA / 2.0;
    let cap = MAX_HISTORY.min(args.items);
    let histories = (0..args.users)
        .map(|_| {
            let extra = (mu + SIGMA * rng.normal()).exp().round() as usize;
            let len = (MIN_HISTORY + extra).min(cap);
            let mut h: Vec<u64> = Vec::with_capacity(len);
            while h.len() < len {
                let item = ids[rng.weighted(&cum)];
                if !h.contains(&item) {
                    h.push(item);
                }
            }
            h
        })
        .collect();
    let titles = (0..args.items).map(|_| title(&mut rng)).collect();
    Ok(Synth { histories, titles })
}

/// Share of the interactions on the top 10% (rounded up) of the items that occur.
pub fn top10_share(histories: &[Vec<u64>]) -> f64 {
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for i in histories.iter().flatten() {
        *counts.entry(*i).or_default() += 1;
    }
    let mut c: Vec<u64> = counts.into_values().collect();
    c.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = c.iter().sum();
    let top: u64 = c.iter().take(c.len().div_ceil(10)).sum();
    top as f64 / total.max(1) as f64
}

pub fn stats(synth: &Synth) -> Stats {
    let interactions: usize = synth.histories.iter().map(Vec::len).sum();
    let seen: std::collections::HashSet<u64> = synth.histories.iter().flatten().copied().collect();
    Stats {
        users: synth.histories.len(),
        items: synth.titles.len(),
        items_seen: seen.len(),
        interactions,
        top10_share: top10_share(&synth.histories),
        mean_history: interactions as f64 / synth.histories.len().max(1) as f64,
    }
}

/// Writes both files in the shared data's formats.
pub fn write(args: &SynthArgs, synth: &Synth) -> Result<(), BenchError> {
    let mut data = String::new();
    for (u, h) in synth.histories.iter().enumerate() {
        let _ = write!(data, "{}", u + 1); // 1-based user ids, as in Beauty.txt
        for i in h {
            let _ = write!(data, " {i}");
        }
        data.push('\n');
    }
    std::fs::write(&args.out_data, data).map_err(BenchError::io(format!(
        "writing {}",
        args.out_data.display()
    )))?;
    let items: BTreeMap<String, serde_json::Value> = synth
        .titles
        .iter()
        .enumerate()
        .map(|(i, t)| (i.to_string(), serde_json::json!({ "title": t })))
        .collect();
    let json = serde_json::to_string_pretty(&items)
        .map_err(|e| BenchError::Setup(format!("encoding items: {e}")))?;
    std::fs::write(&args.out_items, json).map_err(BenchError::io(format!(
        "writing {}",
        args.out_items.display()
    )))
}

pub fn run(args: SynthArgs) -> Result<(), BenchError> {
    let synth = generate(&args)?;
    write(&args, &synth)?;
    let line = serde_json::to_string(&stats(&synth))
        .map_err(|e| BenchError::Setup(format!("encoding: {e}")))?;
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: &std::path::Path, zipf: f64, seed: u64) -> SynthArgs {
        SynthArgs {
            out_data: dir.join("data.txt"),
            out_items: dir.join("items.json"),
            users: 2000,
            items: 3000,
            zipf,
            mean_history: 9.0,
            seed,
        }
    }

    #[test]
    fn deterministic_and_loadable() -> Result<(), BenchError> {
        let dir = tempfile::tempdir().map_err(BenchError::io("temp dir"))?;
        let a = args(dir.path(), 1.1, 5);
        let s = generate(&a)?;
        assert_eq!(s.histories, generate(&a)?.histories);
        assert_eq!(s.titles, generate(&a)?.titles);
        assert_ne!(s.histories, generate(&args(dir.path(), 1.1, 6))?.histories);
        let st = stats(&s);
        assert!((st.mean_history - 9.0).abs() < 1.0, "{st:?}");
        assert!(
            s.histories
                .iter()
                .all(|h| (MIN_HISTORY..=MAX_HISTORY).contains(&h.len()))
        );
        write(&a, &s)?;
        let data = crate::gr::workload::load(&a.out_data, &a.out_items)?;
        assert_eq!(data.users.len(), 2000);
        assert_eq!(data.titles.len(), 3000);
        assert_eq!(data.users[0].1, s.histories[0]);
        // Ids are permuted: the most popular item is not simply id 0.
        assert_ne!(data.items[..5], [0, 1, 2, 3, 4]);
        Ok(())
    }

    #[test]
    fn zipf_concentrates_popularity() -> Result<(), BenchError> {
        let dir = tempfile::tempdir().map_err(BenchError::io("temp dir"))?;
        let skewed = stats(&generate(&args(dir.path(), 1.1, 1))?);
        let flat = stats(&generate(&args(dir.path(), 0.0, 1))?);
        assert!(skewed.top10_share > 0.6, "{skewed:?}");
        assert!(flat.top10_share < 0.3, "{flat:?}");
        Ok(())
    }
}
