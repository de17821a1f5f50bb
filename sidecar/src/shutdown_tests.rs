//! Unit tests of `shutdown`.

use super::*;

#[tokio::test]
async fn shutdown_stops_and_waits_drop_signals() {
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel(2);
    let tx = done_tx.clone();
    let guard = TaskGuard::spawn(move |mut stop| async move {
        let _ = stop.changed().await;
        let _ = tx.send("first").await;
    });
    guard.shutdown().await;
    assert_eq!(done_rx.try_recv().ok(), Some("first"));
    let guard = TaskGuard::spawn(move |mut stop| async move {
        let _ = stop.changed().await;
        let _ = done_tx.send("second").await;
    });
    drop(guard);
    assert_eq!(done_rx.recv().await, Some("second"));
}
