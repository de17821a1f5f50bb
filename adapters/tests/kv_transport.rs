//! The ZMQ transport without vLLM: a zeromq PUB socket stands in for vLLM's publisher and a
//! ROUTER for its replay endpoint, speaking the same frames (topic, 8-byte BE seq, msgpack).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use recache_adapters::kv_events::KvEvent;
use recache_adapters::kv_subscriber::{Incoming, SubscriberConfig, replay, run};
use recache_testkit::wait_for;
use rmpv::Value;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

fn payload(hash: u64) -> Bytes {
    let ev = Value::Map(vec![
        ("type".into(), "BlockRemoved".into()),
        ("block_hashes".into(), Value::Array(vec![hash.into()])),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(
        &mut out,
        &Value::Array(vec![0.5f64.into(), Value::Array(vec![ev])]),
    )
    .expect("encode");
    out.into()
}

fn message(frames: Vec<Bytes>) -> ZmqMessage {
    let mut it = frames.into_iter();
    let mut m = ZmqMessage::from(it.next().unwrap_or_default());
    for f in it {
        m.push_back(f);
    }
    m
}

#[tokio::test]
async fn subscriber_receives_decoded_batches_and_malformed_ones() {
    let mut publisher = PubSocket::new();
    let ep = publisher
        .bind("tcp://127.0.0.1:0")
        .await
        .expect("bind")
        .to_string();
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let task = tokio::spawn(run(SubscriberConfig::new(ep), move |inc| {
        sink.lock().expect("lock").push(inc);
        true
    }));
    // Publish until the subscription has reached the publisher (ZMQ's slow joiner drops
    // what is published before): a batch delivered says it has.
    let mut seq = 0u64;
    wait_for(
        "a batch delivered to the subscriber (its subscription reaching the publisher)",
        Duration::from_secs(10),
        async || {
            let frames = vec![
                Bytes::from_static(b"kv"),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload(seq),
            ];
            seq += 1;
            publisher.send(message(frames)).await.expect("send");
            let got = got.lock().expect("lock");
            match got.iter().any(|i| matches!(i, Incoming::Batch(_))) {
                true => Ok(()),
                false => Err(format!("{} messages, no batch", got.len())),
            }
        },
    )
    .await;
    publisher
        .send(message(vec![
            Bytes::from_static(b"kv"),
            Bytes::from_static(b"bad"),
        ]))
        .await
        .expect("send");
    wait_for(
        "the malformed message reported",
        Duration::from_secs(10),
        async || match got.lock().expect("lock").last() {
            Some(Incoming::Malformed(_)) => Ok(()),
            last => Err(format!("last message {last:?}")),
        },
    )
    .await;
    task.abort();
    let got = got.lock().expect("lock");
    assert!(matches!(got[0], Incoming::Connected));
    let batches: Vec<_> = got
        .iter()
        .filter_map(|i| match i {
            Incoming::Batch(b) => Some(b),
            _ => None,
        })
        .collect();
    assert!(!batches.is_empty());
    let b = batches[0];
    assert_eq!(
        b.events,
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![b.seq]
        }]
    );
    assert!(got.iter().any(|i| matches!(i, Incoming::Malformed(_))));
}

#[tokio::test]
async fn replay_client_speaks_vllms_router_protocol() {
    let mut router = RouterSocket::new();
    let ep = router
        .bind("tcp://127.0.0.1:0")
        .await
        .expect("bind")
        .to_string();
    let server = tokio::spawn(async move {
        let req = router.recv().await.expect("request").into_vec();
        // [client_id, "", start_seq] as vLLM's _service_replay expects.
        assert_eq!(req.len(), 3);
        let start = u64::from_be_bytes(req[2][..].try_into().expect("8 bytes"));
        for seq in start..start + 3 {
            let frames = vec![
                req[0].clone(),
                Bytes::new(),
                Bytes::from_static(b"kv"),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload(seq),
            ];
            router.send(message(frames)).await.expect("send");
        }
        let end = vec![
            req[0].clone(),
            Bytes::new(),
            Bytes::new(),
            Bytes::copy_from_slice(&(-1i64).to_be_bytes()),
            Bytes::new(),
        ];
        router.send(message(end)).await.expect("send end");
    });
    let batches = replay(&ep, 40, Duration::from_secs(5))
        .await
        .expect("replay");
    assert_eq!(
        batches.iter().map(|b| b.seq).collect::<Vec<_>>(),
        vec![40, 41, 42]
    );
    server.await.expect("server");
}
