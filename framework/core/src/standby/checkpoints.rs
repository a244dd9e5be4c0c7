//! The owner's side of a standby: checkpoints numbered in order within a series, each shipping
//! what changed since the last one the standby acknowledged, within the node's budget, and which
//! turns' effects confirmed mode may release.
//!
//! One checkpoint is in flight per room: the next difference is made against what the standby
//! acknowledged, never against what it may not hold. Whatever goes wrong (a refusal, no answer,
//! another holder) starts a new series with the whole image, and confirmed mode releases nothing
//! more until the store names that series as the room's standby (see
//! [`promotion`](super::promotion)): recovery promotes only the copy the store names.
//!
//! A room no node can hold a copy of (a one-node cluster, or every other node drains) plays on
//! unprotected rather than stop: once the store names no copy of it, confirmed mode releases its
//! effects as they come, and a crash rebuilds it from nothing instead of promoting a copy older
//! than what it told.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Policy, Series};
use crate::ids::NodeId;
use crate::relocation::capture::{Base, Manifest};
use crate::relocation::precopy::{changed_by, slices, whole};

/// The unit of comparison between a room's image and what its standby holds: a block that differs
/// in any byte is sent whole. Finer than a move's: checkpoints ship a room's small changes often,
/// where a move's rounds ship much once, so a checkpoint ships close to what changed.
pub const BLOCK: usize = 1024;

/// Checkpoint bytes a node has sent and not seen acknowledged, across all its rooms: its
/// checkpoint traffic never takes more of its links than this.
pub const IN_FLIGHT_BYTES: usize = 1024 * 1024;

/// A room whose oldest change not held by its standby is older than this is reported behind.
pub const BEHIND_AFTER: Duration = Duration::from_secs(1);

/// How long an owner waits for a checkpoint's answer before it takes its holder for silent (its
/// process ended or froze, or the link was reset) and starts a new series on another node. The
/// answer comes back on the same ordered, reliable stream within a mesh round trip (well under
/// 10 ms between hosts of one site, also with a checkpoint of a few MiB queued ahead of it).
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The same in confirmed mode, whose room's confirmations, replies and pushes wait meanwhile:
/// players feel it, so it is cut short. Still fifty round trips; a holder that was only slow
/// costs a whole image sent to another node.
pub const CONFIRMED_ANSWER_WAIT: Duration = Duration::from_millis(500);

/// What the owner sends its standby: the pieces of the image that differ from the checkpoint
/// before it in the series (all of it for the first), checked as a move's image is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The series it belongs to.
    pub series: Series,
    /// Its number in the series, from 1, with no gaps.
    pub number: u64,
    /// The last of the room's turns it contains.
    pub turn: u64,
    /// What the standby checks the pieces against; its base is the checkpoint before.
    pub manifest: Manifest,
    /// The pieces, each with its offset in the image.
    pub pieces: Vec<(u64, Bytes)>,
}

/// A node's share of its links for checkpoints: bytes sent and not yet acknowledged.
#[derive(Debug, Clone)]
pub struct Budget {
    limit: usize,
    used: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(IN_FLIGHT_BYTES)
    }
}

impl Budget {
    /// A budget of `limit` bytes in flight.
    pub fn new(limit: usize) -> Self {
        Budget { limit, used: 0 }
    }

    /// Takes `bytes` if they fit; a checkpoint larger than the whole budget goes alone.
    fn admit(&mut self, bytes: usize) -> bool {
        if self.used > 0 && self.used.saturating_add(bytes) > self.limit {
            return false;
        }
        self.used += bytes;
        true
    }

    fn give_back(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }

    /// Bytes in flight now.
    pub fn used(&self) -> usize {
        self.used
    }
}

/// What a turn boundary does about a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// Send this to the standby.
    Ship(Checkpoint),
    /// Nothing changed since the checkpoint the standby holds: nothing to send, and the turns
    /// so far count as held.
    Unchanged,
    /// The interval since the last checkpoint has not passed.
    NotDue,
    /// A checkpoint is on its way: the next one waits for its answer.
    Waiting,
    /// The node's budget is spent: the room falls behind (see [`Checkpoints::behind`]) and its
    /// turns go on.
    OverBudget,
    /// No node can hold a standby now.
    NoHolder,
    /// The room is on its way to its standby's node, which seals against the copy it holds.
    Moving,
}

/// A write the owner owes the store's standby record of its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Name this series: its standby acknowledged a checkpoint of it.
    Names(Series),
    /// Name no copy: no node can hold one now.
    Nothing,
}

