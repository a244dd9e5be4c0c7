//! A node's conditional writes, sent to the store together, as the core's [`Batcher`] decides: a
//! lone write goes at once, others share a call within a short window, and each is answered on
//! its own from [`LocationStore::batches`].
//!
//! No task stands between a writer and the store: the write that the batcher sends (a lone one,
//! or the one that fills a batch) makes the call on its own task and hands the others of its
//! batch their answers. Only a batch sent when its window ends, or when a call in flight is
//! answered, goes on a task of its own. Tokio's timer fires on whole milliseconds, so a batch
//! that waits for the end of its window goes up to a millisecond after it.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::time::Instant;

use ferry_core::commits::{Batcher, Flush};

use super::{BatchOutcome, Condition, LocationStore, Op, StoreError};

/// Where a node's writes go to be sent together.
pub(crate) struct Committer {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn LocationStore>,
    state: Mutex<State>,
}

struct State {
    batcher: Batcher,
    /// The writes not sent yet, oldest first: what the batcher counts as pending.
    pending: Vec<Asked>,
    /// Whether a task waits for the end of the pending batch's window.
    timer: bool,
}

/// One write waiting for its call, and where its answer goes.
struct Asked {
    conditions: Vec<Condition>,
    ops: Vec<Op>,
    answer: oneshot::Sender<Result<BatchOutcome, StoreError>>,
}

impl Committer {
    /// A committer that sends to `store`.
    pub(crate) fn new(store: Arc<dyn LocationStore>) -> Committer {
        Committer {
            shared: Arc::new(Shared {
                store,
                state: Mutex::new(State {
                    batcher: Batcher::new(),
                    pending: Vec::new(),
                    timer: false,
                }),
            }),
        }
    }

    /// Applies `ops` if every condition holds, as [`LocationStore::batch`] does, in a call it may
    /// share with other writes of the node. The call runs on the task of the write that sends it:
    /// dropping that write's future drops the call, and the others of it hear that their outcome
    /// is unknown (so run it to its end, as a move's commit task does).
    pub(crate) async fn batch(
        &self,
        conditions: Vec<Condition>,
        ops: Vec<Op>,
    ) -> Result<BatchOutcome, StoreError> {
        let (answer, answered) = oneshot::channel();
        let asked = Asked {
            conditions,
            ops,
            answer,
        };
        let (lead, wait) = {
            let mut state = self.shared.state.lock();
            state.pending.push(asked);
            let flush = state.batcher.push(Instant::now().into_std());
            let lead = flush.map(|flush| state.take(flush));
            let wait = lead.is_none() && !std::mem::replace(&mut state.timer, true);
            (lead, wait)
        };
        if wait {
            tokio::spawn(self.shared.clone().wait_windows());
        }
        if let Some(batch) = lead {
            self.shared.send(batch).await;
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable {
                reason: "the call that carried this write was dropped before the store \
                         answered; the write may have been applied"
                    .to_owned(),
            })
        })
    }
}

impl State {
    /// The writes a flush sends.
    fn take(&mut self, Flush { count }: Flush) -> Vec<Asked> {
        let count = count.min(self.pending.len());
        self.pending.drain(..count).collect()
    }
}

impl Shared {
    /// Sends one call's writes and hands each its answer; then, as the call is answered (or
    /// dropped), what waited for it goes.
    async fn send(self: &Arc<Self>, batch: Vec<Asked>) {
        let _answered = Answered(self.clone());
        let (items, answers): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|asked| ((asked.conditions, asked.ops), asked.answer))
            .unzip();
        let outcomes = self.store.batches(items).await;
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A writer that stopped waiting needs no answer.
            let _ = answer.send(outcome);
        }
    }

    /// Sends each pending batch when its window ends, for as long as one is pending.
    async fn wait_windows(self: Arc<Self>) {
        loop {
            let due = {
                let mut state = self.state.lock();
                match state.batcher.poll_timeout() {
                    Some(due) => due,
                    None => {
                        state.timer = false;
                        return;
                    }
                }
            };
            tokio::time::sleep_until(Instant::from_std(due)).await;
            let batch = {
                let mut state = self.state.lock();
                let flush = state.batcher.handle_timeout(Instant::now().into_std());
                flush.map(|flush| state.take(flush))
            };
            if let Some(batch) = batch {
                let shared = self.clone();
                tokio::spawn(async move { shared.send(batch).await });
            }
        }
    }
}

/// Tells the batcher that a call was answered, when the call's future ends or is dropped, and
/// sends what it then lets go on a task of its own.
struct Answered(Arc<Shared>);

