//! `recache serve` settings. Each one comes from, in order of precedence: a command-line flag,
//! its `RECACHE_*` environment variable, the TOML file named by `--config`, the default.
//!
//! clap resolves flag-over-environment; [`ServeArgs::resolve`] then fills what neither gave from
//! the file (every flag has a key: its name with underscores), so the precedence lives here
//! alone. The ranking and engine-loop modules resolve and check their own flags from the
//! filled-in arguments; every unusable value is refused naming its flag, never clamped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::Uri;
use recache_adapters::Engine;
use recache_eviction::PolicyConfig;

mod file;
pub mod print;

use self::file::{FileConfig, read_file};
use crate::client::route::Routing;
use crate::kvloop::config::{InvalidKvLoop, KvLoopArgs};
use crate::limits::{InvalidLimit, LimitArgs, Limits};
use crate::rank::config::{InvalidRank, RankArgs};
use crate::retrieve::config::{InvalidRetrieve, RetrieveArgs, RetrieveConfig};
use crate::slo::SloSettings;
use crate::slo::args::{InvalidSlo, SloArgs};

const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(600);
const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_ROUTE_CANARY: Duration = Duration::from_secs(30);

/// Flags of `recache serve` (each also read from the environment variable shown).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "RECACHE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Upstream engine base URL, e.g. http://127.0.0.1:8000. Repeat the flag (or
    /// comma-separate in RECACHE_UPSTREAM) for data-parallel replicas
    #[arg(long = "upstream", env = "RECACHE_UPSTREAM", value_delimiter = ',')]
    pub upstream: Vec<String>,
    /// TOML file with any of these settings (keys as the flags, with underscores)
    #[arg(long, env = "RECACHE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Engine behind the upstreams: vllm or sglang [default: vllm]
    #[arg(long, env = "RECACHE_ENGINE")]
    pub engine: Option<Engine>,
    /// Largest request body accepted, in bytes; larger ones get 413 [default: 16777216]
    #[arg(long, env = "RECACHE_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Give up connecting to an upstream after this long, e.g. 500ms [default: 500ms]
    #[arg(long, env = "RECACHE_CONNECT_TIMEOUT", value_parser = humantime::parse_duration)]
    pub connect_timeout: Option<Duration>,
    /// Answer 504 when an upstream sends no response headers within this long [default: 10m]
    #[arg(long, env = "RECACHE_UPSTREAM_TIMEOUT", value_parser = humantime::parse_duration)]
    pub upstream_timeout: Option<Duration>,
    /// How often upstreams are probed on the engine's health route [default: 2s]
    #[arg(long, env = "RECACHE_HEALTH_INTERVAL", value_parser = humantime::parse_duration)]
    pub health_interval: Option<Duration>,
    /// On SIGTERM/SIGINT, wait this long for in-flight requests before exiting [default: 30s]
    #[arg(long, env = "RECACHE_DRAIN_TIMEOUT", value_parser = humantime::parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Threads serving requests. 1 runs everything on one thread (no cross-thread wake-ups:
    /// the lowest proxy overhead); raise it when recache's own work saturates a core [default: 1]
    #[arg(long, env = "RECACHE_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    #[command(flatten)]
    pub rank: RankArgs,
    #[command(flatten)]
    pub kvloop: KvLoopArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub slo: SloArgs,
    #[command(flatten)]
    pub retrieve: RetrieveArgs,
    /// Bearer token for the admin API (/admin/...); without one the admin API is off
    #[arg(long, env = "RECACHE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Serve the admin API on this address only (e.g. 127.0.0.1:8081, reachable by operators
    /// but not by clients); the main port then refuses /admin/... [default: the main port]
    #[arg(long, env = "RECACHE_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// Eviction policy at start-up, NAME or NAME:key=value (lru, lfu, sieve, fpb, hf, laru,
    /// dead-first);
    /// switch later with PUT /admin/eviction-policy [default: lru]
    #[arg(long, env = "RECACHE_EVICTION_POLICY")]
    pub eviction_policy: Option<String>,
    /// How a request picks its replica, NAME or NAME:key=value (least-loaded; prefix, e.g.
    /// prefix:blocks=65536:ttl_s=600:balance=0.3; gr, prefix plus GR placement and
    /// per-replica item pools, e.g. gr:hot_share=0.5:pool_hot_share=1); switch later with
    /// PUT /admin/routing
    /// [default: least-loaded]
    #[arg(long, env = "RECACHE_ROUTING")]
    pub routing: Option<String>,
    /// How often a canary prompt checks each replica's routing mirror against the cached
    /// tokens its engine reports (with one --kv-events per --upstream); 0s turns canaries off
    /// and trusts the mirror unverified [default: 30s]
    #[arg(long, env = "RECACHE_ROUTE_CANARY", value_parser = humantime::parse_duration)]
    pub route_canary: Option<Duration>,
}

