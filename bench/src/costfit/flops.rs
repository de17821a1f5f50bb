//! What the arithmetic alone predicts for `b/a`: attention FLOPs per attended pair over
//! linear-layer FLOPs per computed token, from the served model's Hugging Face `config.json`
//! (decoder layers of the Llama/Qwen2 shape: q, k, v, o projections and a gated MLP).
//!
//! Per layer, a token's linear layers are `2·h·(nh·d + 2·nkv·d + nh·d + 3·I)` FLOPs (one
//! multiply-add = 2); a pair costs `4·nh·d` (q·k for every head, then p·v). The layer count
//! cancels. Norms, RoPE, the softmax and the one logits row of a `max_tokens: 1` prefill are
//! left out: they are per token or per request, small beside these, and land in `a` or `c`.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::error::BenchError;

/// The layer shape a FLOP count needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Shape {
    pub hidden_size: u64,
    pub intermediate_size: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub head_dim: u64,
    pub num_hidden_layers: u64,
}

impl Shape {
    /// From `config.json`'s text; the error names the missing field.
    pub fn from_config(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |k: &str| {
            v[k].as_u64()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("no positive integer `{k}`"))
        };
        let hidden_size = field("hidden_size")?;
        let heads = field("num_attention_heads")?;
        Ok(Self {
            hidden_size,
            intermediate_size: field("intermediate_size")?,
            num_attention_heads: heads,
            // Absent: multi-head attention (as transformers defaults it).
            num_key_value_heads: field("num_key_value_heads").unwrap_or(heads),
            head_dim: field("head_dim").unwrap_or(hidden_size / heads),
            num_hidden_layers: field("num_hidden_layers")?,
        })
    }

    pub fn read(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path)
            .map_err(BenchError::io(format!("reading {}", path.display())))?;
        Self::from_config(&text).map_err(|e| BenchError::Setup(format!("{}: {e}", path.display())))
    }

    /// Linear-layer FLOPs of one token, all layers.
    pub fn linear_flops_per_token(&self) -> f64 {
        let (h, d) = (self.hidden_size as f64, self.head_dim as f64);
        let (nh, nkv) = (
            self.num_attention_heads as f64,
            self.num_key_value_heads as f64,
        );
        let per_layer =
            2.0 * h * (2.0 * nh * d + 2.0 * nkv * d + 3.0 * self.intermediate_size as f64);
        per_layer * self.num_hidden_layers as f64
    }

    /// Attention FLOPs of one query–key pair, all layers.
    pub fn attention_flops_per_pair(&self) -> f64 {
        4.0 * (self.num_attention_heads * self.head_dim * self.num_hidden_layers) as f64
    }

    /// KV bytes of one token in a 16-bit cache: K and V of every KV head, every layer.
    pub fn kv_bytes_per_token(&self) -> u64 {
        2 * 2 * self.num_key_value_heads * self.head_dim * self.num_hidden_layers
    }

    /// The `b/a` a cost proportional to FLOPs would give.
    pub fn ratio(&self) -> f64 {
        self.attention_flops_per_pair() / self.linear_flops_per_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_testbed_models_ratios() {
        // examples/testbed/make_model.py's tiny Qwen2.
        let tiny = Shape::from_config(
            r#"{"hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 65536}"#,
        )
        .expect("tiny config");
        assert_eq!(tiny.head_dim, 64);
        // 2·256·(2·256 + 2·128 + 3·1024) per layer, 4·4·64 per pair per layer.
        assert_eq!(tiny.linear_flops_per_token(), 4.0 * 1_966_080.0);
        assert_eq!(tiny.attention_flops_per_pair(), 4.0 * 1024.0);
        assert!((tiny.ratio() - 1024.0 / 1_966_080.0).abs() < 1e-15);
        assert_eq!(tiny.kv_bytes_per_token(), crate::testbed::KV_TOKEN_BYTES);
        // Qwen2-1.5B's layer shape (head_dim given explicitly here).
        let big = Shape::from_config(
            r#"{"hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
                "num_key_value_heads": 2, "head_dim": 128, "num_hidden_layers": 2}"#,
        )
        .expect("1.5b config");
        assert!((big.ratio() - 6144.0 / 93_585_408.0).abs() < 1e-15);
        assert_eq!(big.kv_bytes_per_token(), 2 * 2 * 2 * 128 * 2);
    }

    #[test]
    fn a_missing_field_is_named() {
        let err = Shape::from_config(r#"{"hidden_size": 8}"#).expect_err("incomplete");
        assert!(err.contains("num_attention_heads"), "{err}");
        assert!(Shape::from_config("nope").is_err());
    }
}
