//! What recache's own port accepts from a client: header size and header read time (enforced
//! by the HTTP server, see [`crate::server`]), and how many requests one client address may
//! have in flight ([`per_client`]). Body size stays `--max-body-bytes` ([`crate::body`]); the
//! number of ranking candidates, `--rank-max-items`.
//!
//! Flags, `RECACHE_*` variables and TOML keys are resolved by `recache serve`'s settings
//! module like every other setting; this module owns what the values mean and checks them.

pub mod per_client;

use std::time::Duration;

pub use per_client::{ClientLimits, Permit};

/// Default largest request head (request line + headers); nginx's default buffers hold 8 KiB
/// lines and 32 KiB in all, OpenAI clients send well under 4 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// The least `--max-header-bytes` accepts: hyper's smallest HTTP/1 read buffer.
const MIN_MAX_HEADER_BYTES: usize = 8192;
/// Default time a client has to send a request's head (slowloris); hyper's own default.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default requests in flight from one client address. Engines serve a few hundred sequences
/// at once, so a client past this is only queueing; behind a load balancer that hides client
/// addresses, raise it or turn it off (0).
pub const DEFAULT_MAX_IN_FLIGHT_PER_CLIENT: usize = 1024;

/// Flags for the limits on recache's port (flattened into `recache serve`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Largest request head (request line and headers) in bytes; a larger one gets 431 and
    /// the connection is closed [default: 65536]
    #[arg(long, env = "RECACHE_MAX_HEADER_BYTES")]
    pub max_header_bytes: Option<usize>,
    /// Close a connection whose request head has not fully arrived after this long
    /// (slowloris); it also bounds how long an idle keep-alive connection stays open;
    /// 0s turns it off [default: 30s]
    #[arg(long, env = "RECACHE_HEADER_READ_TIMEOUT", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Option<Duration>,
    /// Requests one client address may have in flight (a streamed answer counts until its
    /// last byte); more get 429. 0 turns the limit off [default: 1024]
    #[arg(long, env = "RECACHE_MAX_IN_FLIGHT_PER_CLIENT")]
    pub max_in_flight_per_client: Option<usize>,
}

/// Resolved limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_header_bytes: usize,
    /// None: off.
    pub header_read_timeout: Option<Duration>,
    /// None: off.
    pub max_in_flight_per_client: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            header_read_timeout: Some(DEFAULT_HEADER_READ_TIMEOUT),
            max_in_flight_per_client: Some(DEFAULT_MAX_IN_FLIGHT_PER_CLIENT),
        }
    }
}

/// A limit that cannot be used: the flag and why.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct InvalidLimit {
    pub setting: &'static str,
    pub why: String,
}

impl LimitArgs {
    /// Defaults for what is unset, and checks.
    pub fn try_resolve(&self) -> Result<Limits, InvalidLimit> {
        let max_header_bytes = self.max_header_bytes.unwrap_or(DEFAULT_MAX_HEADER_BYTES);
        if max_header_bytes < MIN_MAX_HEADER_BYTES {
            return Err(InvalidLimit {
                setting: "--max-header-bytes",
                why: format!(
                    "{max_header_bytes} is below {MIN_MAX_HEADER_BYTES}, the smallest HTTP/1 \
                     read buffer"
                ),
            });
        }
        Ok(Limits {
            max_header_bytes,
            header_read_timeout: Some(
                self.header_read_timeout
                    .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT),
            )
            .filter(|d| !d.is_zero()),
            max_in_flight_per_client: Some(
                self.max_in_flight_per_client
                    .unwrap_or(DEFAULT_MAX_IN_FLIGHT_PER_CLIENT),
            )
            .filter(|n| *n > 0),
        })
    }
}

#[cfg(test)]
mod tests;
