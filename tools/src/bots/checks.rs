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

/// How a room came back after its node died, as a bot can tell from what it pushes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Nothing the bot saw went back: the room moved, or came back from a checkpoint that held
    /// all it had shown.
    #[default]
    Kept,
    /// Its state went back to an earlier point of the same life: its standby's checkpoint.
    Checkpoint,
    /// Its state started over: it was rebuilt from nothing.
    Rebuilt,
}

/// A room that came back after a crash, as a bot saw it: from a checkpoint, or rebuilt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// How it came back (never [`Outcome::Kept`]).
    pub outcome: Outcome,
    /// The node it came back on, for games whose pushes name it.
    pub node: Option<String>,
    /// When the bot first saw the new incarnation.
    pub at: Instant,
}

/// The incarnations of a room as one bot played in it. A crash rebuilds a room fresh (what it had
/// applied is gone) or promotes its standby (what the checkpoint did not hold is gone); inputs
/// the old incarnation had not applied died with it. A game's bot checks each incarnation on its
/// own, from the state it starts in, and tells this account when a push shows the state went
/// back; the inputs lost that way are counted apart from what the server lost, and so are the
/// inputs whose effect the room no longer shows (rolled back).
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
    /// Inputs sent whose effect the room no longer shows: those a rebuilt room forgot, applied or
    /// not, and those the checkpoint a room went back to did not hold.
    rolled_back: u64,
    /// What the incarnations before the last comeback answered for, and the inputs sent then:
    /// so that a comeback first taken for a rebuild can be found a checkpoint.
    last_comeback: (u64, u64),
}

impl Incarnations {
    /// The room came back fresh (on `node`, if the push said). The incarnation that died applied
    /// `applied` of this bot's inputs and its checks found `faults`; of the `sent` inputs so far,
    /// the rest died with it. Inputs from number `sent` on are the new incarnation's.
    /// Until [`Incarnations::first_input`] says otherwise.
    pub fn rebuilt(&mut self, node: Option<String>, sent: u64, applied: u64, faults: Faults) {
        let answered_before = self.before;
        self.went_back(node, sent, applied, faults, Outcome::Rebuilt);
        // Nothing the old incarnation did shows in the new one.
        self.rolled_back += self.before - answered_before;
    }

    /// The room went back to its standby's checkpoint (on `node`, if the push said), which holds
    /// `kept` of the inputs the incarnation that died answers for (it had applied more, or not);
    /// its checks found `faults`. Of the `sent` inputs so far, the rest died with it; inputs from
    /// number `sent` on are the restored room's, until [`Incarnations::first_input`] says
    /// otherwise.
    pub fn restored(&mut self, node: Option<String>, sent: u64, kept: u64, faults: Faults) {
        let lost = self.lost;
        self.went_back(node, sent, kept, faults, Outcome::Checkpoint);
        self.rolled_back += self.lost - lost;
    }

    fn went_back(
        &mut self,
        node: Option<String>,
        sent: u64,
        kept: u64,
        faults: Faults,
        outcome: Outcome,
    ) {
        self.last_comeback = (self.before, sent);
        self.before += kept;
        self.floor = Some(self.before);
        let lost = sent.saturating_sub(self.before);
        self.lost += lost;
        self.before += lost;
        self.past.add(faults);
        self.rebuilds.push(Rebuild {
            outcome,
            node,
            at: Instant::now(),
        });
    }

    /// The comeback [`Incarnations::rebuilt`] took last for a rebuild was the room back at its
    /// standby's checkpoint, which holds `kept` of the inputs the incarnation that died answered
    /// for: for games that can tell only from a later push. Only before the new incarnation's
    /// first input is seen, and only once.
    pub fn was_restored(&mut self, kept: u64) {
        let Some(last) = self.rebuilds.last_mut() else {
            return;
        };
        if self.floor.is_none() || last.outcome != Outcome::Rebuilt {
            return;
        }
        last.outcome = Outcome::Checkpoint;
        let (answered_before, sent) = self.last_comeback;
        // Undo the rebuild's count, then count as `restored` does.
        self.lost -= self.before - self.floor.unwrap_or(self.before);
        self.rolled_back -= self.before - answered_before;
        self.before = answered_before + kept;
        self.floor = Some(self.before);
        let lost = sent.saturating_sub(self.before);
        self.lost += lost;
        self.rolled_back += lost;
        self.before += lost;
    }

    /// The first input the current incarnation ran is numbered `first`. Those from it on that
    /// [`Incarnations::rebuilt`] counted lost with the old one reached the new one instead (the
    /// gateway held them while it bound the Actor again), but none the old one applied: an input
    /// both ran stays a duplicate. Returns where the current incarnation's inputs start, the
    /// first time after a rebuild only.
    pub fn first_input(&mut self, first: u64) -> Option<u64> {
        let floor = self.floor.take()?;
        let start = first.clamp(floor, self.before);
        // Those reached the new incarnation: neither lost nor rolled back.
        self.lost -= self.before - start;
        self.rolled_back -= self.before - start;
        self.before = start;
        Some(start)
    }

