//! Which model the testbed's engines serve (`up --model`, `RECACHE_TESTBED_MODEL`, a bench's
//! `--testbed-model`) and what the benchmarks must know of it: the name its rows carry
//! (`model`) and the KV bytes one cached token occupies, read from the checkpoint's own
//! config.json, so byte budgets (`--kv-bytes`, `--gr-kv-blocks`' equal memory) turn into the
//! block counts the served model really has.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::BenchError;

/// The variable `up` reads for `--model` (and the benches for `--testbed-model`).
pub const MODEL_ENV: &str = "RECACHE_TESTBED_MODEL";

/// A model `examples/testbed/up --model` serves.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelKind {
    /// Random-weight tiny Qwen2: 4 layers, hidden 256, 4 heads, 2 KV heads
    #[default]
    Tiny,
    /// The GR ranker trained here (`up --model ranker`)
    Ranker,
    /// Random weights in Qwen2-1.5B's layer shape (hidden 1536, FFN 8960, 12 heads, 2 KV
    /// heads), 2 layers: a GR model's cost per token and per query-key pair
    #[value(name = "qwen2-1.5b-shape")]
    Qwen2Shape,
    /// The generative-retrieval model trained here (`up --model retriever`): the tiny shape,
    /// writing the next item's code after a user's history of codes
    Retriever,
}

/// The KV cache's shape: what one token occupies in every layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeometry {
    pub layers: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
}

impl KvGeometry {
    /// Bytes of one token: K and V of every layer, `elem_bytes` per value.
    pub fn token_bytes(self, elem_bytes: u64) -> u64 {
        self.layers * self.kv_heads * self.head_dim * 2 * elem_bytes
    }

    /// From a Hugging Face config.json (head_dim, where absent, is hidden / heads).
    pub fn from_config(v: &Value) -> Option<Self> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        let heads = n("num_attention_heads").filter(|h| *h > 0)?;
        let head_dim = match n("head_dim") {
            Some(d) => d,
            None => n("hidden_size")? / heads,
        };
        Some(Self {
            layers: n("num_hidden_layers")?,
            kv_heads: n("num_key_value_heads").unwrap_or(heads),
            head_dim,
        })
    }
}

impl ModelKind {
    /// The name `up --model` takes.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Tiny => "tiny",
            ModelKind::Ranker => "ranker",
            ModelKind::Qwen2Shape => "qwen2-1.5b-shape",
            ModelKind::Retriever => "retriever",
        }
    }

    /// The name `up` serves it under unless `RECACHE_TESTBED_SERVED_MODEL_NAME` says otherwise.
    pub fn default_served_name(self) -> &'static str {
        match self {
            ModelKind::Tiny => "tiny-qwen2",
            ModelKind::Ranker => "gr-ranker",
            ModelKind::Qwen2Shape => "qwen2-1.5b-shape",
            ModelKind::Retriever => "gr-retriever",
        }
    }

    /// Its checkpoint's folder under the testbed home's `models/`.
    fn dir(self) -> &'static str {
        match self {
            ModelKind::Tiny => "tiny-qwen2",
            ModelKind::Ranker => "gr-ranker",
            ModelKind::Qwen2Shape => "qwen2-1.5b-shape",
            ModelKind::Retriever => "gr-retriever",
        }
    }

    /// The retrieval index a model was trained on (`retrieval-index.json` beside its
    /// weights), where it has one: recache must serve it with that index.
    pub fn retrieval_index(self) -> Option<PathBuf> {
        (self == ModelKind::Retriever).then(|| {
            home()
                .join("models")
                .join(self.dir())
                .join("retrieval-index.json")
        })
    }

    /// The geometry its recipe makes (make_model.py's KINDS, train_ranker.py's model): what
    /// its config.json says once made, used before it is.
    pub fn recipe_geometry(self) -> KvGeometry {
        let (layers, kv_heads, head_dim) = match self {
            ModelKind::Tiny => (4, 2, 64),
            ModelKind::Retriever => (4, 2, 64),
            ModelKind::Ranker => (4, 1, 128),
            ModelKind::Qwen2Shape => (2, 2, 128),
        };
        KvGeometry {
            layers,
            kv_heads,
            head_dim,
        }
    }
}

/// How an engine's item pool keeps K/V in host memory (`up --item-pool-codec`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolCodec {
    /// The engine's own 16-bit rows.
    #[default]
    Bf16,
    /// int8 rows with a scale per token and KV head: about twice the items in the same bytes.
    Int8,
    /// 4-bit values with a scale per 32: 3.56x the items at head_dim 128, a coarser step.
    Int4,
}

impl PoolCodec {
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
            Self::Int4 => "int4",
        }
    }
}

/// The testbed model a run uses, as far as the benchmarks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub kind: ModelKind,
    /// The name the engine serves it under (the rows' `model`).
    pub served: String,
    /// KV bytes of one token (all layers, K and V) in the engine's dtype.
    pub kv_token_bytes: u64,
    /// Its KV cache's shape.
    pub geometry: KvGeometry,
}

