//! The fresh and cached-prefix kinds: token-id prompts sent straight to the engine's
//! `/v1/completions` (`max_tokens: 1`, a prefill), one at a time. Fresh prompts are seeded
//! random token ids under a salt of their own, so nothing of them is cached; a cached point
//! sends its prefix once (unmeasured) under its group's salt, then prompts that extend it by
//! new random tokens, each measured.

use serde_json::{Value, json};

use super::args::Kind;
use super::probe::{self, Delta};
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::rng::Rng;

/// Token ids the prompts draw from: clear of the special tokens at the start of the testbed
/// tokenizers' vocabularies and inside every vocabulary the testbed serves.
const TOKEN_IDS: std::ops::Range<u32> = 256..4000;

/// Where the requests go and how they are salted.
pub struct Target<'a> {
    pub client: &'a HttpClient,
    pub upstream: &'a str,
    pub model: &'a str,
    /// Distinguishes this run's salts from any earlier run's on the same engine.
    pub nonce: u128,
}

/// One planned measurement: `new` fresh tokens after a cached prefix of `prefix` (0: fresh).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub kind: Kind,
    pub prefix: u64,
    pub new: u64,
}

/// The fresh and cached kinds' points, in the order they are sent (cached points grouped by
/// prefix, so a prefix is sent once per group).
pub fn plan(kinds: &[Kind], fresh: &[u64], prefixes: &[u64], extends: &[u64]) -> Vec<Planned> {
    let mut out = Vec::new();
    for &kind in kinds {
        match kind {
            Kind::Fresh => out.extend(fresh.iter().map(|&new| Planned {
                kind,
                prefix: 0,
                new,
            })),
            Kind::Cached => {
                for &prefix in prefixes {
                    out.extend(extends.iter().map(|&new| Planned { kind, prefix, new }));
                }
            }
            Kind::Pooled => {}
        }
    }
    out
}

fn tokens(rng: &mut Rng, n: u64) -> Vec<u32> {
    let span = (TOKEN_IDS.end - TOKEN_IDS.start) as usize;
    (0..n)
        .map(|_| TOKEN_IDS.start + rng.below(span) as u32)
        .collect()
}

/// A prefill of `prompt` under `salt`.
async fn complete(t: &Target<'_>, prompt: &[u32], salt: &str) -> Result<(), BenchError> {
    let body = json!({
        "model": t.model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "cache_salt": salt,
    });
    let url = format!("{}/v1/completions", t.upstream);
    let (status, answer) = http::post(t.client, &url, &body).await?;
    if status != 200 {
        return Err(BenchError::Setup(format!(
            "{url} answered {status} to a {}-token prompt: {}",
            prompt.len(),
            short(&answer)
        )));
    }
    Ok(())
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(300).collect()
}

/// Sends `points` (round `round`), one at a time; each measured request's deltas in order.
/// `each` is called after every measured request (progress).
pub async fn send(
    t: &Target<'_>,
    metrics_url: &str,
    points: &[Planned],
    round: usize,
    rng: &mut Rng,
    each: &dyn Fn(),
) -> Result<Vec<(Planned, Delta)>, BenchError> {
    let mut out = Vec::with_capacity(points.len());
    let mut group: Option<(u64, Vec<u32>, String)> = None;
    for (i, p) in points.iter().enumerate() {
        let (prompt, salt) = match p.kind {
            Kind::Cached => {
                let (prefix, salt) = match group.take() {
                    Some((n, prefix, salt)) if n == p.prefix => (prefix, salt),
                    _ => {
                        let salt = format!("costfit-{}-r{round}-p{}-{i}", t.nonce, p.prefix);
                        let prefix = tokens(rng, p.prefix);
                        // The prefix itself, unmeasured: what the measured prompts find cached.
                        complete(t, &prefix, &salt).await?;
                        (prefix, salt)
                    }
                };
                let mut prompt = prefix.clone();
                prompt.extend(tokens(rng, p.new));
                group = Some((p.prefix, prefix, salt.clone()));
                (prompt, salt)
            }
            _ => (
                tokens(rng, p.new),
                format!("costfit-{}-r{round}-fresh-{i}", t.nonce),
            ),
        };
        let (_, delta) = probe::around(t.client, metrics_url, complete(t, &prompt, &salt)).await?;
        out.push((*p, delta));
        each();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_groups_cached_points_by_prefix_and_skips_pooled() {
        let p = plan(
            &[Kind::Cached, Kind::Pooled, Kind::Fresh],
            &[256, 512],
            &[512, 2048],
            &[64, 128],
        );
        let got: Vec<(Kind, u64, u64)> = p.iter().map(|p| (p.kind, p.prefix, p.new)).collect();
        assert_eq!(
            got,
            vec![
                (Kind::Cached, 512, 64),
                (Kind::Cached, 512, 128),
                (Kind::Cached, 2048, 64),
                (Kind::Cached, 2048, 128),
                (Kind::Fresh, 0, 256),
                (Kind::Fresh, 0, 512),
            ]
        );
    }
}
