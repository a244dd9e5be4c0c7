//! Warm standbys, as the core decides them (`ferry_core::standby`): in a world whose shape says
//! so, the first room of every three keeps a confirmed standby and the second a periodic one. The
//! owner takes a checkpoint at each turn boundary it is due at, ships it over the links (with
//! their resets, partitions and backlog) to the holder placement chooses, names the series in
//! the store once the holder acknowledged it, and in confirmed mode holds each reply until the
//! turn that caused it is released. Recovery promotes the named holder's copy of a dead owner's
//! room with a conditional write, or rebuilds the room from nothing and says why.
//!
//! The image a checkpoint ships is the room's cell, and in confirmed mode what is queued for it,
//! encoded as a move's capture, with its log after its state: so every turn changes it, and the
//! copy a standby holds is, byte for byte, the room as of that checkpoint. A promoted copy runs
//! that queue first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::standby::checkpoints::{Budget, Checkpoint, Checkpoints, Outbox, Record, Take};
use ferry_core::standby::placement::{self, Silent};
use ferry_core::standby::promotion::{self, Named};
use ferry_core::standby::replica::{self, Applied, Refusal, Replica};
use ferry_core::standby::{Policy, Series};

use super::lanes::{Cell, FOLLOW_UP, Lane, Parcel, Work, follows_up};
use super::links::Msg;
use super::store::{Cond, Key, Op, Purpose, Reply, Value};
use super::{Timer, World, node_id, node_index};

/// A reply held in confirmed mode: where it goes, and the room's log length after its turn.
#[derive(Debug, Clone, Copy)]
struct Held {
    origin: usize,
    id: u64,
    log: usize,
}

/// One room's checkpoints on its owner's process.
#[derive(Debug)]
struct Owner {
    process: u64,
    policy: Policy,
    checkpoints: Checkpoints,
    outbox: Outbox<Held>,
    /// Whether a write of the standby record is under way: one at a time, as the runtime does,
    /// so that their answers cannot come back out of order.
    naming: bool,
}

/// One room's copy on a standby's process, with the cell and the queue its image stands for.
#[derive(Debug)]
struct Standby {
    process: u64,
    copy: Option<Replica>,
    cell: Cell,
    queue: Vec<Parcel>,
}

impl Standby {
    /// No copy yet on this process.
    fn empty(process: u64) -> Standby {
        Standby {
            process,
            copy: None,
            cell: Cell::default(),
            queue: Vec::new(),
        }
    }
}

/// A promotion whose claim is in flight: the room's dead owner, and how many messages at the
/// head of the lane's queue the copy saved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Promoting {
    unit: usize,
    owner: usize,
    saved: usize,
}

/// What the world keeps of standbys.
#[derive(Debug, Default)]
pub(crate) struct Standbys {
    /// By (owner node, room).
    owners: BTreeMap<(usize, usize), Owner>,
    /// By (standby node, room).
    copies: BTreeMap<(usize, usize), Standby>,
    /// Each node process's checkpoint budget, and the holders it passes over.
    budgets: BTreeMap<usize, (u64, Budget, Silent)>,
    /// Per room, the log length after the last turn whose reply confirmed mode released: a
    /// promoted copy holds at least that much.
    confirmed: BTreeMap<usize, usize>,
    /// Promotions whose claim is in flight, by (node, lane).
    pub promotions: BTreeMap<(usize, u64), Promoting>,
    /// Per node, checkpoints that wait to go together.
    gathered: BTreeMap<usize, Gathered>,
    /// Messages promoted copies took over from their checkpoints' queues.
    pub requeued: usize,
}

/// A node's checkpoints that wait to go together.
#[derive(Debug)]
struct Gathered {
    /// The process that took them.
    process: u64,
    /// When the first is due.
    due: Instant,
    /// Each with its holder, in order.
    frames: Vec<(usize, Msg)>,
}

impl World {
    /// The standby policy of unit `u`.
    pub(crate) fn policy(&self, u: usize) -> Policy {
        if !self.shape.standby || !self.is_room(u) {
            return Policy::None;
        }
        match u % 3 {
            0 => Policy::Confirmed,
            1 => Policy::periodic(),
            _ => Policy::None,
        }
    }

