//! Serving to a deadline: what a request's deadline is, and the settings of
//! deadline serving. The mechanism lives in [`gate`] (one per replica: window, order,
//! refusals) and [`cost`] (the online service-time model); the engine client applies both
//! when it sends a generation call that carries a deadline, and composes load-aware dispatch
//! ([`dispatch`]) with the routing rule.
//!
//! A request's deadline comes from its `x-recache-deadline-ms` header, or `deadline_ms` in a
//! `/v1/rank` body, or the route's default (`--slo-rank-deadline`,
//! `--slo-completions-deadline`, `--slo-chat-deadline`); `x-recache-best-effort: 1` asks to
//! be served late rather than refused. Requests without a deadline are served as before.
//! The deadline travels with the request's task ([`scope`], [`current`]) so recache's own
//! engine calls made for it (ranking) carry it without every signature naming it.

pub mod args;
pub mod cost;
pub mod dispatch;
pub mod gate;
pub mod load;
pub mod metrics;

use std::time::Duration;

use tokio::time::Instant;

use http::HeaderMap;

pub use cost::Demand;
pub use gate::{Gate, Permit, Refusal};

/// The header carrying a request's deadline in ms from its arrival.
pub const DEADLINE_HEADER: &str = "x-recache-deadline-ms";
/// The header asking to be served late rather than refused (`1` or `true`).
pub const BEST_EFFORT_HEADER: &str = "x-recache-best-effort";
/// Longest deadline accepted (a day): anything longer is a mistake, not a deadline.
pub const MAX_DEADLINE_MS: u64 = 86_400_000;

/// When a request must be answered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at: Instant,
    /// The budget it was given at arrival.
    pub budget: Duration,
    /// Serve it late rather than refuse it.
    pub best_effort: bool,
}

impl Deadline {
    pub fn within(budget: Duration, arrived: Instant, best_effort: bool) -> Self {
        Self {
            at: arrived + budget,
            budget,
            best_effort,
        }
    }
}

tokio::task_local! {
    static CURRENT: Option<Deadline>;
}

/// Runs `fut` with `deadline` as the request's deadline.
pub async fn scope<F: Future>(deadline: Option<Deadline>, fut: F) -> F::Output {
    CURRENT.scope(deadline, fut).await
}

/// The deadline of the request this task serves, if any.
pub fn current() -> Option<Deadline> {
    CURRENT.try_with(|d| *d).ok().flatten()
}

/// A deadline header or field that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {why}")]
pub struct BadDeadline {
    pub what: &'static str,
    pub why: String,
}

/// A deadline in ms as a client gave it (header text or body number), checked.
pub fn budget_ms(what: &'static str, ms: Option<u64>, text: &str) -> Result<Duration, BadDeadline> {
    let ms = ms.ok_or_else(|| BadDeadline {
        what,
        why: format!("{text:?} is not a whole number of milliseconds"),
    })?;
    if ms == 0 || ms > MAX_DEADLINE_MS {
        return Err(BadDeadline {
            what,
            why: format!("{ms} is outside 1..={MAX_DEADLINE_MS} ms"),
        });
    }
    Ok(Duration::from_millis(ms))
}

/// The deadline a request's headers give (None without the header), or why they are unusable.
pub fn from_headers(
    headers: &HeaderMap,
    arrived: Instant,
) -> Result<Option<Deadline>, BadDeadline> {
    let best_effort = best_effort(headers)?;
    let Some(v) = headers.get(DEADLINE_HEADER) else {
        return Ok(None);
    };
    let text = v.to_str().unwrap_or("").trim();
    let budget = budget_ms(DEADLINE_HEADER, text.parse().ok(), text)?;
    Ok(Some(Deadline::within(budget, arrived, best_effort)))
}

/// Whether the request asked for best effort.
pub fn best_effort(headers: &HeaderMap) -> Result<bool, BadDeadline> {
    match headers
        .get(BEST_EFFORT_HEADER)
        .map(|v| v.to_str().unwrap_or("?").trim())
    {
        None => Ok(false),
        Some("1" | "true") => Ok(true),
        Some("0" | "false") => Ok(false),
        Some(other) => Err(BadDeadline {
            what: BEST_EFFORT_HEADER,
            why: format!("{other:?} is not one of 1, true, 0, false"),
        }),
    }
}

