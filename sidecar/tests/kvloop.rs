//! The engine loop's worker without an engine: synthetic KV-event batches (in order, gap,
//! restart, malformed), request arrivals and the published order.

mod support;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::channel;
use std::time::Duration;

use recache::kvloop::LoopMetrics;
use recache::kvloop::config::KvLoopArgs;
use recache::kvloop::resident::Resident;
use recache::kvloop::worker::{Msg, Worker};
use recache::metrics::Metrics;
use recache::policy_slot::PolicySlot;
use recache_adapters::kv_events::{DecodeError, KvBatch, KvEvent};
use recache_adapters::kv_subscriber::Incoming;
use recache_adapters::order::Order;
use recache_eviction::PolicyConfig;
use recache_testkit::wait_for_blocking;

fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: hashes.to_vec(),
        parent,
        token_ids: tokens.to_vec(),
        block_size: 2,
    }
}

fn batch(seq: u64, events: Vec<KvEvent>) -> Msg {
    Msg::Sub(Incoming::Batch(KvBatch {
        seq,
        ts: 0.0,
        events,
    }))
}

#[test]
fn worker_follows_events_resyncs_and_publishes() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = std::env::temp_dir().join(format!("recache-kvloop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let order = dir.join("order.bin");
    let mut cfg = KvLoopArgs {
        kv_events: vec!["tcp://127.0.0.1:1".into()],
        publish: Some(order.display().to_string()),
        kv_engine_blocks: Some(5),
        kv_block_size: Some(2),
        ..Default::default()
    }
    .resolve()
    .expect("config");
    cfg.refresh = Duration::from_millis(20);
    let metrics = Metrics::new().expect("metrics");
    let lm = LoopMetrics::new(&metrics).expect("loop metrics");
    let policy = Arc::new(PolicySlot::new(PolicyConfig::Lru {}, &metrics).expect("slot"));
    let slot = policy.clone();
    let worker = Worker {
        resident: Arc::new(Resident::new(cfg.block_size)),
        cfg,
        metrics: lm.clone(),
        policy,
        // vLLM's dialect: a null block and the partial tail never cache.
        uncached_blocks: recache_adapters::Engine::Vllm.uncached_blocks(),
        pending_arrivals: Arc::new(AtomicUsize::new(0)),
        runtime: rt.handle().clone(),
        priority: None,
    };
    let (tx, rx) = channel();
    let thread = std::thread::spawn(move || worker.run(rx));
    let query = |tokens: Vec<u32>| {
        let (rtx, rrx) = channel();
        tx.send(Msg::Query(tokens, rtx)).expect("send");
        rrx.recv_timeout(Duration::from_secs(5)).expect("answer")
    };
    let resyncs = |r: &str| lm.resyncs.with_label_values(&[r]).get();

    tx.send(batch(0, vec![stored(&[1, 2], None, &[5, 6, 7, 8])]))
        .expect("send");
    tx.send(batch(1, vec![stored(&[3], Some(2), &[9, 9])]))
        .expect("send");
    assert_eq!(query(vec![5, 6, 7, 8, 9, 9, 1]), (3, 3));
    tx.send(batch(
        2,
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![3],
        }],
    ))
    .expect("send");
    assert_eq!(query(vec![5, 6, 7, 8, 9, 9]), (2, 2));
    tx.send(batch(
        2,
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![2],
        }],
    ))
    .expect("send");
    assert_eq!(
        query(vec![5, 6, 7, 8]),
        (2, 2),
        "a duplicate batch is skipped"
    );

    // Requests: the shadow (capacity 3 = 5 blocks - null - partial tail) evicts what the engine
    // still has; the order lists exactly those engine hashes.
    for p in [vec![1, 1, 2, 2, 3, 3], vec![4, 4, 5, 5]] {
        tx.send(Msg::Arrival(p)).expect("send");
    }
    // The worker publishes after arrivals (and every 20 ms): wait for the order that lists
    // what the two arrivals evicted. Deepest first: the shadow evicted both engine blocks.
    let o = wait_for_blocking(
        "an order listing victims [2, 1] (deepest first: both engine blocks)",
        Duration::from_secs(10),
        || match std::fs::read(&order).map(|b| Order::decode(&b)) {
            Ok(Ok(o)) if o.victims == [2, 1] => Ok(o),
            Ok(Ok(o)) => Err(format!("victims {:?}", o.victims)),
            Ok(Err(e)) => Err(format!("undecodable order: {e}")),
            Err(e) => Err(format!("no order file: {e}")),
        },
    );
    assert_eq!(o.generation, slot.load().generation);

    // A gap without a replay endpoint clears the mirror; then events apply again.
    tx.send(batch(9, vec![stored(&[20], None, &[1, 1])]))
        .expect("send");
    assert_eq!(query(vec![1, 1]), (1, 1));
    assert_eq!(resyncs("gap_cleared"), 1);
    // Sequence back to 0: the engine restarted.
    tx.send(batch(0, vec![stored(&[30], None, &[2, 2])]))
        .expect("send");
    assert_eq!(query(vec![1, 1]), (0, 1));
    assert_eq!(resyncs("restart"), 1);
    tx.send(Msg::Sub(Incoming::Malformed(DecodeError::Frames(1))))
        .expect("send");
    tx.send(batch(
        1,
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![99],
        }],
    ))
    .expect("send");
    let _ = query(vec![]);
    assert_eq!(lm.decode_errors.get(), 1);
    assert_eq!(
        lm.apply_issues
            .with_label_values(&["unknown_removed"])
            .get(),
        1
    );
    assert_eq!(lm.mirror_blocks.get(), 1);
    drop(tx);
    thread.join().expect("worker exits when the channel closes");
    let _ = std::fs::remove_dir_all(&dir);
}