    /// The image a checkpoint ships of a room's cell and its queue: their capture, the log after
    /// the state.
    fn standby_image(&self, u: usize, cell: &Cell, queue: &[Parcel]) -> Bytes {
        let mut state = cell.state.to_vec();
        for (who, seq) in &cell.log {
            state.extend_from_slice(&(*who as u64).to_le_bytes());
            state.extend_from_slice(&seq.to_le_bytes());
        }
        state.extend_from_slice(&cell.ticks.to_le_bytes());
        let imaged = Cell {
            state: Bytes::from(state),
            ..cell.clone()
        };
        self.image(u, &BTreeMap::from([(u, imaged)]), queue)
    }

    /// This process's checkpoint budget.
    fn budget(&mut self, node: usize) -> &mut Budget {
        self.process_standby(node).0
    }

    /// This process's checkpoint budget and the holders it passes over.
    fn process_standby(&mut self, node: usize) -> (&mut Budget, &mut Silent) {
        let process = self.nodes[node].process;
        let entry = self
            .standby
            .budgets
            .entry(node)
            .or_insert_with(|| (process, Budget::default(), Silent::default()));
        if entry.0 != process {
            *entry = (process, Budget::default(), Silent::default());
        }
        (&mut entry.1, &mut entry.2)
    }

    /// A turn of `unit` ran on `node` in `lane`: its number, if the room keeps a standby, once
    /// a checkpoint was taken at the boundary it ends at.
    pub(crate) fn standby_turn(&mut self, node: usize, lane: u64, unit: usize) -> Option<u64> {
        let policy = self.policy(unit);
        if !policy.keeps_standby() {
            return None;
        }
        self.own(node, unit, policy);
        let now = self.now;
        let turn = self
            .standby
            .owners
            .get_mut(&(node, unit))
            .map(|o| o.checkpoints.turn(now));
        self.checkpoint(node, lane, unit);
        turn
    }

    /// The node `unit`'s checkpoints on `node` go to, if it keeps a standby: a drain of `node`
    /// prefers it as the room's target.
    pub(crate) fn standby_holder(
        &self,
        node: usize,
        unit: usize,
    ) -> Option<ferry_core::ids::NodeId> {
        let owner = self.standby.owners.get(&(node, unit))?;
        owner.checkpoints.holder().cloned()
    }

    /// A move of `unit` from `node` to `to` starts: the copy it seals against if `to` keeps
    /// it (the room's checkpoints pause meanwhile).
    pub(crate) fn standby_move_to(&mut self, node: usize, unit: usize, to: usize) -> Option<Bytes> {
        let owner = self.standby.owners.get_mut(&(node, unit))?;
        owner.checkpoints.move_to(&node_id(to))
    }

    /// A move of `unit` from `node` ended with the room still there: its checkpoints go on.
    pub(crate) fn standby_stays(&mut self, node: usize, unit: usize) {
        if let Some(owner) = self.standby.owners.get_mut(&(node, unit)) {
            owner.checkpoints.stays();
        }
    }

    /// The image of the copy of `unit` this process of `node` keeps, if any: a move here may
    /// seal against it.
    pub(crate) fn standby_copy(&self, node: usize, unit: usize) -> Option<Vec<u8>> {
        let process = self.nodes[node].process;
        let held = self.standby.copies.get(&(node, unit))?;
        let copy = held.copy.as_ref().filter(|_| held.process == process)?;
        Some(copy.image().to_vec())
    }

    /// The room runs on `node`: its checkpoints start there if they have not, and the node
    /// holds no standby of it.
    fn own(&mut self, node: usize, unit: usize, policy: Policy) {
        self.standby.copies.remove(&(node, unit));
        let process = self.nodes[node].process;
        if self
            .standby
            .owners
            .get(&(node, unit))
            .is_some_and(|o| o.process == process)
        {
            return;
        }
        // The series' generation stands for the owner generation of the record it runs
        // under: it grows with every owner (a world-wide counter here).
        let first = Series {
            generation: self.fresh(),
            epoch: 1,
        };
        let owner = Owner {
            process,
            policy,
            checkpoints: Checkpoints::new(policy, first),
            outbox: Outbox::default(),
            naming: false,
        };
        self.standby.owners.insert((node, unit), owner);
    }