#[derive(Debug, Clone)]
struct Flight {
    number: u64,
    turn: u64,
    image: Bytes,
    bytes: usize,
    sent: Instant,
}

/// One room's checkpoints, on its owner.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    policy: Policy,
    series: Series,
    /// The node the series ships to.
    holder: Option<NodeId>,
    /// The number the next checkpoint takes.
    next: u64,
    /// The image of the last checkpoint of this series the standby acknowledged.
    held: Option<Bytes>,
    /// The last turn contained in an acknowledged checkpoint of this series.
    held_turn: u64,
    flight: Option<Flight>,
    /// Turns run so far.
    turn: u64,
    /// When the last checkpoint was sent.
    last: Option<Instant>,
    /// Since when a turn has run that no acknowledged checkpoint contains.
    unheld_since: Option<Instant>,
    /// When the first turn since the checkpoint in flight was taken ran.
    after_flight: Option<Instant>,
    /// What the store's standby record says, as far as this owner knows (`None`: not known).
    named: Option<Record>,
    /// The last turn whose effects may leave the node.
    released: u64,
    /// A move to the standby's node is under way: no checkpoint goes until it ends.
    moving: bool,
    /// The last checkpoint the room was ready for waits for the node's budget.
    held_back: bool,
    /// Earlier holders and the series they kept, to drop their copies once the store no longer
    /// names them: until then, a crash of the owner promotes one of them.
    retired: Vec<(NodeId, Series)>,
}

impl Checkpoints {
    /// A room's checkpoints under `policy`, starting with series `first` (the owner generation
    /// of the record the owner runs the room under, epoch 1).
    pub fn new(policy: Policy, first: Series) -> Self {
        Checkpoints {
            policy,
            series: first,
            holder: None,
            next: 1,
            held: None,
            held_turn: 0,
            flight: None,
            turn: 0,
            last: None,
            unheld_since: None,
            after_flight: None,
            named: None,
            released: 0,
            moving: false,
            held_back: false,
            retired: Vec::new(),
        }
    }

    /// The series checkpoints are sent in now.
    pub fn series(&self) -> Series {
        self.series
    }

    /// A move of the room to `target` starts. If `target` keeps its standby and no checkpoint is
    /// in flight, checkpoints pause until the move ends ([`stays`](Self::stays), or the room
    /// leaves), so that the copy stays the one the move seals against, and that copy's image is
    /// returned ([`Precopy::from_standby`](crate::relocation::precopy::Precopy::from_standby)).
    /// Otherwise the move copies from nothing, and checkpoints go on.
    pub fn move_to(&mut self, target: &NodeId) -> Option<Bytes> {
        if self.holder.as_ref() != Some(target) || self.flight.is_some() {
            return None;
        }
        let copy = self.held.clone()?;
        self.moving = true;
        Some(copy)
    }

    /// The move ended with the room still here: checkpoints go on.
    pub fn stays(&mut self) {
        self.moving = false;
    }

    /// The node the checkpoints go to, once [`aim`](Self::aim) chose one.
    pub fn holder(&self) -> Option<&NodeId> {
        self.holder.as_ref()
    }

    /// Points the checkpoints at `holder`, the node placement chooses now: another one than
    /// before (the last one left, drains, or the room moved onto it) starts a new series there.
    /// `None`: no node can hold a copy, and the room goes unprotected once the store names none.
    /// The earlier holder keeps its copy until the store names another (see
    /// [`retired`](Self::retired)).
    pub fn aim(&mut self, holder: Option<NodeId>, budget: &mut Budget) {
        if holder != self.holder {
            let series = self.series;
            self.restart(budget);
            if let Some(old) = std::mem::replace(&mut self.holder, holder) {
                self.retired.push((old, series));
            }
        }
    }

    /// The earlier holders whose copies may go now, each with the series to drop up to: once
    /// the store's record names the current series, or no copy.
    pub fn retired(&mut self) -> Vec<(NodeId, Series)> {
        let settled = match self.named {
            Some(Record::Names(series)) => series == self.series,
            Some(Record::Nothing) => self.holder.is_none(),
            None => false,
        };
        if !settled {
            return Vec::new();
        }
        let current = self.holder.clone();
        let mut retired = std::mem::take(&mut self.retired);
        retired.retain(|(node, _)| Some(node) != current.as_ref());
        retired
    }

