//! What a bot checks in what it receives, as plain state machines fed one observation at a time:
//! a numbered stream that must arrive whole, once and in order, and the time between server ticks.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::percentiles::Durations;

/// How far a numbered stream strayed from arriving whole, once and in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Faults {
    /// Numbers never seen (by the end, or while checking).
    pub lost: u64,
    /// Numbers seen more than once.
    pub duplicated: u64,
    /// Numbers seen after a higher one.
    pub reordered: u64,
}

impl Faults {
    /// Whether nothing was lost, duplicated or reordered.
    pub fn is_clean(&self) -> bool {
        *self == Faults::default()
    }

    /// Adds another count.
    pub fn add(&mut self, other: Faults) {
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
    }
}

/// Checks a stream numbered `first, first + 1, ...`.
#[derive(Debug, Clone)]
pub struct Sequence {
    /// The number expected next if all is well.
    next: u64,
    /// Numbers skipped so far: lost unless they turn up late.
    missing: BTreeSet<u64>,
    duplicated: u64,
    reordered: u64,
}

impl Sequence {
    /// A stream whose first number is `first`.
    pub fn starting_at(first: u64) -> Self {
        Sequence {
            next: first,
            missing: BTreeSet::new(),
            duplicated: 0,
            reordered: 0,
        }
    }

    /// Takes the next number that arrived.
    pub fn observe(&mut self, n: u64) {
        if n >= self.next {
            self.missing.extend(self.next..n);
            self.next = n + 1;
        } else if self.missing.remove(&n) {
            self.reordered += 1;
        } else {
            self.duplicated += 1;
        }
    }

    /// How many numbers arrived in order so far, counting from the first: the next one expected.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The faults so far, counting as lost what has not arrived up to number `upto` (exclusive).
    pub fn faults_upto(&self, upto: u64) -> Faults {
        Faults {
            lost: self.missing.len() as u64 + upto.saturating_sub(self.next),
            duplicated: self.duplicated,
            reordered: self.reordered,
        }
    }
}

/// The time between server ticks as one client saw them.
#[derive(Debug, Clone, Default)]
pub struct TickGaps {
    last: Option<(u64, Instant)>,
    /// Every gap between two consecutive ticks received.
    pub gaps: Durations,
    /// The longest gap.
    pub longest: Duration,
    /// Ticks numbered below one already received (a server clock going back, or a replay).
    pub backwards: u64,
}

impl TickGaps {
    /// Takes tick number `tick`, received at `at`.
    pub fn observe(&mut self, tick: u64, at: Instant) {
        if let Some((last_tick, last_at)) = self.last {
            if tick <= last_tick {
                self.backwards += 1;
                return;
            }
            let gap = at.saturating_duration_since(last_at);
            self.gaps.record(gap);
            self.longest = self.longest.max(gap);
        }
        self.last = Some((tick, at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(lost: u64, duplicated: u64, reordered: u64) -> Faults {
        Faults {
            lost,
            duplicated,
            reordered,
        }
    }

    fn check(numbers: &[u64], upto: u64) -> Faults {
        let mut sequence = Sequence::starting_at(1);
        for n in numbers {
            sequence.observe(*n);
        }
        sequence.faults_upto(upto)
    }

    #[test]
    fn a_whole_ordered_stream_is_clean() {
        assert!(check(&[1, 2, 3, 4], 5).is_clean());
    }

    #[test]
    fn a_gap_is_a_loss_and_what_never_came_too() {
        assert_eq!(check(&[1, 3], 5), faults(2, 0, 0));
    }

    #[test]
    fn a_late_number_is_reordered_not_lost() {
        assert_eq!(check(&[1, 3, 2, 4], 5), faults(0, 0, 1));
    }

    #[test]
    fn a_repeat_is_a_duplicate() {
        assert_eq!(check(&[1, 2, 2, 3, 1], 4), faults(0, 2, 0));
    }

    #[test]
    fn tick_gaps_measure_arrivals_and_skip_backward_ticks() {
        let start = Instant::now();
        let mut gaps = TickGaps::default();
        gaps.observe(1, start);
        gaps.observe(2, start + Duration::from_millis(33));
        gaps.observe(2, start + Duration::from_millis(40));
        gaps.observe(4, start + Duration::from_millis(100));
        assert_eq!(gaps.longest, Duration::from_millis(67));
        assert_eq!(gaps.backwards, 1);
        assert_eq!(gaps.gaps.summary().count, 2);
    }
}