    /// A turn boundary of a room that keeps a standby: take a checkpoint if one is due, with the
    /// room's queue if its policy carries it. None while no image of it may be taken (it is not
    /// open, or a move captured it), as the runtime's lane takes none then.
    fn checkpoint(&mut self, node: usize, lane: u64, unit: usize) {
        let imageable = |l: &&Lane| l.stance.imageable();
        let carries = self.policy(unit).carries_queue();
        let Some((cell, queue)) = self.nodes[node]
            .lanes
            .get(&lane)
            .filter(imageable)
            .and_then(|l| {
                let queued = l.queue.iter().filter(|p| carries && p.to == unit);
                let queue: Vec<Parcel> = queued.cloned().collect();
                Some((l.cells.get(&unit)?.clone(), queue))
            })
        else {
            return;
        };
        let now = self.now;
        let silent = self.process_standby(node).1.clone();
        let holder = placement::answering_holder(
            &self.nodes[node].view,
            &node_id(node),
            &self.unit_id(unit),
            self.factory(unit),
            (&silent, now),
        );
        let Some(mut owner) = self.take_owner(node, unit) else {
            return;
        };
        owner.checkpoints.aim(holder, self.budget(node));
        let take = match owner.checkpoints.ready(now) {
            Ok(()) => {
                let image = self.standby_image(unit, &cell, &queue);
                owner.checkpoints.take(now, image, self.budget(node))
            }
            Err(take) => take,
        };
        let to = owner.checkpoints.holder().map(node_index);
        let behind = owner.checkpoints.behind(now);
        self.standby.owners.insert((node, unit), owner);
        match (take, to) {
            (Take::Ship(checkpoint), Some(to)) => {
                trace!(
                    self,
                    "n{node}: u{unit} checkpoint {:?}#{} to n{to} ({} pieces)",
                    checkpoint.series,
                    checkpoint.number,
                    checkpoint.pieces.len()
                );
                let msg = Msg::Checkpoint {
                    unit,
                    checkpoint: Box::new(checkpoint),
                    cell: Box::new(cell),
                    queue,
                };
                self.ship(node, to, msg, self.policy(unit).gather());
            }
            (Take::Unchanged, _) => self.release_replies(node, unit),
            (_, _) => {
                if let Some(age) = behind {
                    trace!(self, "n{node}: u{unit} is behind its standby by {age:?}");
                }
            }
        }
    }

    /// Sends a checkpoint at once, or within `gather` together with the others `node` takes
    /// meanwhile, as the runtime's owner does.
    fn ship(&mut self, node: usize, to: usize, msg: Msg, gather: Duration) {
        if gather.is_zero() {
            self.post(node, to, msg);
            return;
        }
        let process = self.nodes[node].process;
        let due = self.now + gather;
        // What an earlier process gathered died with it.
        let gathered = &mut self.standby.gathered;
        if gathered.get(&node).is_some_and(|g| g.process != process) {
            gathered.remove(&node);
        }
        let gathered = gathered.entry(node).or_insert(Gathered {
            process,
            due,
            frames: Vec::new(),
        });
        let first = gathered.frames.is_empty();
        gathered.frames.push((to, msg));
        if first || due < gathered.due {
            gathered.due = due;
            self.arm(due, Timer::Ship { node, process });
        }
    }

    /// The first gathered checkpoint of `node` is due: every one gathered goes, in order.
    pub(crate) fn ship_gathered(&mut self, node: usize) {
        let process = self.nodes[node].process;
        let Some(gathered) = self.standby.gathered.remove(&node) else {
            return;
        };
        if gathered.process != process {
            return;
        }
        let frames = gathered.frames;
        trace!(self, "n{node}: {} gathered checkpoints go", frames.len());
        for (to, msg) in frames {
            self.post(node, to, msg);
        }
    }

    /// A request to `unit` ran in `turn` (`None`: the room keeps no standby): its reply goes
    /// now, or, in confirmed mode, once the turn is released.
    pub(crate) fn reply_after(
        &mut self,
        node: usize,
        unit: usize,
        turn: Option<u64>,
        (origin, id): (usize, u64),
    ) {
        let log = self.lane_of(node, unit).map_or(0, |lane| {
            self.nodes[node].lanes[&lane].cells[&unit].log.len()
        });
        let held = Held { origin, id, log };
        let now = match (turn, self.standby.owners.get_mut(&(node, unit))) {
            (Some(turn), Some(owner)) => {
                let released = owner.checkpoints.released();
                owner.outbox.effect(turn, held, released)
            }
            _ => Some(held),
        };
        if let Some(held) = now {
            self.send_reply(node, unit, held);
        }
    }

    fn send_reply(&mut self, node: usize, unit: usize, held: Held) {
        if self.policy(unit) == Policy::Confirmed {
            let confirmed = self.standby.confirmed.entry(unit).or_default();
            *confirmed = (*confirmed).max(held.log);
        }
        self.post(
            node,
            held.origin,
            Msg::Reply {
                id: held.id,
                ok: true,
            },
        );
    }

