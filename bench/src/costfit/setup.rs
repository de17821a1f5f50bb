//! The engine `bench costfit` measures and what it serves: the engine given (`--upstream`) or
//! started with the testbed (with the item pool's connector), checked ready; the served
//! model's name, longest prompt and FLOP ratio (its `config.json`, from the model directory
//! vLLM names as the model's `root`).

use std::path::PathBuf;

use super::args::CostfitArgs;
use super::flops;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::testbed::{self, Instance, Layout, Testbed};

/// The engine: given, or started with the testbed (with the item pool's connector).
pub async fn engine(
    args: &CostfitArgs,
    client: &HttpClient,
) -> Result<(Instance, Option<Testbed>), BenchError> {
    let (instance, tb) = match &args.upstream {
        Some(up) => {
            let instance = Instance {
                name: "upstream".into(),
                upstream: up.trim_end_matches('/').to_string(),
                kv_events: args.kv_events.clone(),
            };
            (instance, None)
        }
        None => {
            let block_bytes = testbed::BLOCK_TOKENS * testbed::KV_TOKEN_BYTES;
            let mut tb = Testbed::new(&args.testbed_dir, block_bytes)?.with_model(args.model);
            let layout = Layout {
                kv_blocks: args.kv_blocks,
                pool_bytes: args.pool_bytes,
            };
            let name = format!("costfit-{}", args.model.name());
            let i = tokio::task::block_in_place(|| tb.start_named(&name, layout))?;
            (i, Some(tb))
        }
    };
    let health = format!("{}/health", instance.upstream);
    let ready = match health.parse() {
        Ok(uri) => client.get(uri).await.map(|r| r.status().as_u16()).ok(),
        Err(_) => None,
    };
    if ready != Some(200) {
        return Err(BenchError::Setup(format!(
            "the engine at {} is not ready (GET /health: {}); start one with {}",
            instance.upstream,
            ready.map_or("no answer".to_string(), |s| s.to_string()),
            testbed::up_command("--item-pool")
        )));
    }
    Ok((instance, tb))
}

/// What the engine serves.
pub struct Served {
    pub name: String,
    /// The longest sequence (prompt + generated) the engine takes.
    pub max_len: Option<u64>,
    /// The layer shape from its `config.json` (None when unreadable: no FLOP ratio).
    pub shape: Option<flops::Shape>,
}

impl Served {
    /// Attention FLOPs per pair over linear FLOPs per token ([`flops`]).
    pub fn flop_ratio(&self) -> Option<f64> {
        self.shape.map(|s| s.ratio())
    }
}

/// The served model: `--served-model` or the engine's first, its `max_model_len`, and its
/// layer shape from `--model-config` or `config.json` under the model's `root`.
pub async fn served(
    args: &CostfitArgs,
    client: &HttpClient,
    upstream: &str,
) -> Result<Served, BenchError> {
    let text = http::get_text(client, &format!("{upstream}/v1/models")).await?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let models = v["data"].as_array().cloned().unwrap_or_default();
    let entry = match &args.served_model {
        Some(name) => models.iter().find(|m| m["id"] == name.as_str()),
        None => models.first(),
    };
    let name = match (&args.served_model, entry) {
        (Some(n), _) => n.clone(),
        (None, Some(m)) => m["id"].as_str().unwrap_or_default().to_string(),
        (None, None) => {
            return Err(BenchError::Setup(format!(
                "{upstream}/v1/models lists no model: {text}"
            )));
        }
    };
    let max_len = entry.and_then(|m| m["max_model_len"].as_u64());
    let config = (args.model_config.clone()).or_else(|| {
        let root = entry?["root"].as_str()?;
        Some(PathBuf::from(root).join("config.json"))
    });
    let shape = match config {
        Some(path) => match flops::Shape::read(&path) {
            Ok(shape) => Some(shape),
            Err(e) => {
                eprintln!("bench costfit: warning: no FLOP ratio: {e} (give --model-config)");
                None
            }
        },
        None => {
            eprintln!(
                "bench costfit: warning: no FLOP ratio: the engine names no model root (give \
                 --model-config)"
            );
            None
        }
    };
    Ok(Served {
        name,
        max_len,
        shape,
    })
}
