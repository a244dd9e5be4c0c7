//! Requests waiting for their terminal, by request number.
//!
//! The reply route a queued request carries is plain data (node, number), not a channel, so it can be
//! captured with the queue and shipped when the unit moves. Each request remembers the peer it was
//! handed to, so that a peer declared gone ends what it had not answered.

use foldhash::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use ferry_core::errors::MessageError;

use super::envelope::Terminal;
use crate::ids::{NodeId, UnitId};

const SHARDS: usize = 16;

/// The pending requests of one node, at most `limit` at once.
pub(crate) struct Replies {
    next: AtomicU64,
    open: AtomicUsize,
    limit: usize,
    shards: [Mutex<HashMap<u64, Open>>; SHARDS],
}

/// A request waiting for its terminal, and the peer it was handed to (none while it is here).
struct Open {
    answer: oneshot::Sender<Terminal>,
    sent: Option<(NodeId, UnitId)>,
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

    fn shard(&self, request: u64) -> &Mutex<HashMap<u64, Open>> {
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
        let open = Open {
            answer: tx,
            sent: None,
        };
        self.shard(request).lock().insert(request, open);
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

    /// Notes that a request for `unit` was handed to `peer` over the mesh.
    pub fn sent(&self, request: u64, peer: &NodeId, unit: &UnitId) {
        if let Some(open) = self.shard(request).lock().get_mut(&request) {
            open.sent = Some((peer.clone(), unit.clone()));
        }
    }

    /// Ends every request last handed to `peer`, which left the cluster: it will not answer.
    /// Returns how many there were.
    pub fn fail_sent_to(&self, peer: &NodeId) -> usize {
        let mut gone = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            let requests: Vec<u64> = shard
                .iter()
                .filter(|(_, open)| open.sent.as_ref().is_some_and(|(p, _)| p == peer))
                .map(|(request, _)| *request)
                .collect();
            gone.extend(requests.into_iter().filter_map(|r| shard.remove(&r)));
        }
        self.open.fetch_sub(gone.len(), Ordering::AcqRel);
        let count = gone.len();
        for open in gone {
            if let Some((node, id)) = open.sent {
                let _ = open.answer.send(Err(MessageError::PeerGone { id, node }));
            }
        }
        count
    }

    /// Delivers a terminal; a request that already ended (timed out) ignores it.
    pub fn complete(&self, request: u64, terminal: Terminal) {
        if let Some(open) = self.take(request) {
            // The caller may have stopped waiting; its terminal was then its timeout.
            let _ = open.answer.send(terminal);
        }
    }

    /// Forgets a request whose caller gave up.
    fn forget(&self, request: u64) {
        self.take(request);
    }

    fn take(&self, request: u64) -> Option<Open> {
        let waiter = self.shard(request).lock().remove(&request);
        if waiter.is_some() {
            self.open.fetch_sub(1, Ordering::AcqRel);
        }
        waiter
    }
}