impl Drop for Answered {
    fn drop(&mut self) {
        let batch = {
            let mut state = self.0.state.lock();
            let flush = state.batcher.flushed();
            flush.map(|flush| state.take(flush))
        };
        // Without a runtime (it is shutting down) the writes are dropped, and their writers
        // hear that the outcome is unknown.
        if let (Some(batch), Ok(runtime)) = (batch, tokio::runtime::Handle::try_current()) {
            let shared = self.0.clone();
            runtime.spawn(async move { shared.send(batch).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;

    use super::*;
    use crate::ids::NodeId;
    use crate::store::{BoxFuture, Lease, MemoryStore, Page, Versioned};

    /// A memory store that notes the size of every call of many batches, and holds the first
    /// such call until it is let go.
    struct Counted {
        inner: MemoryStore,
        calls: Mutex<Vec<usize>>,
        go: watch::Sender<bool>,
    }

    impl Counted {
        fn new() -> Arc<Counted> {
            Arc::new(Counted {
                inner: MemoryStore::new(),
                calls: Mutex::new(Vec::new()),
                go: watch::Sender::new(false),
            })
        }
    }

    impl LocationStore for Counted {
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
            self.inner.get(key)
        }

        fn batch<'a>(
            &'a self,
            conditions: Vec<Condition>,
            ops: Vec<Op>,
        ) -> BoxFuture<'a, Result<BatchOutcome, StoreError>> {
            self.inner.batch(conditions, ops)
        }

        fn batches<'a>(
            &'a self,
            items: Vec<(Vec<Condition>, Vec<Op>)>,
        ) -> BoxFuture<'a, Vec<Result<BatchOutcome, StoreError>>> {
            let first = {
                let mut calls = self.calls.lock();
                calls.push(items.len());
                calls.len() == 1
            };
            let mut go = self.go.subscribe();
            Box::pin(async move {
                if first {
                    let _ = go.wait_for(|go| *go).await;
                }
                self.inner.batches(items).await
            })
        }

        fn scan<'a>(
            &'a self,
            prefix: &'a str,
            after: Option<&'a str>,
            limit: usize,
        ) -> BoxFuture<'a, Result<Page, StoreError>> {
            self.inner.scan(prefix, after, limit)
        }

        fn acquire_lease<'a>(
            &'a self,
            node: &'a NodeId,
            holder: u64,
            ttl: Duration,
        ) -> BoxFuture<'a, Result<Lease, StoreError>> {
            self.inner.acquire_lease(node, holder, ttl)
        }

        fn renew_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            self.inner.renew_lease(lease)
        }

        fn lease_of<'a>(
            &'a self,
            node: &'a NodeId,
        ) -> BoxFuture<'a, Result<Option<Lease>, StoreError>> {
            self.inner.lease_of(node)
        }

        fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<(), StoreError>> {
            self.inner.release_lease(lease)
        }
    }

    fn create(key: &str) -> (Vec<Condition>, Vec<Op>) {
        (vec![Condition::absent(key)], vec![Op::put(key, "v")])
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_write_goes_at_once_and_writes_behind_a_call_share_the_next() {
        let store = Counted::new();
        let committer = Arc::new(Committer::new(store.clone()));
        store.go.send_replace(true);
        let (conditions, ops) = create("alone");
        let started = Instant::now();
        let alone = committer.batch(conditions, ops).await;
        assert!(
            matches!(alone, Ok(BatchOutcome::Committed { .. })),
            "{alone:?}"
        );
        assert_eq!(started.elapsed(), Duration::ZERO, "no wait when idle");
        assert_eq!(*store.calls.lock(), vec![1]);

        // A second store whose first call is held: the writes that come meanwhile go together
        // once the window ends, without waiting for the held call.
        let store = Counted::new();
        let committer = Arc::new(Committer::new(store.clone()));
        let writes: Vec<_> = ["held", "a", "b", "c", "a"]
            .into_iter()
            .map(|key| {
                let (committer, (conditions, ops)) = (committer.clone(), create(key));
                tokio::spawn(async move {
                    let asked = Instant::now();
                    let outcome = committer.batch(conditions, ops).await;
                    (outcome, asked.elapsed())
                })
            })
            .collect();
        // The writes come in the order spawned, the first alone; the others wait for a window.
        tokio::time::sleep(ferry_core::commits::WINDOW * 2).await;
        store.go.send_replace(true);
        let mut outcomes = Vec::new();
        for write in writes {
            outcomes.push(write.await.expect("write ran"));
        }
        assert_eq!(*store.calls.lock(), vec![1, 4]);
        let [held, a, b, c, again] = <[_; 5]>::try_from(outcomes).expect("five");
        for (outcome, waited) in [&a, &b, &c] {
            assert!(
                matches!(outcome, Ok(BatchOutcome::Committed { .. })),
                "{outcome:?}"
            );
            // Its window, and the rest of the timer's millisecond.
            let bound = ferry_core::commits::WINDOW + Duration::from_millis(1);
            assert!(*waited <= bound, "{waited:?}");
        }
        assert!(matches!(held.0, Ok(BatchOutcome::Committed { .. })));
        assert!(held.1 >= ferry_core::commits::WINDOW * 2);
        // Each is answered on its own: the second create of `a` found it there.
        assert!(
            matches!(again.0, Ok(BatchOutcome::Conflict { .. })),
            "{again:?}"
        );
    }
}
