//! recache's own calls to the engines (its routing canaries, its ranking label check:
//! `recache_own_*` on its `/metrics`), read per replica between two scrapes, taken out of
//! what a benchmark reads from the engines' counters and reported apart in the row
//! (`own_traffic`): traffic a system adds to check itself is no workload's, so it counts in
//! no hit rate, no computed or prompt tokens and no replica's share.
//!
//! Item-pool fills and the quality guard's shadow scorings are not own traffic in this
//! sense: they are engine work the pool and the guard cost, so their tokens stay in
//! `computed_tokens` (every token an engine computes for a system counts against it).

use serde_json::{Value, json};

const REQUESTS: &str = "recache_own_requests_total";
const TOKENS: &str = "recache_own_tokens_total";
const IN_FLIGHT: &str = "recache_own_in_flight";

/// recache's own calls to one replica over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Own {
    pub requests: f64,
    pub prompt_tokens: f64,
    pub cached_tokens: f64,
}

impl Own {
    fn minus(self, o: Own) -> Own {
        Own {
            requests: self.requests - o.requests,
            prompt_tokens: self.prompt_tokens - o.prompt_tokens,
            cached_tokens: self.cached_tokens - o.cached_tokens,
        }
    }

    fn plus(self, o: Own) -> Own {
        Own {
            requests: self.requests + o.requests,
            prompt_tokens: self.prompt_tokens + o.prompt_tokens,
            cached_tokens: self.cached_tokens + o.cached_tokens,
        }
    }

    /// Every replica's together.
    pub fn total(per: &[Own]) -> Own {
        per.iter().fold(Own::default(), |a, &b| a.plus(b))
    }
}

/// How recache labels the upstream at `url`: `host:port[/prefix]`.
pub fn label(url: &str) -> String {
    let rest = (url.split_once("://")).map_or(url, |(_, r)| r);
    rest.trim_end_matches('/').to_string()
}

/// The sum of `name`'s series whose labels include every `(key, value)` of `labels`.
fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    (text.lines())
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| l.rsplit_once("} "))
        .filter(|(ls, _)| {
            let pairs: Vec<&str> = ls.split(',').collect();
            (labels.iter()).all(|(k, v)| pairs.contains(&format!("{k}=\"{v}\"").as_str()))
        })
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
}

/// recache's own calls to the upstream at `url` so far, from one scrape of its `/metrics`.
pub fn read(metrics: &str, url: &str) -> Own {
    let up = label(url);
    let tokens = |kind| series(metrics, TOKENS, &[("upstream", &up), ("kind", kind)]);
    Own {
        requests: series(metrics, REQUESTS, &[("upstream", &up)]),
        prompt_tokens: tokens("prompt"),
        cached_tokens: tokens("cached"),
    }
}

