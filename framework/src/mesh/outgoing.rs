//! A peer's queue of outgoing frames: senders encode each frame straight onto the end of one
//! buffer, and the peer's task takes everything queued as one run of frames, ready to write.
//!
//! Frames queued one by one and joined only when written would be copied twice and counted
//! three times (queued, kept until acknowledged, written). Here a frame is written into the
//! buffer once, under the queue's lock, and a whole run moves on as one `Bytes`.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, MutexGuard};

use super::codec::EncodeError;

/// The room a buffer takes from the allocator at a time (more when a backlog is longer): runs
/// are split off it, so thousands of small frames share one allocation.
const ROOM: usize = 64 * 1024;
/// A buffer with less room left than this grows before the next frame (a frame larger than
/// what is left grows it while it is encoded).
const MIN_ROOM: usize = 1024;

/// Frames queued and not yet taken, as one buffer.
pub(crate) struct Run {
    /// The frames, each with its length prefix, back to back.
    pub(crate) bytes: Bytes,
    /// How many frames `bytes` holds.
    pub(crate) frames: usize,
}

/// Why [`Outgoing::push`] did not queue a frame.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The limit of queued frames was reached.
    Full,
    /// The queue is closed.
    Closed,
    /// The frame could not be encoded.
    Encode(EncodeError),
}

#[derive(Default)]
struct State {
    buf: BytesMut,
    frames: usize,
    /// The task, when it found the queue empty and waits.
    waker: Option<Waker>,
    /// No more frames are accepted (what is queued is still handed out).
    closed: bool,
}

/// The queue, shared by the senders and the peer's task.
#[derive(Default)]
pub(crate) struct Outgoing {
    state: Mutex<State>,
}

impl Outgoing {
    /// Appends one frame that `encode` writes onto the end of the buffer (a frame that fails to
    /// encode leaves nothing behind), unless `limit` frames wait to be taken already.
    pub(crate) fn push(
        &self,
        limit: usize,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
    ) -> Result<(), Refused> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(Refused::Closed);
        }
        if state.frames >= limit {
            return Err(Refused::Full);
        }
        let buf = &mut state.buf;
        if buf.capacity() - buf.len() < MIN_ROOM {
            // Doubling with the backlog keeps the copies of what waits linear in its length.
            let room = ROOM.max(buf.len());
            buf.reserve(room);
        }
        encode(buf).map_err(Refused::Encode)?;
        state.frames += 1;
        wake_after_unlock(state);
        Ok(())
    }

    /// How many frames wait to be taken.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().frames
    }

    /// Waits until frames are queued and takes them all: `None` once the queue is closed and
    /// empty.
    pub(crate) async fn take_next(&self) -> Option<Run> {
        poll_fn(|cx| {
            let mut state = self.state.lock();
            if let Some(run) = take(&mut state) {
                return Poll::Ready(Some(run));
            }
            if state.closed {
                return Poll::Ready(None);
            }
            match &mut state.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// Refuses every later frame and wakes the task; what is queued stays to be taken.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        wake_after_unlock(state);
    }

    /// Closes the queue and takes what it still holds.
    pub(crate) fn close_and_drain(&self) -> Option<Run> {
        let mut state = self.state.lock();
        state.closed = true;
        take(&mut state)
    }
}

/// Everything queued, if anything is.
fn take(state: &mut State) -> Option<Run> {
    if state.frames == 0 {
        return None;
    }
    let frames = std::mem::take(&mut state.frames);
    Some(Run {
        bytes: state.buf.split().freeze(),
        frames,
    })
}

/// Lets the lock go, then wakes the task if it was waiting.
fn wake_after_unlock(mut state: MutexGuard<'_, State>) {
    let waiting = state.waker.take();
    drop(state);
    if let Some(waker) = waiting {
        waker.wake();
    }
}

/// The senders' side: dropping the last one closes the queue, and the peer's task ends once it
/// has written what was queued.
pub(crate) struct OutgoingTx(pub(crate) Arc<Outgoing>);

impl Drop for OutgoingTx {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u8) -> impl FnOnce(&mut BytesMut) -> Result<(), EncodeError> {
        move |buf: &mut BytesMut| {
            buf.extend_from_slice(&[n; 3]);
            Ok(())
        }
    }

    #[tokio::test]
    async fn frames_queued_one_by_one_are_taken_as_one_run_in_order() {
        let out = Outgoing::default();
        for n in 1..=3 {
            out.push(10, frame(n)).unwrap();
        }
        assert_eq!(out.len(), 3);
        let run = out.take_next().await.unwrap();
        assert_eq!(run.frames, 3);
        assert_eq!(&run.bytes[..], &[1, 1, 1, 2, 2, 2, 3, 3, 3]);
        assert_eq!(out.len(), 0);
        // Later frames start a new run, not touching the bytes handed out.
        out.push(10, frame(4)).unwrap();
        assert_eq!(&out.take_next().await.unwrap().bytes[..], &[4, 4, 4]);
        assert_eq!(&run.bytes[..3], &[1, 1, 1]);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_failed_encoding_leaves_nothing() {
        let out = Outgoing::default();
        out.push(2, frame(1)).unwrap();
        out.push(2, frame(2)).unwrap();
        assert!(matches!(out.push(2, frame(3)), Err(Refused::Full)));
        let failed = out.push(3, |buf: &mut BytesMut| {
            let start = buf.len();
            buf.extend_from_slice(&[9; 5]);
            buf.truncate(start);
            Err(EncodeError::TooLarge { max: 4 })
        });
        assert!(matches!(failed, Err(Refused::Encode(_))));
        let run = out.take_next().await.unwrap();
        assert_eq!((run.frames, &run.bytes[..]), (2, &[1, 1, 1, 2, 2, 2][..]));
    }

    #[tokio::test]
    async fn a_waiting_task_is_woken_by_a_frame_and_ends_once_closed_and_taken() {
        let out = Arc::new(Outgoing::default());
        let task = tokio::spawn({
            let out = out.clone();
            async move {
                let mut runs = Vec::new();
                while let Some(run) = out.take_next().await {
                    runs.push(run.frames);
                }
                runs
            }
        });
        tokio::task::yield_now().await;
        let tx = OutgoingTx(out.clone());
        tx.0.push(10, frame(1)).unwrap();
        drop(tx);
        assert!(matches!(out.push(10, frame(2)), Err(Refused::Closed)));
        let runs = task.await.unwrap();
        assert_eq!(
            runs.iter().sum::<usize>(),
            1,
            "the frame queued before the close"
        );
    }
}
