//! Talking to the engine for retrieval: the prompt (user + instruction as token ids, padded
//! to a whole number of KV blocks), one scoring call per live beam, and the check that the
//! index's code tokens exist in the served model.
//!
//! The scoring call is the engine's ranking dialect (`recache_adapters::Engine::score_body`:
//! vLLM `logprob_token_ids` + `allowed_token_ids`, SGLang `token_ids_logprob`) with the
//! beam's code tokens appended to the prompt and the trie's allowed next tokens as labels.
//! Every beam's call starts with the same prompt, so the engine computes it once and the
//! others read it from its prefix cache; padding the prompt to a block boundary
//! (`--retrieve-align`) makes all of it cacheable, leaving each call only its beam's tokens.

use std::sync::Arc;

use recache_adapters::Engine;
use recache_adapters::scoring::ScoreRequest;

use super::search::{Scorer, StepScores};
use crate::client::EngineClient;
use crate::engine::api::TextOrTokens;
use crate::engine::{EngineError, post_json, tokenize};

/// Instruction appended after the user when the request gives none.
pub const DEFAULT_INSTRUCTION: &str = "\nThe next item the user will interact with is:";

/// Scores beams of one request against the engine.
pub struct EngineScorer<'a> {
    pub client: &'a Arc<EngineClient>,
    pub engine: Engine,
    pub model: Option<&'a str>,
    pub prompt: &'a [u32],
}

impl Scorer for EngineScorer<'_> {
    type Error = EngineError;

    async fn score(&self, beam: &[u32], next: &[u32]) -> Result<StepScores, EngineError> {
        let mut tokens = Vec::with_capacity(self.prompt.len() + beam.len());
        tokens.extend_from_slice(self.prompt);
        tokens.extend_from_slice(beam);
        let req = ScoreRequest {
            model: self.model,
            tokens: &tokens,
            labels: next,
            cache_salt: None,
        };
        let body = self.engine.score_body(&req);
        let answer = post_json(self.client, self.engine.scoring_path(), &body).await?;
        let s = self
            .engine
            .read_score(&answer, next)
            .map_err(|e| EngineError::BadEngineAnswer(e.to_string()))?;
        Ok(StepScores {
            logprobs: s.logprobs,
            prompt_tokens: s.prompt_tokens,
            cached_tokens: s.cached_tokens,
        })
    }
}

/// The search's prompt: `pad* user instruction`, with as many pad tokens in front as make its
/// length a multiple of `align` (0 or 1: no padding).
pub async fn prompt(
    client: &EngineClient,
    model: Option<&str>,
    user: &TextOrTokens,
    instruction: Option<&TextOrTokens>,
    align: usize,
    pad: u32,
) -> Result<Vec<u32>, EngineError> {
    let default = TextOrTokens::Text(DEFAULT_INSTRUCTION.to_string());
    let instruction = instruction.unwrap_or(&default);
    let mut tokens = match (user, instruction) {
        // One call for both: the text is tokenized as the model would read it.
        (TextOrTokens::Text(u), TextOrTokens::Text(i)) => {
            tokenize(client, model, &format!("{u}{i}")).await?
        }
        (u, i) => {
            let mut t = match u {
                TextOrTokens::Text(s) => tokenize(client, model, s).await?,
                TextOrTokens::Tokens(t) => t.clone(),
            };
            match i {
                TextOrTokens::Text(s) => t.extend(tokenize(client, model, s).await?),
                TextOrTokens::Tokens(s) => t.extend_from_slice(s),
            }
            t
        }
    };
    if align > 1 && tokens.len() % align != 0 {
        let n = align - tokens.len() % align;
        tokens.splice(0..0, std::iter::repeat_n(pad, n));
    }
    Ok(tokens)
}

/// Asks the engine to score the highest code token after itself: a 4xx means the served
/// model does not have it. Returns the error to answer with, naming the fix.
pub async fn check_vocab(
    client: &EngineClient,
    engine: Engine,
    model: Option<&str>,
    highest: u32,
) -> Result<(), EngineError> {
    let req = ScoreRequest {
        model,
        tokens: &[highest],
        labels: &[highest],
        cache_salt: None,
    };
    match post_json(client, engine.scoring_path(), &engine.score_body(&req)).await {
        Err(EngineError::Engine { status, body }) if status.is_client_error() => {
            let said = body["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| body.to_string());
            Err(EngineError::Config(format!(
                "the retrieval index's codes reach token id {highest} but the served model \
                 refuses it ({said}); rebuild the index with a lower --token-base, --levels or \
                 --codebook (recache items index), or serve a model with more than {highest} ids"
            )))
        }
        other => other.map(|_| ()),
    }
}