    /// Whether the room runs unprotected: no node can hold a copy, and the store names none.
    fn unprotected(&self) -> bool {
        self.holder.is_none() && self.named == Some(Record::Nothing)
    }

    /// A turn ran at `now`: its number, which its effects are held under.
    pub fn turn(&mut self, now: Instant) -> u64 {
        self.turn += 1;
        self.unheld_since.get_or_insert(now);
        if self.flight.is_some() {
            self.after_flight.get_or_insert(now);
        }
        if self.policy != Policy::Confirmed || self.unprotected() {
            self.released = self.turn;
        }
        self.turn
    }

    /// Whether a checkpoint could go now, before the room's image is made for it: there is a
    /// holder, nothing is in flight, the interval passed and a turn ran since the last one.
    pub fn ready(&self, now: Instant) -> Result<(), Take> {
        if self.moving {
            return Err(Take::Moving);
        }
        if self.holder.is_none() {
            return Err(Take::NoHolder);
        }
        if self.flight.is_some() {
            return Err(Take::Waiting);
        }
        let interval = self.policy.interval();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < interval)
        {
            return Err(Take::NotDue);
        }
        if self.held.is_some() && self.unheld_since.is_none() {
            return Err(Take::Unchanged);
        }
        Ok(())
    }

    /// When a checkpoint could go next with no further turn, as of `now`: once the interval
    /// since the last one passed, if there is a holder, nothing is in flight, and the standby
    /// lacks something (a turn it does not hold, or any copy at all). `None`: only a turn, an
    /// answer or a new holder changes that, so a room that went idle is woken only when due.
    pub fn due(&self, now: Instant) -> Option<Instant> {
        self.wants_checkpoint()
            .then(|| self.last.map_or(now, |last| last + self.policy.interval()))
    }

    /// Whether a checkpoint could go with no further turn: there is a holder, nothing is in
    /// flight, and the standby lacks something.
    fn wants_checkpoint(&self) -> bool {
        self.holder.is_some()
            && self.flight.is_none()
            && (self.held.is_none() || self.unheld_since.is_some())
    }

    /// Whether the room's lane must act on the answer just handled: confirmed mode may release
    /// the effects it holds, or a checkpoint could go with no further turn (a change the
    /// answered one lacks, or a new series after a refusal). A periodic room at rest is not
    /// woken for each answer.
    pub fn answer_wakes_lane(&self) -> bool {
        self.policy.holds_effects() || self.wants_checkpoint()
    }

    /// At a turn boundary, with the room's image now: what to send its standby, if anything.
    pub fn take(&mut self, now: Instant, image: Bytes, budget: &mut Budget) -> Take {
        if let Err(take) = self.ready(now) {
            return take;
        }
        self.held_back = false;
        let pieces: Vec<Range<usize>> = match &self.held {
            None => whole(image.len()),
            Some(held) => changed_by(held, &image, BLOCK),
        };
        if self
            .held
            .as_ref()
            .is_some_and(|held| held.len() == image.len())
            && pieces.is_empty()
        {
            self.holds(self.turn, None);
            return Take::Unchanged;
        }
        let bytes: usize = pieces.iter().map(Range::len).sum();
        self.held_back = !budget.admit(bytes);
        if self.held_back {
            return Take::OverBudget;
        }
        let number = self.next;
        self.next += 1;
        self.last = Some(now);
        let manifest = Manifest {
            len: image.len() as u64,
            chunks: pieces.len() as u32,
            crc: crc32c::crc32c(&image),
            base: self.held.as_ref().map(|held| Base::of(held)),
            // A checkpoint patches bytes: adapters' own deltas are a move's, at its seal.
            recipe: None,
        };
        let pieces = slices(&image, pieces);
        self.after_flight = None;
        self.flight = Some(Flight {
            number,
            turn: self.turn,
            image,
            bytes,
            sent: now,
        });
        Take::Ship(Checkpoint {
            series: self.series,
            number,
            turn: self.turn,
            manifest,
            pieces,
        })
    }

    /// The standby acknowledged checkpoint `number` of `series`. `Some` when the store must now
    /// name this series as the room's standby (its first acknowledgement): confirmed mode
    /// releases nothing it holds until [`recorded`](Self::recorded).
    pub fn acked(&mut self, series: Series, number: u64, budget: &mut Budget) -> Option<Record> {
        let current = self.series;
        let flight = self
            .flight
            .take_if(|f| series == current && f.number == number)?;
        budget.give_back(flight.bytes);
        self.held = Some(flight.image);
        let after = self.after_flight.take();
        self.holds(flight.turn, after);
        self.record_due()
    }

    /// The standby refused checkpoint `number` of `series` (it lacks the base, or it would skip
    /// one): a new series starts with the whole image.
    pub fn refused(&mut self, series: Series, number: u64, budget: &mut Budget) {
        if series == self.series && self.flight.as_ref().is_some_and(|f| f.number == number) {
            self.restart(budget);
        }
    }

    /// The holder, if the checkpoint in flight went unanswered for `wait` (see
    /// [`answer_wait`](Self::answer_wait)): it may have lost it with its process, or froze. The
    /// caller passes over it ([`Silent`](super::placement::Silent)) and aims again; the series
    /// starts over, with the whole image.
    pub fn silent(&mut self, now: Instant, wait: Duration, budget: &mut Budget) -> Option<NodeId> {
        let overdue = self
            .flight
            .as_ref()
            .is_some_and(|f| now.duration_since(f.sent) >= wait);
        if !overdue {
            return None;
        }
        self.restart(budget);
        self.holder.clone()
    }

    /// Whether the owner's keeper must look at this room on its rounds: a checkpoint waits for
    /// its answer (which may never come), one waits for the budget, the store's record is owed a
    /// write, or an earlier holder's copy waits to be dropped. A room with none of these needs no
    /// look until its own turns, answers or a new cluster view give it one: so the keeper's
    /// rounds cost what is under way, not the number of rooms.
    pub fn watched(&self) -> bool {
        self.flight.is_some()
            || self.held_back
            || self.record_due().is_some()
            || !self.retired.is_empty()
    }

    /// How long this room's owner waits for a checkpoint's answer: [`CONFIRMED_ANSWER_WAIT`] in
    /// confirmed mode, [`ANSWER_WAIT`] otherwise.
    pub fn answer_wait(&self) -> Duration {
        if self.policy.holds_effects() {
            CONFIRMED_ANSWER_WAIT
        } else {
            ANSWER_WAIT
        }
    }

    /// Forgets what the standby holds: the next checkpoint starts a new series, whole.
    pub fn restart(&mut self, budget: &mut Budget) {
        if let Some(flight) = self.flight.take() {
            budget.give_back(flight.bytes);
        }
        self.after_flight = None;
        self.held_back = false;
        self.held = None;
        self.held_turn = 0;
        // A series nothing was sent in may go on where it is.
        if self.next > 1 {
            self.series.epoch += 1;
        }
        self.next = 1;
        self.last = None;
    }

    /// What the store's standby record should say and does not yet, as far as this owner
    /// knows: the current series, once its standby acknowledged a checkpoint of it; or, in
    /// confirmed mode with no node to hold a copy, no copy at all.
    pub fn record_due(&self) -> Option<Record> {
        let due = if self.holder.is_none() && self.policy.holds_effects() {
            Record::Nothing
        } else if self.held.is_some() {
            Record::Names(self.series)
        } else {
            return None;
        };
        (self.named != Some(due)).then_some(due)
    }

    /// The store's standby record says `record` now. Naming no copy releases every turn so far,
    /// if still no node can hold one.
    pub fn recorded(&mut self, record: Record) {
        self.named = Some(record);
        if self.unprotected() {
            self.released = self.turn;
        }
        self.release_held();
    }

    /// A write of the standby record is on its way: until one commits, the record may say what
    /// it said or what the write says (a write whose answer is lost may still land), so confirmed
    /// mode releases nothing more on the strength of it meanwhile.
    pub fn recording(&mut self) {
        self.named = None;
    }

    /// Whether the room runs without a copy on another node, and so a crash would rebuild it
    /// from nothing.
    pub fn alone(&self) -> bool {
        self.holder.is_none()
    }

    /// The last turn whose effects may leave the node now: every turn but in confirmed mode,
    /// where only the turns of a checkpoint the standby acknowledged in the series the store
    /// names (so that recovery promotes a copy that holds them).
    pub fn released(&self) -> u64 {
        self.released
    }

    /// How long the room's oldest change has waited for its standby, once that is longer than
    /// [`BEHIND_AFTER`]: it cannot keep up (its checkpoints wait for the budget, or for a
    /// standby that does not answer). Reported; its turns go on.
    pub fn behind(&self, now: Instant) -> Option<Duration> {
        let since = self.unheld_since?;
        let age = now.duration_since(since);
        (age > BEHIND_AFTER).then_some(age)
    }

    /// How long the room's oldest change not held by its standby has waited (`None`: the
    /// standby holds every turn).
    pub fn unheld_for(&self, now: Instant) -> Option<Duration> {
        self.unheld_since.map(|since| now.duration_since(since))
    }

    /// Whether the room's standby is current: it acknowledged a checkpoint of this series, and
    /// the room is not [`behind`](Self::behind).
    pub fn current(&self, now: Instant) -> bool {
        self.held.is_some() && self.behind(now).is_none()
    }

    /// Gives back what is in flight when the room leaves this node or ends; returns every node
    /// that may keep a copy of it, with the series to drop up to.
    pub fn close(mut self, budget: &mut Budget) -> Vec<(NodeId, Series)> {
        if let Some(flight) = self.flight.take() {
            budget.give_back(flight.bytes);
        }
        let mut holders = std::mem::take(&mut self.retired);
        if let Some(holder) = self.holder.take() {
            holders.push((holder, self.series));
        }
        holders
    }

    /// The standby holds every turn up to `turn`; the first turn after it, if any, ran at
    /// `after`.
    fn holds(&mut self, turn: u64, after: Option<Instant>) {
        self.held_turn = turn;
        self.unheld_since = if turn < self.turn { after } else { None };
        self.release_held();
    }

    fn release_held(&mut self) {
        if self.named == Some(Record::Names(self.series)) && self.held.is_some() {
            self.released = self.released.max(self.held_turn);
        }
    }
}

