//! `least-loaded`: fewest outstanding requests among healthy replicas; ties broken round-robin so equal
//! replicas share the load. Blind to what each replica caches.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{ReplicaChoice, RouteHint};
use crate::client::replica::{Replica, can_take};

#[derive(Debug, Default)]
pub struct LeastLoaded {
    next: AtomicUsize,
}

impl ReplicaChoice for LeastLoaded {
    fn choose(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        _: &RouteHint<'_>,
    ) -> Option<usize> {
        let n = replicas.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| can_take(replicas, tried, i))
            .min_by_key(|i| replicas[*i].in_flight())
    }
}
