//! The store for the engine tests of the item pool's cold tier, installed by
//! `examples/store/install`: a Redis server ([`RedisServer`], Debian's `redis-server`) started
//! on a given or free loopback port, logging beside the engines, stopped on `stop` or drop;
//! and the cold tier's check through recache, one body for both engines
//! ([`cold_items_are_served_across_replicas`]).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use recache::itempool::config::PoolArgs;
use recache::rank::config::RankArgs;
use recache_adapters::prom::selected_sum;
use serde_json::{Value, json};

use crate::{Engine, Proxy, Testbed, pool, repo_root, wait_for};

/// Installs what is missing of the stores (`examples/store/install`); returns its venv.
pub fn install() -> PathBuf {
    let out = Command::new(repo_root().join("examples/store/install"))
        .output()
        .expect("running examples/store/install");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "examples/store/install failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let venv = (stdout.lines())
        .find_map(|l| l.strip_prefix("VENV="))
        .unwrap_or_else(|| panic!("examples/store/install printed no VENV= line:\n{stdout}"));
    PathBuf::from(venv)
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// A running `redis-server` (no persistence: a restart comes back empty, as a lost store).
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        Self::start_on(free_port()).await
    }

    pub async fn start_on(port: u16) -> RedisServer {
        let log = crate::testbed_home()
            .join("run")
            .join(format!("redis-{port}.log"));
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().expect("log file handle");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("starting redis-server (examples/store/install installs it)");
        let mut r = RedisServer {
            child: Some(child),
            port,
        };
        wait_for(
            format_args!("redis-server accepting on 127.0.0.1:{port}"),
            Duration::from_secs(30),
            async || {
                if let Some(status) = r.child.as_mut().and_then(|c| c.try_wait().ok()?) {
                    panic!("redis-server exited ({status}) before listening on {port}");
                }
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .await;
        r
    }

    /// `--rank-pool-store` and `up --pool-store`'s value.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL: a store that dies).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new, empty server on the same port.
    pub async fn restart(&mut self) {
        self.stop();
        *self = Self::start_on(self.port).await;
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

const ITEMS: usize = 24;
/// The store reads the engines reported as hits (recache's `/metrics`).
const STORE_HITS: &str = "recache_rank_pool_store_reads{result=\"hit\"}";
const ITEM_TOKENS: usize = 12;

fn request(model: &str, user: &str, salt: &str) -> Value {
    let items = pool::items(ITEMS, ITEM_TOKENS, 700, 41, |i| json!(format!("s{i}")));
    let profile = pool::profile(300, user.len() as u32);
    pool::item_prefix_request(model, user, profile, items, Some(salt))
}

fn store_lines(text: &str) -> String {
    (text.lines())
        .filter(|l| l.contains("pool_store") || l.contains("cold_items"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// recache (`--rank-pool-store`, `gr:pool_hot_share=0`: each item pooled on its home replica
/// only) in front of replicas `a` and `b` of `engine`, both started with `up --item-pool
/// --pool-store store_url`: after a first ranking has filled every item at its home, a ranking
/// sent to one replica carries the items the other holds marked cold, that engine reads them
/// from the store (recache's store metrics count them as hits), every candidate is answered,
/// and `/ready` reports the store reachable.
pub async fn cold_items_are_served_across_replicas(
    engine: Engine,
    a: &Testbed,
    b: &Testbed,
    store_url: &str,
) {
    let mut args = engine.serve_args(&[&a.upstream, &b.upstream]);
    args.routing = Some("gr:pool_hot_share=0".into());
    args.rank = RankArgs {
        pool: PoolArgs {
            rank_item_pool: Some(64),
            rank_item_pool_refresh: Some(0.0),
            rank_pool_store: Some(store_url.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    proxy.wait_ready(Duration::from_secs(60)).await;
    let pools = (proxy.state.ranker.rank.pool.as_ref()).expect("item pool on");
    let first = proxy.rank(&request(&a.model, "u-1", "s1")).await;
    assert_eq!(first["ranking"].as_array().map(Vec::len), Some(ITEMS));
    wait_for(
        format_args!("every item filled at its home ({ITEMS} resident in all, 0 pending)"),
        Duration::from_secs(180),
        async || {
            let counts: Vec<(usize, usize)> = pools.iter().map(|p| p.counts()).collect();
            let (res, pend) = (counts.iter()).fold((0, 0), |s, c| (s.0 + c.0, s.1 + c.1));
            match (res, pend) {
                (ITEMS, 0) => Ok(()),
                _ => Err(format!("(resident, pending) per pool {counts:?}")),
            }
        },
    )
    .await;
    let homed: Vec<usize> = pools.iter().map(|p| p.counts().0).collect();
    assert!(
        homed.iter().all(|&n| n > 0),
        "both replicas are home to some items: {homed:?}"
    );
    // The engines' store counters so far (earlier phases included): what the stream adds.
    let hits_before = selected_sum(&proxy.metrics_text().await, STORE_HITS);
    let second = proxy.rank(&request(&a.model, "u-2", "s2")).await;
    assert_eq!(second["ranking"].as_array().map(Vec::len), Some(ITEMS));
    let text = proxy.metrics_text().await;
    let cold = selected_sum(&text, "recache_rank_pool_cold_items_total");
    assert!(
        homed.iter().any(|&n| n as f64 == cold),
        "the items the other replica holds went cold: {cold} of {homed:?}"
    );
    let hits = wait_for(
        format_args!("the engine reporting {cold} store hits"),
        Duration::from_secs(30),
        async || {
            // Reports arrive with answers; a third ranking carries the second's counters.
            let _ = proxy.rank(&request(&a.model, "u-3", "s3")).await;
            let text = proxy.metrics_text().await;
            match selected_sum(&text, STORE_HITS) - hits_before {
                h if h >= cold => Ok(h),
                h => Err(format!("{h} hits; store metrics:\n{}", store_lines(&text))),
            }
        },
    )
    .await;
    println!("cold items sent {cold}, store hits {hits}");
    wait_for(
        "/ready reporting the store reachable",
        Duration::from_secs(30),
        async || match proxy.ready().await {
            r if r["store"]["reachable"] == json!(true) => Ok(()),
            r => Err(r.to_string()),
        },
    )
    .await;
}
