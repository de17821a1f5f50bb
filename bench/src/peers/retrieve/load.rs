//! What every system of the retrieve workload gets, built once per run: the same users
//! (`bench retrieve`'s prompts: the titles of each user's most recent items), the retrieval
//! index built from `--items` with `recache items index`'s defaults, and for the peers one
//! text prompt per user whose tokens are exactly the prompt recache's `/v1/retrieve` builds
//! for that user (`pad* user instruction`, padded in front to whole KV blocks), checked
//! against the engine's tokenizer before anything is measured. With the trained retrieval
//! model (`--testbed-model retriever`) the users are held-out users written as their items'
//! codes ([`crate::retrieve::codes`]), the index is the one the model was trained on, the
//! peers get the same tokens as a token-id prompt, and each user's last item is what the
//! rows' Recall@10 looks for.

use std::path::PathBuf;

use recache::harness::{RETRIEVE_INSTRUCTION, RetrieveIndex};
use serde_json::{Value, json};

use super::super::args::PeersArgs;
use super::super::replicas::Replicas;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::retrieve::users::{self, User};
use crate::testbed;

/// History items in a user's prompt and the seed users are drawn with (`bench retrieve`'s
/// defaults).
const HISTORY: usize = 20;
const SEED: u64 = 0;

/// Pad texts tried in turn: the first that is one token and, repeated in front of every
/// user's prompt, tokenizes to that token repeated and the prompt unchanged.
const PADS: &[&str] = &["\n", " ", "#", "."];

pub struct RetrieveLoad {
    pub users: Vec<User>,
    pub index: RetrieveIndex,
    pub index_path: PathBuf,
    _keep: tempfile::TempPath,
    /// recache's `--retrieve-align` (0: no padding) and `--retrieve-pad-token`.
    pub align: usize,
    pub pad: u32,
    /// The peers' prompts (text, or token ids for code users), one per user.
    pub prompts: Vec<Value>,
    pub mean_prompt_tokens: f64,
    /// The popularity baseline's (recall, NDCG) at 10 on the same users (code users only).
    pub popularity: Option<(f64, f64)>,
}

/// Tokens of `text` as vLLM's completions API reads a text prompt (its tokenizer's
/// special tokens included).
async fn as_completions(
    client: &HttpClient,
    upstream: &str,
    model: &str,
    text: &str,
) -> Result<Vec<u32>, BenchError> {
    let body = json!({"model": model, "prompt": text});
    let (status, v) = http::post(client, &format!("{upstream}/tokenize"), &body).await?;
    (v["tokens"].as_array())
        .and_then(|a| a.iter().map(|t| t.as_u64().map(|t| t as u32)).collect())
        .ok_or_else(|| BenchError::Setup(format!("{upstream}/tokenize answered {status}: {v}")))
}

/// The pad in front of `base` that makes it a multiple of `align` tokens.
fn padded(base: &[u32], align: usize, pad: u32) -> Vec<u32> {
    let n = (align - base.len() % align) % align;
    std::iter::repeat_n(pad, n)
        .chain(base.iter().copied())
        .collect()
}

pub async fn build(
    args: &PeersArgs,
    client: &HttpClient,
    replicas: &Replicas,
) -> Result<RetrieveLoad, BenchError> {
    let (Some(data), Some(items)) = (&args.data, &args.items) else {
        return Err(BenchError::Setup(
            "--workloads retrieve needs --data (user histories) and --items (the catalog it \
             indexes)"
                .into(),
        ));
    };
    if let Some(path) = args.testbed_model.retrieval_index() {
        return codes(args, client, replicas, (data, items), &path).await;
    }
    let users = users::load_from(data, items, args.requests, HISTORY, SEED)?;
    eprintln!(
        "[peers] retrieve: building the index of {} (recache items index defaults) ...",
        items.display()
    );
    let built = crate::items::build_default(items)
        .map_err(|e| BenchError::Setup(format!("building the retrieval index: {e}")))?;
    let tmp =
        tempfile::NamedTempFile::new().map_err(BenchError::io("creating a temporary index"))?;
    std::fs::write(tmp.path(), built).map_err(BenchError::io("writing the temporary index"))?;
    let keep = tmp.into_temp_path();
    let index = RetrieveIndex::load(&keep).map_err(|e| BenchError::Setup(e.to_string()))?;
    let (upstream, model) = (&replicas.urls[0], &replicas.model);
    // recache's prompt: one tokenize call for user + instruction, no special tokens.
    let mut bases = Vec::with_capacity(users.len());
    for u in &users {
        let text = format!("{}{RETRIEVE_INSTRUCTION}", u.text);
        bases.push(http::tokenize(client, upstream, model, &text).await?);
    }
    let align = testbed::BLOCK_TOKENS as usize;
    let mut chosen = None;
    'pads: for p in PADS {
        let t = http::tokenize(client, upstream, model, p).await?;
        let [pad] = t[..] else { continue };
        let mut texts = Vec::with_capacity(users.len());
        for (u, base) in users.iter().zip(&bases) {
            let want = padded(base, align, pad);
            let n = want.len() - base.len();
            let text = format!("{}{}{RETRIEVE_INSTRUCTION}", p.repeat(n), u.text);
            if as_completions(client, upstream, model, &text).await? != want {
                continue 'pads;
            }
            texts.push(text);
        }
        chosen = Some((align, pad, texts));
        break;
    }
    let (align, pad, texts) = match chosen {
        Some(c) => c,
        None => {
            // No pad text keeps its tokens in front of every prompt: both sides unpadded.
            let mut texts = Vec::with_capacity(users.len());
            for (u, base) in users.iter().zip(&bases) {
                let text = format!("{}{RETRIEVE_INSTRUCTION}", u.text);
                if as_completions(client, upstream, model, &text).await? != *base {
                    return Err(BenchError::Setup(format!(
                        "retrieve: user {}'s text prompt tokenizes differently as a completions \
                         prompt than recache's /v1/retrieve prompt; the peers would not get the \
                         same tokens",
                        u.id
                    )));
                }
                texts.push(text);
            }
            (0, 0, texts)
        }
    };
    let tokens = |b: &Vec<u32>| match align {
        0 => b.len(),
        a => padded(b, a, pad).len(),
    };
    let mean_prompt_tokens =
        bases.iter().map(tokens).sum::<usize>() as f64 / bases.len().max(1) as f64;
    eprintln!(
        "[peers] retrieve: {} users, {:.0} prompt tokens on average (align {align}, pad token \
         {pad}), index of {} items (codes of up to {} tokens)",
        users.len(),
        mean_prompt_tokens,
        index.file.items.len(),
        index.depth
    );
    Ok(RetrieveLoad {
        users,
        index,
        index_path: keep.to_path_buf(),
        _keep: keep,
        align,
        pad,
        prompts: texts.into_iter().map(Value::from).collect(),
        mean_prompt_tokens,
        popularity: None,
    })
}

