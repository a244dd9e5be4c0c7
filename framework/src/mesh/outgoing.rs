//! A peer's queue of outgoing frames: senders encode each frame straight onto the end of a
//! buffer, and the peer's task takes everything queued as one run of frames, ready to write.
//!
//! Frames queued one by one and joined only when written would be copied twice and counted
//! three times (queued, kept until acknowledged, written). Here a frame is written into the
//! buffer once, under the queue's lock, and a whole run moves on as a few `Bytes`. A full buffer
//! is set aside for the run and a new one started, rather than grown: a growing buffer would copy
//! what it holds, a backlog of large frames (a relocation's chunks) many times over.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Poll, Waker};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, MutexGuard};

use super::codec::EncodeError;

/// The room a buffer takes from the allocator at a time, at least: runs are split off it, so
/// thousands of small frames share one allocation.
const ROOM: usize = 64 * 1024;
/// A buffer with less room left than this is set aside before the next frame (a frame larger
/// than what is left grows it while it is encoded).
const MIN_ROOM: usize = 1024;

/// Whole frames, back to back, each with its length prefix.
pub(crate) struct Piece {
    /// The frames.
    pub(crate) bytes: Bytes,
    /// How many frames `bytes` holds.
    pub(crate) frames: usize,
}

/// Frames queued and not yet taken, in order.
pub(crate) struct Run {
    /// The buffers set aside since the last run was taken (usually none).
    full: Vec<Piece>,
    /// The frames of the current buffer, if it has any.
    last: Option<Piece>,
}

