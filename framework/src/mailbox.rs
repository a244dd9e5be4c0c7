//! A queue with one receiving task (a lane's messages): senders append
//! under a short lock, and the receiver takes everything queued in one step.
//!
//! A channel that counts each item in a shared counter makes the sender's and the receiver's
//! cores take turns owning that counter for every item. Here the receiver takes the senders' lock
//! once per batch, and a sender only wakes the receiver when it found it waiting.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Poll, Waker};

use parking_lot::{Mutex, MutexGuard};

/// How many items' room the buffers keep once the bursts are over. While batches stay large
/// the buffers stay large too: giving memory back for every batch costs more than the batch.
const KEEP: usize = 1024;

/// Makes a mailbox: one sending side, one receiving side.
pub(crate) fn mailbox<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        inbox: Mutex::new(Inbox {
            queue: Vec::new(),
            waker: None,
            closed: false,
        }),
        queued: Flag(AtomicBool::new(false)),
    });
    (
        Sender(shared.clone()),
        Receiver {
            shared,
            spare: Vec::new(),
        },
    )
}

struct Shared<T> {
    inbox: Mutex<Inbox<T>>,
    /// Whether the queue holds anything, changed under the lock only when it becomes non-empty
    /// or is taken. The receiver reads it without the lock, so one that has caught up does not
    /// take the lock's cache line away from a sender for every look.
    queued: Flag,
}

/// An atomic flag on a cache line of its own, away from the lock that senders write.
#[repr(align(128))]
struct Flag(AtomicBool);

struct Inbox<T> {
    queue: Vec<T>,
    /// The receiver, when it found the queue empty and waits.
    waker: Option<Waker>,
    /// No more items are accepted (what is queued is still handed out): the sender is gone,
    /// or the receiver closed it.
    closed: bool,
}

/// The sending side. Dropping it closes the mailbox: the receiver then learns that nothing more
/// can arrive.
pub(crate) struct Sender<T>(Arc<Shared<T>>);

impl<T> Sender<T> {
    /// Queues `item` behind everything sent before it, or gives it back if the mailbox is closed.
    pub fn send(&self, item: T) -> Result<(), T> {
        let mut inbox = self.0.inbox.lock();
        if inbox.closed {
            return Err(item);
        }
        if inbox.queue.is_empty() {
            self.0.queued.0.store(true, Ordering::Release);
        }
        inbox.queue.push(item);
        wake_after_unlock(inbox);
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut inbox = self.0.inbox.lock();
        inbox.closed = true;
        wake_after_unlock(inbox);
    }
}

/// Lets the lock go, then wakes the receiver if it was waiting.
fn wake_after_unlock<T>(mut inbox: MutexGuard<'_, Inbox<T>>) {
    let waiting = inbox.waker.take();
    drop(inbox);
    if let Some(waker) = waiting {
        waker.wake();
    }
}

/// The receiving side. Dropping it (its task ended) closes the mailbox and drops what is still
/// queued, so that senders learn the receiver is gone instead of queueing for nobody.
pub(crate) struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// An empty buffer, swapped in for the queue when the receiver takes it.
    spare: Vec<T>,
}

impl<T> Receiver<T> {
    /// Moves everything queued, in order, to the end of `into`. Whether anything was queued.
    ///
    /// It sees every send that happened before the call (a send under a lock that the receiver
    /// took since, or before a control message a lane received since): the flag it reads first is
    /// only written under the mailbox's lock.
    pub fn take(&mut self, into: &mut VecDeque<T>) -> bool {
        if !self.shared.queued.0.load(Ordering::Acquire) {
            return false;
        }
        let inbox = self.shared.inbox.lock();
        if inbox.queue.is_empty() {
            return false;
        }
        hand_over(inbox, &self.shared.queued, &mut self.spare, into);
        true
    }

    /// Waits until something is queued and takes it as [`Receiver::take`] does: `true` then,
    /// `false` once the mailbox is closed and empty.
    pub async fn take_next(&mut self, into: &mut VecDeque<T>) -> bool {
        poll_fn(|cx| {
            let mut inbox = self.shared.inbox.lock();
            if !inbox.queue.is_empty() {
                hand_over(inbox, &self.shared.queued, &mut self.spare, into);
                return Poll::Ready(true);
            }
            if inbox.closed {
                return Poll::Ready(false);
            }
            match &mut inbox.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            // Caught up and about to sleep: the room of a burst that is over is given back.
            let idle = (inbox.queue.capacity() > KEEP).then(|| std::mem::take(&mut inbox.queue));
            drop(inbox);
            drop(idle);
            if self.spare.capacity() > KEEP {
                self.spare = Vec::new();
            }
            if into.is_empty() && into.capacity() > KEEP {
                *into = VecDeque::new();
            }
            Poll::Pending
        })
        .await
    }

    /// Everything queued, in order.
    pub fn drain(&mut self) -> VecDeque<T> {
        let mut all = VecDeque::new();
        self.take(&mut all);
        all
    }

