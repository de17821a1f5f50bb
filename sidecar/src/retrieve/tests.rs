//! The beam search against exhaustive scoring of every valid code, with a deterministic
//! stand-in scorer (log-probabilities as a function of the beam and the token).

use std::sync::atomic::{AtomicU64, Ordering};

use super::index::{FORMAT, IndexFile, IndexedItem, RetrieveIndex};
use super::search::{Ask, Found, Scorer, SearchSpec, StepScores, search};

/// Log-softmax over the offered tokens of a seeded hash of (beam, token): a proper
/// distribution, so scores fall as codes grow and the early stop is sound.
struct Fake {
    seed: u64,
    calls: AtomicU64,
}

fn logit(seed: u64, beam: &[u32], t: u32) -> f64 {
    let mut h = recache_hash::fnv1a(seed.to_le_bytes());
    for &b in beam.iter().chain(std::iter::once(&t)) {
        h = recache_hash::fnv1a_from(h, b.to_le_bytes());
    }
    let h = recache_hash::mix64(h);
    (h % 10_000) as f64 / 1_000.0
}

impl Fake {
    fn lp(&self, beam: &[u32], next: &[u32], t: u32) -> f64 {
        let z: f64 = next.iter().map(|&u| logit(self.seed, beam, u).exp()).sum();
        logit(self.seed, beam, t) - z.ln()
    }
}

impl Scorer for Fake {
    type Error = std::convert::Infallible;
    async fn score_step(&self, asks: &[Ask<'_>]) -> Result<StepScores, Self::Error> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        Ok(StepScores {
            logprobs: asks
                .iter()
                .map(|a| a.next.iter().map(|&t| self.lp(a.beam, a.next, t)).collect())
                .collect(),
            engine_calls: 1,
            prompt_tokens: asks.iter().map(|a| 10 + a.beam.len() as u64).sum(),
            cached_tokens: 10 * asks.len() as u64,
        })
    }
}

/// Codes over 3 levels of 4 tokens (100..112); items whose codes collide get a 4th,
/// disambiguation token (112..), as `recache items index` does.
fn index(n: usize, seed: u64) -> RetrieveIndex {
    let mut rng = recache_hash::SplitMix64::new(seed);
    let mut groups = std::collections::BTreeMap::<Vec<u32>, u32>::new();
    for _ in 0..n {
        let code: Vec<u32> = (0..3)
            .map(|l| 100 + l * 4 + (rng.next_u64() % 4) as u32)
            .collect();
        *groups.entry(code).or_insert(0) += 1;
    }
    let mut items = Vec::new();
    for (code, count) in groups {
        for d in 0..count {
            let mut c = code.clone();
            if count > 1 {
                c.push(112 + d);
            }
            items.push(IndexedItem {
                id: format!("i{}", items.len()),
                code: c,
            });
        }
    }
    RetrieveIndex::new(IndexFile {
        format: FORMAT,
        method: "test".into(),
        levels: 3,
        codebook: 4,
        seed,
        token_base: 100,
        items,
    })
    .expect("valid index")
}

/// Every item's score as the search adds it (f32, level by level), best first.
fn exhaustive(idx: &RetrieveIndex, fake: &Fake, exclude: &[usize], k: usize) -> Vec<Found> {
    let mut all: Vec<Found> = (0..idx.file.items.len())
        .filter(|i| !exclude.contains(i))
        .map(|i| {
            let code = &idx.file.items[i].code;
            let mut score = 0f32;
            let mut node = 0;
            for (d, &t) in code.iter().enumerate() {
                let (toks, kids) = idx.trie.children(node);
                // Offered tokens: children with a non-excluded item below.
                let offered: Vec<u32> = toks
                    .iter()
                    .zip(kids)
                    .filter(|(_, k)| {
                        (0..idx.file.items.len()).any(|j| {
                            let path = idx.file.items[j].code.get(..=d);
                            !exclude.contains(&j)
                                && path.and_then(|p| idx.trie.walk(p)) == Some(**k)
                        })
                    })
                    .map(|(t, _)| *t as u32)
                    .collect();
                score += fake.lp(&code[..d], &offered, t) as f32;
                let at = toks.binary_search(&(t as i32)).expect("edge");
                node = kids[at];
            }
            Found { item: i, score }
        })
        .collect();
    all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.item.cmp(&b.item)));
    all.truncate(k);
    all
}

fn run(
    idx: &RetrieveIndex,
    fake: &Fake,
    spec: SearchSpec,
) -> (Vec<Found>, super::search::SearchStats) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(search(idx, &spec, fake)).expect("infallible")
}

#[test]
fn wide_beam_equals_exhaustive_scoring_with_exclusions() {
    for seed in 0..5 {
        let idx = index(40, seed);
        let fake = Fake {
            seed,
            calls: AtomicU64::new(0),
        };
        let n = idx.file.items.len();
        for exclude in [vec![], vec![0, 3, 3, n - 1]] {
            let spec = SearchSpec {
                beam_width: 64,
                top_k: 5,
                exclude: exclude.clone(),
            };
            let (got, stats) = run(&idx, &fake, spec);
            assert_eq!(got, exhaustive(&idx, &fake, &exclude, 5), "seed {seed}");
            assert!(got.iter().all(|f| !exclude.contains(&f.item)));
            assert!(stats.steps >= 3);
            assert_eq!(stats.engine_calls, stats.steps as u64, "one call a step");
        }
    }
}

#[test]
fn narrow_beams_return_distinct_real_items_and_stop_early() {
    let idx = index(60, 7);
    let fake = Fake {
        seed: 7,
        calls: AtomicU64::new(0),
    };
    let mut early = 0;
    for (w, k) in [(1, 1), (4, 2), (8, 8), (16, 3)] {
        let (got, stats) = run(
            &idx,
            &fake,
            SearchSpec {
                beam_width: w,
                top_k: k,
                exclude: vec![],
            },
        );
        assert!(!got.is_empty() && got.len() <= k);
        let mut ids: Vec<usize> = got.iter().map(|f| f.item).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), got.len(), "no duplicates");
        assert!(
            got.windows(2).all(|p| p[0].score >= p[1].score),
            "best first"
        );
        early += stats.stopped_early as usize + (stats.pruned_beams > 0) as usize;
        // Deterministic: the same search twice gives the same answer.
        let again = run(
            &idx,
            &fake,
            SearchSpec {
                beam_width: w,
                top_k: k,
                exclude: vec![],
            },
        );
        assert_eq!(again.0, got);
    }
    assert!(early > 0, "some search pruned or stopped early");
}

#[test]
fn excluding_every_item_answers_nothing() {
    let idx = index(10, 1);
    let fake = Fake {
        seed: 1,
        calls: AtomicU64::new(0),
    };
    let all: Vec<usize> = (0..idx.file.items.len()).collect();
    let (got, stats) = run(
        &idx,
        &fake,
        SearchSpec {
            beam_width: 8,
            top_k: 3,
            exclude: all,
        },
    );
    assert!(got.is_empty());
    assert_eq!(stats.engine_calls, 0);
}
