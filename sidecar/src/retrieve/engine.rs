//! Talking to the engine for retrieval: the prompt (user + instruction as token ids, padded
//! to a whole number of KV blocks), one scoring call per search step, and the check that the
//! index's code tokens exist in the served model.
//!
//! A step's call carries every live beam as its own prompt (`recache_adapters::Engine::
//! score_batch_body`: on vLLM one completions call with a list of prompts and the union of
//! their allowed tokens, on SGLang one batched `/generate` with each prompt's own labels);
//! each beam reads only its own tokens' log-probabilities, which are over the whole vocabulary,
//! so the scores equal one call per beam. Every prompt starts with the same prompt, so the
//! engine computes it once and reads it from its prefix cache after; padding it to a block
//! boundary (`--retrieve-align`) makes all of it cacheable. The first call is routed like any
//! of recache's own prompts (cache-aware when the routing rule is); every later step goes to
//! the replica that answered it, which holds the prompt's KV, and is routed anew only when
//! that replica fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::Method;
use recache_adapters::Engine;
use recache_adapters::scoring::{BatchAnswer, ScoreBatch, ScoreRequest, split_by_label_union};

use super::index::MAX_CHILDREN;
use super::search::{Ask, Scorer, StepScores, join_all};
use crate::client::EngineClient;
use crate::engine::api::TextOrTokens;
use crate::engine::{EngineError, answer, post_json, tokenize};

/// Instruction appended after the user when the request gives none.
pub const DEFAULT_INSTRUCTION: &str = "\nThe next item the user will interact with is:";

/// No replica chosen yet.
const UNPINNED: usize = usize::MAX;

/// Scores the beams of one request against the engine.
pub struct EngineScorer<'a> {
    client: &'a Arc<EngineClient>,
    engine: Engine,
    model: Option<&'a str>,
    prompt: &'a [u32],
    /// The replica that answered the search's first call; [`UNPINNED`] until then.
    replica: AtomicUsize,
}

impl<'a> EngineScorer<'a> {
    pub fn new(
        client: &'a Arc<EngineClient>,
        engine: Engine,
        model: Option<&'a str>,
        prompt: &'a [u32],
    ) -> Self {
        Self {
            client,
            engine,
            model,
            prompt,
            replica: AtomicUsize::new(UNPINNED),
        }
    }

    /// One engine call for the asks `idx`: on the pinned replica, else (first call, or the
    /// pinned replica failed) routed, pinning whichever replica answers.
    async fn call(&self, asks: &[Ask<'_>], idx: &[usize]) -> Result<BatchAnswer, EngineError> {
        let prompts: Vec<Vec<u32>> = idx
            .iter()
            .map(|&i| [self.prompt, asks[i].beam].concat())
            .collect();
        let labels: Vec<Vec<u32>> = idx.iter().map(|&i| asks[i].next.to_vec()).collect();
        let body = self.engine.score_batch_body(&ScoreBatch {
            model: self.model,
            prompts: &prompts,
            labels: &labels,
        });
        let path = self.engine.scoring_path();
        let pinned = match self.replica.load(Ordering::Relaxed) {
            UNPINNED => None,
            i => {
                let sent = self
                    .client
                    .json_to(i, Method::POST, path, Some(&body))
                    .await;
                match sent {
                    Ok(a) if !a.status.is_server_error() => Some(a),
                    other => {
                        let why = other.map_or_else(|e| e.to_string(), |a| a.status.to_string());
                        tracing::debug!(replica = i, %why, "retrieve: pinned replica failed, routing anew");
                        None
                    }
                }
            }
        };
        let got = match pinned {
            Some(a) => a,
            None => self.client.json(Method::POST, path, Some(&body)).await?,
        };
        if let Some(r) = got.replica {
            self.replica.store(r, Ordering::Relaxed);
        }
        self.engine
            .read_score_batch(&answer(got)?, &labels)
            .map_err(|e| EngineError::BadEngineAnswer(e.to_string()))
    }
}

impl Scorer for EngineScorer<'_> {
    type Error = EngineError;

    async fn score_step(&self, asks: &[Ask<'_>]) -> Result<StepScores, EngineError> {
        // vLLM takes one `logprob_token_ids` list of at most 128 for all of a call's prompts.
        let groups = split_by_label_union(asks.iter().map(|a| a.next), MAX_CHILDREN);
        let answers = join_all(groups.iter().map(|g| self.call(asks, g))).await;
        let mut out = StepScores {
            logprobs: vec![Vec::new(); asks.len()],
            ..Default::default()
        };
        for (g, a) in groups.iter().zip(answers) {
            let a = a?;
            out.engine_calls += 1;
            out.prompt_tokens += a.prompt_tokens;
            out.cached_tokens += a.cached_tokens;
            for (&i, lp) in g.iter().zip(a.logprobs) {
                out.logprobs[i] = lp;
            }
        }
        Ok(out)
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
