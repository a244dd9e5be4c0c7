//! What a bot checks in what it receives, as plain state machines fed one observation at a time:
//! a numbered stream that must arrive whole, once and in order, the time between server ticks, and
//! the incarnations of a room that crashes rebuilt.

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

    /// Lets the numbers below `n` that have not arrived go without counting them lost, and
    /// returns how many those are: they will not come (their answers went to a session that
    /// ended), so `n` is the next one expected.
    pub fn excuse_below(&mut self, n: u64) -> u64 {
        let kept = self.missing.split_off(&n);
        let mut excused = std::mem::replace(&mut self.missing, kept).len() as u64;
        if n > self.next {
            excused += n - self.next;
            self.next = n;
        }
        excused
    }

    /// Whether `n` arrived already, below the highest number that arrived: the stream started
    /// again rather than sent one late (`n` missing) or repeated its latest.
    pub fn went_back_to(&self, n: u64) -> bool {
        n + 1 < self.next && !self.missing.contains(&n)
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

/// A room rebuilt after a crash, as a bot saw it: its state restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// The node it came back on, for games whose pushes name it.
    pub node: Option<String>,
    /// When the bot first saw the new incarnation.
    pub at: Instant,
}

/// The incarnations of a room as one bot played in it. A crash rebuilds a room fresh: what it had
/// applied is gone, and inputs the old incarnation had not applied died with it. A game's bot
/// checks each incarnation on its own, from the state it starts in, and tells this account when
/// a push shows the state restarted; the inputs lost that way are counted apart from what the
/// server lost.
#[derive(Debug, Clone, Default)]
pub struct Incarnations {
    /// Inputs the incarnations before the current one account for: applied, or lost with them.
    before: u64,
    /// Inputs lost with incarnations that died.
    lost: u64,
    /// The checks of the incarnations before the current one.
    past: Faults,
    rebuilds: Vec<Rebuild>,
    /// Until the current incarnation's first input is seen: the inputs the incarnations before
    /// it applied, below which none can be the current one's.
    floor: Option<u64>,
}

impl Incarnations {
    /// The room came back fresh (on `node`, if the push said). The incarnation that died applied
    /// `applied` of this bot's inputs and its checks found `faults`; of the `sent` inputs so far,
    /// the rest died with it. Inputs from number `sent` on are the new incarnation's.
    /// Until [`Incarnations::first_input`] says otherwise.
    pub fn rebuilt(&mut self, node: Option<String>, sent: u64, applied: u64, faults: Faults) {
        self.before += applied;
        self.floor = Some(self.before);
        let lost = sent.saturating_sub(self.before);
        self.lost += lost;
        self.before += lost;
        self.past.add(faults);
        self.rebuilds.push(Rebuild {
            node,
            at: Instant::now(),
        });
    }

    /// The first input the current incarnation ran is numbered `first`. Those from it on that
    /// [`Incarnations::rebuilt`] counted lost with the old one reached the new one instead (the
    /// gateway held them while it bound the Actor again), but none the old one applied: an input
    /// both ran stays a duplicate. Returns where the current incarnation's inputs start, the
    /// first time after a rebuild only.
    pub fn first_input(&mut self, first: u64) -> Option<u64> {
        let floor = self.floor.take()?;
        let start = first.clamp(floor, self.before);
        self.lost -= self.before - start;
        self.before = start;
        Some(start)
    }

    /// How many inputs the incarnations before the current one account for: the current one
    /// answers for the inputs numbered from here on.
    pub fn before(&self) -> u64 {
        self.before
    }

    /// The faults of every incarnation, given the current one's.
    pub fn faults(&self, current: Faults) -> Faults {
        let mut faults = self.past;
        faults.add(current);
        faults
    }

    /// Inputs lost with incarnations that died.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Each rebuild, in the order seen.
    pub fn rebuilds(&self) -> &[Rebuild] {
        &self.rebuilds
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
    /// The room was rebuilt since the last tick: its clock started again.
    restarted: bool,
}

impl TickGaps {
    /// Takes tick number `tick`, received at `at`.
    pub fn observe(&mut self, tick: u64, at: Instant) {
        if let Some((last_tick, last_at)) = self.last {
            if tick <= last_tick && !std::mem::take(&mut self.restarted) {
                self.backwards += 1;
                return;
            }
            let gap = at.saturating_duration_since(last_at);
            self.gaps.record(gap);
            self.longest = self.longest.max(gap);
        }
        self.last = Some((tick, at));
    }

