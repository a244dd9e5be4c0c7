//! Requests waiting for their terminal, by request number.
//!
//! The reply route a queued request carries is plain data (node, number), not a channel, so it can be
//! captured with the queue and shipped when the unit moves.

use foldhash::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::envelope::Terminal;

const SHARDS: usize = 16;

/// The pending requests of one node, at most `limit` at once.
pub(crate) struct Replies {
    next: AtomicU64,
    open: AtomicUsize,
    limit: usize,
    shards: [Mutex<HashMap<u64, oneshot::Sender<Terminal>>>; SHARDS],
}

/// A request waiting for its terminal; dropping it (a caller that stops waiting) forgets it, so
/// an abandoned request never holds a place under the limit.
pub(crate) struct Waiting {
    replies: Arc<Replies>,
    /// The request number, for the reply route.
    pub request: u64,
    /// Where the terminal arrives.
    pub answer: oneshot::Receiver<Terminal>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.replies.forget(self.request);
    }
}

impl Replies {
    pub fn new(limit: usize) -> Self {
        Replies {
            next: AtomicU64::new(1),
            open: AtomicUsize::new(0),
            limit,
            shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
        }
    }

    fn shard(&self, request: u64) -> &Mutex<HashMap<u64, oneshot::Sender<Terminal>>> {
        &self.shards[(request % SHARDS as u64) as usize]
    }

    /// Opens a request, or `None` when `limit` requests are already waiting.
    pub fn open(self: &Arc<Self>) -> Option<Waiting> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            });
        if taken.is_err() {
            return None;
        }
        let request = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, answer) = oneshot::channel();
        self.shard(request).lock().insert(request, tx);
        Some(Waiting {
            replies: self.clone(),
            request,
            answer,
        })
    }

    /// The limit this table was made with.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Delivers a terminal; a request that already ended (timed out) ignores it.
    pub fn complete(&self, request: u64, terminal: Terminal) {
        if let Some(tx) = self.take(request) {
            // The caller may have stopped waiting; its terminal was then its timeout.
            let _ = tx.send(terminal);
        }
    }

    /// Forgets a request whose caller gave up.
    fn forget(&self, request: u64) {
        self.take(request);
    }

    fn take(&self, request: u64) -> Option<oneshot::Sender<Terminal>> {
        let waiter = self.shard(request).lock().remove(&request);
        if waiter.is_some() {
            self.open.fetch_sub(1, Ordering::AcqRel);
        }
        waiter
    }
}
