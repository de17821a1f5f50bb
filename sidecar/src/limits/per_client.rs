//! Requests in flight per client address (`--max-in-flight-per-client`): a count per IP,
//! taken when a request arrives and given back when its answer's last byte is sent (or the
//! client goes away), so a client streaming many long generations cannot hold every engine
//! slot. One short lock per request and per answer; an address whose count falls to zero is
//! forgotten, so the map holds only clients with requests in flight.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use prometheus::IntCounter;

use crate::{Body, BoxError};

/// Counts per client address, against one limit.
pub struct ClientLimits {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
    refused: IntCounter,
}

/// One request's place in its client's count; dropping it gives the place back.
pub struct Permit {
    limits: Arc<ClientLimits>,
    ip: IpAddr,
}

impl ClientLimits {
    /// `refused` counts requests turned away.
    pub fn new(max: usize, refused: IntCounter) -> Arc<Self> {
        Arc::new(Self {
            max,
            counts: Mutex::new(HashMap::new()),
            refused,
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for one more request from `ip`, or None when it already has `max` in flight.
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<Permit> {
        // A poisoned lock only means another request panicked mid-update of a counter: the
        // counts are still usable, so keep serving.
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if *n >= self.max {
            drop(counts);
            self.refused.inc();
            return None;
        }
        *n += 1;
        Some(Permit {
            limits: self.clone(),
            ip,
        })
    }

    /// Requests in flight from `ip` now.
    pub fn in_flight(&self, ip: IpAddr) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self.limits.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// `body` holding `permit` until it is sent or dropped.
pub fn hold(body: Body, permit: Permit) -> Body {
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
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_forgets_idle_ones() {
        let refused = IntCounter::new("r", "r").expect("counter");
        let limits = ClientLimits::new(2, refused.clone());
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let p1 = limits.acquire(a).expect("first");
        let p2 = limits.acquire(a).expect("second");
        assert!(
            limits.acquire(a).is_none(),
            "third from a is over the limit"
        );
        assert_eq!(refused.get(), 1);
        let _pb = limits.acquire(b).expect("b has its own count");
        drop(p1);
        let p3 = limits.acquire(a).expect("a place came back");
        drop((p2, p3));
        assert_eq!(limits.in_flight(a), 0);
        let counts = limits.counts.lock().expect("lock");
        assert!(!counts.contains_key(&a), "an idle address is forgotten");
    }

    #[tokio::test]
    async fn a_held_body_gives_its_place_back_when_sent() {
        let limits = ClientLimits::new(1, IntCounter::new("r", "r").expect("counter"));
        let ip: IpAddr = [127, 0, 0, 1].into();
        let permit = limits.acquire(ip).expect("permit");
        let body = hold(crate::error::full(Bytes::from_static(b"hi")), permit);
        assert_eq!(limits.in_flight(ip), 1);
        let bytes = body.collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], b"hi");
        assert_eq!(limits.in_flight(ip), 0);
    }
}
