//! How many units a drain keeps sealed at once: seal narrow, copy wide.
//!
//! A drain starts many moves at once, so that their pre-copy and record reads overlap, but a
//! sealed unit is paused, and every unit sealed beside it shares the link, the store and the
//! processors with it. The window lets through only as many seals as go straight through: it
//! grows while the pauses stay near the shortest one seen, and shrinks when they do not, so that
//! a unit's pause inside a drain stays the pause of a single move.

use std::time::Duration;

/// The window a drain starts with: one seal, so that the first pauses measured are those of a
/// move that waits for nothing.
pub const START: usize = 1;

/// The widest the window grows: as many as a drain moves at once.
pub const MAX: usize = crate::drain::IN_FLIGHT;

/// Pauses up to this much over twice the shortest seen still count as going straight through:
/// below it, the difference is the scheduler's noise.
pub const SLACK: Duration = Duration::from_micros(250);

/// Whether a move waits for a place in the window before it quiesces its unit: not one whose
/// unit seals only at its application's safe point, which the drain does not choose; it would
/// hold its place, and keep others from sealing, for as long as the application runs on.
pub fn windowed(waits_for_the_app: bool) -> bool {
    !waits_for_the_app
}

/// The seals a drain lets through at once, and what it measured of them.
#[derive(Debug, Clone)]
pub struct SealWindow {
    limit: usize,
    open: usize,
    /// The shortest pause seen: a move that waited for nothing.
    floor: Option<Duration>,
    /// The pauses of the moves that ended since the window last changed.
    sum: Duration,
    count: usize,
}

impl Default for SealWindow {
    fn default() -> Self {
        SealWindow {
            limit: START,
            open: 0,
            floor: None,
            sum: Duration::ZERO,
            count: 0,
        }
    }
}

impl SealWindow {
    /// A window of [`START`] seals.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many seals it lets through at once now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How many moves are through it now.
    pub fn open(&self) -> usize {
        self.open
    }

    /// A move asks to seal its unit: whether it may now. One that may not waits until a move
    /// through the window ends.
    pub fn enter(&mut self) -> bool {
        if self.open < self.limit {
            self.open += 1;
            true
        } else {
            false
        }
    }

    /// A move let through ended, with its unit's pause if it sealed one. Once a window's worth
    /// of moves ended, the window grows by a quarter if their mean pause went straight through,
    /// and shrinks by a quarter if not.
    pub fn left(&mut self, pause: Option<Duration>) {
        self.open = self.open.saturating_sub(1);
        let Some(pause) = pause else {
            return;
        };
        let floor = self.floor.map_or(pause, |floor| floor.min(pause));
        self.floor = Some(floor);
        self.sum += pause;
        self.count += 1;
        if self.count < self.limit {
            return;
        }
        let mean = self.sum / self.count as u32;
        self.sum = Duration::ZERO;
        self.count = 0;
        let step = (self.limit / 4).max(1);
        self.limit = if mean <= floor * 2 + SLACK {
            (self.limit + step).min(MAX)
        } else {
            (self.limit - step).max(1)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn no_more_enter_than_the_window_lets_through() {
        let mut w = SealWindow::new();
        for _ in 0..START {
            assert!(w.enter());
        }
        assert!(!w.enter());
        w.left(None);
        assert!(w.enter());
        assert_eq!(w.open(), START);
    }

    #[test]
    fn pauses_that_go_straight_through_widen_the_window() {
        let mut w = SealWindow::new();
        for _ in 0..10_000 {
            assert!(w.enter());
            w.left(Some(us(400)));
        }
        assert_eq!(w.limit(), MAX);
    }

    /// Pauses that grow with the window (each move waits for the others) narrow it back to the
    /// width where they do not.
    #[test]
    fn pauses_that_queue_narrow_the_window_to_where_they_do_not() {
        let mut w = SealWindow::new();
        let cost = 150;
        for _ in 0..5_000 {
            while w.enter() {}
            let pause = us(300 + cost * w.open() as u64);
            for _ in 0..w.open() {
                w.left(Some(pause));
            }
        }
        // Twice the shortest pause (at one sealed) plus the slack: 2 * 450 + 250 = 1150 µs.
        let pause = 300 + cost * w.limit() as u64;
        assert!(
            pause <= 1_150 + cost * 2,
            "window {} pauses {pause} µs",
            w.limit()
        );
        assert!(w.limit() >= 4, "window {}", w.limit());
        assert_eq!(w.open(), 0);
    }

    #[test]
    fn moves_that_never_sealed_free_their_place_and_measure_nothing() {
        let mut w = SealWindow::new();
        assert!(w.enter());
        w.left(None);
        assert_eq!(w.open(), 0);
        assert_eq!(w.limit(), START);
    }
}