/// Resolved deadline-serving settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SloSettings {
    /// Off: deadlines are ignored and every call goes straight to the engine (a plain proxy).
    pub enabled: bool,
    /// Default deadlines of requests without one, per route.
    pub rank: Option<Duration>,
    pub completions: Option<Duration>,
    pub chat: Option<Duration>,
    /// Dispatch leaves the routing rule's pick when another replica's predicted completion is
    /// shorter by more than this share of it.
    pub dispatch_threshold: f64,
    /// Set the engine's `priority` from the deadline (`--slo-engine-priority`).
    pub engine_priority: bool,
}

impl Default for SloSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            rank: None,
            completions: None,
            chat: None,
            dispatch_threshold: DEFAULT_DISPATCH_THRESHOLD,
            engine_priority: false,
        }
    }
}

/// Default `--slo-dispatch-threshold`.
pub const DEFAULT_DISPATCH_THRESHOLD: f64 = 0.25;

impl SloSettings {
    /// The default deadline budget of a route, if one is set.
    pub fn default_for(&self, path: &str) -> Option<Duration> {
        match path {
            "/v1/rank" => self.rank,
            recache_adapters::openai::COMPLETIONS => self.completions,
            "/v1/chat/completions" => self.chat,
            _ => None,
        }
    }
}

/// What a generation body asks of the engine: its token prompts' length (`field`: the
/// engine's token-prompt field), else a text prompt's or the messages' bytes / 4 (a rough
/// token count; the model learns its own scale), and the output cap (`max_tokens`,
/// `max_completion_tokens`, SGLang's `sampling_params.max_new_tokens`; 16 when absent, vLLM's
/// default).
pub fn demand_of(field: Option<&str>, body: &serde_json::Map<String, serde_json::Value>) -> Demand {
    let tokens: usize = match field.and_then(|f| body.get(f)) {
        Some(p) => recache_adapters::openai::token_prompts(p)
            .iter()
            .map(Vec::len)
            .sum(),
        None => 0,
    };
    let tokens = if tokens > 0 {
        tokens
    } else if let Some(text) = body.get("prompt").and_then(|p| p.as_str()) {
        text.len() / 4
    } else {
        body.get("messages").map_or(0, |m| m.to_string().len() / 4)
    };
    let out = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(|v| v.as_u64()))
        .or_else(|| {
            body.get("sampling_params")
                .and_then(|s| s.get("max_new_tokens"))
                .and_then(|v| v.as_u64())
        })
        .unwrap_or(16);
    Demand {
        uncached_tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        output_tokens: u32::try_from(out).unwrap_or(u32::MAX),
    }
}

/// With `--slo-engine-priority`, stamps a generation body that carries a deadline with the
/// engine `priority` of that deadline: its ms since this process first stamped one, so an
/// engine running the lowest value first (vLLM's priority scheduling) runs the earliest
/// deadline first among what recache admitted. A body that names its own priority keeps it.
/// Returns whether the body changed.
pub fn stamp_priority(
    settings: &SloSettings,
    path: &str,
    body: &mut serde_json::Map<String, serde_json::Value>,
) -> bool {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let Some(d) =
        current().filter(|_| settings.enabled && settings.engine_priority && is_generation(path))
    else {
        return false;
    };
    if body.contains_key("priority") {
        return false;
    }
    let epoch = *EPOCH.get_or_init(Instant::now);
    let ms = d.at.saturating_duration_since(epoch).as_millis();
    body.insert(
        "priority".into(),
        serde_json::Value::from(i64::try_from(ms).unwrap_or(i64::MAX)),
    );
    true
}

/// Whether calls on `path` generate (and so wait for a place in the window): the OpenAI
/// generation routes and SGLang's native one.
pub fn is_generation(path: &str) -> bool {
    matches!(
        path,
        "/v1/completions" | "/v1/chat/completions" | "/generate"
    )
}

#[cfg(test)]
mod tests;