    /// Sends the replies the room's released turns cover.
    fn release_replies(&mut self, node: usize, unit: usize) {
        let Some(owner) = self.standby.owners.get_mut(&(node, unit)) else {
            return;
        };
        let released = owner.checkpoints.released();
        for held in owner.outbox.release(released) {
            self.send_reply(node, unit, held);
        }
    }

    /// A checkpoint reaches the node chosen to hold the room's standby.
    pub(crate) fn on_checkpoint(
        &mut self,
        node: usize,
        from: usize,
        unit: usize,
        checkpoint: &Checkpoint,
        cell: Cell,
        queue: Vec<Parcel>,
    ) {
        let process = self.nodes[node].process;
        let runs = self.lane_of(node, unit).is_some();
        let standby = self
            .standby
            .copies
            .entry((node, unit))
            .or_insert_with(|| Standby::empty(process));
        if standby.process != process {
            *standby = Standby::empty(process);
        }
        let before = standby.copy.as_ref().map(|c| (c.series(), c.number()));
        let applied = replica::apply(&mut standby.copy, checkpoint, runs);
        if applied == Ok(Applied::New) {
            standby.cell = cell;
            standby.queue = queue;
        }
        let (series, number) = (checkpoint.series, checkpoint.number);
        let ok = match applied {
            Ok(Applied::New) => {
                let in_order = match before {
                    Some((held, last)) if held == series => number == last + 1,
                    Some((held, _)) => series > held && number == 1,
                    None => number == 1,
                };
                if !in_order {
                    self.broken.get_or_insert(format!(
                        "n{node} applied checkpoint {series:?}#{number} of u{unit} after {before:?}: a checkpoint skipped or applied out of order"
                    ));
                }
                let copy = self.standby.copies.get(&(node, unit));
                let image = copy.map(|s| self.standby_image(unit, &s.cell, &s.queue));
                if copy.and_then(|s| s.copy.as_ref()).map(Replica::image) != image.as_ref() {
                    self.broken.get_or_insert(format!(
                        "n{node}'s standby of u{unit} after {series:?}#{number} is not the room's image at that checkpoint"
                    ));
                }
                true
            }
            Ok(Applied::Again) => true,
            Err(Refusal::Stale { .. }) => return,
            Err(why) => {
                trace!(
                    self,
                    "n{node}: refuses checkpoint {series:?}#{number} of u{unit}: {why}"
                );
                false
            }
        };
        let msg = Msg::Checkpointed {
            unit,
            series,
            number,
            ok,
        };
        self.post(node, from, msg);
    }

    /// The room's checkpoints on `node`, taken out of the map while the node's budget is borrowed
    /// (the caller puts them back), if this process of the node keeps them; those an earlier
    /// process left are dropped.
    fn take_owner(&mut self, node: usize, unit: usize) -> Option<Owner> {
        let process = self.nodes[node].process;
        self.standby
            .owners
            .remove(&(node, unit))
            .filter(|o| o.process == process)
    }

    /// The standby answered a checkpoint.
    pub(crate) fn on_checkpointed(
        &mut self,
        node: usize,
        unit: usize,
        series: Series,
        number: u64,
        ok: bool,
    ) {
        let Some(mut owner) = self.take_owner(node, unit) else {
            return;
        };
        let budget = self.budget(node);
        let due = if ok {
            owner.checkpoints.acked(series, number, budget)
        } else {
            owner.checkpoints.refused(series, number, budget);
            None
        };
        let holder = owner.checkpoints.holder().cloned();
        let wake = owner.checkpoints.answer_wakes_lane();
        self.standby.owners.insert((node, unit), owner);
        if let Some(due) = due {
            self.record(node, unit, due, holder);
        }
        // The lane hears of the answer only when the core says it must act on it.
        if !wake {
            return;
        }
        self.release_replies(node, unit);
        if let Some(lane) = self.lane_of(node, unit) {
            self.checkpoint(node, lane, unit);
        }
    }

