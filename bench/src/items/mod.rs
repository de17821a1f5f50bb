//! `recache items index`: build the retrieval index of a catalog and write it where `recache
//! serve --retrieve-index` reads it; a progress bar on stderr, a JSON summary on stdout. The
//! `recache` binary hands `items` to this crate's (`recache-bench items ...`): the serving
//! binary links no offline index builder.
//!
//! - [`semantic`]: semantic IDs for a catalog (residual k-means over item-text features).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::progress::Progress;
use recache::harness::{IndexError, RetrieveIndex};

use self::semantic::{SemanticArgs, build_index};

pub mod semantic;

/// `recache items ...` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ItemsCmd {
    /// Semantic IDs for a catalog (residual k-means over item-text features) and their prefix
    /// trie, for `recache serve --retrieve-index`.
    Index(IndexArgs),
}

#[derive(clap::Args, Debug)]
pub struct IndexArgs {
    /// Item file: a JSON object `{"<id>": {"title", "brand"?, "categories"?, "description"?}}`
    #[arg(long)]
    pub items: PathBuf,
    /// Where to write the index (JSON)
    #[arg(long)]
    pub out: PathBuf,
    /// Code tokens per item before disambiguation [default: the fewest whose codes outnumber
    /// the items: codebook^levels >= items]
    #[arg(long)]
    pub levels: Option<usize>,
    /// Codes per level (at most 128: one engine request scores at most 128 given tokens)
    #[arg(long, default_value_t = 128)]
    pub codebook: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Vocabulary id of the first code token; the index uses levels*codebook + up to 128 ids
    /// from there, which the served model must have
    #[arg(long, default_value_t = 32768)]
    pub token_base: u32,
    /// Dimensions of the hashed text features
    #[arg(long, default_value_t = 256)]
    pub dims: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ItemsError {
    #[error(transparent)]
    Build(#[from] semantic::SemanticError),
    #[error("the built index does not load: {0}")]
    Check(#[from] IndexError),
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl ItemsCmd {
    pub fn run(self) -> Result<(), ItemsError> {
        match self {
            ItemsCmd::Index(a) => index(a),
        }
    }
}

fn index(a: IndexArgs) -> Result<(), ItemsError> {
    let args = SemanticArgs {
        levels: a.levels.unwrap_or(0),
        codebook: a.codebook,
        seed: a.seed,
        token_base: a.token_base,
        dims: a.dims,
    };
    // The pass count is levels x iterations, and `levels` 0 is chosen from the catalog inside
    // build_index: the bar takes its length from the first report.
    let mut bar: Option<Progress> = None;
    let (file, stats) = build_index(&a.items, &args, &mut |done, total| {
        bar.get_or_insert_with(|| Progress::new(total as u64, "k-means passes"))
            .set(done as u64)
    })?;
    if let Some(bar) = bar {
        bar.finish();
    }
    let text = serde_json::to_string(&file).unwrap_or_default();
    RetrieveIndex::new(file)?;
    write_atomic(&a.out, text.as_bytes())?;
    let mut summary = serde_json::to_value(&stats).unwrap_or_default();
    summary["out"] = a.out.display().to_string().into();
    println!("{summary}");
    Ok(())
}

/// Writes beside `path` and renames over it, so a reader never sees half a file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ItemsError> {
    let fail = |source| ItemsError::Write {
        path: path.display().to_string(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    tmp.write_all(bytes).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// The index of `items` with this command's defaults, as JSON (for benchmarks).
pub fn build_default(items: &Path) -> Result<String, ItemsError> {
    let (file, _) = build_index(items, &SemanticArgs::default(), &mut |_, _| {})?;
    Ok(serde_json::to_string(&file).unwrap_or_default())
}