/// A room's effects held in confirmed mode (confirmations, replies, pushes), each under the
/// turn that caused it, until that turn is released.
#[derive(Debug, Clone)]
pub struct Outbox<E> {
    held: VecDeque<(u64, E)>,
}

impl<E> Default for Outbox<E> {
    fn default() -> Self {
        Outbox {
            held: VecDeque::new(),
        }
    }
}

impl<E> Outbox<E> {
    /// An effect of `turn`: given back to be sent now if `released` covers it and nothing held
    /// before it waits, else held.
    pub fn effect(&mut self, turn: u64, effect: E, released: u64) -> Option<E> {
        if turn <= released && self.held.is_empty() {
            return Some(effect);
        }
        self.held.push_back((turn, effect));
        None
    }

    /// The held effects that `released` now covers, in the order their turns ran.
    pub fn release(&mut self, released: u64) -> Vec<E> {
        let mut out = Vec::new();
        while self.held.front().is_some_and(|(turn, _)| *turn <= released) {
            if let Some((_, effect)) = self.held.pop_front() {
                out.push(effect);
            }
        }
        out
    }

    /// Every effect still held, for a room that leaves the node.
    pub fn drain(&mut self) -> Vec<E> {
        self.held.drain(..).map(|(_, effect)| effect).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standby::replica::{self, Applied, Refusal, Replica};

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    fn first() -> Series {
        Series {
            generation: 3,
            epoch: 1,
        }
    }

    fn image(len: usize, seed: u8) -> Bytes {
        Bytes::from(
            (0..len)
                .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                .collect::<Vec<u8>>(),
        )
    }

    /// Takes a checkpoint and, if one ships, applies it on `held` and answers it.
    fn ship(
        owner: &mut Checkpoints,
        held: &mut Option<Replica>,
        now: Instant,
        state: &Bytes,
        budget: &mut Budget,
    ) -> Take {
        let take = owner.take(now, state.clone(), budget);
        if let Take::Ship(checkpoint) = &take {
            match replica::apply(held, checkpoint, false) {
                Ok(_) => {
                    if let Some(record) = owner.acked(checkpoint.series, checkpoint.number, budget)
                    {
                        owner.recorded(record);
                    }
                }
                Err(_) => owner.refused(checkpoint.series, checkpoint.number, budget),
            }
        }
        take
    }

    #[test]
    fn the_first_checkpoint_is_whole_then_only_what_changed_and_nothing_when_unchanged() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        owner.aim(Some(node("b")), &mut budget);
        let mut held = None;
        let mut state = image(100_000, 1);
        owner.turn(now);
        let Take::Ship(whole) = ship(&mut owner, &mut held, now, &state, &mut budget) else {
            panic!("the first checkpoint ships");
        };
        assert_eq!(whole.manifest.base, None);
        assert_eq!(whole.number, 1);
        let mut bytes = state.to_vec();
        bytes[40_000] ^= 1;
        state = Bytes::from(bytes);
        owner.turn(now);
        let Take::Ship(diff) = ship(&mut owner, &mut held, now, &state, &mut budget) else {
            panic!("a change ships");
        };
        assert_eq!(diff.number, 2);
        assert_eq!(diff.pieces.len(), 1);
        assert_eq!(
            diff.pieces[0].1.len(),
            BLOCK,
            "one byte changed: one block ships"
        );
        assert_eq!(held.as_ref().unwrap().image(), &state);
        owner.turn(now);
        assert_eq!(
            ship(&mut owner, &mut held, now, &state, &mut budget),
            Take::Unchanged
        );
        assert_eq!(owner.released(), 3);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_move_to_the_standby_seals_against_its_copy_and_no_checkpoint_changes_it_meanwhile() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        owner.aim(Some(node("b")), &mut budget);
        let mut held = None;
        let state = image(50_000, 2);
        owner.turn(now);
        // In flight: what the standby will hold is not known yet.
        let Take::Ship(checkpoint) = owner.take(now, state.clone(), &mut budget) else {
            panic!("the first checkpoint ships");
        };
        assert_eq!(owner.move_to(&node("b")), None, "a checkpoint is in flight");
        replica::apply(&mut held, &checkpoint, false).expect("applied");
        owner.acked(checkpoint.series, checkpoint.number, &mut budget);
        assert_eq!(owner.move_to(&node("c")), None, "c keeps no copy");
        assert_eq!(owner.move_to(&node("b")), Some(state.clone()));
        assert_eq!(held.as_ref().map(Replica::image), Some(&state));
        // Turns go on while the room moves, but its copy stays the move's base.
        owner.turn(now);
        assert_eq!(owner.take(now, image(50_000, 3), &mut budget), Take::Moving);
        owner.stays();
        assert!(matches!(
            owner.take(now, image(50_000, 3), &mut budget),
            Take::Ship(_)
        ));
    }