    /// The room was rebuilt after a crash and its ticks count from zero again: the next tick
    /// is timed from the last one received, whatever its number.
    pub fn restarted(&mut self) {
        self.restarted = true;
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
    fn a_number_seen_below_the_highest_is_the_stream_going_back() {
        let mut sequence = Sequence::starting_at(1);
        for n in [1, 2, 4] {
            sequence.observe(n);
        }
        assert!(sequence.went_back_to(1));
        assert!(!sequence.went_back_to(3), "missing: late, not going back");
        assert!(!sequence.went_back_to(4), "the latest again: a repeat");
        assert!(!sequence.went_back_to(5), "ahead");
    }

    #[test]
    fn numbers_excused_below_a_mark_are_neither_lost_nor_late() {
        let mut sequence = Sequence::starting_at(0);
        for n in [0, 1, 3] {
            sequence.observe(n);
        }
        // 2 was skipped, 4 and 5 never came: three excused; 7 still counts when skipped.
        assert_eq!(sequence.excuse_below(6), 3);
        for n in [6, 8] {
            sequence.observe(n);
        }
        assert_eq!(sequence.faults_upto(9), faults(1, 0, 0));
        assert_eq!(sequence.excuse_below(2), 0, "nothing below 2 is missing");
    }

    #[test]
    fn a_rebuild_counts_what_the_old_incarnation_did_not_apply_as_lost_with_it() {
        let mut rooms = Incarnations::default();
        rooms.rebuilt(Some("n2".to_owned()), 5, 3, faults(0, 0, 1));
        assert_eq!((rooms.before(), rooms.lost()), (5, 2));
        // A second crash: the second incarnation applied 4 of the 6 sent since.
        rooms.rebuilt(None, 11, 4, Faults::default());
        assert_eq!((rooms.before(), rooms.lost()), (11, 4));
        assert_eq!(rooms.faults(faults(1, 0, 0)), faults(1, 0, 1));
        let nodes: Vec<_> = rooms.rebuilds().iter().map(|r| r.node.clone()).collect();
        assert_eq!(nodes, [Some("n2".to_owned()), None]);
    }

    #[test]
    fn inputs_held_for_a_rebuilt_room_count_with_it_not_with_the_old_one() {
        let mut rooms = Incarnations::default();
        // 10 applied, 16 sent when the rebuild was seen; the new room's first input is 13.
        rooms.rebuilt(None, 16, 10, Faults::default());
        assert_eq!((rooms.before(), rooms.lost()), (16, 6));
        assert_eq!(rooms.first_input(13), Some(13));
        assert_eq!((rooms.before(), rooms.lost()), (13, 3));
        assert_eq!(rooms.first_input(14), None, "once per incarnation");
        // After a second rebuild, a first input the old room had applied is not moved below
        // what it applied (the checks then count it twice), nor one sent later above `sent`.
        rooms.rebuilt(None, 20, 5, Faults::default());
        assert_eq!(rooms.first_input(15), Some(18));
        assert_eq!(rooms.lost(), 3);
        rooms.rebuilt(None, 25, 2, Faults::default());
        assert_eq!(rooms.first_input(30), Some(25));
        assert_eq!(rooms.lost(), 8);
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

    #[test]
    fn the_ticks_of_a_rebuilt_room_are_timed_from_the_last_one_before_the_crash() {
        let start = Instant::now();
        let mut gaps = TickGaps::default();
        gaps.observe(700, start);
        gaps.observe(701, start + Duration::from_millis(33));
        // The room is rebuilt 2 s later and ticks from 1 again.
        gaps.restarted();
        gaps.observe(1, start + Duration::from_millis(2033));
        gaps.observe(2, start + Duration::from_millis(2066));
        assert_eq!(gaps.longest, Duration::from_millis(2000));
        assert_eq!(gaps.backwards, 0);
        assert_eq!(gaps.gaps.summary().count, 3);
    }
}