    /// Refuses every later send; what is queued stays to be taken.
    pub fn close(&mut self) {
        self.shared.inbox.lock().closed = true;
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let left = {
            let mut inbox = self.shared.inbox.lock();
            inbox.closed = true;
            (std::mem::take(&mut inbox.queue), inbox.waker.take())
        };
        // Dropped outside the lock: a queued message may hold a reply that someone awaits.
        drop(left);
    }
}

/// Moves a non-empty queue to `into`, letting the lock go before anything is copied: the
/// queue's buffer is swapped for the receiver's empty `spare`. A waker left from an earlier wait
/// goes too, as the receiver is not waiting now. Once batches are small again, the room that a
/// burst left in these buffers is given back.
fn hand_over<T>(
    mut inbox: MutexGuard<'_, Inbox<T>>,
    queued: &Flag,
    spare: &mut Vec<T>,
    into: &mut VecDeque<T>,
) {
    queued.0.store(false, Ordering::Relaxed);
    std::mem::swap(&mut inbox.queue, spare);
    let stale = inbox.waker.take();
    drop(inbox);
    drop(stale);
    let small = spare.len() < KEEP / 4;
    if small && into.is_empty() {
        into.shrink_to(KEEP);
    }
    into.extend(spare.drain(..));
    if small {
        spare.shrink_to(KEEP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_everything_in_order_and_refuses_sends_once_closed() {
        let (tx, mut rx) = mailbox();
        let mut got = VecDeque::new();
        assert!(!rx.take(&mut got));
        for i in 0..3 {
            assert!(tx.send(i).is_ok());
        }
        // Into an empty queue, then behind what is still there.
        assert!(rx.take(&mut got));
        assert!(tx.send(3).is_ok());
        assert!(rx.take(&mut got));
        assert_eq!(got, [0, 1, 2, 3]);
        rx.close();
        assert_eq!(tx.send(4), Err(4));
        assert!(!rx.take(&mut got));
    }

    #[tokio::test]
    async fn a_waiting_lane_wakes_for_a_send_and_learns_when_the_sender_is_gone() {
        let (tx, mut rx) = mailbox();
        let sender = tokio::spawn(async move {
            tokio::task::yield_now().await;
            tx.send("first").map_err(|_| "closed")?;
            tokio::task::yield_now().await;
            tx.send("second").map_err(|_| "closed")
        });
        let mut got = VecDeque::new();
        while got.len() < 2 {
            assert!(rx.take_next(&mut got).await);
        }
        assert_eq!(got, ["first", "second"]);
        assert_eq!(sender.await.ok(), Some(Ok(())));
        // The sender was dropped with its task: nothing more can come.
        assert!(!rx.take_next(&mut got).await);
        assert!(rx.drain().is_empty());
    }

    #[test]
    fn a_lane_that_ends_drops_what_was_queued_for_it_and_refuses_more() {
        use tokio::sync::oneshot::{self, error::TryRecvError};
        let (tx, rx) = mailbox();
        let (reply, mut answer) = oneshot::channel::<()>();
        assert!(tx.send(reply).is_ok());
        drop(rx);
        // Whoever waits for that reply learns at once that it will not come.
        assert_eq!(answer.try_recv(), Err(TryRecvError::Closed));
        let (reply, _answer) = oneshot::channel::<()>();
        assert!(tx.send(reply).is_err());
    }

    #[test]
    fn a_lane_that_caught_up_after_a_burst_gives_its_room_back_before_it_sleeps() {
        use futures_util::FutureExt;
        let (tx, mut rx) = mailbox();
        let mut backlog = VecDeque::new();
        for round in 0..2 {
            for i in 0..KEEP * 4 {
                assert!(tx.send(i).is_ok());
            }
            if round == 0 {
                // Into the lane's queue behind what it still holds, through the spare buffer.
                backlog.push_back(0);
            }
            assert!(rx.take(&mut backlog));
            backlog.clear();
        }
        assert!(backlog.capacity() >= KEEP * 4);
        assert_eq!(
            rx.take_next(&mut backlog).now_or_never(),
            None,
            "nothing queued"
        );
        assert!(rx.shared.inbox.lock().queue.capacity() <= KEEP);
        assert!(rx.spare.capacity() <= KEEP);
        assert!(backlog.capacity() <= KEEP);
    }

    #[test]
    fn the_room_of_a_burst_is_given_back_once_batches_are_small_again() {
        let (tx, mut rx) = mailbox();
        let mut backlog = VecDeque::new();
        let queue_room = |rx: &Receiver<usize>| rx.shared.inbox.lock().queue.capacity();
        for _ in 0..2 {
            for i in 0..KEEP * 4 {
                assert!(tx.send(i).is_ok());
            }
            assert!(rx.take(&mut backlog));
            assert_eq!(backlog.len(), KEEP * 4);
            backlog.clear();
        }
        assert!(
            queue_room(&rx).max(rx.spare.capacity()) >= KEEP * 4,
            "kept while bursts go on"
        );
        assert!(backlog.capacity() >= KEEP * 4);
        for _ in 0..2 {
            assert!(tx.send(0).is_ok());
            assert!(rx.take(&mut backlog));
            backlog.clear();
        }
        assert!(queue_room(&rx) <= KEEP);
        assert!(rx.spare.capacity() <= KEEP);
        assert!(backlog.capacity() <= KEEP);
    }
}
