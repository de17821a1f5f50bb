//! Background work with an owner: a [`TaskGuard`] holds a spawned task and the signal that
//! stops it. Shutting the guard down (or dropping it) tells the task to stop; `shutdown`
//! also waits for it. So no loop outlives the server that started it (as mini-redis's
//! `DbDropGuard` does for its purge task).

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running background task and its stop signal.
#[derive(Debug)]
pub struct TaskGuard {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl TaskGuard {
    /// Spawns `body(stop)` on the current runtime; `stop` changes to true when the task
    /// should end.
    pub fn spawn<F, Fut>(body: F) -> Self
    where
        F: FnOnce(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(body(rx));
        Self {
            stop,
            task: Some(task),
        }
    }

    /// Signals the task and waits for it to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
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
}
