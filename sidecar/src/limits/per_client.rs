//! Requests in flight per client address (`--max-in-flight-per-client`): a count per IP,
//! taken when a request arrives and given back when its answer is sent (a streamed answer:
//! when its last byte is, or the client goes away), so a client streaming many long
//! generations cannot hold every engine slot.
//!
//! The request path stays cheap: a connection looks its address up once, when accepted
//! ([`ClientLimits::client`]), and each request then only bumps an atomic counter. An address
//! is forgotten when its last connection and its last answer are gone, so the map holds only
//! clients that are connected.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use prometheus::IntCounter;

use crate::{Body, BoxError};

/// Counts per client address, against one limit.
pub struct ClientLimits {
    max: usize,
    clients: Mutex<HashMap<IpAddr, Weak<Client>>>,
    refused: IntCounter,
}

/// One address's count, shared by its connections and the answers in flight.
pub struct Client {
    ip: IpAddr,
    in_flight: AtomicUsize,
    limits: Arc<ClientLimits>,
}

/// One request's place in its client's count; dropping it gives the place back.
pub struct Permit {
    client: Arc<Client>,
}

impl ClientLimits {
    /// `refused` counts requests turned away.
    pub fn new(max: usize, refused: IntCounter) -> Arc<Self> {
        Arc::new(Self {
            max,
            clients: Mutex::new(HashMap::new()),
            refused,
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// The count for `ip`, shared with its other connections (once per accepted connection).
    pub fn client(self: &Arc<Self>, ip: IpAddr) -> Arc<Client> {
        // A poisoned lock only means a thread panicked while holding it; the map is still a
        // valid map, so keep serving.
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&ip).and_then(Weak::upgrade) {
            return client;
        }
        let client = Arc::new(Client {
            ip,
            in_flight: AtomicUsize::new(0),
            limits: self.clone(),
        });
        clients.insert(ip, Arc::downgrade(&client));
        client
    }

    /// Requests in flight from `ip` now.
    pub fn in_flight(&self, ip: IpAddr) -> usize {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .get(&ip)
            .and_then(Weak::upgrade)
            .map_or(0, |c| c.in_flight.load(Ordering::Relaxed))
    }

    /// Addresses remembered now (connected, or with answers in flight).
    pub fn clients(&self) -> usize {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Client {
    /// A place for one more request, or None when the address already has `max` in flight.
    pub fn acquire(self: &Arc<Self>) -> Option<Permit> {
        let max = self.limits.max;
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Some(Permit {
                client: self.clone(),
            }),
            Err(_) => {
                self.limits.refused.inc();
                None
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.client.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut clients = self
            .limits
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // A new connection from the same address may already have put a live entry there.
        if clients.get(&self.ip).is_some_and(|w| w.strong_count() == 0) {
            clients.remove(&self.ip);
        }
    }
}

/// `body` holding `permit` until it is sent or dropped. A body already complete in memory
/// (exact size known: recache's own answers, buffered small upstream answers) lets the place
/// go now instead: sending it cannot hold an engine slot.
pub fn hold(body: Body, permit: Permit) -> Body {
    if body.size_hint().exact().is_some() {
        return body;
    }
    Held {
        inner: body,
        _permit: permit,
    }
    .boxed()
}

struct Held {
    inner: Body,
    _permit: Permit,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "per_client_tests.rs"]
mod tests;