    #[test]
    fn confirmed_mode_releases_only_turns_of_an_acknowledged_and_named_checkpoint() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        owner.aim(Some(node("b")), &mut budget);
        let mut outbox = Outbox::default();
        let turn = owner.turn(now);
        assert_eq!(outbox.effect(turn, "reply 1", owner.released()), None);
        let Take::Ship(cp) = owner.take(now, image(10, 1), &mut budget) else {
            panic!("ships");
        };
        let turn = owner.turn(now);
        assert_eq!(outbox.effect(turn, "reply 2", owner.released()), None);
        let record = owner.acked(cp.series, cp.number, &mut budget);
        assert_eq!(record, Some(Record::Names(first())));
        assert!(outbox.release(owner.released()).is_empty(), "not named yet");
        owner.recorded(Record::Names(first()));
        assert_eq!(outbox.release(owner.released()), vec!["reply 1"]);
        // The standby's node leaves: a new series, and nothing more until it is named. Its copy
        // stays where it is meanwhile: a crash now would promote it.
        owner.aim(Some(node("c")), &mut budget);
        assert_eq!(owner.retired(), Vec::new());
        let Take::Ship(cp) = owner.take(now, image(10, 2), &mut budget) else {
            panic!("ships");
        };
        assert_eq!(cp.manifest.base, None);
        assert_eq!(cp.series.epoch, 2);
        assert_eq!(
            owner.acked(cp.series, cp.number, &mut budget),
            Some(Record::Names(cp.series))
        );
        assert!(outbox.release(owner.released()).is_empty());
        owner.recorded(Record::Names(cp.series));
        assert_eq!(outbox.release(owner.released()), vec!["reply 2"]);
        assert_eq!(owner.retired(), vec![(node("b"), first())]);
        assert_eq!(owner.retired(), Vec::new(), "once");
    }

    #[test]
    fn a_confirmed_room_no_node_can_hold_releases_once_the_store_names_no_copy() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        let mut held = None;
        owner.aim(Some(node("b")), &mut budget);
        owner.turn(now);
        ship(&mut owner, &mut held, now, &image(10, 1), &mut budget);
        assert_eq!(owner.released(), 1);
        // The holder leaves and no node can take its place: the copy it kept is too old for
        // what the room tells from now on, so the store must stop naming it first.
        owner.aim(None, &mut budget);
        assert!(owner.alone());
        let mut outbox = Outbox::default();
        let turn = owner.turn(now);
        assert_eq!(outbox.effect(turn, "reply 2", owner.released()), None);
        assert_eq!(owner.record_due(), Some(Record::Nothing));
        owner.recorded(Record::Nothing);
        assert_eq!(owner.record_due(), None);
        assert_eq!(outbox.release(owner.released()), vec!["reply 2"]);
        // A write on its way (or whose answer was lost) may name a copy again: effects wait
        // until a write commits.
        owner.recording();
        let turn = owner.turn(now);
        assert_eq!(outbox.effect(turn, "reply 3", owner.released()), None);
        assert_eq!(owner.record_due(), Some(Record::Nothing));
        owner.recorded(Record::Nothing);
        assert_eq!(outbox.release(owner.released()), vec!["reply 3"]);
        let turn = owner.turn(now);
        assert_eq!(
            outbox.effect(turn, "reply 3b", owner.released()),
            Some("reply 3b")
        );
        // The copy on b goes only now that the store no longer names it.
        assert_eq!(owner.retired(), vec![(node("b"), first())]);
        // A node to hold a copy joins: effects wait for it again.
        owner.aim(Some(node("c")), &mut budget);
        let turn = owner.turn(now);
        assert_eq!(outbox.effect(turn, "reply 4", owner.released()), None);
        assert_eq!(owner.record_due(), None, "nothing acknowledged yet");
        ship(&mut owner, &mut held, now, &image(10, 4), &mut budget);
        assert_eq!(outbox.release(owner.released()), vec!["reply 4"]);
    }

    #[test]
    fn a_periodic_room_alone_keeps_the_record_of_its_last_copy() {
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::periodic(), first());
        owner.aim(None, &mut budget);
        owner.turn(Instant::now());
        assert_eq!(owner.record_due(), None);
        assert_eq!(owner.released(), 1);
    }

    #[test]
    fn periodic_mode_releases_at_once_and_waits_for_its_interval() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::periodic(), first());
        owner.aim(Some(node("b")), &mut budget);
        let mut held = None;
        let turn = owner.turn(now);
        assert_eq!(turn, owner.released());
        assert!(matches!(
            ship(&mut owner, &mut held, now, &image(10, 1), &mut budget),
            Take::Ship(_)
        ));
        owner.turn(now);
        let soon = now + Duration::from_millis(50);
        assert_eq!(
            ship(&mut owner, &mut held, soon, &image(10, 2), &mut budget),
            Take::NotDue
        );
        let later = now + crate::standby::DEFAULT_INTERVAL;
        assert!(matches!(
            ship(&mut owner, &mut held, later, &image(10, 2), &mut budget),
            Take::Ship(_)
        ));
    }

    #[test]
    fn one_in_flight_per_room_and_a_node_budget_that_reports_the_room_behind() {
        let now = Instant::now();
        let mut budget = Budget::new(150_000);
        let mut a = Checkpoints::new(Policy::Confirmed, first());
        let mut b = Checkpoints::new(Policy::Confirmed, first());
        a.aim(Some(node("b")), &mut budget);
        b.aim(Some(node("c")), &mut budget);
        a.turn(now);
        b.turn(now);
        assert!(matches!(
            a.take(now, image(100_000, 1), &mut budget),
            Take::Ship(_)
        ));
        assert_eq!(a.take(now, image(100_000, 2), &mut budget), Take::Waiting);
        assert_eq!(
            b.take(now, image(100_000, 3), &mut budget),
            Take::OverBudget
        );
        let later = now + BEHIND_AFTER * 2;
        assert!(b.behind(later).is_some());
        assert_eq!(a.silent(now, a.answer_wait(), &mut budget), None);
        assert_eq!(
            a.silent(later, a.answer_wait(), &mut budget),
            Some(node("b"))
        );
        assert_eq!(budget.used(), 0);
        assert!(matches!(
            b.take(later, image(100_000, 3), &mut budget),
            Take::Ship(_)
        ));
    }

    #[test]
    fn the_keeper_watches_a_room_only_while_something_is_under_way() {
        let now = Instant::now();
        let mut budget = Budget::new(6_000);
        let mut owner = Checkpoints::new(Policy::periodic(), first());
        assert!(!owner.watched(), "no holder, periodic: nothing owed");
        owner.aim(Some(node("b")), &mut budget);
        owner.turn(now);
        let Take::Ship(checkpoint) = owner.take(now, image(4_096, 1), &mut budget) else {
            panic!("ships");
        };
        assert!(owner.watched(), "its answer may never come");
        let due = owner.acked(checkpoint.series, checkpoint.number, &mut budget);
        assert!(owner.watched(), "the store is owed the series' name");
        owner.recording();
        owner.recorded(due.expect("the first answer names the series"));
        assert!(!owner.watched(), "at rest");

        let mut other = Checkpoints::new(Policy::periodic(), first());
        other.aim(Some(node("c")), &mut budget);
        other.turn(now);
        assert!(matches!(
            other.take(now, image(4_096, 2), &mut budget),
            Take::Ship(_)
        ));
        let later = now + crate::standby::DEFAULT_INTERVAL;
        owner.turn(later);
        assert_eq!(
            owner.take(later, image(4_096, 3), &mut budget),
            Take::OverBudget
        );
        assert!(owner.watched(), "held back until the budget frees");
        other.close(&mut budget);
        assert!(matches!(
            owner.take(later, image(4_096, 3), &mut budget),
            Take::Ship(_)
        ));

        owner.aim(Some(node("d")), &mut budget);
        assert!(owner.watched(), "the copy on b waits to be dropped");
    }

    #[test]
    fn a_standby_that_lost_its_copy_refuses_the_difference_and_gets_the_whole_image() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        owner.aim(Some(node("b")), &mut budget);
        let mut held = None;
        owner.turn(now);
        ship(&mut owner, &mut held, now, &image(50_000, 1), &mut budget);
        held = None;
        owner.turn(now);
        let Take::Ship(diff) = owner.take(now, image(50_000, 2), &mut budget) else {
            panic!("ships");
        };
        assert_eq!(
            replica::apply(&mut held, &diff, false),
            Err(Refusal::Gap { held: 0, got: 2 })
        );
        owner.refused(diff.series, diff.number, &mut budget);
        let Take::Ship(whole) = owner.take(now, image(50_000, 2), &mut budget) else {
            panic!("ships");
        };
        assert_eq!((whole.series.epoch, whole.number), (2, 1));
        assert_eq!(replica::apply(&mut held, &whole, false), Ok(Applied::New));
        assert_eq!(replica::apply(&mut held, &whole, false), Ok(Applied::Again));
    }

    #[test]
    fn a_room_whose_later_turns_wait_is_behind_from_the_checkpoint_that_left_them_out() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        owner.aim(Some(node("b")), &mut budget);
        owner.turn(now);
        let Take::Ship(cp) = owner.take(now, image(10, 1), &mut budget) else {
            panic!("ships");
        };
        let later = now + BEHIND_AFTER;
        owner.turn(later);
        owner.acked(cp.series, cp.number, &mut budget);
        assert_eq!(owner.behind(later + BEHIND_AFTER / 2), None);
        assert!(owner.behind(later + BEHIND_AFTER * 2).is_some());
    }

    #[test]
    fn an_idle_room_is_due_once_its_interval_passed_and_not_while_an_answer_is_awaited() {
        let now = Instant::now();
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::periodic(), first());
        assert_eq!(owner.due(now), None, "no holder");
        owner.aim(Some(node("b")), &mut budget);
        assert_eq!(owner.due(now), Some(now), "no copy yet");
        owner.turn(now);
        let Take::Ship(cp) = owner.take(now, image(10, 1), &mut budget) else {
            panic!("ships");
        };
        owner.turn(now);
        assert_eq!(owner.due(now), None, "waits for the answer");
        owner.acked(cp.series, cp.number, &mut budget);
        let due = now + crate::standby::DEFAULT_INTERVAL;
        assert_eq!(owner.due(now), Some(due));
        assert_eq!(owner.ready(due), Ok(()));
        assert!(!owner.current(due + BEHIND_AFTER * 2));
        assert!(owner.unheld_for(due).is_some());
        let Take::Ship(cp) = owner.take(due, image(10, 2), &mut budget) else {
            panic!("ships");
        };
        owner.acked(cp.series, cp.number, &mut budget);
        assert_eq!(owner.due(due), None, "the standby holds everything");
        assert_eq!(owner.unheld_for(due), None);
        assert!(owner.current(due));
    }

    #[test]
    fn no_holder_no_checkpoint() {
        let mut budget = Budget::default();
        let mut owner = Checkpoints::new(Policy::Confirmed, first());
        assert_eq!(
            owner.take(Instant::now(), image(10, 1), &mut budget),
            Take::NoHolder
        );
        owner.aim(None, &mut budget);
        assert_eq!(owner.holder(), None);
    }
}