impl Model {
    /// `kind`'s model: its KV geometry from its config.json under the testbed home when the
    /// checkpoint is made (else its recipe's), its values 16-bit unless the testbed runs in
    /// float32 (`RECACHE_TESTBED_DTYPE`, as `up` reads it).
    pub fn resolve(kind: ModelKind) -> Result<Self, BenchError> {
        let config = home().join("models").join(kind.dir()).join("config.json");
        let geometry = match std::fs::read_to_string(&config) {
            Ok(text) => geometry_of(&config, &text)?,
            Err(_) => kind.recipe_geometry(),
        };
        let dtype = std::env::var("RECACHE_TESTBED_DTYPE").unwrap_or_default();
        let served = std::env::var("RECACHE_TESTBED_SERVED_MODEL_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| kind.default_served_name().to_string());
        Ok(Self {
            kind,
            served,
            kv_token_bytes: geometry.token_bytes(elem_bytes(&dtype, cpu_has_bf16)),
            geometry,
        })
    }

    /// Host bytes of one token in the item pool kept as `codec` says (`int8`: each token's
    /// row of one KV head as int8 with a 2-byte scale, `recache_shim.item_codec`).
    pub fn pool_token_bytes(&self, codec: PoolCodec) -> u64 {
        let g = self.geometry;
        match codec {
            PoolCodec::Bf16 => self.kv_token_bytes,
            PoolCodec::Int8 => g.layers * g.kv_heads * 2 * (g.head_dim + 2),
            // Two values a byte and a 2-byte scale per 32 values.
            PoolCodec::Int4 => g.layers * g.kv_heads * 2 * (g.head_dim / 2 + g.head_dim / 16),
        }
    }
}

fn geometry_of(path: &Path, text: &str) -> Result<KvGeometry, BenchError> {
    serde_json::from_str::<Value>(text)
        .ok()
        .as_ref()
        .and_then(KvGeometry::from_config)
        .ok_or_else(|| {
            BenchError::Setup(format!(
                "{}: not a config.json with num_hidden_layers, num_attention_heads and \
                 hidden_size (remove it; `up` makes it again)",
                path.display()
            ))
        })
}

/// Bytes of one KV value for `up --dtype` (`RECACHE_TESTBED_DTYPE`; `auto` is float32 where
/// the CPU has no bf16 instructions, as `up` decides).
fn elem_bytes(dtype: &str, bf16_cpu: impl FnOnce() -> bool) -> u64 {
    match dtype {
        "float32" => 4,
        "auto" if !bf16_cpu() => 4,
        _ => 2,
    }
}

fn cpu_has_bf16() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.split_whitespace()
            .any(|w| w == "avx512_bf16" || w == "amx_bf16")
    })
}

/// The testbed's cache (`RECACHE_TESTBED_HOME`, default `~/.cache/recache-testbed`).
pub fn home() -> PathBuf {
    match std::env::var_os("RECACHE_TESTBED_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/recache-testbed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_recipe_keeps_2_kib_a_token_in_bf16() {
        // tiny: 4 layers x 2 KV heads x 64; the shape model: 2 x 2 x 128; the ranker: 4 x 1 x 128.
        for kind in [
            ModelKind::Tiny,
            ModelKind::Qwen2Shape,
            ModelKind::Ranker,
            ModelKind::Retriever,
        ] {
            assert_eq!(kind.recipe_geometry().token_bytes(2), 2048, "{kind:?}");
        }
        assert_eq!(
            ModelKind::Tiny.recipe_geometry().token_bytes(2),
            super::super::KV_TOKEN_BYTES
        );
    }

    #[test]
    fn the_geometry_comes_from_a_config_json() {
        // What transformers 5 writes for the shape model: no head_dim, derived from hidden.
        let shape = json!({"hidden_size": 1536, "num_attention_heads": 12,
                           "num_key_value_heads": 2, "num_hidden_layers": 2});
        let g = KvGeometry::from_config(&shape).expect("geometry");
        assert_eq!(g, ModelKind::Qwen2Shape.recipe_geometry());
        let one_layer = json!({"hidden_size": 1536, "num_attention_heads": 12,
                               "num_key_value_heads": 2, "num_hidden_layers": 1});
        assert_eq!(
            KvGeometry::from_config(&one_layer).map(|g| g.token_bytes(2)),
            Some(1024)
        );
        let explicit = json!({"hidden_size": 64, "head_dim": 32, "num_attention_heads": 4,
                              "num_hidden_layers": 3});
        let g = KvGeometry::from_config(&explicit).expect("no KV heads: MHA");
        assert_eq!((g.kv_heads, g.head_dim), (4, 32));
        assert!(KvGeometry::from_config(&json!({"num_attention_heads": 0})).is_none());
        let bad = geometry_of(Path::new("/m/config.json"), "{").expect_err("not JSON");
        assert!(bad.to_string().contains("/m/config.json"), "{bad}");
    }

    #[test]
    fn float32_doubles_a_value() {
        assert_eq!(elem_bytes("", || unreachable!()), 2);
        assert_eq!(elem_bytes("bfloat16", || unreachable!()), 2);
        assert_eq!(elem_bytes("float32", || unreachable!()), 4);
        assert_eq!(elem_bytes("auto", || true), 2);
        assert_eq!(elem_bytes("auto", || false), 4);
    }

    #[test]
    fn the_names_are_ups() {
        use clap::ValueEnum;
        for kind in ModelKind::value_variants() {
            let v = kind.to_possible_value().expect("named");
            assert_eq!(v.get_name(), kind.name());
        }
        assert_eq!(
            ModelKind::Qwen2Shape.default_served_name(),
            "qwen2-1.5b-shape"
        );
    }
}
