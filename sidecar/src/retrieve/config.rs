//! `--retrieve-*` settings: the index to serve, the beam-width limit, and prompt alignment.

use std::path::PathBuf;
use std::sync::Arc;

use super::index::RetrieveIndex;

/// Largest `--retrieve-max-beam-width` (the beam top-k's limit, `recache_kernels::beam`).
pub const MAX_BEAM_WIDTH_LIMIT: usize = 1024;
const DEFAULT_MAX_BEAM_WIDTH: usize = 256;

/// Flags of `recache serve` for `/v1/retrieve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RetrieveArgs {
    /// Retrieval index from `recache items index` (semantic IDs of the catalog); turns on
    /// POST /v1/retrieve and the recache_retrieve completions extension [default: off]
    #[arg(long, env = "RECACHE_RETRIEVE_INDEX")]
    pub retrieve_index: Option<PathBuf>,
    /// Largest beam_width a retrieval may ask for [default: 256]
    #[arg(long, env = "RECACHE_RETRIEVE_MAX_BEAM_WIDTH")]
    pub retrieve_max_beam_width: Option<usize>,
    /// Pad retrieval prompts in front to a multiple of this many tokens (the engine's KV block
    /// size, e.g. 16 or 32), so the whole prompt is cached once and each beam's call computes
    /// only its own code tokens; needs --retrieve-pad-token [default: off]
    #[arg(long, env = "RECACHE_RETRIEVE_ALIGN")]
    pub retrieve_align: Option<usize>,
    /// Token id used for that padding (one the model reads as filler) [default: none]
    #[arg(long, env = "RECACHE_RETRIEVE_PAD_TOKEN")]
    pub retrieve_pad_token: Option<u32>,
    /// auto: run the beam search inside vLLM when its replicas advertise recache's endpoint
    /// plugin (VLLM_PLUGINS=recache-retrieve), else in recache; off: always in recache
    /// [default: auto]
    #[arg(long, env = "RECACHE_RETRIEVE_IN_ENGINE", value_parser = ["auto", "off"])]
    pub retrieve_in_engine: Option<String>,
}

/// Resolved retrieval settings.
#[derive(Debug, Clone)]
pub struct RetrieveConfig {
    pub index: Arc<RetrieveIndex>,
    pub index_path: PathBuf,
    pub max_beam_width: usize,
    /// 0: no padding.
    pub align: usize,
    pub pad_token: u32,
    /// `--retrieve-in-engine auto`.
    pub in_engine: bool,
}

/// A setting that cannot be used: the flag and why.
#[derive(Debug)]
pub struct InvalidRetrieve {
    pub setting: &'static str,
    pub why: String,
}

impl RetrieveArgs {
    /// Loads the index and checks the rest; None without `--retrieve-index`.
    pub fn try_resolve(&self) -> Result<Option<RetrieveConfig>, InvalidRetrieve> {
        let invalid = |setting, why: String| InvalidRetrieve { setting, why };
        let Some(path) = &self.retrieve_index else {
            for (set, flag) in [
                (
                    self.retrieve_max_beam_width.is_some(),
                    "--retrieve-max-beam-width",
                ),
                (self.retrieve_align.is_some(), "--retrieve-align"),
                (self.retrieve_pad_token.is_some(), "--retrieve-pad-token"),
                (self.retrieve_in_engine.is_some(), "--retrieve-in-engine"),
            ] {
                if set {
                    return Err(invalid(flag, "needs --retrieve-index".into()));
                }
            }
            return Ok(None);
        };
        let max_beam_width = self
            .retrieve_max_beam_width
            .unwrap_or(DEFAULT_MAX_BEAM_WIDTH);
        if max_beam_width == 0 || max_beam_width > MAX_BEAM_WIDTH_LIMIT {
            return Err(invalid(
                "--retrieve-max-beam-width",
                format!("must be in 1..={MAX_BEAM_WIDTH_LIMIT}; got {max_beam_width}"),
            ));
        }
        let align = self.retrieve_align.unwrap_or(0);
        let pad_token = match (align > 1, self.retrieve_pad_token) {
            (true, Some(t)) => t,
            (true, None) => {
                return Err(invalid(
                    "--retrieve-pad-token",
                    format!("--retrieve-align {align} pads prompts: name the token to pad with"),
                ));
            }
            (false, t) => t.unwrap_or(0),
        };
        let in_engine = match self.retrieve_in_engine.as_deref() {
            None | Some("auto") => true,
            Some("off") => false,
            Some(v) => {
                return Err(invalid(
                    "--retrieve-in-engine",
                    format!("auto or off; got {v}"),
                ));
            }
        };
        let index =
            RetrieveIndex::load(path).map_err(|e| invalid("--retrieve-index", e.to_string()))?;
        Ok(Some(RetrieveConfig {
            index: Arc::new(index),
            index_path: path.clone(),
            max_beam_width,
            align,
            pad_token,
            in_engine,
        }))
    }
}
