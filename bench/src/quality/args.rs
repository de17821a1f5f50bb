//! `recache bench quality`'s command line, and the `bench gr` settings each layout runs with
//! (gr's own defaults for everything quality does not set).

use std::path::PathBuf;

use clap::{FromArgMatches, Parser};

use crate::error::BenchError;
use crate::gr::GrArgs;
use crate::gr::modes::Mode;

#[derive(clap::Args, Debug, Clone)]
pub struct QualityArgs {
    /// Interaction file: one line per user, `user_id item_id item_id ...` in time order
    #[arg(long)]
    pub data: PathBuf,
    /// Item file: JSON object `{"<index>": {"title": ...}}`; item id i takes title i mod count
    #[arg(long)]
    pub items: PathBuf,
    /// Engine base URL; the pool layouts need it started with the item pool's connector
    /// (`examples/testbed/up --model ranker --item-pool`)
    #[arg(long)]
    pub upstream: String,
    /// Layouts to measure, in order (any `bench gr` mode: up, ip, ip-pool, bat, bat-pool, ...)
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "up,ip,ip-pool,bat,bat-pool"
    )]
    pub layouts: Vec<Mode>,
    /// Print one JSON object per layout and baseline (else a table)
    #[arg(long)]
    pub json: bool,
    /// Held-out users to rank at most (in a fixed pseudo-random order) [default: all]
    #[arg(long)]
    pub users: Option<usize>,
    /// Profile: the user's last N items before the held-out one, as title tokens
    #[arg(long, default_value_t = 20)]
    pub history_items: usize,
    /// Candidates per request: the held-out item + others drawn by popularity
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    /// Tokens per item text (its title cut or cycled to this length)
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    /// Item tokens: each item's text starts with the token N + its id and the title fills the
    /// other --item-tokens - 1, as a ranker trained with hp `item_ids` N reads items
    /// [default: titles alone]
    #[arg(long, value_name = "N")]
    pub item_id_base: Option<u32>,
    /// Seed of the candidate draws and their order
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Served model name [default: the engine's first model]
    #[arg(long)]
    pub model: Option<String>,
    /// The engine's dialect: vllm or sglang [default: detected]
    #[arg(long)]
    pub engine: Option<recache_adapters::Engine>,
    /// The engine's KV-event publisher: bat layouts then read the engine's cache, as `recache
    /// serve --kv-events` does
    #[arg(long)]
    pub kv_events: Option<String>,
    /// The engine's KV cache in blocks (as started), to size bat's user-prefix cache
    #[arg(long)]
    pub kv_blocks: Option<u64>,
    /// Requests in flight at most
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Token id of the first candidate's label, as the ranker was trained (`recache serve
    /// --rank-label-base`; a ranker with `label_base` 4096 in its recipe needs 4096)
    #[arg(long, default_value_t = recache::harness::DEFAULT_LABEL_BASE)]
    pub rank_label_base: u32,
    /// The pooled layouts' recompute setting (`bench gr --rank-pool-recompute`): none |
    /// link:k=N[:pos=true]; rows carry it and their computed tokens
    #[arg(long, default_value = "none", value_name = "SPEC")]
    pub rank_pool_recompute: recache::harness::RecomputeSpec,
    /// Which token scores a candidate (`recache serve --rank-readout`): auto (item in pooled
    /// layouts, label elsewhere), label, or item (its own first token; the testbed ranker's
    /// item-id tokens); rows carry it. A list (`label,item`) runs every layout once per
    /// readout: the same-head table (docs/quality.md)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    pub rank_readout: Vec<recache::harness::Readout>,
    /// Runs of every layout and readout, each on an emptied engine prefix cache and a pool
    /// reset to its precomputed set; the table says whether they ranked every user alike
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Runs after the first send the users in another order (a shuffle seeded by the run), so
    /// the spread over runs shows how much a layout depends on the requests before it: an
    /// item-first prompt orders its items by what earlier requests asked for
    #[arg(long)]
    pub reorder: bool,
    /// Every user is ranked twice, its second request scored: a returning user's view, where
    /// layouts reuse its cached profile (`up-pool`: the pooled items after it). Users go in
    /// chunks of 32, each chunk's first visits before its second ones
    #[arg(long)]
    pub revisit: bool,
    /// Bootstrap resamples over users for every row's 95% interval (`ci95`, `vs`); drawn
    /// from a fixed seed, so a rerun gives the same intervals
    #[arg(long, default_value_t = 1000)]
    pub bootstrap: usize,
    /// Pool layouts: items computed into the pool before the requests, most popular first
    /// [default: every item of --data]; the rest are filled while serving, as recache does
    #[arg(long)]
    pub pool_warm: Option<usize>,
}

/// `bench gr`'s command line with only the required flags: its defaults, from clap itself.
#[derive(Parser)]
struct GrDefaults {
    #[command(flatten)]
    gr: GrArgs,
}