/// The load for the trained retrieval model: code users, its own index, token-id prompts.
async fn codes(
    args: &PeersArgs,
    client: &HttpClient,
    replicas: &Replicas,
    (data, items): (&std::path::Path, &std::path::Path),
    index_path: &std::path::Path,
) -> Result<RetrieveLoad, BenchError> {
    let index = RetrieveIndex::load(index_path).map_err(|e| {
        BenchError::Setup(format!("the retrieval model's index (`up` writes it): {e}"))
    })?;
    let c = crate::retrieve::codes::load(data, items, &index, args.requests, HISTORY, SEED)?;
    let popularity = Some(crate::retrieve::codes::popularity(&c.users, &c.popular));
    let (upstream, model) = (&replicas.urls[0], &replicas.model);
    let [pad] = http::tokenize(client, upstream, model, "\n").await?[..] else {
        return Err(BenchError::Setup(
            "the engine does not write \"\\n\" as one token".into(),
        ));
    };
    let align = testbed::BLOCK_TOKENS as usize;
    let prompts: Vec<Vec<u32>> = (c.users.iter())
        .filter_map(|u| u.base_tokens())
        .map(|b| padded(&b, align, pad))
        .collect();
    let mean_prompt_tokens =
        prompts.iter().map(Vec::len).sum::<usize>() as f64 / prompts.len().max(1) as f64;
    // A copy the load owns, so the run does not depend on the testbed's file staying put.
    let tmp =
        tempfile::NamedTempFile::new().map_err(BenchError::io("creating a temporary index"))?;
    std::fs::copy(index_path, tmp.path()).map_err(BenchError::io("copying the index"))?;
    let keep = tmp.into_temp_path();
    eprintln!(
        "[peers] retrieve: {} held-out users as item codes, {mean_prompt_tokens:.0} prompt \
         tokens on average (align {align}, pad token {pad}), the model's index of {} items",
        c.users.len(),
        index.file.items.len()
    );
    Ok(RetrieveLoad {
        users: c.users,
        index,
        index_path: keep.to_path_buf(),
        _keep: keep,
        align,
        pad,
        prompts: prompts.into_iter().map(|p| json!(p)).collect(),
        mean_prompt_tokens,
        popularity,
    })
}

#[cfg(test)]
impl RetrieveLoad {
    /// One user, `text` for recache and `"padded " + text` for the peers.
    pub fn for_tests(index: RetrieveIndex, id: &str, text: &str) -> Self {
        let keep = tempfile::NamedTempFile::new()
            .expect("a temporary file")
            .into_temp_path();
        Self {
            users: vec![User {
                id: id.into(),
                text: text.into(),
                ..User::default()
            }],
            index,
            index_path: keep.to_path_buf(),
            _keep: keep,
            align: 0,
            pad: 0,
            prompts: vec![Value::from(format!("padded {text}"))],
            mean_prompt_tokens: 1.0,
            popularity: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::padded;

    #[test]
    fn padding_fills_the_front_to_whole_blocks() {
        assert_eq!(padded(&[5, 6, 7], 4, 0), vec![0, 5, 6, 7]);
        assert_eq!(padded(&[5, 6, 7, 8], 4, 0), vec![5, 6, 7, 8]);
        assert_eq!(padded(&[5], 3, 9), vec![9, 9, 5]);
    }
}
