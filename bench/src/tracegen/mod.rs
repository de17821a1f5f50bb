//! Trace generators (`examples/gen_trace`), deterministic per seed, writing the Mooncake
//! JSONL format `recache sim` reads:
//!
//! - [`conv`]: Mooncake-style multi-turn conversations (Poisson turns, shared system
//!   prompts, partial final blocks).
//! - [`adversarial`]: conversations whose reuse flips between two visible classes every
//!   epoch, so a model trained on the recent past predicts backwards (LARU's robustness test
//!   with a learned predictor).
//! - [`gr`]: GR ranking traffic in the segment format (user-first chains, pooled items as
//!   root chains), from an interaction file such as Amazon Beauty or a synthetic population.

pub mod adversarial;
pub mod conv;
pub mod gr;
pub mod rng;

use std::io::Write;
use std::path::Path;

use recache_eviction::trace::{Request, to_line};

/// Writes `requests` as JSONL to `path` (created or truncated).
pub fn write(path: &Path, requests: &[Request]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in requests {
        writeln!(f, "{}", to_line(r))?;
    }
    f.flush()
}
