//! Where a request goes: the one place a replica is chosen.
//!
//! A [`ReplicaChoice`] sees the replica set and what the client knows about the request
//! ([`RouteHint`]) and names one replica. Today's rule is [`least_outstanding`]; cache-aware
//! routing is another file here and another [`Routing`] variant, nothing else changes.

pub mod least_outstanding;

use std::sync::Arc;

use serde::Deserialize;

use super::replica::Replica;

/// What is known about a request when its replica is chosen.
#[derive(Debug, Default, Clone, Copy)]
pub struct RouteHint<'a> {
    /// The engine route, e.g. `/v1/completions`.
    pub path: &'a str,
    /// The token-id prompt(s) when the body carries them (empty for text prompts).
    pub prompts: &'a [Vec<u32>],
}

/// A replica-choice rule.
pub trait ReplicaChoice: Send + Sync + std::fmt::Debug {
    /// Index into `replicas` of a healthy replica not in `tried` (indices already attempted
    /// for this request), or None when none is left.
    fn choose(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        hint: &RouteHint<'_>,
    ) -> Option<usize>;
}

/// The rules there are, by name (configuration and the factory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// Fewest outstanding requests among healthy replicas, ties round-robin.
    #[default]
    LeastOutstanding,
}

/// The one factory.
pub fn build(routing: Routing) -> Box<dyn ReplicaChoice> {
    match routing {
        Routing::LeastOutstanding => Box::new(least_outstanding::LeastOutstanding::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::replica::InFlight;

    fn set(urls: &[&str]) -> Vec<Arc<Replica>> {
        urls.iter()
            .map(|u| Arc::new(Replica::new(u.parse().expect("uri"))))
            .collect()
    }

    /// Every rule: only healthy, untried replicas; None when none is left.
    #[test]
    fn every_rule_skips_unhealthy_and_tried_replicas() {
        for routing in [Routing::LeastOutstanding] {
            let rule = build(routing);
            let reps = set(&["http://a:1", "http://b:2", "http://c:3"]);
            let hint = RouteHint::default();
            reps[2].set_healthy(false);
            for _ in 0..6 {
                let i = rule.choose(&reps, &[], &hint).expect("a healthy replica");
                assert!(i < 2, "{routing:?} chose the unhealthy replica");
            }
            assert_eq!(rule.choose(&reps, &[0, 1], &hint), None, "{routing:?}");
            reps.iter().for_each(|r| {
                r.set_healthy(false);
            });
            assert_eq!(rule.choose(&reps, &[], &hint), None, "{routing:?}");
        }
    }

    #[test]
    fn least_outstanding_prefers_the_idle_replica() {
        let rule = build(Routing::LeastOutstanding);
        let reps = set(&["http://a:1", "http://b:2", "http://c:3"]);
        let _a = InFlight::new(reps[0].clone());
        let _b = InFlight::new(reps[1].clone());
        assert_eq!(rule.choose(&reps, &[], &RouteHint::default()), Some(2));
        let two = set(&["http://a:1", "http://b:2"]);
        let picks: Vec<_> = (0..4)
            .filter_map(|_| rule.choose(&two, &[], &RouteHint::default()))
            .collect();
        assert!(
            picks.contains(&0) && picks.contains(&1),
            "ties spread: {picks:?}"
        );
    }

    #[test]
    fn routing_names_parse() {
        #[derive(Deserialize)]
        struct W {
            r: Routing,
        }
        let w: W = toml::from_str("r = \"least-outstanding\"").expect("parse");
        assert_eq!(w.r, Routing::LeastOutstanding);
    }
}
