//! How many units a drain keeps sealed at once: seal narrow, copy wide.
//!
//! A drain starts many moves at once, so that their pre-copy and record reads overlap, but a
//! sealed unit is paused, and every unit sealed beside it shares the link, the store and the
//! processors with it. The window lets through only as many seals as go straight through: it
//! grows while the pauses stay near the shortest ones seen, and shrinks when they do not, so that
//! a unit's pause inside a drain stays the pause of a single move.
//!
//! Pauses are judged by their mean over a sample of moves, never one by one: a single pause is
//! as short or as long as the scheduler happened to make it, and a window that took the shortest
//! single pause for the cost of a move would stay narrow, and the drain slow, for no one's gain.
//! What a move that waits for nothing costs is measured again now and then, with one seal at a
//! time: the shortest mean of a whole drain is the luckiest sample of its quietest moment, and
//! once the host got busier no window, not even a single seal, would come near it again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The window a drain starts with: one seal, so that the first pauses measured are those of a
/// move that waits for nothing.
pub const START: usize = 1;

/// The widest the window grows: as many as a drain moves at once.
pub const MAX: usize = crate::drain::IN_FLIGHT;

/// Mean pauses up to this much over half again the shortest mean seen still count as going
/// straight through: below it, the difference is the scheduler's noise. (Up to twice the shortest,
/// as the window once allowed, let large rooms pause several times a single move at p99.)
pub const SLACK: Duration = Duration::from_micros(250);

/// Whether a move waits for a place in the window before it quiesces its unit: not one whose
/// unit seals only at its application's safe point, which the drain does not choose; it would
/// hold its place, and keep others from sealing, for as long as the application runs on.
pub fn windowed(waits_for_the_app: bool) -> bool {
    !waits_for_the_app
}

/// A move's place in the window.
pub type Ticket = u64;

/// Moves of a drain that pre-copy at once, for each unit the window lets seal: the next moves
/// copy while those before them seal, so the link is never idle. A move asks before it takes its
/// first snapshot, so that no image waits, going stale, for leave to be sent; and one for each
/// seal keeps captures of large units from taking the processors from the units that are sealed.
pub const COPY_AHEAD: usize = 1;

/// The fewest pauses whose mean the window judges, however narrow it is.
pub const SAMPLE: usize = 8;

/// After this many judgments the window measures again what a move that waits for nothing
/// costs: it lets one seal through at a time for a sample, then goes back to its width. A
/// window that follows a host's load no further than its shortest mean ever would stay at one
/// seal once moves grew dearer; one that took its latest means for the cost would grow with
/// its own queue. Each sample at one seal costs a drain its width for some milliseconds: every
/// 128 judgments it is a few percent of the drain's time (every 32 took about a sixth more
/// on Redis, docs/benchmarks.md).
pub const REMEASURE: usize = 128;

/// A place held this much longer than the shortest mean pause seen no longer counts: a unit
/// stuck in a slow restore or commit keeps its place, but does not keep the others from sealing.
pub const STUCK_FACTOR: u32 = 8;

/// Nor does a place held longer than this, whatever the pauses seen.
pub const STUCK_MIN: Duration = Duration::from_millis(20);

/// The seals a drain lets through at once, and what it measured of them.
#[derive(Debug, Clone)]
pub struct SealWindow {
    limit: usize,
    /// The places taken, with when each was taken.
    open: BTreeMap<Ticket, Instant>,
    next: Ticket,
    /// The shortest mean pause over a sample since the last one taken at a single seal: moves
    /// that waited for nothing.
    floor: Option<Duration>,
    /// Judgments since that sample.
    judged: usize,
    /// While it takes a sample at a single seal: the width it goes back to, and the first
    /// place of the sample (those before sealed beside others).
    remeasure: Option<(usize, Ticket)>,
    /// The pauses of the moves that ended since the window last changed.
    sum: Duration,
    count: usize,
    /// Moves pre-copying now.
    copying: usize,
}