/// Resolved settings for one `recache serve`.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub upstreams: Vec<Uri>,
    pub engine: Engine,
    pub max_body_bytes: usize,
    pub connect_timeout: Duration,
    pub upstream_timeout: Duration,
    pub health_interval: Duration,
    pub drain_timeout: Duration,
    /// Runtime threads serving requests (1: a single-threaded runtime).
    pub worker_threads: usize,
    pub rank: crate::rank::config::RankConfig,
    /// The engine loop (KV-event mirror, order publishing); None without `--kv-events`.
    pub kvloop: Option<crate::kvloop::config::KvLoopConfig>,
    pub admin_token: Option<Secret>,
    /// The admin API's own address; None: the main port serves it.
    pub admin_listen: Option<SocketAddr>,
    /// What recache's port accepts from a client.
    pub limits: Limits,
    /// Deadline serving.
    pub slo: SloSettings,
    /// `/v1/retrieve`; None without `--retrieve-index`.
    pub retrieve: Option<RetrieveConfig>,
    pub eviction_policy: PolicyConfig,
    pub routing: Routing,
    /// One KV-event endpoint per upstream (same order) for the routing mirrors; empty with
    /// one upstream or one `--kv-events`.
    pub route_events: Vec<String>,
    /// Canary period; None: canaries off.
    pub route_canary: Option<Duration>,
}

/// Settings that cannot be used, with what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("config key {key}: {source}")]
    Duration {
        key: &'static str,
        #[source]
        source: humantime::DurationError,
    },
    #[error(
        "no upstream given: pass --upstream URL (or RECACHE_UPSTREAM, or `upstream` in the config file)"
    )]
    NoUpstream,
    #[error("--routing: {0}")]
    Routing(#[from] crate::client::route::BadRouting),
    #[error("--eviction-policy: {0}")]
    Policy(String),
    #[error("upstream {url:?} is not usable: {why}")]
    BadUpstream { url: String, why: String },
    /// `setting` is the flag; its environment variable and TOML key follow from it.
    #[error("{setting} (or its RECACHE_* variable or config key): {why}")]
    Invalid { setting: &'static str, why: String },
}

impl From<InvalidRank> for ConfigError {
    fn from(e: InvalidRank) -> Self {
        ConfigError::Invalid {
            setting: e.setting,
            why: e.why,
        }
    }
}

impl From<InvalidSlo> for ConfigError {
    fn from(e: InvalidSlo) -> Self {
        ConfigError::Invalid {
            setting: e.setting,
            why: e.why,
        }
    }
}

impl From<InvalidRetrieve> for ConfigError {
    fn from(e: InvalidRetrieve) -> Self {
        ConfigError::Invalid {
            setting: e.setting,
            why: e.why,
        }
    }
}

impl From<InvalidLimit> for ConfigError {
    fn from(e: InvalidLimit) -> Self {
        ConfigError::Invalid {
            setting: e.setting,
            why: e.why,
        }
    }
}

/// A value that must never reach a log: `Debug` prints a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<InvalidKvLoop> for ConfigError {
    fn from(e: InvalidKvLoop) -> Self {
        ConfigError::Invalid {
            setting: e.setting,
            why: e.why,
        }
    }
}

/// The `serve` command's flags as clap sees them (for help text and checks against the docs).
pub fn serve_command() -> clap::Command {
    use clap::Args;
    ServeArgs::augment_args(clap::Command::new("serve"))
}

