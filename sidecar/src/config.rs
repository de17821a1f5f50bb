//! `recache serve` settings. Each one comes from, in order of precedence: a command-line flag,
//! its `RECACHE_*` environment variable, the TOML file named by `--config`, the default.
//!
//! clap resolves flag-over-environment; [`ServeArgs::resolve`] then fills what neither gave from
//! the file and the defaults, so the precedence lives in one place.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Uri;
use recache_adapters::Engine;
use recache_eviction::PolicyConfig;
use serde::Deserialize;

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(600);
const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

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
    #[command(flatten)]
    pub rank: crate::rank::config::RankArgs,
    #[command(flatten)]
    pub kvloop: crate::kvloop::config::KvLoopArgs,
    /// Bearer token for the admin API (/admin/...); without one the admin API is off
    #[arg(long, env = "RECACHE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Eviction policy at start-up, NAME or NAME:key=value (lru, lfu, sieve, fpb, hf, laru);
    /// switch later with PUT /admin/eviction-policy [default: lru]
    #[arg(long, env = "RECACHE_EVICTION_POLICY")]
    pub eviction_policy: Option<String>,
}

/// The same settings as read from a TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    upstream: Option<Vec<String>>,
    engine: Option<Engine>,
    max_body_bytes: Option<usize>,
    connect_timeout: Option<String>,
    upstream_timeout: Option<String>,
    health_interval: Option<String>,
    drain_timeout: Option<String>,
    admin_token: Option<String>,
    eviction_policy: Option<String>,
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
    pub rank: crate::rank::config::RankConfig,
    /// The engine loop (KV-event mirror, order publishing); None without `--kv-events`.
    pub kvloop: Option<crate::kvloop::config::KvLoopConfig>,
    pub admin_token: Option<String>,
    pub eviction_policy: PolicyConfig,
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
    #[error("eviction policy: {0}")]
    Policy(String),
    #[error("upstream {url:?} is not usable: {why}")]
    BadUpstream { url: String, why: String },
}

impl ServeArgs {
    /// Applies file and defaults under what flags and environment already set.
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let duration =
            |flag: Option<Duration>, key: &'static str, text: &Option<String>, default| match (
                flag, text,
            ) {
                (Some(d), _) => Ok(d),
                (None, Some(t)) => humantime::parse_duration(t)
                    .map_err(|source| ConfigError::Duration { key, source }),
                (None, None) => Ok(default),
            };
        let raw = if self.upstream.is_empty() {
            file.upstream.unwrap_or_default()
        } else {
            self.upstream.clone()
        };
        let upstreams = raw
            .iter()
            .map(|u| parse_upstream(u))
            .collect::<Result<Vec<_>, _>>()?;
        if upstreams.is_empty() {
            return Err(ConfigError::NoUpstream);
        }
        let spec = self
            .eviction_policy
            .clone()
            .or(file.eviction_policy)
            .unwrap_or_else(|| "lru".into());
        let eviction_policy =
            PolicyConfig::from_spec(&spec).map_err(|e| ConfigError::Policy(e.to_string()))?;
        crate::policy_slot::check_servable(&eviction_policy)
            .map_err(|e| ConfigError::Policy(e.to_string()))?;
        let default_listen = DEFAULT_LISTEN
            .parse()
            .map_err(|_| ConfigError::NoUpstream)?;
        let engine: Engine = self.engine.or(file.engine).unwrap_or_default();
        let mut kvloop = self.kvloop.resolve();
        // An engine with fixed event granularity (SGLang: one token per block) sets the
        // mirror's block size unless --kv-block-size says otherwise.
        if let (Some(k), Some(bs), None) = (
            kvloop.as_mut(),
            engine.kv_event_block_size(),
            self.kvloop.kv_block_size,
        ) {
            k.block_size = bs;
        }
        Ok(Config {
            rank: self
                .rank
                .resolve_for(kvloop.as_ref().is_some_and(|k| k.publish.is_some())),
            kvloop,
            listen: self.listen.or(file.listen).unwrap_or(default_listen),
            upstreams,
            engine,
            max_body_bytes: self
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(DEFAULT_MAX_BODY_BYTES),
            connect_timeout: duration(
                self.connect_timeout,
                "connect_timeout",
                &file.connect_timeout,
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            upstream_timeout: duration(
                self.upstream_timeout,
                "upstream_timeout",
                &file.upstream_timeout,
                DEFAULT_UPSTREAM_TIMEOUT,
            )?,
            health_interval: duration(
                self.health_interval,
                "health_interval",
                &file.health_interval,
                DEFAULT_HEALTH_INTERVAL,
            )?,
            drain_timeout: duration(
                self.drain_timeout,
                "drain_timeout",
                &file.drain_timeout,
                DEFAULT_DRAIN_TIMEOUT,
            )?,
            admin_token: self
                .admin_token
                .clone()
                .or(file.admin_token)
                .filter(|t| !t.is_empty()),
            eviction_policy,
        })
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
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
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn flags_override_file_which_overrides_defaults() {
        let mut f = tempfile::NamedTempFile::new().expect("tmp");
        writeln!(f, "listen = \"127.0.0.1:9000\"\nupstream = [\"http://a:1\"]\ndrain_timeout = \"5s\"\nmax_body_bytes = 10").expect("write");
        let args = ServeArgs {
            config: Some(f.path().into()),
            max_body_bytes: Some(20),
            ..Default::default()
        };
        let c = args.resolve().expect("resolve");
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.max_body_bytes, 20);
        assert_eq!(c.drain_timeout, Duration::from_secs(5));
        assert_eq!(c.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(c.upstreams[0].to_string(), "http://a:1/");
        let args = ServeArgs {
            upstream: vec!["http://b:2".into()],
            ..args
        };
        assert_eq!(
            args.resolve().expect("resolve").upstreams[0].host(),
            Some("b")
        );
    }

    #[test]
    fn rejects_unusable_settings_with_a_reason() {
        assert!(matches!(
            ServeArgs::default().resolve(),
            Err(ConfigError::NoUpstream)
        ));
        for url in ["https://a:1", "a:1", "http://a:1/?x=1"] {
            let err = parse_upstream(url).expect_err(url);
            assert!(err.to_string().contains("not usable"), "{err}");
        }
        let mut f = tempfile::NamedTempFile::new().expect("tmp");
        writeln!(f, "upstreams = []").expect("write");
        let args = ServeArgs {
            config: Some(f.path().into()),
            ..Default::default()
        };
        assert!(matches!(args.resolve(), Err(ConfigError::Parse { .. })));
    }
}