/// Per replica (`urls`, in order), recache's own calls between two scrapes of each of its
/// instances' `/metrics` (`before[i]`, `after[i]`: instance i).
pub fn between(before: &[String], after: &[String], urls: &[String]) -> Vec<Own> {
    (urls.iter())
        .map(|u| {
            let per = before.iter().zip(after);
            Own::total(
                &per.map(|(b, a)| read(a, u).minus(read(b, u)))
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// Every own call counted so far and those still in flight, over all upstreams: equal
/// counts in two scrapes with none in flight mean no own call crossed what lay between.
pub fn sent_and_in_flight(metrics: &str) -> (f64, f64) {
    (
        series(metrics, REQUESTS, &[]),
        series(metrics, IN_FLIGHT, &[]),
    )
}

/// The engines' (queries, hits) prompt tokens less recache's own.
pub fn less_cache((queries, hits): (f64, f64), own: &[Own]) -> (f64, f64) {
    let o = Own::total(own);
    (
        (queries - o.prompt_tokens).max(0.0),
        (hits - o.cached_tokens).max(0.0),
    )
}

/// Each replica's finished requests less recache's own.
pub fn less_requests(per_replica: Option<Vec<f64>>, own: &[Own]) -> Option<Vec<f64>> {
    per_replica.map(|v| {
        (v.iter().enumerate())
            .map(|(i, r)| (r - own.get(i).map_or(0.0, |o| o.requests)).max(0.0))
            .collect()
    })
}

/// The row's `own_traffic`: what was taken out of the engines' counts.
pub fn json(own: &[Own]) -> Value {
    let t = Own::total(own);
    json!({
        "what": "recache's own calls (routing canaries, the ranking label check), left out of \
                 hit_rate, prompt_tokens, computed_tokens and requests_per_replica",
        "requests": t.requests, "prompt_tokens": t.prompt_tokens,
        "cached_tokens": t.cached_tokens,
        "requests_per_replica": own.iter().map(|o| o.requests).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
recache_own_requests_total{upstream=\"127.0.0.1:8001\",what=\"canary\"} 2
recache_own_requests_total{upstream=\"127.0.0.1:8001\",what=\"label_check\"} 1
recache_own_tokens_total{kind=\"prompt\",upstream=\"127.0.0.1:8001\",what=\"canary\"} 194
recache_own_tokens_total{kind=\"prompt\",upstream=\"127.0.0.1:8001\",what=\"label_check\"} 1
recache_own_tokens_total{kind=\"cached\",upstream=\"127.0.0.1:8001\",what=\"canary\"} 64
recache_own_in_flight{upstream=\"127.0.0.1:8001\"} 0
";

    fn after() -> String {
        BEFORE
            .replace("what=\"canary\"} 2", "what=\"canary\"} 5")
            .replace("} 194", "} 485")
            .replace("} 64", "} 256")
            + "recache_own_requests_total{upstream=\"127.0.0.1:8002\",what=\"canary\"} 3\n\
               recache_own_tokens_total{kind=\"prompt\",upstream=\"127.0.0.1:80021\",what=\"canary\"} 9\n\
               recache_own_in_flight{upstream=\"127.0.0.1:8002\"} 1\n"
    }

    #[test]
    fn labels_are_recaches_and_series_match_whole_values() {
        assert_eq!(label("http://127.0.0.1:8001/"), "127.0.0.1:8001");
        assert_eq!(label("http://h:1/v1"), "h:1/v1");
        let a = after();
        let two = read(&a, "http://127.0.0.1:8002");
        assert_eq!(two.requests, 3.0);
        assert_eq!(two.prompt_tokens, 0.0, "8002 is not 80021");
        assert_eq!(sent_and_in_flight(&a), (9.0, 1.0));
    }

    #[test]
    fn own_calls_are_subtracted_from_the_engines_counts() {
        let urls = [
            "http://127.0.0.1:8001".to_string(),
            "http://127.0.0.1:8002".into(),
        ];
        let own = between(&[BEFORE.into()], &[after()], &urls);
        assert_eq!(
            own[0],
            Own {
                requests: 3.0,
                prompt_tokens: 291.0,
                cached_tokens: 192.0
            }
        );
        assert_eq!(own[1].requests, 3.0);
        // The engines saw the workload's 10_000 tokens (6_000 cached) and the canaries'.
        assert_eq!(less_cache((10_291.0, 6_192.0), &own), (10_000.0, 6_000.0));
        assert_eq!(
            less_requests(Some(vec![123.0, 103.0]), &own),
            Some(vec![120.0, 100.0])
        );
        assert_eq!(less_requests(None, &own), None);
        let j = json(&own);
        assert_eq!(j["requests"], 6.0);
        assert_eq!(j["requests_per_replica"], json!([3.0, 3.0]));
        // Two instances: their calls add up.
        let both = between(
            &[BEFORE.into(), BEFORE.into()],
            &[after(), after()],
            &urls[..1],
        );
        assert_eq!(both[0].requests, 6.0);
        // No recache (a peer): nothing to take out.
        assert_eq!(between(&[], &[], &urls), vec![Own::default(); 2]);
    }
}
