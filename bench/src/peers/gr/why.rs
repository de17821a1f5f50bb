//! Why recache missed a `gr` goal, in the goals row itself: where its throughput stays
//! under 2× the best peer's, the numbers that explain it side by side (hit rate, prompt
//! tokens the engines computed, the engines' CPU a request, prompt length, queueing: answer
//! time from arrival against service time, errors) and sentences naming which of them fell
//! short.

use serde_json::{Value, json};

/// The summary numbers the explanation compares.
const COMPARED: &[&str] = &[
    "rps",
    "hit_rate",
    "computed_tokens",
    "engine_cpu_ms_per_request",
    "mean_prompt_tokens",
    "ttft_p50_ms",
    "service_p50_ms",
    "errors",
    "recall_at_10",
];

fn num(v: &Value, f: &str) -> Option<f64> {
    v[f].as_f64()
}

/// Adds `shortfall` to the goals row `verdict` when its `rps` goal is not met.
pub fn explain(verdict: &mut Value, sums: &[Value]) {
    let missed = (verdict["goals"].as_array().into_iter().flatten())
        .find(|g| g["field"] == "rps" && g["met"] == json!(false));
    let Some(peer_name) = missed
        .and_then(|g| g["best_peer"].as_str())
        .map(str::to_string)
    else {
        return;
    };
    let (Some(ours), Some(peer)) = (
        sums.iter().find(|r| r["system"] == "recache"),
        sums.iter().find(|r| r["system"] == peer_name.as_str()),
    ) else {
        return;
    };
    let pick = |r: &Value| {
        let m: serde_json::Map<String, Value> = (COMPARED.iter())
            .map(|f| ((*f).to_string(), r[*f].clone()))
            .collect();
        Value::Object(m)
    };
    let mut why = Vec::new();
    if let (Some(a), Some(b)) = (num(ours, "hit_rate"), num(peer, "hit_rate"))
        && a <= b
    {
        why.push(format!(
            "hit rate {a:.3} against {b:.3}: recache's layouts and item pool reused no more of \
             the prompts than {peer_name}'s routing did"
        ));
    }
    match (num(ours, "computed_tokens"), num(peer, "computed_tokens")) {
        (Some(a), Some(b)) if a >= b => why.push(format!(
            "the engines computed {a:.0} prompt tokens for recache against {b:.0}: no less work"
        )),
        (Some(a), Some(b)) if b > 0.0 => {
            if let (Some(ra), Some(rb)) = (num(ours, "rps"), num(peer, "rps")) {
                why.push(format!(
                    "the engines computed {:.2}x the peer's prompt tokens, yet rps is {:.2}x: \
                     a computed token cost more (attention over the tokens already in KV \
                     before it, pool loads and fills, scheduling)",
                    a / b,
                    ra / rb.max(1e-9)
                ));
            }
        }
        _ => {}
    }
    if let (Some(a), Some(b), Some(ra), Some(rb)) = (
        num(ours, "engine_cpu_ms_per_request"),
        num(peer, "engine_cpu_ms_per_request"),
        num(ours, "rps"),
        num(peer, "rps"),
    ) && a > 0.0
    {
        // Where rps follows the engines' CPU a request, nothing outside them holds it down.
        let (cpu, rate) = (b / a, ra / rb.max(1e-9));
        let whose = if rate >= 0.95 * cpu {
            "the engines' compute a request sets the ratio"
        } else {
            "work outside the engines' compute (cpu_s) takes the rest"
        };
        why.push(format!(
            "the engines' compute took {a:.0} ms of CPU a request for recache against {b:.0} \
             ({cpu:.2}x less) and rps is {rate:.2}x: {whose}"
        ));
    }
    if let (Some(a), Some(b)) = (
        num(ours, "mean_prompt_tokens"),
        num(peer, "mean_prompt_tokens"),
    ) && a > 1.05 * b
    {
        why.push(format!(
            "recache's prompts are longer: {a:.0} tokens against {b:.0}"
        ));
    }
    if let (Some(t), Some(s)) = (num(ours, "ttft_p50_ms"), num(ours, "service_p50_ms"))
        && t > 2.0 * s
    {
        why.push(format!(
            "queueing: recache's answers took {t:.0} ms from arrival at p50, {s:.0} ms of it \
             in service: the offered --rate is above what the replicas serve, so rps is their \
             capacity"
        ));
    }
    if let Some(e) = num(ours, "errors").filter(|e| *e > 0.0) {
        why.push(format!(
            "{e:.0} of recache's requests failed (first_error in its rows)"
        ));
    }
    if why.is_empty() {
        why.push("none of hit rate, computed tokens, prompt length or queueing is worse".into());
    }
    if let Some(o) = verdict.as_object_mut() {
        o.insert(
            "shortfall".into(),
            json!({"goal": "rps", "best_peer": peer_name, "recache": pick(ours),
                   "peer": pick(peer), "why": why}),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_rps_goal_says_why() {
        let sums = vec![
            json!({"system": "recache", "rps": 1.0, "hit_rate": 0.1, "computed_tokens": 900.0,
                   "engine_cpu_ms_per_request": 500.0, "mean_prompt_tokens": 3000.0, "ttft_p50_ms": 9000.0, "service_p50_ms": 1000.0,
                   "errors": 0.0, "recall_at_10": 0.1}),
            json!({"system": "vllm-router", "rps": 0.8, "hit_rate": 0.2, "computed_tokens": 800.0,
                   "engine_cpu_ms_per_request": 400.0, "mean_prompt_tokens": 2990.0, "ttft_p50_ms": 9000.0, "service_p50_ms": 1000.0,
                   "errors": 0.0, "recall_at_10": 0.1}),
        ];
        let mut v = json!({"goals": [{"field": "rps", "met": false, "best_peer": "vllm-router"}]});
        explain(&mut v, &sums);
        let why = v["shortfall"]["why"].as_array().expect("why").clone();
        let text = serde_json::to_string(&why).expect("text");
        assert!(text.contains("hit rate 0.100 against 0.200"), "{text}");
        assert!(text.contains("no less work"), "{text}");
        assert!(text.contains("queueing"), "{text}");
        assert!(
            text.contains("500 ms of CPU a request for recache against 400"),
            "{text}"
        );
        assert!(text.contains("sets the ratio"), "{text}");
        assert_eq!(v["shortfall"]["peer"]["rps"], 0.8);
        // A met goal adds nothing.
        let mut met = json!({"goals": [{"field": "rps", "met": true, "best_peer": "x"}]});
        explain(&mut met, &sums);
        assert!(met.get("shortfall").is_none());
    }
}
