//! Trace prompts as text, so that text-tree routers (the peers' `cache_aware`) see the same
//! sharing the engine's token blocks have. Each trace hash id becomes a fixed run of 32
//! words, each word one token of the engine's tokenizer (" word": a space then letters, which
//! Qwen2's pre-tokenizer never merges across), so two prompts share a text prefix exactly when
//! they share hash ids, and the engine sees the same 32-token blocks `bench replay` sends.

use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::replay::trace::BLOCK;
use crate::rng::Rng;

/// How many one-token words the vocabulary wants, and the fewest it runs with.
const WANT: usize = 512;
const FEWEST: usize = 64;

/// Words that are one token each for the engine at `upstream`: pseudo-words from syllables
/// (the testbed tokenizer learnt such words), kept when `/tokenize` gives one id for " word".
pub async fn one_token_words(
    client: &HttpClient,
    upstream: &str,
    model: &str,
) -> Result<Vec<String>, BenchError> {
    let mut syll: Vec<String> = Vec::new();
    for c in "bcdfghklmnprstvwz".chars() {
        for v in "aeiou".chars() {
            syll.push(format!("{c}{v}"));
        }
    }
    let mut cands: Vec<String> = syll.clone();
    for a in &syll {
        for b in &syll {
            cands.push(format!("{a}{b}"));
        }
    }
    Rng::new(7).shuffle(&mut cands);
    let mut words = Vec::new();
    for w in cands.iter().take(4 * WANT) {
        let ids = http::tokenize(client, upstream, model, &format!(" {w}")).await?;
        if ids.len() == 1 {
            words.push(format!(" {w}"));
            if words.len() == WANT {
                break;
            }
        }
    }
    if words.len() < FEWEST {
        return Err(BenchError::Setup(format!(
            "only {} of {} pseudo-words are one token for {upstream}'s tokenizer (need {FEWEST})",
            words.len(),
            cands.len().min(4 * WANT)
        )));
    }
    Ok(words)
}

/// The prompt of one request: each hash id's 32 words, then a tail word of its own.
pub fn render(words: &[String], ids: &[u64], tail: u64) -> String {
    let mut s = blocks(words, ids);
    s.push_str(pick(words, tail ^ 0xdead_beef));
    s
}

fn pick(words: &[String], x: u64) -> &str {
    words[(recache_hash::mix64(x) % words.len() as u64) as usize].as_str()
}

/// The hash ids' words alone.
fn blocks(words: &[String], ids: &[u64]) -> String {
    let mut s = String::with_capacity((ids.len() * BLOCK + 1) * 6);
    for &h in ids {
        for j in 0..BLOCK as u64 {
            s.push_str(pick(words, h.wrapping_mul(64) + j));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_ids_share_a_text_prefix_and_nothing_more() {
        let words: Vec<String> = (0..100).map(|i| format!(" w{i}")).collect();
        let a = render(&words, &[1, 2, 3], 10);
        let b = render(&words, &[1, 2, 4], 11);
        assert_eq!(
            a.split(' ').count() - 1,
            3 * BLOCK + 1,
            "32 words per id, one tail"
        );
        let shared = blocks(&words, &[1, 2]);
        assert!(a.starts_with(&shared) && b.starts_with(&shared));
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        assert!(
            common < blocks(&words, &[1, 2, 3]).len(),
            "block 3 is not block 4"
        );
    }
}