impl Run {
    /// The pieces, in order.
    pub(crate) fn pieces(self) -> impl Iterator<Item = Piece> {
        self.full.into_iter().chain(self.last)
    }
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
    /// Buffers set aside, full, since the last run was taken.
    full: Vec<Piece>,
    buf: BytesMut,
    /// Frames in `buf`.
    buffered: usize,
    /// Frames in `full` and `buf`.
    frames: usize,
    /// Frames the task took and has not yet counted as its own (see [`Outgoing::settled`]).
    in_hand: usize,
    /// The length of the last frame queued: a new buffer takes room for one as long, so frames of
    /// a stream of large ones are each encoded into an allocation of their size, not regrown.
    last_len: usize,
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
        let mut guard = self.state.lock();
        if guard.closed {
            return Err(Refused::Closed);
        }
        if guard.frames >= limit {
            return Err(Refused::Full);
        }
        let state = &mut *guard;
        if state.buf.capacity() - state.buf.len() < MIN_ROOM {
            if state.buffered > 0 {
                state.full.push(Piece {
                    bytes: state.buf.split().freeze(),
                    frames: std::mem::take(&mut state.buffered),
                });
            }
            state.buf.reserve(ROOM.max(state.last_len));
        }
        let start = state.buf.len();
        encode(&mut state.buf).map_err(Refused::Encode)?;
        state.last_len = state.buf.len() - start;
        state.buffered += 1;
        state.frames += 1;
        wake_after_unlock(guard);
        Ok(())
    }

    /// How many frames wait to be taken, or were taken and are not yet counted by the task: a
    /// closing mesh that asks whether anything is still to be sent never misses a run that is
    /// between the two.
    pub(crate) fn len(&self) -> usize {
        let state = self.state.lock();
        state.frames + state.in_hand
    }

    /// The task counts the frames it took as its own now (kept until acknowledged).
    pub(crate) fn settled(&self) {
        self.state.lock().in_hand = 0;
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

    /// Takes what is queued now, if anything, leaving the queue open; the caller counts it as
    /// its own with [`settled`](Self::settled), as after [`take_next`](Self::take_next).
    pub(crate) fn take_queued(&self) -> Option<Run> {
        take(&mut self.state.lock())
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
    state.in_hand += std::mem::take(&mut state.frames);
    // A frame that failed to encode after its buffer was set aside leaves the new one empty.
    let last = (state.buffered > 0).then(|| Piece {
        bytes: state.buf.split().freeze(),
        frames: std::mem::take(&mut state.buffered),
    });
    Some(Run {
        full: std::mem::take(&mut state.full),
        last,
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
        sized(n, 3)
    }

    fn sized(n: u8, len: usize) -> impl FnOnce(&mut BytesMut) -> Result<(), EncodeError> {
        move |buf: &mut BytesMut| {
            buf.extend_from_slice(&vec![n; len]);
            Ok(())
        }
    }

    /// A run's frame count and bytes, its pieces joined.
    fn joined(run: Run) -> (usize, Vec<u8>) {
        run.pieces()
            .fold((0, Vec::new()), |(frames, mut bytes), piece| {
                bytes.extend_from_slice(&piece.bytes);
                (frames + piece.frames, bytes)
            })
    }

    #[tokio::test]
    async fn frames_queued_one_by_one_are_taken_as_one_run_in_order() {
        let out = Outgoing::default();
        for n in 1..=3 {
            out.push(10, frame(n)).unwrap();
        }
        assert_eq!(out.len(), 3);
        let (frames, bytes) = joined(out.take_next().await.unwrap());
        assert_eq!((frames, &bytes[..]), (3, &[1, 1, 1, 2, 2, 2, 3, 3, 3][..]));
        assert_eq!(out.len(), 3, "taken, not yet counted by the task");
        out.settled();
        assert_eq!(out.len(), 0);
        // Later frames start a new run.
        out.push(10, frame(4)).unwrap();
        assert_eq!(joined(out.take_next().await.unwrap()), (1, vec![4, 4, 4]));
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
        let (frames, bytes) = joined(out.take_next().await.unwrap());
        assert_eq!((frames, &bytes[..]), (2, &[1, 1, 1, 2, 2, 2][..]));
    }

    #[tokio::test]
    async fn a_waiting_task_is_woken_by_a_frame_and_ends_once_closed_and_taken() {
        let out = Arc::new(Outgoing::default());
        let task = tokio::spawn({
            let out = out.clone();
            async move {
                let mut runs = Vec::new();
                while let Some(run) = out.take_next().await {
                    runs.push(joined(run).0);
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

    #[tokio::test]
    async fn a_backlog_of_large_frames_is_set_aside_buffer_by_buffer_in_order() {
        let out = Outgoing::default();
        let large = 3 * ROOM;
        out.push(10, frame(1)).unwrap();
        for n in 2..=4 {
            out.push(10, sized(n, large)).unwrap();
        }
        out.push(10, frame(5)).unwrap();
        let pieces: Vec<Piece> = out.take_next().await.unwrap().pieces().collect();
        let sizes: Vec<(usize, usize)> = pieces.iter().map(|p| (p.bytes.len(), p.frames)).collect();
        // The first large frame grew the buffer the small one was in; each later frame took a
        // buffer of its own, as large as the frame before.
        assert_eq!(sizes, [(3 + large, 2), (large, 1), (large, 1), (3, 1)]);
        let joined: Vec<u8> = pieces
            .iter()
            .flat_map(|p| p.bytes.iter().copied())
            .collect();
        let expected: Vec<u8> = [vec![1; 3], vec![2; large], vec![3; large], vec![4; large]]
            .concat()
            .into_iter()
            .chain([5; 3])
            .collect();
        assert_eq!(joined, expected);
    }

    #[tokio::test]
    async fn a_frame_that_fails_after_its_buffer_was_set_aside_leaves_no_empty_piece() {
        let out = Outgoing::default();
        out.push(10, sized(1, ROOM)).unwrap();
        let failed = out.push(10, |_: &mut BytesMut| Err(EncodeError::TooLarge { max: 0 }));
        assert!(matches!(failed, Err(Refused::Encode(_))));
        let pieces: Vec<Piece> = out.take_next().await.unwrap().pieces().collect();
        assert_eq!(pieces.len(), 1);
        assert_eq!((pieces[0].bytes.len(), pieces[0].frames), (ROOM, 1));
    }
}
