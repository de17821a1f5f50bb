//! How recache's item KV pool talks to each engine: where the per-request plan goes, where
//! the report comes back, and the body of a pool-only call (a fill, the list). The plan and
//! the report are the same objects on both engines (`shim/python/recache_shim/item_pool.py`'s
//! docstring); only their place differs:
//! - vLLM (KV connector `recache_shim.item_pool`): `kv_transfer_params.recache_pool` in the
//!   request, and the same field in the answer;
//! - SGLang (external unified-cache linker `recache_shim.sglang_item_pool`):
//!   `custom_params.recache_pool` as a JSON string (SGLang's typed `custom_params` takes no
//!   nested lists), inside `sampling_params` on `/generate` and at the top level on `/v1/*`;
//!   the report comes back as `meta_info.recache_pool`, a one-element list.

use serde_json::{Value, json};

use crate::Engine;

const KEY: &str = "recache_pool";
static NULL: Value = Value::Null;

impl Engine {
    /// Attaches the pool's plan, `params` = `{"recache_pool": {...}}`, to a request body.
    pub fn attach_pool_params(self, body: &mut Value, params: &Value) {
        match self {
            Engine::Vllm => body["kv_transfer_params"] = params.clone(),
            Engine::Sglang => {
                let plan = Value::String(params[KEY].to_string());
                let target = match body.get("sampling_params") {
                    Some(_) => &mut body["sampling_params"],
                    None => body,
                };
                target["custom_params"][KEY] = plan;
            }
        }
    }

    /// The pool's report in an engine answer (`Null` when there is none).
    pub fn pool_report(self, answer: &Value) -> &Value {
        match self {
            Engine::Vllm => &answer["kv_transfer_params"][KEY],
            Engine::Sglang => answer["meta_info"][KEY]
                .as_array()
                .and_then(|a| a.last())
                .unwrap_or(&NULL),
        }
    }

    /// Path and body of a pool-only call: one generated token over `prompt`, carrying `plan`
    /// (the object under `recache_pool`: `{"fill": KEY, ..}` or `{"list": true, ..}`).
    pub fn pool_call(
        self,
        prompt: &[u32],
        plan: Value,
        model: Option<&str>,
    ) -> (&'static str, Value) {
        let params = json!({ KEY: plan });
        let (path, mut body) = match self {
            Engine::Vllm => (
                crate::openai::COMPLETIONS,
                json!({"prompt": prompt, "max_tokens": 1, "temperature": 0}),
            ),
            Engine::Sglang => (
                crate::sglang::GENERATE_PATH,
                json!({"input_ids": prompt,
                       "sampling_params": {"max_new_tokens": 1, "temperature": 0}}),
            ),
        };
        self.attach_pool_params(&mut body, &params);
        if let (Some(m), Engine::Vllm) = (model, self) {
            body["model"] = json!(m); // SGLang's /generate serves its one model and takes none
        }
        (path, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_go_where_each_engine_reads_them() {
        let p = json!({"recache_pool": {"segments": [["m/a", 0, 5]], "evict": ["m/b"]}});
        let mut v = json!({"prompt": [1, 2]});
        Engine::Vllm.attach_pool_params(&mut v, &p);
        assert_eq!(v["kv_transfer_params"], p);
        let mut g = json!({"input_ids": [1], "sampling_params": {"custom_params": {"x": 1}}});
        Engine::Sglang.attach_pool_params(&mut g, &p);
        let s = g["sampling_params"]["custom_params"]["recache_pool"]
            .as_str()
            .unwrap();
        assert_eq!(serde_json::from_str::<Value>(s).unwrap(), p["recache_pool"]);
        assert_eq!(g["sampling_params"]["custom_params"]["x"], 1);
        let mut o = json!({"model": "m", "prompt": [1]});
        Engine::Sglang.attach_pool_params(&mut o, &p);
        assert!(o["custom_params"]["recache_pool"].is_string());
    }

    #[test]
    fn reports_are_read_from_each_engines_answer() {
        let r = json!({"loaded_tokens": 7});
        let v = json!({"kv_transfer_params": {"recache_pool": r}});
        assert_eq!(Engine::Vllm.pool_report(&v), &r);
        let s = json!({"meta_info": {"recache_pool": [r]}});
        assert_eq!(Engine::Sglang.pool_report(&s), &r);
        assert!(
            Engine::Sglang
                .pool_report(&json!({"meta_info": {}}))
                .is_null()
        );
        assert!(Engine::Vllm.pool_report(&json!({})).is_null());
    }

    #[test]
    fn pool_calls_are_one_token_on_each_engines_route() {
        let (path, b) = Engine::Vllm.pool_call(&[0], json!({"list": true}), Some("m"));
        assert_eq!(path, "/v1/completions");
        assert_eq!(b["kv_transfer_params"]["recache_pool"]["list"], true);
        assert_eq!(
            (b["max_tokens"].as_u64(), b["model"].as_str()),
            (Some(1), Some("m"))
        );
        let (path, b) = Engine::Sglang.pool_call(&[9, 8], json!({"fill": "m/k"}), Some("m"));
        assert_eq!(path, "/generate");
        assert_eq!(b["input_ids"], json!([9, 8]));
        assert!(b.get("model").is_none());
        let plan = b["sampling_params"]["custom_params"]["recache_pool"]
            .as_str()
            .unwrap();
        assert_eq!(plan, r#"{"fill":"m/k"}"#);
    }
}
