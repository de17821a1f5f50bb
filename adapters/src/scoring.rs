//! Scoring a ranking prompt on the engine, in engine-neutral terms: what recache asks (the
//! log-probability of each label token at the prompt's last position, one generated token,
//! greedy) and what it reads back (those log-probabilities and the prompt's cache use). Each
//! engine's request and answer shapes live in its own module ([`crate::vllm`],
//! [`crate::sglang`]); [`crate::Engine`] picks one.

/// One scoring request.
#[derive(Debug, Clone, Copy)]
pub struct ScoreRequest<'a> {
    /// Served model name (vLLM's OpenAI routes need it; SGLang's `/generate` has one model).
    pub model: Option<&'a str>,
    /// The whole prompt as token ids.
    pub tokens: &'a [u32],
    /// Label token ids whose log-probabilities are wanted, in the order to return them.
    pub labels: &'a [u32],
    /// Keeps requests apart in the engine's prefix cache (both engines hash it in).
    pub cache_salt: Option<&'a str>,
}

/// What the engine answered.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreAnswer {
    /// Log-probability per label, in the request's order.
    pub logprobs: Vec<f64>,
    pub prompt_tokens: u64,
    /// Prompt tokens served from the engine's prefix cache (0 when not reported).
    pub cached_tokens: u64,
}

/// The engine's answer lacks what a scoring answer must have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScoreError {
    #[error("{0}")]
    Shape(String),
    #[error("the engine returned no log-probability for label token {0}")]
    MissingLabel(u32),
}

/// Several prompts scored in one engine call (a retrieval step's beams), each with its own
/// labels.
#[derive(Debug, Clone, Copy)]
pub struct ScoreBatch<'a> {
    pub model: Option<&'a str>,
    pub prompts: &'a [Vec<u32>],
    /// Per prompt, the label token ids whose log-probabilities are wanted.
    pub labels: &'a [Vec<u32>],
}

impl ScoreBatch<'_> {
    /// Every prompt's labels together, sorted and deduplicated.
    pub fn label_union(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.labels.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// What the engine answered for a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchAnswer {
    /// Per prompt, a log-probability per label, in the request's order.
    pub logprobs: Vec<Vec<f64>>,
    /// Over the whole batch.
    pub prompt_tokens: u64,
    /// Over the whole batch, as far as the engine reports it (see each engine's reader).
    pub cached_tokens: u64,
}

/// Splits prompts (given by their labels, in order) into as few consecutive calls as keep each
/// call's label union within `max_labels`; one call whenever the whole union fits. Returns each
/// call's prompt indices.
pub fn split_by_label_union<'a>(
    labels: impl IntoIterator<Item = &'a [u32]>,
    max_labels: usize,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut union: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for (i, l) in labels.into_iter().enumerate() {
        let added = l.iter().filter(|t| !union.contains(t)).count();
        if !cur.is_empty() && union.len() + added > max_labels {
            out.push(std::mem::take(&mut cur));
            union.clear();
        }
        union.extend(l.iter().copied());
        cur.push(i);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::split_by_label_union;

    #[test]
    fn one_call_while_the_label_union_fits() {
        let l: [&[u32]; 3] = [&[1, 2, 3], &[3, 4], &[5, 6, 7]];
        assert_eq!(split_by_label_union(l, 128), vec![vec![0, 1, 2]]);
        // Union {1,2,3,4} fits in 4; adding 5,6,7 would not: a second call.
        assert_eq!(split_by_label_union(l, 4), vec![vec![0, 1], vec![2]]);
        assert_eq!(split_by_label_union(l, 3), vec![vec![0], vec![1], vec![2]]);
        assert!(split_by_label_union(std::iter::empty::<&[u32]>(), 128).is_empty());
    }
}
