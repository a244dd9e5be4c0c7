//! A node's conditional writes, sent to the store together: one task carries out what the core's
//! [`Batcher`] decides (a lone write at once, others sharing a call within a short window) and
//! answers each write on its own, from [`LocationStore::batches`].

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use ferry_core::commits::{Batcher, Flush};

use super::{BatchOutcome, Condition, LocationStore, Op, StoreError};

/// Where a node's writes go to be sent together. Dropping the last handle, or the node's stop,
/// ends the task once what it took is answered.
pub(crate) struct Committer {
    asks: mpsc::UnboundedSender<Asked>,
    store: Arc<dyn LocationStore>,
}

/// One write waiting for its call, and where its answer goes.
struct Asked {
    conditions: Vec<Condition>,
    ops: Vec<Op>,
    answer: oneshot::Sender<Result<BatchOutcome, StoreError>>,
}

impl Committer {
    /// Starts the task that sends the writes to `store`, until `stop`.
    pub(crate) fn start(store: Arc<dyn LocationStore>, stop: CancellationToken) -> Committer {
        let (asks, asked) = mpsc::unbounded_channel();
        tokio::spawn(run(store.clone(), asked, stop));
        Committer { asks, store }
    }

    /// Applies `ops` if every condition holds, as [`LocationStore::batch`] does, in a call it may
    /// share with other writes of the node. Once the node has stopped, it goes on its own.
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
        if let Err(mpsc::error::SendError(asked)) = self.asks.send(asked) {
            return self.store.batch(asked.conditions, asked.ops).await;
        }
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable {
                reason: "the node's committer task ended before the store answered; the write \
                         may have been applied"
                    .to_owned(),
            })
        })
    }
}

/// Takes writes as they come and sends them as the batcher decides, until `stop` or until every
/// handle is gone; then sends what is pending at once and waits for every answer.
async fn run(
    store: Arc<dyn LocationStore>,
    mut asked: mpsc::UnboundedReceiver<Asked>,
    stop: CancellationToken,
) {
    let mut batcher = Batcher::new();
    let mut pending: Vec<Asked> = Vec::new();
    let mut in_flight = FuturesUnordered::new();
    loop {
        let due = batcher.poll_timeout();
        let window = async {
            match due {
                Some(due) => tokio::time::sleep_until(Instant::from_std(due)).await,
                None => std::future::pending().await,
            }
        };
        let flush = tokio::select! {
            () = stop.cancelled() => break,
            next = asked.recv() => match next {
                Some(next) => {
                    pending.push(next);
                    batcher.push(Instant::now().into_std())
                }
                None => break,
            },
            Some(()) = in_flight.next() => batcher.flushed(),
            () = window => batcher.handle_timeout(Instant::now().into_std()),
        };
        if let Some(Flush { count }) = flush {
            let batch: Vec<Asked> = pending.drain(..count.min(pending.len())).collect();
            in_flight.push(send(&*store, batch));
        }
    }
    // Writes asked from now on go on their own; those already taken go now, all together.
    asked.close();
    while let Ok(late) = asked.try_recv() {
        pending.push(late);
    }
    if !pending.is_empty() {
        in_flight.push(send(&*store, pending));
    }
    while in_flight.next().await.is_some() {}
}

/// Sends one call's writes and hands each its own answer.
async fn send(store: &dyn LocationStore, batch: Vec<Asked>) {
    let (items, answers): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|asked| ((asked.conditions, asked.ops), asked.answer))
        .unzip();
    let outcomes = store.batches(items).await;
    for (answer, outcome) in answers.into_iter().zip(outcomes) {
        // A writer that stopped waiting needs no answer.
        let _ = answer.send(outcome);
    }
}
