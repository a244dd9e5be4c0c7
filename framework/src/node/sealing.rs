//! The drain's seal window ([`SealWindow`]) as something moves wait on: a move copies only while
//! the window lets it copy ahead, enters before it quiesces its unit and leaves once it ended,
//! with its unit's pause.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use ferry_core::sealing::{SealWindow, Ticket};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The seals of one drain.
#[derive(Default)]
pub(crate) struct SealGate {
    window: Mutex<SealWindow>,
    /// Wakes moves waiting to enter, as many as the window lets through: a drain keeps a hundred
    /// moves waiting, and waking all of them for every place freed would spend the drain's
    /// processors on moves that find none.
    sealed: Notify,
    /// Wakes moves waiting to copy, likewise.
    copying: Notify,
}

impl SealGate {
    /// Waits until the window lets this move seal its unit: a move through it ended, or one has
    /// held its place so long that it no longer counts.
    pub async fn enter(self: &Arc<Self>) -> SealPass {
        loop {
            let mut freed = pin!(self.sealed.notified());
            // Registered before the window is read, so that a place freed in between wakes it.
            freed.as_mut().enable();
            let now = Instant::now().into_std();
            let (ticket, change) = {
                let mut window = self.window.lock();
                (window.enter(now), window.next_change(now))
            };
            if let Some(ticket) = ticket {
                return SealPass {
                    gate: self.clone(),
                    ticket,
                    pause: None,
                };
            }
            match change {
                Some(at) => {
                    tokio::select! {
                        () = freed => {}
                        () = tokio::time::sleep_until(Instant::from_std(at)) => {}
                    }
                }
                None => freed.await,
            }
        }
    }

    /// Waits until the window lets this move pre-copy its unit.
    pub async fn copy(self: &Arc<Self>) -> CopyPass {
        loop {
            let mut freed = pin!(self.copying.notified());
            freed.as_mut().enable();
            if self.window.lock().copy() {
                return CopyPass { gate: self.clone() };
            }
            freed.await;
        }
    }

    /// How many seals the window lets through now.
    pub fn limit(&self) -> usize {
        self.window.lock().limit()
    }

    /// Changes the window, then wakes as many waiting moves as it now lets through; every move
    /// waiting to enter when the change says places count as stuck sooner than they were told.
    fn change(&self, change: impl FnOnce(&mut SealWindow) -> bool) {
        let (sooner, seals, copies) = {
            let mut window = self.window.lock();
            let sooner = change(&mut window);
            (
                sooner,
                window.free_seals(Instant::now().into_std()),
                window.free_copies(),
            )
        };
        if sooner {
            self.sealed.notify_waiters();
        }
        for _ in 0..seals {
            self.sealed.notify_one();
        }
        for _ in 0..copies {
            self.copying.notify_one();
        }
    }
}

/// A move's place in the window, given back when it is dropped.
pub(crate) struct SealPass {
    gate: Arc<SealGate>,
    ticket: Ticket,
    pause: Option<Duration>,
}

impl SealPass {
    /// The move's unit was paused this long: the window learns from it as the pass is dropped.
    pub fn paused(&mut self, pause: Option<Duration>) {
        self.pause = pause;
    }
}

impl Drop for SealPass {
    fn drop(&mut self) {
        let (ticket, pause) = (self.ticket, self.pause);
        self.gate.change(|window| window.left(ticket, pause));
    }
}

/// A move's leave to pre-copy, given back when it is dropped.
pub(crate) struct CopyPass {
    gate: Arc<SealGate>,
}

impl Drop for CopyPass {
    fn drop(&mut self) {
        self.gate.change(|window| {
            window.copied();
            false
        });
    }
}