    /// Writes the room's standby record as `record` says: `holder` holds its copy in a series,
    /// or no node holds one. Gated on the room's record as this owner holds it (the runtime's
    /// lane knows it; the simulator reads it), on the standby record as read just before (a
    /// write that lands late never undoes a later one), and on the owner's lease.
    fn record(
        &mut self,
        node: usize,
        unit: usize,
        record: Record,
        holder: Option<ferry_core::ids::NodeId>,
    ) {
        let Some((version, found)) = self.store.record(unit).cloned() else {
            return;
        };
        let Some(owner) = self.standby.owners.get_mut(&(node, unit)) else {
            return;
        };
        if found.owner != node_id(node) || owner.naming {
            return;
        }
        let (puts, deletes) = match (record, holder) {
            (Record::Names(series), Some(holder)) => {
                let named = Named {
                    holder,
                    series,
                    incarnation: found.object_generation,
                };
                (
                    vec![(Key::Standby(unit), Value::Standby(named))],
                    Vec::new(),
                )
            }
            (Record::Names(_), None) => return,
            (Record::Nothing, _) => (Vec::new(), vec![Key::Standby(unit)]),
        };
        let standby = match self.store.standby_version(unit) {
            Some(at) => Cond::Version(Key::Standby(unit), at),
            None => Cond::Absent(Key::Standby(unit)),
        };
        let conds = vec![
            Cond::Version(Key::Unit(unit), version),
            standby,
            self.lease_cond(node),
        ];
        if let Some(owner) = self.standby.owners.get_mut(&(node, unit)) {
            owner.checkpoints.recording();
            owner.naming = true;
        }
        self.call(
            node,
            Op::Batch {
                conds,
                puts,
                deletes,
            },
            Purpose::Record { unit, record },
        );
    }

    /// The standby record's write answered: once written, confirmed mode releases what the
    /// named series holds, or, alone, every turn so far. Anything else is tried again at the
    /// next keeper round.
    pub(crate) fn standby_recorded(
        &mut self,
        node: usize,
        unit: usize,
        record: Record,
        reply: Reply,
    ) {
        let Some(owner) = self.standby.owners.get_mut(&(node, unit)) else {
            return;
        };
        owner.naming = false;
        if reply != Reply::Committed {
            return;
        }
        owner.checkpoints.recorded(record);
        if record == Record::Nothing && owner.checkpoints.alone() {
            trace!(
                self,
                "n{node}: u{unit} has no node to hold its copy: unprotected"
            );
        }
        self.release_replies(node, unit);
    }

    /// The keeper's round: every open room that keeps a standby and has none yet starts one, a
    /// watched room's checkpoint unanswered too long starts a new series, a series not yet named
    /// is named again, and a room whose change waits (a periodic one with no turn since) is
    /// checkpointed.
    pub(crate) fn standby_keep(&mut self, node: usize) {
        let rooms: Vec<(usize, Policy)> = self.nodes[node]
            .lanes
            .values()
            .filter(|l| l.stance.is_open())
            .map(|l| (l.primary, self.policy(l.primary)))
            .filter(|(_, policy)| policy.keeps_standby())
            .collect();
        let now = self.now;
        for (unit, policy) in rooms {
            self.own(node, unit, policy);
            let Some(mut owner) = self.standby.owners.remove(&(node, unit)) else {
                continue;
            };
            // Only a room the core has under watch, as the runtime's keeper: the others' turns,
            // answers and views are what move them on.
            if owner.checkpoints.watched() {
                let wait = owner.checkpoints.answer_wait();
                let (budget, silent) = self.process_standby(node);
                if let Some(holder) = owner.checkpoints.silent(now, wait, budget) {
                    silent.unanswered(holder, now);
                }
            }
            let due = owner.checkpoints.record_due();
            let holder = owner.checkpoints.holder().cloned();
            self.standby.owners.insert((node, unit), owner);
            if let Some(due) = due {
                self.record(node, unit, due, holder);
            }
            if let Some(lane) = self.lane_of(node, unit) {
                self.checkpoint(node, lane, unit);
            }
        }
    }

    /// A room's lane left `node` (it moved, stopped or was given up): its checkpoints end there,
    /// and the replies still held are dropped (their requests time out: they may have run).
    pub(crate) fn standby_left(&mut self, node: usize, unit: usize) {
        let Some(mut owner) = self.standby.owners.remove(&(node, unit)) else {
            return;
        };
        let dropped = owner.outbox.drain().len();
        if dropped > 0 {
            trace!(
                self,
                "n{node}: u{unit} left with {dropped} replies unconfirmed ({:?}); they are not sent",
                owner.policy
            );
        }
        owner.checkpoints.close(self.budget(node));
    }

