//! Unit tests of `limits::per_client`.

use super::*;

fn limits(max: usize) -> (Arc<ClientLimits>, IntCounter) {
    let refused = IntCounter::new("r", "r").expect("counter");
    (ClientLimits::new(max, refused.clone()), refused)
}

#[test]
fn counts_per_address_across_connections_and_forgets_gone_ones() {
    let (limits, refused) = limits(2);
    let a: IpAddr = [10, 0, 0, 1].into();
    let b: IpAddr = [10, 0, 0, 2].into();
    let (conn1, conn2) = (limits.client(a), limits.client(a));
    let p1 = conn1.acquire().expect("first");
    let p2 = conn2.acquire().expect("second, on another connection");
    assert!(conn1.acquire().is_none(), "third from a is over the limit");
    assert_eq!(refused.get(), 1);
    let pb = limits.client(b).acquire().expect("b has its own count");
    drop(p1);
    let p3 = conn2.acquire().expect("a place came back");
    drop((p2, p3));
    assert_eq!(limits.in_flight(a), 0);
    drop((conn1, conn2));
    assert_eq!(limits.clients(), 1, "b's answer is still in flight");
    drop(pb);
    assert_eq!(limits.clients(), 0, "both addresses are gone");
}

#[tokio::test]
async fn a_streamed_body_holds_its_place_until_sent_a_complete_one_does_not() {
    let (limits, _) = limits(1);
    let ip: IpAddr = [127, 0, 0, 1].into();
    let client = limits.client(ip);
    let full = hold(
        crate::error::full(Bytes::from_static(b"hi")),
        client.acquire().expect("permit"),
    );
    assert_eq!(
        limits.in_flight(ip),
        0,
        "a complete body frees its place at once"
    );
    drop(full);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let body = hold(Channel(rx).boxed(), client.acquire().expect("permit"));
    assert_eq!(limits.in_flight(ip), 1);
    tx.send(Bytes::from_static(b"x")).await.expect("send");
    drop(tx);
    let bytes = body.collect().await.expect("body").to_bytes();
    assert_eq!(&bytes[..], b"x");
    assert_eq!(limits.in_flight(ip), 0);
}

/// A body of unknown length, fed by the test.
struct Channel(tokio::sync::mpsc::Receiver<Bytes>);

impl HttpBody for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}