impl Default for SealWindow {
    fn default() -> Self {
        SealWindow {
            limit: START,
            open: BTreeMap::new(),
            next: 0,
            floor: None,
            judged: 0,
            remeasure: None,
            sum: Duration::ZERO,
            count: 0,
            copying: 0,
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

    /// How long a place counts before it is taken as stuck.
    pub fn stuck(&self) -> Duration {
        self.floor
            .map_or(STUCK_MIN, |floor| (floor * STUCK_FACTOR).max(STUCK_MIN))
    }

    /// How many places count at `now`: those taken, less the stuck ones.
    pub fn open(&self, now: Instant) -> usize {
        let stuck = self.stuck();
        self.open
            .values()
            .filter(|at| now.saturating_duration_since(**at) < stuck)
            .count()
    }

    /// A move asks to seal its unit: its place, if it may now. One that may not waits until a
    /// move through the window ends, or until [`next_change`](Self::next_change).
    pub fn enter(&mut self, now: Instant) -> Option<Ticket> {
        if self.free_seals(now) == 0 {
            return None;
        }
        self.next += 1;
        self.open.insert(self.next, now);
        Some(self.next)
    }

    /// How many more moves may [`enter`](Self::enter) at `now`: as many as a runtime wakes
    /// of those waiting, so that a place freed wakes one waiter and not all of them.
    pub fn free_seals(&self, now: Instant) -> usize {
        self.limit.saturating_sub(self.open(now))
    }

    /// How many more moves may [`copy`](Self::copy) now.
    pub fn free_copies(&self) -> usize {
        (self.limit * COPY_AHEAD).saturating_sub(self.copying)
    }

    /// A move asks to pre-copy its unit: whether it may now. One that may not waits until a
    /// move stops copying ([`copied`](Self::copied)) or the window grows.
    pub fn copy(&mut self) -> bool {
        if self.free_copies() == 0 {
            return false;
        }
        self.copying += 1;
        true
    }

    /// A move that was let [`copy`](Self::copy) stopped pre-copying (to seal, or because its
    /// move ended).
    pub fn copied(&mut self) {
        self.copying = self.copying.saturating_sub(1);
    }

    /// When a place that counts now becomes stuck, letting one more through.
    pub fn next_change(&self, now: Instant) -> Option<Instant> {
        let stuck = self.stuck();
        self.open
            .values()
            .map(|at| *at + stuck)
            .filter(|at| *at > now)
            .min()
    }

    /// The move with this place ended, with its unit's pause if it sealed one. Once a window's
    /// worth of moves ended (and at least [`SAMPLE`]), the window grows by a quarter if their
    /// mean pause went straight through, and shrinks by a quarter if not; every [`REMEASURE`]
    /// judgments it takes a sample at one seal, as the cost of a move from then on.
    ///
    /// Returns whether places now count as stuck sooner (a shorter mean pause was seen): the
    /// times [`next_change`](Self::next_change) gave those waiting may be too late, and each
    /// should ask again.
    pub fn left(&mut self, ticket: Ticket, pause: Option<Duration>) -> bool {
        self.open.remove(&ticket);
        let Some(pause) = pause else {
            return false;
        };
        if self.remeasure.is_some_and(|(_, first)| ticket < first) {
            return false;
        }
        self.sum += pause;
        self.count += 1;
        if self.count < self.limit.max(SAMPLE) {
            return false;
        }
        let stuck = self.stuck();
        let mean = self.sum / self.count as u32;
        self.sum = Duration::ZERO;
        self.count = 0;
        if let Some((width, _)) = self.remeasure.take() {
            self.floor = Some(mean);
            self.limit = width;
            self.judged = 0;
            return self.stuck() < stuck;
        }
        let floor = self.floor.map_or(mean, |floor| floor.min(mean));
        self.floor = Some(floor);
        let step = (self.limit / 4).max(1);
        self.limit = if mean <= floor * 3 / 2 + SLACK {
            (self.limit + step).min(MAX)
        } else {
            (self.limit - step).max(1)
        };
        self.judged += 1;
        if self.judged >= REMEASURE {
            self.remeasure = Some((self.limit, self.next + 1));
            self.limit = 1;
        }
        self.stuck() < stuck
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
        let now = Instant::now();
        let mut w = SealWindow::new();
        let first = w.enter(now).expect("a place");
        assert_eq!(w.enter(now), None);
        w.left(first, None);
        assert!(w.enter(now).is_some());
        assert_eq!(w.open(now), START);
    }

    #[test]
    fn pauses_that_go_straight_through_widen_the_window() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        for _ in 0..10_000 {
            let ticket = w.enter(now).expect("a place");
            w.left(ticket, Some(us(400)));
        }
        assert_eq!(w.limit(), MAX);
    }

    /// Pauses that grow with the window (each move waits for the others) narrow it back to the
    /// width where they do not.
    #[test]
    fn pauses_that_queue_narrow_the_window_to_where_they_do_not() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        let cost = 150;
        let mut widest = 0;
        for round in 0..5_000 {
            let mut tickets = Vec::new();
            while let Some(ticket) = w.enter(now) {
                tickets.push(ticket);
            }
            if round >= 1_000 {
                widest = widest.max(tickets.len());
            }
            let pause = us(300 + cost * tickets.len() as u64);
            for ticket in tickets {
                w.left(ticket, Some(pause));
            }
        }
        // Half again the shortest pause (at one sealed) plus the slack: 450 * 3 / 2 + 250 =
        // 925 µs, which 4 sealed (900 µs) stay within and 5 (1,050 µs) do not: the window
        // tries 5 and comes back. (Twice the shortest would let it try 6.)
        assert_eq!(widest, 5, "window {}", w.limit());
        assert!(w.limit() >= 4, "window {}", w.limit());
        assert_eq!(w.open(now), 0);
    }

