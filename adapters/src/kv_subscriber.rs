//! The transport side of KV-event ingestion: a ZMQ SUB socket on vLLM's publisher (pure-Rust
//! `zeromq`, no libzmq), reconnecting when the engine goes away, and a client for vLLM's
//! replay ROUTER (`replay_endpoint` in `--kv-events-config`).
//!
//! It only moves frames and decodes them ([`crate::kv_events`]); what a gap or a restart
//! means for the mirror is the consumer's business. Nothing here is fatal: undecodable
//! messages are handed on as errors for the consumer to log and count.

use std::time::Duration;

use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use crate::kv_events::{DecodeError, KvBatch, decode_frames};

/// What the subscriber reports.
#[derive(Debug)]
pub enum Incoming {
    /// A decoded batch.
    Batch(KvBatch),
    /// A message that did not decode.
    Malformed(DecodeError),
    /// (Re)connected to the publisher; events published while disconnected are lost.
    Connected,
    /// The publisher is unreachable (engine down); reconnecting in the background.
    Disconnected,
}

/// How the subscriber checks liveness: vLLM publishes only when the cache changes, so
/// silence is normal; a TCP probe after `idle` tells "quiet" from "gone" (zeromq-rs does
/// not surface a peer's disconnect to a SUB socket).
#[derive(Debug, Clone)]
pub struct SubscriberConfig {
    pub endpoint: String,
    pub idle: Duration,
    pub retry: Duration,
}

impl SubscriberConfig {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            idle: Duration::from_secs(2),
            retry: Duration::from_millis(500),
        }
    }
}

fn host_port(endpoint: &str) -> Option<&str> {
    endpoint.strip_prefix("tcp://")
}

async fn reachable(endpoint: &str) -> bool {
    match host_port(endpoint) {
        Some(hp) => tokio::net::TcpStream::connect(hp).await.is_ok(),
        None => true,
    }
}

async fn connect(cfg: &SubscriberConfig) -> SubSocket {
    loop {
        let mut sock = SubSocket::new();
        let ok = async {
            sock.connect(&cfg.endpoint).await?;
            sock.subscribe("").await
        }
        .await;
        match ok {
            Ok(()) => return sock,
            Err(e) => {
                tracing::debug!(endpoint = %cfg.endpoint, error = %e, "KV events: connect failed");
                tokio::time::sleep(cfg.retry).await;
            }
        }
    }
}

/// Runs until `sink` returns false. Reconnects forever; never returns an error.
pub async fn run(cfg: SubscriberConfig, mut sink: impl FnMut(Incoming) -> bool) {
    loop {
        let mut sock = connect(&cfg).await;
        if !sink(Incoming::Connected) {
            return;
        }
        loop {
            match tokio::time::timeout(cfg.idle, sock.recv()).await {
                Ok(Ok(msg)) => {
                    let frames = msg.into_vec();
                    let item = match decode_frames(&frames) {
                        Ok(b) => Incoming::Batch(b),
                        Err(e) => Incoming::Malformed(e),
                    };
                    if !sink(item) {
                        return;
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "KV events: receive failed; reconnecting");
                    break;
                }
                Err(_idle) if reachable(&cfg.endpoint).await => {}
                Err(_idle) => break,
            }
        }
        drop(sock);
        if !sink(Incoming::Disconnected) {
            return;
        }
        tokio::time::sleep(cfg.retry).await;
    }
}

/// Errors of a replay request.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("replay endpoint")]
    Zmq(#[source] zeromq::ZmqError),
    #[error("replay timed out")]
    Timeout,
    #[error("replay answered a malformed batch")]
    Decode(#[source] DecodeError),
}

/// Asks vLLM's replay ROUTER for every buffered batch with `seq >= from` and returns them
/// in order. vLLM answers `["", topic, seq, payload]` per batch, then `["", "", END, ""]`.
pub async fn replay(
    endpoint: &str,
    from: u64,
    timeout: Duration,
) -> Result<Vec<KvBatch>, ReplayError> {
    let work = async {
        let mut sock = DealerSocket::new();
        sock.connect(endpoint).await.map_err(ReplayError::Zmq)?;
        let mut req = ZmqMessage::from(bytes::Bytes::new());
        req.push_back(bytes::Bytes::copy_from_slice(&from.to_be_bytes()));
        sock.send(req).await.map_err(ReplayError::Zmq)?;
        let mut out = Vec::new();
        loop {
            let frames = sock.recv().await.map_err(ReplayError::Zmq)?.into_vec();
            // Drop the empty delimiter DEALER receives first.
            let frames = frames
                .get(1..)
                .filter(|f| !f.is_empty())
                .unwrap_or_default();
            if frames.len() == 3 && frames[0].is_empty() {
                // End marker: empty topic, vLLM's END_SEQ, empty payload.
                return Ok(out);
            }
            out.push(decode_frames(frames).map_err(ReplayError::Decode)?);
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| ReplayError::Timeout)?
}
