//! Requests waiting for their terminal, by request number.
//!
//! The reply route a queued request carries is plain data (node, number), not a channel, so it can be
//! captured with the queue and shipped when the unit moves.

use foldhash::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::envelope::Terminal;

const SHARDS: usize = 16;

/// The pending requests of one node.
pub(crate) struct Replies {
    next: AtomicU64,
    shards: [Mutex<HashMap<u64, oneshot::Sender<Terminal>>>; SHARDS],
}

impl Replies {
    pub fn new() -> Self {
        Replies {
            next: AtomicU64::new(1),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
        }
    }

    fn shard(&self, request: u64) -> &Mutex<HashMap<u64, oneshot::Sender<Terminal>>> {
        &self.shards[(request % SHARDS as u64) as usize]
    }

    /// Opens a request; the receiver gets its one terminal.
    pub fn open(&self) -> (u64, oneshot::Receiver<Terminal>) {
        let request = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shard(request).lock().insert(request, tx);
        (request, rx)
    }

    /// Delivers a terminal; a request that already ended (timed out) ignores it.
    pub fn complete(&self, request: u64, terminal: Terminal) {
        let waiter = self.shard(request).lock().remove(&request);
        if let Some(tx) = waiter {
            // The caller may have stopped waiting; its terminal was then its timeout.
            let _ = tx.send(terminal);
        }
    }

    /// Forgets a request whose caller gave up.
    pub fn forget(&self, request: u64) {
        self.shard(request).lock().remove(&request);
    }
}