impl ServeArgs {
    /// Applies file and defaults under what flags and environment already set, and checks
    /// every value.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        self.over(file)?.resolve_filled()
    }

    /// Defaults and checks, once flags, environment and file are merged into `self`.
    fn resolve_filled(&self) -> Result<Config, ConfigError> {
        let upstreams = self
            .upstream
            .iter()
            .map(|u| parse_upstream(u))
            .collect::<Result<Vec<_>, _>>()?;
        if upstreams.is_empty() {
            return Err(ConfigError::NoUpstream);
        }
        let spec = self.eviction_policy.as_deref().unwrap_or("lru");
        let eviction_policy =
            PolicyConfig::from_spec(spec).map_err(|e| ConfigError::Policy(e.to_string()))?;
        crate::policy_slot::check_servable(&eviction_policy)
            .map_err(|e| ConfigError::Policy(e.to_string()))?;
        let routing = match self.routing.as_deref() {
            Some(spec) => Routing::from_spec(spec)?,
            None => Routing::default(),
        };
        let engine: Engine = self.engine.unwrap_or_default();
        let mut kvloop = self.kvloop.try_resolve()?;
        // An engine with fixed event granularity (SGLang: one token per block) sets the
        // mirror's block size unless --kv-block-size says otherwise.
        if let (Some(k), Some(bs), None) = (
            kvloop.as_mut(),
            engine.kv_event_block_size(),
            self.kvloop.kv_block_size,
        ) {
            k.block_size = bs;
        }
        let steered = kvloop.as_ref().is_some_and(|k| k.publish.is_some());
        let events = &self.kvloop.kv_events;
        if events.len() > 1 && events.len() != upstreams.len() {
            return Err(invalid(
                "--kv-events",
                &format!(
                    "{} given for {} --upstream: give one per upstream, in the same order (or one, \
                     for the engine loop alone)",
                    events.len(),
                    upstreams.len()
                ),
            ));
        }
        let route_events = if upstreams.len() > 1 && events.len() == upstreams.len() {
            events.clone()
        } else {
            Vec::new()
        };
        let route_canary =
            Some(self.route_canary.unwrap_or(DEFAULT_ROUTE_CANARY)).filter(|d| !d.is_zero());
        let max_body_bytes = self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            return Err(invalid("--max-body-bytes", "must be at least 1 (bytes)"));
        }
        let slo = self.slo.try_resolve()?;
        if slo.engine_priority && engine != Engine::Vllm {
            return Err(invalid(
                "--slo-engine-priority",
                "vLLM only (its --scheduling-policy priority); SGLang's `priority` steers \
                 eviction here (--sglang-priority)",
            ));
        }
        let worker_threads = self.worker_threads.unwrap_or(1);
        if worker_threads == 0 {
            return Err(invalid("--worker-threads", "must be at least 1"));
        }
        let retrieve = self.retrieve.try_resolve()?;
        Ok(Config {
            retrieve,
            worker_threads,
            rank: self.rank.try_resolve_for(steered)?,
            kvloop,
            listen: self.listen.unwrap_or(DEFAULT_LISTEN),
            upstreams,
            engine,
            max_body_bytes,
            connect_timeout: positive(
                "--connect-timeout",
                self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            )?,
            upstream_timeout: positive(
                "--upstream-timeout",
                self.upstream_timeout.unwrap_or(DEFAULT_UPSTREAM_TIMEOUT),
            )?,
            health_interval: positive(
                "--health-interval",
                self.health_interval.unwrap_or(DEFAULT_HEALTH_INTERVAL),
            )?,
            // Zero is fine here: exit without waiting.
            drain_timeout: self.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT),
            admin_token: self
                .admin_token
                .clone()
                .filter(|t| !t.is_empty())
                .map(Secret),
            admin_listen: self.admin_listen,
            limits: self.limits.try_resolve()?,
            slo,
            eviction_policy,
            routing,
            route_events,
            route_canary,
        })
    }
}

fn invalid(setting: &'static str, why: &str) -> ConfigError {
    ConfigError::Invalid {
        setting,
        why: why.to_string(),
    }
}

/// A zero timeout would fail every request, and a zero probe period panics the health loop.
fn positive(setting: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        return Err(invalid(
            setting,
            "must be longer than zero, e.g. 500ms or 2s",
        ));
    }
    Ok(d)
}

/// Accepts `http://host:port[/prefix]`; the prefix is kept and request paths appended to it.
pub fn parse_upstream(url: &str) -> Result<Uri, ConfigError> {
    let bad = |why: &str| ConfigError::BadUpstream {
        url: url.to_string(),
        why: why.to_string(),
    };
    let uri: Uri = url
        .trim()
        .trim_end_matches('/')
        .parse()
        .map_err(|_| bad("not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => {
            return Err(bad(
                "only http:// upstreams are supported (run recache beside the engine)",
            ));
        }
        None => return Err(bad("missing scheme, e.g. http://127.0.0.1:8000")),
    }
    if uri.authority().is_none() {
        return Err(bad("missing host"));
    }
    if uri.query().is_some() {
        return Err(bad("must not contain a query string"));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests;