    /// A process of `node` ended: its checkpoints and copies are gone with it.
    pub(crate) fn standby_ended(&mut self, node: usize) {
        self.standby.owners.retain(|(n, _), _| *n != node);
        self.standby.copies.retain(|(n, _), _| *n != node);
        self.standby.budgets.remove(&node);
    }

    /// The cell, and what it runs first, a recovery claims `unit` with here: the standby copy to
    /// promote with the queue it saved, gated on the standby record too, or a fresh cell with
    /// nothing.
    pub(crate) fn promoted_cell(
        &mut self,
        n: usize,
        (unit, owner): (usize, usize),
        promote: Option<(Series, u64)>,
        conds: &mut Vec<Cond>,
    ) -> (Cell, Vec<Parcel>, Option<Promoting>) {
        let process = self.nodes[n].process;
        let Some((series, version)) = promote else {
            return (self.fresh_cell(unit), Vec::new(), None);
        };
        let held = self
            .standby
            .copies
            .get(&(n, unit))
            .filter(|s| s.process == process);
        match promotion::promotable(held.and_then(|s| s.copy.as_ref()), series) {
            Ok(_) => {
                let (cell, queue) = held
                    .map(|s| (s.cell.clone(), s.queue.clone()))
                    .unwrap_or_default();
                conds.push(Cond::Version(Key::Standby(unit), version));
                let saved = queue.len();
                (cell, queue, Some(Promoting { unit, owner, saved }))
            }
            Err(why) => {
                trace!(self, "n{n}: u{unit} is rebuilt: {why}");
                (self.fresh_cell(unit), Vec::new(), None)
            }
        }
    }

    /// The claim on `lane` lost: if it promoted a copy, the queue the copy saved is dropped, as
    /// the runtime's restored lane drops it (the room runs elsewhere, with its own); what arrived
    /// since goes on to it.
    pub(crate) fn given_up_promotion(&mut self, n: usize, lane: u64) {
        let Some(p) = self.standby.promotions.remove(&(n, lane)) else {
            return;
        };
        if let Some(l) = self.nodes[n].lanes.get_mut(&lane) {
            l.queue.drain(..p.saved.min(l.queue.len()));
        }
    }

    /// Remembers the promotion a claim on `lane` carries.
    pub(crate) fn promoting(&mut self, n: usize, lane: u64, promoting: Promoting) {
        self.standby.promotions.insert((n, lane), promoting);
    }

    /// A claimed lane opened: a promoted room is checked (its owner no longer runs turns, and it
    /// holds every reply confirmed mode released), its copy becomes the room; a room rebuilt or
    /// created from nothing owes nothing that was confirmed before.
    pub(crate) fn standby_opened(&mut self, node: usize, lane: u64, unit: usize) {
        let Some(p) = self.standby.promotions.remove(&(node, lane)) else {
            self.standby.confirmed.remove(&unit);
            return;
        };
        self.standby.copies.remove(&(node, p.unit));
        let owner_runs = self.nodes[p.owner].up
            && self.lane_of(p.owner, unit).is_some()
            && self.node_may_run(p.owner);
        if owner_runs {
            self.broken.get_or_insert(format!(
                "u{unit} promoted on n{node} while its owner n{} may still run its turns",
                p.owner
            ));
        }
        let promoted = &self.nodes[node].lanes[&lane];
        let log = &promoted.cells[&unit].log;
        // In confirmed mode, every turn the copy holds had its follow-up run, or holds it queued.
        let carries = self.policy(unit).carries_queue();
        let owed = log.iter().enumerate().find(|&(place, &(who, seq))| {
            let follow = (FOLLOW_UP, place as u64 + 1);
            let queued = Work::Tell {
                sender: follow.0,
                seq: follow.1,
            };
            carries
                && follows_up(who, seq)
                && !log.contains(&follow)
                && !promoted
                    .queue
                    .iter()
                    .any(|p| p.to == unit && p.work == queued)
        });
        if let Some((place, _)) = owed {
            self.broken.get_or_insert(format!(
                "u{unit} promoted on n{node} without the follow-up its turn {place} queued: lost with its owner"
            ));
        }
        let log = log.len();
        self.standby.requeued += p.saved;
        let confirmed = self.standby.confirmed.get(&unit).copied().unwrap_or(0);
        if log < confirmed {
            self.broken.get_or_insert(format!(
                "u{unit} promoted on n{node} with {log} turns of its log, older than the {confirmed} its owner confirmed a reply from"
            ));
        }
        trace!(
            self,
            "n{node}: u{unit} promoted from its standby ({log} turns)"
        );
    }
}
