//! Async prediction mode: a worker thread evaluates the current model on
//! each access's feature row as it happens, off the request path; decisions
//! read whatever predictions have arrived (a leaf still waiting for one is
//! not a candidate of the learned choice until it arrives). Not
//! reproducible run to run, so the simulator uses sync mode by default.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use super::features::Row;
use super::trees::Ensemble;
use crate::BlockId;
use crate::hash::FastMap;

enum Msg {
    Model(Arc<Ensemble>),
    Row(BlockId, u64, Box<Row>),
}

/// (block, access time, predicted gap).
type Done = (BlockId, u64, f64);

fn worker(rx: Receiver<Msg>, tx: Sender<Done>) {
    let mut model: Option<Arc<Ensemble>> = None;
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Model(m) => model = Some(m),
            Msg::Row(b, t, row) => {
                if let Some(m) = &model {
                    let gap = m.predict(&row[..]).exp_m1();
                    if tx.send((b, t, gap)).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

pub struct Refresher {
    tx: Option<Sender<Msg>>,
    rx: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
    /// Latest prediction per block: (access time it was made for, gap).
    cache: FastMap<BlockId, (u64, f64)>,
    /// Rows the worker predicted.
    pub rows: u64,
}

impl Refresher {
    pub fn new() -> Self {
        let (tx, wrx) = channel();
        let (wtx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("recache-predict".into())
            .spawn(move || worker(wrx, wtx))
            .ok();
        Self {
            tx: thread.as_ref().map(|_| tx),
            rx,
            thread,
            cache: FastMap::default(),
            rows: 0,
        }
    }

    pub fn set_model(&self, model: Arc<Ensemble>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Model(model));
        }
    }

    pub fn submit(&self, block: BlockId, time: u64, row: &Row) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Msg::Row(block, time, Box::new(*row)));
        }
    }

    /// Takes in every prediction that arrived.
    pub fn drain(&mut self) {
        while let Ok((b, t, gap)) = self.rx.try_recv() {
            self.rows += 1;
            let e = self.cache.entry(b).or_insert((t, gap));
            if t >= e.0 {
                *e = (t, gap);
            }
        }
    }

    /// Predicted gap for `block`'s access at `last`, if it arrived.
    pub fn gap(&self, block: BlockId, last: u64) -> Option<f64> {
        self.cache.get(&block).filter(|e| e.0 == last).map(|e| e.1)
    }

    pub fn forget(&mut self, block: BlockId) {
        self.cache.remove(&block);
    }
}

impl Default for Refresher {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
