//! `recache bench retrieve` flags, and the index it searches (given, or built from `--items`
//! with `recache items index`'s defaults into a temporary file).

use std::path::PathBuf;

use recache_adapters::Engine;

use crate::error::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct RetrieveBenchArgs {
    /// Engine base URL (the testbed's UPSTREAM)
    #[arg(long)]
    pub upstream: String,
    /// Engine behind it [default: detected]
    #[arg(long)]
    pub engine: Option<Engine>,
    /// Interaction file (`user item item ...` per line), e.g. ../shared/data/amazon/Beauty.txt
    #[arg(long)]
    pub data: PathBuf,
    /// Item file (`{"<idx>": {"title", ...}}`): the titles of user histories, and the catalog
    /// indexed when --index is not given
    #[arg(long)]
    pub items: PathBuf,
    /// Retrieval index (`recache items index`); default: built from --items with that
    /// command's defaults
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// Beam widths, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "8,32,128")]
    pub widths: Vec<usize>,
    /// How users are written: `titles` (their items' titles, any model) or `codes` (their
    /// items' codes with SEP between, as the trained retrieval model `up --model retriever`
    /// reads them; held-out users only, and the rows gain Recall@10 / NDCG@10 against
    /// popularity)
    #[arg(long, value_enum, default_value_t = PromptKind::Titles)]
    pub prompt: PromptKind,
    /// Users (one retrieval each per width), drawn with --seed
    #[arg(long, default_value_t = 24)]
    pub users: usize,
    /// History items in a user's prompt (the most recent, without the held-out last one)
    #[arg(long, default_value_t = 20)]
    pub history: usize,
    /// Items per retrieval (capped at the width)
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    /// recache's --retrieve-align (the engine's KV block size; the testbed's is 32)
    #[arg(long, default_value_t = crate::testbed::BLOCK_TOKENS as usize)]
    pub align: usize,
    /// Pad token for the alignment [default: the engine's token for "\n"]
    #[arg(long)]
    pub pad_token: Option<u32>,
    /// Also run width 32 without alignment, to show what padding saves
    #[arg(long)]
    pub compare_align: bool,
    /// Skip the unconstrained beam search baseline
    #[arg(long)]
    pub no_unconstrained: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the report as JSON (default: a table)
    #[arg(long)]
    pub json: bool,
    /// Write a PNG: latency and computed tokens per width
    #[arg(long)]
    pub png: Option<PathBuf>,
}

/// `--prompt`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    Titles,
    Codes,
}

impl RetrieveBenchArgs {
    pub fn unconstrained(&self) -> bool {
        !self.no_unconstrained
    }
}

/// The index to search: `--index`, or one built now from `--items` (kept alive by the
/// returned temporary path).
pub fn index_path(
    args: &RetrieveBenchArgs,
) -> Result<(PathBuf, Option<tempfile::TempPath>), BenchError> {
    if let Some(p) = &args.index {
        return Ok((p.clone(), None));
    }
    eprintln!(
        "bench retrieve: building an index from {} (recache items index defaults)",
        args.items.display()
    );
    let built = crate::items::build_default(&args.items)
        .map_err(|e| BenchError::Setup(format!("building the index: {e}")))?;
    let tmp =
        tempfile::NamedTempFile::new().map_err(BenchError::io("creating a temporary index"))?;
    std::fs::write(tmp.path(), built).map_err(BenchError::io("writing the temporary index"))?;
    let path = tmp.into_temp_path();
    Ok((path.to_path_buf(), Some(path)))
}
