//! The drain's seal window ([`SealWindow`]) as something moves wait on: a move copies only while
//! the window lets it copy ahead, enters before it quiesces its unit and leaves once it ended,
//! with its unit's pause.

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
    /// Wakes the moves waiting to enter or to copy when one leaves or stops copying (the window
    /// may have grown, too).
    left: Notify,
}

impl SealGate {
    /// Waits until the window lets this move seal its unit: a move through it ended, or one has
    /// held its place so long that it no longer counts.
    pub async fn enter(self: &Arc<Self>) -> SealPass {
        loop {
            let left = self.left.notified();
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
                        () = left => {}
                        () = tokio::time::sleep_until(Instant::from_std(at)) => {}
                    }
                }
                None => left.await,
            }
        }
    }

    /// Waits until the window lets this move pre-copy its unit.
    pub async fn copy(self: &Arc<Self>) -> CopyPass {
        loop {
            let left = self.left.notified();
            if self.window.lock().copy() {
                return CopyPass { gate: self.clone() };
            }
            left.await;
        }
    }

    /// How many seals the window lets through now.
    pub fn limit(&self) -> usize {
        self.window.lock().limit()
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
        self.gate.window.lock().left(self.ticket, self.pause);
        self.gate.left.notify_waiters();
    }
}

/// A move's leave to pre-copy, given back when it is dropped.
pub(crate) struct CopyPass {
    gate: Arc<SealGate>,
}

impl Drop for CopyPass {
    fn drop(&mut self) {
        self.gate.window.lock().copied();
        self.gate.left.notify_waiters();
    }
}
