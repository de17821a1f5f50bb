//! Trace loading. Mooncake format: one JSON object per line,
//! `{"timestamp","input_length","output_length","hash_ids":[...]}`.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::BlockId;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Request {
    #[serde(default)]
    pub timestamp: Option<u64>,
    #[serde(default)]
    pub input_length: Option<u64>,
    #[serde(default)]
    pub output_length: Option<u64>,
    pub hash_ids: Vec<BlockId>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a mooncake request")]
    Parse {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("trace {0} has no requests")]
    Empty(PathBuf),
}

/// Reads a Mooncake JSONL trace; blank lines are skipped, a bad line is an
/// error naming its (1-based) line number.
pub fn load_mooncake(path: &Path) -> Result<Vec<Request>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let req = serde_json::from_str(&line).map_err(|source| TraceError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            source,
        })?;
        out.push(req);
    }
    if out.is_empty() {
        return Err(TraceError::Empty(path.to_path_buf()));
    }
    Ok(out)
}