    /// The bot cannot tell whether its inputs numbered below `n` ran: their answers may have
    /// gone to a binding that ended before it saw any. The current incarnation answers for those
    /// from `n` on; returns how many that leaves unchecked.
    pub fn unseen_below(&mut self, n: u64) -> u64 {
        let unseen = n.saturating_sub(self.before);
        self.before += unseen;
        unseen
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

    /// Inputs sent whose effect the room no longer shows, after the crashes seen.
    pub fn rolled_back(&self) -> u64 {
        self.rolled_back
    }

    /// Each time the room came back from a crash, in the order seen.
    pub fn rebuilds(&self) -> &[Rebuild] {
        &self.rebuilds
    }

    /// How the room came through the crashes seen: the worst of its comebacks.
    pub fn outcome(&self) -> Outcome {
        self.rebuilds
            .iter()
            .map(|r| r.outcome)
            .max()
            .unwrap_or_default()
    }
}

/// The inputs a crash took back from a bot, split by what the bot had been told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rollback {
    /// Inputs the gateway confirmed (or whose answer the bot received) whose effect the room no
    /// longer shows: what a crash must never take under a confirmed standby.
    pub confirmed_lost: u64,
    /// Inputs sent but never confirmed that the room does not show: the client said it could
    /// not vouch for them.
    pub unconfirmed_rolled_back: u64,
}

impl Rollback {
    /// Splits `rolled_back` inputs by the `unconfirmed` ones the client reported it had no
    /// confirmation of: an input the client vouched for is confirmed, so only as many as it did
    /// not vouch for can be excused.
    pub fn split(rolled_back: u64, unconfirmed: u64) -> Rollback {
        let unconfirmed_rolled_back = rolled_back.min(unconfirmed);
        Rollback {
            confirmed_lost: rolled_back - unconfirmed_rolled_back,
            unconfirmed_rolled_back,
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
    fn a_rebuild_rolls_back_every_input_of_the_old_life_a_checkpoint_only_those_it_missed() {
        let mut rooms = Incarnations::default();
        assert_eq!(rooms.outcome(), Outcome::Kept);
        // 20 sent, 18 applied; the checkpoint the room went back to holds 15 of them.
        rooms.restored(Some("n2".to_owned()), 20, 15, Faults::default());
        assert_eq!(
            (rooms.before(), rooms.lost(), rooms.rolled_back()),
            (20, 5, 5)
        );
        assert_eq!(rooms.outcome(), Outcome::Checkpoint);
        // Input 17 was held by the gateway and ran in the restored room: 2 rolled back, not 5.
        assert_eq!(rooms.first_input(17), Some(17));
        assert_eq!((rooms.lost(), rooms.rolled_back()), (2, 2));
        // Rebuilt from nothing at 30 sent: the 13 the restored room answered for are gone too.
        rooms.rebuilt(None, 30, 10, Faults::default());
        assert_eq!((rooms.lost(), rooms.rolled_back()), (5, 15));
        assert_eq!(rooms.outcome(), Outcome::Rebuilt);
        let seen: Vec<Outcome> = rooms.rebuilds().iter().map(|r| r.outcome).collect();
        assert_eq!(seen, [Outcome::Checkpoint, Outcome::Rebuilt]);
    }

    #[test]
    fn a_comeback_taken_for_a_rebuild_and_then_found_a_checkpoint_counts_as_one() {
        let mut found = Incarnations::default();
        found.restored(None, 3, 1, Faults::default());
        found.rebuilt(None, 20, 12, Faults::default());
        found.was_restored(9);
        let mut told = Incarnations::default();
        told.restored(None, 3, 1, Faults::default());
        told.restored(None, 20, 9, Faults::default());
        assert_eq!(
            (
                found.before(),
                found.lost(),
                found.rolled_back(),
                found.outcome()
            ),
            (
                told.before(),
                told.lost(),
                told.rolled_back(),
                told.outcome()
            )
        );
        assert_eq!(found.first_input(15), told.first_input(15));
        assert_eq!(found.rolled_back(), told.rolled_back());
        // Once the new incarnation's first input is seen, it is too late to change its mind.
        found.was_restored(0);
        assert_eq!(found.rolled_back(), told.rolled_back());
    }

    #[test]
    fn only_inputs_the_client_did_not_vouch_for_are_excused_from_a_rollback() {
        assert_eq!(
            Rollback::split(5, 3),
            Rollback {
                confirmed_lost: 2,
                unconfirmed_rolled_back: 3
            }
        );
        // More unconfirmed than rolled back: some of them ran and were kept.
        assert_eq!(
            Rollback::split(2, 7),
            Rollback {
                confirmed_lost: 0,
                unconfirmed_rolled_back: 2
            }
        );
        assert_eq!(Rollback::split(0, 0), Rollback::default());
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
