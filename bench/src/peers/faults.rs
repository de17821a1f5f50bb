//! The `faults` workload: what each system does with what clients and replicas do to it.
//! Three parts per system, each counted as requests that did not get a 200 (a stream must
//! also reach its `[DONE]`):
//! - `token_ids`: `prompt` as a list of token ids (the OpenAI API allows it; sglang-router
//!   0.3.x refuses it, sglang#35262);
//! - `stream`: text prompts with `"stream": true`;
//! - `replica_killed`: an extra testbed replica (`peers-victim`) beside the first one, stopped
//!   with the testbed's `down` halfway through an open-loop run at `--rate`; a gateway that
//!   retries elsewhere and stops routing to the dead replica loses nothing.

use std::time::Duration;

use serde_json::{Value, json};

use super::args::PeersArgs;
use super::replicas::Replicas;
use super::system::{self, RecacheSetup, System};
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::open_loop;
use crate::testbed::{self, Layout, Testbed};

/// Requests per part (token ids, streaming); the killed-replica part sends `--requests`
/// capped at [`KILLED`], at `--rate`.
const PART: usize = 20;
const KILLED: usize = 30;

fn text(i: usize) -> String {
    format!("request {i}: the quick brown fox jumps over the lazy dog, twice over")
}

/// Sends `bodies` one after another; counts the ones that failed.
async fn sequential(client: &HttpClient, url: &str, bodies: &[Value]) -> (usize, Option<String>) {
    let (mut errors, mut why) = (0, None);
    for b in bodies {
        match answer(client, url, b).await {
            Ok(()) => {}
            Err(e) => {
                errors += 1;
                why.get_or_insert(e);
            }
        }
    }
    (errors, why)
}

/// One request: Ok when it got a 200 and, when streamed, its `[DONE]`.
async fn answer(client: &HttpClient, url: &str, body: &Value) -> Result<(), String> {
    let (status, v) = http::post(client, url, body)
        .await
        .map_err(|e| e.to_string())?;
    if status != 200 {
        let msg = v.to_string();
        return Err(format!("status {status}: {}", &msg[..msg.len().min(200)]));
    }
    if body["stream"] == json!(true) && !v.as_str().is_some_and(|s| s.contains("[DONE]")) {
        return Err("stream ended without [DONE]".into());
    }
    Ok(())
}

/// One system's row.
pub async fn one(
    args: &PeersArgs,
    venv: &std::path::Path,
    replicas: &Replicas,
    s: System,
    round: u32,
) -> Result<Value, BenchError> {
    let client = http::client();
    let model = &replicas.model;
    let setup = RecacheSetup::default();
    let running = system::start(s, venv, &replicas.urls, &setup).await?;
    let url = format!("{}/v1/completions", running.url());
    eprintln!(
        "[peers] faults round {round}: {} token ids, streaming ...",
        s.name()
    );
    let ids: Vec<Value> = (0..PART)
        .map(|i| json!({"model": model, "prompt": [11, 12, 13, 14 + i], "max_tokens": 1}))
        .collect();
    let (id_errors, id_why) = sequential(&client, &url, &ids).await;
    let streams: Vec<Value> = (0..PART)
        .map(|i| json!({"model": model, "prompt": text(i), "max_tokens": 4, "stream": true}))
        .collect();
    let (stream_errors, stream_why) = sequential(&client, &url, &streams).await;
    drop(running);
    let (kill_errors, kill_why, sent) = killed(args, venv, replicas, s, round).await?;
    Ok(json!({
        "system": s.name(), "workload": "faults", "round": round, "model": model,
        "errors": id_errors + stream_errors + kill_errors,
        "token_ids": {"requests": PART, "errors": id_errors, "first_error": id_why},
        "stream": {"requests": PART, "errors": stream_errors, "first_error": stream_why},
        "replica_killed": {"requests": sent, "errors": kill_errors, "first_error": kill_why},
        "rps": null, "hit_rate": null, "ttft_p50_ms": null, "ttft_p99_ms": null,
        "max_share": null, "computed_tokens": null, "kv_bytes": null,
        "model": replicas.model,
    }))
}

/// The killed-replica part: the system in front of the first replica and a victim replica,
/// the victim stopped halfway through the run.
async fn killed(
    args: &PeersArgs,
    venv: &std::path::Path,
    replicas: &Replicas,
    s: System,
    round: u32,
) -> Result<(usize, Option<String>, usize), BenchError> {
    let client = http::client();
    let block_bytes = testbed::BLOCK_TOKENS * args.model()?.kv_token_bytes;
    let mut tb = Testbed::new(&args.testbed_dir, block_bytes)?.with_model(args.testbed_model);
    let victim = tb.start_named(
        "peers-victim",
        Layout {
            kv_blocks: args.kv_blocks,
            pool_bytes: 0,
        },
    )?;
    let pair = vec![replicas.urls[0].clone(), victim.upstream.clone()];
    let running = system::start(s, venv, &pair, &RecacheSetup::default()).await?;
    let url = format!("{}/v1/completions", running.url());
    let n = args.requests.clamp(10, KILLED);
    let gap = 1.0 / args.rate.max(0.1);
    let arrivals: Vec<f64> = (0..n).map(|i| i as f64 * gap).collect();
    eprintln!(
        "[peers] faults round {round}: {} with {} killed after {:.1} s ...",
        s.name(),
        victim.name,
        arrivals[n / 2]
    );
    let dir = args.testbed_dir.clone();
    let name = victim.name.clone();
    let kill_at = Duration::from_secs_f64(arrivals[n / 2] + open_loop::LEAD.as_secs_f64());
    let killer = tokio::spawn(async move {
        tokio::time::sleep(kill_at).await;
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(dir.join("down"))
                .args(["--name", &name])
                .stdout(std::process::Stdio::null())
                .status()
        })
        .await
    });
    let model = replicas.model.clone();
    let out = open_loop::run(
        &arrivals,
        None,
        |i| {
            let (client, url) = (client.clone(), url.clone());
            let body = json!({"model": model, "prompt": text(i), "max_tokens": 1});
            async move { answer(&client, &url, &body).await }
        },
        || {},
    )
    .await;
    let _ = killer.await;
    drop(running);
    drop(tb); // the victim is already down; `down` again is harmless
    let (mut errors, mut why) = (0, None);
    for a in out.answers {
        if let Err(e) = a.and_then(|t| t.value) {
            errors += 1;
            why.get_or_insert(e);
        }
    }
    Ok((errors, why, n))
}