    /// Moves grow dearer mid-drain (the host got busier): a single seal now pauses longer than
    /// several did before. The window judges against what a move costs now, and widens again to
    /// where pauses go straight through at that cost, where it would stay at one seal, its
    /// pauses all judged too long against the quiet moment's.
    #[test]
    fn moves_grown_dearer_are_judged_against_what_a_move_costs_now() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        let mut widest = 0;
        for round in 0..6_000 {
            let mut tickets = Vec::new();
            while let Some(ticket) = w.enter(now) {
                tickets.push(ticket);
            }
            let cost = if round < 2_000 { 300 } else { 900 };
            if round >= 3_000 {
                widest = widest.max(tickets.len());
            }
            let pause = us(cost + 150 * tickets.len() as u64);
            for ticket in tickets {
                w.left(ticket, Some(pause));
            }
        }
        // At 1,050 µs for one seal: 1,050 * 3 / 2 + 250 = 1,825 µs, which 6 sealed (1,800 µs)
        // stay within and 7 do not: the window tries 7 and comes back.
        assert_eq!(widest, 7, "window {}", w.limit());
    }

    /// A pause the scheduler happened to make short is no move's cost: pauses that do not grow
    /// with the window widen it, whatever their spread.
    #[test]
    fn one_lucky_short_pause_does_not_keep_the_window_narrow() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        for n in 0..20_000u32 {
            let ticket = w.enter(now).expect("a place");
            let pause = if n % 50 == 3 { us(60) } else { us(500) };
            w.left(ticket, Some(pause));
        }
        assert_eq!(w.limit(), MAX);
    }

    #[test]
    fn moves_copy_ahead_of_the_seals_by_as_many_as_the_window_lets_seal() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        for _ in 0..START * COPY_AHEAD {
            assert!(w.copy());
        }
        assert!(!w.copy(), "no more than the window's share copy at once");
        w.copied();
        assert!(w.copy());
        // As the window widens, more copy beside it.
        for _ in 0..SAMPLE {
            let ticket = w.enter(now).expect("a place");
            w.left(ticket, Some(us(400)));
        }
        assert!(w.limit() > START);
        assert!(w.copy());
    }

    /// What is free is exactly what the next asks are granted: a runtime wakes that many.
    #[test]
    fn the_free_places_are_those_the_next_moves_are_let_through() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        for _ in 0..4 * SAMPLE {
            let ticket = w.enter(now).expect("a place");
            w.left(ticket, Some(us(400)));
        }
        let limit = w.limit();
        assert!(limit > START);
        assert_eq!(w.free_seals(now), limit);
        let mut tickets = Vec::new();
        for taken in 1..=limit {
            tickets.push(w.enter(now).expect("a free place"));
            assert_eq!(w.free_seals(now), limit - taken);
        }
        assert_eq!(w.enter(now), None);
        w.left(tickets.pop().expect("a ticket"), None);
        assert_eq!(w.free_seals(now), 1);
        assert_eq!(w.free_copies(), limit * COPY_AHEAD);
        for _ in 0..limit * COPY_AHEAD {
            assert!(w.copy());
        }
        assert_eq!(w.free_copies(), 0);
        assert!(!w.copy());
    }

    #[test]
    fn moves_that_never_sealed_free_their_place_and_measure_nothing() {
        let now = Instant::now();
        let mut w = SealWindow::new();
        let ticket = w.enter(now).expect("a place");
        w.left(ticket, None);
        assert_eq!(w.open(now), 0);
        assert_eq!(w.limit(), START);
    }

    /// A unit stuck in a slow restore keeps its place but not the others from sealing.
    #[test]
    fn a_place_held_far_longer_than_a_pause_lets_the_next_move_through() {
        let start = Instant::now();
        let mut w = SealWindow::new();
        let slow = w.enter(start).expect("a place");
        assert_eq!(w.enter(start), None);
        let stuck = start + STUCK_MIN;
        assert_eq!(w.next_change(start), Some(stuck));
        assert_eq!(w.enter(stuck - us(1)), None);
        let next = w.enter(stuck).expect("the stuck place no longer counts");
        assert_eq!(w.open(stuck), 1);
        w.left(slow, Some(Duration::from_secs(2)));
        w.left(next, Some(Duration::from_millis(4)));
        assert_eq!(w.open(stuck), 0);
        // Stuck is judged against the shortest mean pause seen, and the window says each time
        // that made it shorter.
        let leave = |w: &mut SealWindow, ms| {
            let ticket = w.enter(stuck).expect("a place");
            let before = w.stuck();
            let sooner = w.left(ticket, Some(Duration::from_millis(ms)));
            assert_eq!(sooner, w.stuck() < before);
            usize::from(sooner)
        };
        let sooner: usize = (0..2 * SAMPLE).map(|_| leave(&mut w, 4)).sum();
        assert_eq!(w.stuck(), Duration::from_millis(32));
        assert_eq!(
            sooner, 1,
            "from 8 times the first mean (about 1 s) to 32 ms, once"
        );
        let sooner: usize = (0..3 * SAMPLE).map(|_| leave(&mut w, 3)).sum();
        assert_eq!(w.stuck(), Duration::from_millis(24));
        assert!(sooner >= 1);
    }
}