impl QualityArgs {
    /// The `bench gr` settings every layout's run with `readout` uses: gr's defaults, the
    /// workload shape and engine given here, closed loop (quality does not depend on arrival
    /// times).
    pub fn gr(&self, readout: recache::harness::Readout) -> Result<GrArgs, BenchError> {
        if self.item_tokens == 0 {
            return Err(BenchError::Setup("--item-tokens must be at least 1".into()));
        }
        if self.repeat == 0 {
            return Err(BenchError::Setup("--repeat must be at least 1".into()));
        }
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let argv = [
            "gr".to_string(),
            "--data".into(),
            path(&self.data),
            "--items".into(),
            path(&self.items),
            "--upstream".into(),
            self.upstream.clone(),
        ];
        let matches = <GrDefaults as clap::CommandFactory>::command()
            .try_get_matches_from(argv)
            .map_err(|e| BenchError::Setup(format!("bench gr defaults: {e}")))?;
        let mut gr = GrDefaults::from_arg_matches(&matches)
            .map_err(|e| BenchError::Setup(format!("bench gr defaults: {e}")))?
            .gr;
        gr.modes = self.layouts.clone();
        gr.json = self.json;
        gr.seed = self.seed;
        gr.candidates = self.candidates;
        gr.item_tokens = self.item_tokens;
        gr.rate = 0.0;
        gr.concurrency = self.concurrency;
        gr.model = self.model.clone();
        gr.engine = self.engine;
        gr.kv_events = self.kv_events.clone();
        gr.kv_blocks = self.kv_blocks;
        gr.pool_warm = self.pool_warm;
        gr.rank_label_base = self.rank_label_base;
        gr.rank_pool_recompute = self.rank_pool_recompute;
        gr.rank_readout = readout;
        // Quality compares rankings, not throughput: a pool on top of the engine's cache
        // changes no answer.
        gr.allow_unequal_memory = true;
        Ok(gr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recache::harness::Readout;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        quality: QualityArgs,
    }

    fn parse(extra: &[&str]) -> QualityArgs {
        let base = [
            "quality",
            "--data",
            "d",
            "--items",
            "i",
            "--upstream",
            "http://e",
        ];
        Cli::try_parse_from(base.iter().chain(extra))
            .unwrap()
            .quality
    }

    #[test]
    fn item_id_base_is_optional_and_items_need_a_token() {
        assert_eq!(parse(&[]).item_id_base, None);
        assert_eq!(
            parse(&["--item-id-base", "20480"]).item_id_base,
            Some(20480)
        );
        let err = parse(&["--item-tokens", "0"])
            .gr(Readout::Auto)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("--item-tokens")));
    }

    /// Each layout's in-process recache settings for the command line with `extra`.
    fn rank_per_layout(extra: &[&str]) -> Vec<(Mode, recache::harness::RankArgs)> {
        let args = parse(extra);
        let gr = args.gr(args.rank_readout[0]).unwrap();
        [Mode::Up, Mode::Ip, Mode::IpPool, Mode::Bat, Mode::BatPool]
            .into_iter()
            .map(|mode| {
                (
                    mode,
                    crate::gr::proxy::setup_for(mode, &gr, 32768, 100).rank,
                )
            })
            .collect()
    }

    /// Every layout's in-process recache gets the label base the ranker was trained with.
    #[test]
    fn rank_label_base_reaches_every_layouts_recache() {
        for (extra, want) in [(&[][..], 256), (&["--rank-label-base", "4096"][..], 4096)] {
            assert_eq!(parse(extra).rank_label_base, want);
            for (mode, rank) in rank_per_layout(extra) {
                assert_eq!(rank.resolve().label_base, want, "{}", mode.name());
            }
        }
    }

    /// The readout reaches every layout's recache; a list gives each run its own.
    #[test]
    fn rank_readout_reaches_every_layout() {
        for (mode, rank) in rank_per_layout(&["--rank-readout", "item"]) {
            assert_eq!(rank.rank_readout, Some(Readout::Item), "{}", mode.name());
        }
        let default = parse(&[]);
        assert_eq!(default.rank_readout, [Readout::Auto]);
        assert_eq!(
            default.gr(Readout::Auto).unwrap().rank_readout,
            Readout::Auto
        );
        let both = parse(&["--rank-readout", "label,item"]);
        assert_eq!(both.rank_readout, [Readout::Label, Readout::Item]);
        assert_eq!(both.gr(Readout::Item).unwrap().rank_readout, Readout::Item);
        assert_eq!((both.repeat, both.bootstrap), (1, 1000));
        let err = parse(&["--repeat", "0"]).gr(Readout::Label).err();
        assert!(err.is_some_and(|e| e.to_string().contains("--repeat")));
    }

    /// The recompute setting reaches the pooled layouts' recache and only theirs.
    #[test]
    fn rank_pool_recompute_reaches_the_pooled_layouts() {
        for (mode, rank) in rank_per_layout(&["--rank-pool-recompute", "link:k=2"]) {
            let want = mode.uses_pool().then(|| "link:k=2".to_string());
            assert_eq!(rank.rank_pool_recompute, want, "{}", mode.name());
        }
        let base = [
            "quality",
            "--data",
            "d",
            "--items",
            "i",
            "--upstream",
            "http://e",
        ];
        let bad = ["--rank-pool-recompute", "blend:ratio=0.1"];
        let err = Cli::try_parse_from(base.iter().chain(&bad)).err();
        assert!(err.is_some(), "an unknown recompute setting is refused");
    }
}
