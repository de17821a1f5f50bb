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
#[path = "shutdown_tests.rs"]
mod tests;
