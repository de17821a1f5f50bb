//! Trace generators (`examples/gen_trace`), deterministic per seed, writing the Mooncake
//! JSONL format `recache sim` reads:
//!
//! - [`conv`]: Mooncake-style multi-turn conversations (Poisson turns, shared system
//!   prompts, partial final blocks).
//! - [`adversarial`]: conversations whose reuse flips between two visible classes every
//!   epoch, so a model trained on the recent past predicts backwards (LARU's robustness test
//!   with a learned predictor).
//! - [`online_qa`]: LCR §5.2's Online-QA shape (geometric turns, log-normal gaps in
//!   intervening requests, the prompt growing each turn), or Aibrix-like closed-loop load.
//! - [`ml100k`]: MovieLens-100k's timestamped ratings replayed as user-first GR requests
//!   (one per session, the profile the history so far): GR traffic with real return times.
//! - [`gr`]: GR ranking traffic in the segment format (user-first chains, pooled items as
//!   root chains), from an interaction file such as Amazon Beauty or a synthetic population.

pub mod adversarial;
pub mod conv;
pub mod gr;
pub mod ml100k;
pub mod online_qa;
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
