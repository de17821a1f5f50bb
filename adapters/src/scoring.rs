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
