//! The lanes that run units' turns: a room with its members in one lane, or an Actor alone. What
//! reaches a lane runs at once when it may, or waits in its queue (before a seal's turn boundary,
//! or while it is not open yet) or its hold (after a capture), as the core's [`LaneMove`] says.
//! Joins, leaves, creations and stops go through the same rules as the runtime's lane. Each unit
//! holds state bytes that its turns rewrite, which a move carries in its image.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};

use ferry_core::authority::UnitRecord;
use ferry_core::conditional::{ConditionalWrite, Settled};
use ferry_core::ids::{ObjectGeneration, UnitId};
use ferry_core::relocation::lane::{Arrival, Change, LaneMove, Verdict};
use ferry_core::relocation::precopy::{BLOCK, MIN_IMAGE};
use ferry_core::witness::may_run;

use super::links::Msg;
use super::store::{Cond, Key, Op, Purpose, Reply, Value};
use super::{Event, TIMES, World, node_id, take_where};
use crate::plan::Rng;

/// How many conditional writes of an Actor's room a join or a leave tries.
const RECORD_TRIES: u8 = 8;

/// The state of a unit that is not a large one: too small to pre-copy.
const SMALL_STATE: usize = 64;

/// How often a large unit's game loop ticks (a timer of its own), each tick rewriting part of
/// its state as a turn does.
const TICK_MS: u128 = 100;

/// How many missed ticks a large unit runs when it is next looked at: the last few, as a timer
/// whose overrun policy skips the rest would.
const CATCH_UP: u64 = 2;

/// The writer a tick counts as in [`rewrite`].
const TICKER: usize = usize::MAX;

/// The sender a unit's follow-ups count as in its log, numbered by the place in the log (from 1)
/// of the turn that caused them.
pub(crate) const FOLLOW_UP: usize = usize::MAX - 1;

/// Whether message `seq` of `who` (a tell, a request or a client's input) makes its unit tell
/// itself once more, as a member's turn tells its room in a game: a message queued on the lane
/// during the turn, run at a later one. Every third of each sender's does.
pub(crate) fn follows_up(who: usize, seq: u64) -> bool {
    who != FOLLOW_UP && seq.is_multiple_of(3)
}

/// A message for a unit, as queues and the mesh carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parcel {
    pub to: usize,
    pub work: Work,
    /// The node that sent it first: route hints go there.
    pub origin: usize,
    pub hops: u8,
}

/// What a message asks of its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A sender's numbered tell.
    Tell { sender: usize, seq: u64 },
    /// A sender's numbered request; its terminal goes to request `id` on the origin.
    Ask { sender: usize, seq: u64, id: u64 },
    /// A route fence of the origin's: answered once everything before it ran.
    Fence { id: u64 },
    /// A game client's numbered input, sent by its gateway; `client` is the session's id in logs.
    Input { client: usize, seq: u64 },
    /// A session binds the Actor; its answer goes to request `id` on the gateway.
    Bind {
        client: usize,
        number: u64,
        epoch: u32,
        id: u64,
    },
    /// A session lets the Actor go.
    Unbind {
        client: usize,
        number: u64,
        epoch: u32,
    },
}

/// One unit in a lane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cell {
    /// What ran, in order: (sender, number); game clients count as `CLIENTS + client`.
    pub log: Vec<(usize, u64)>,
    /// A room's members.
    pub members: BTreeSet<usize>,
    /// The room an Actor is in.
    pub spot: Option<usize>,
    /// The session an Actor is bound to.
    pub binding: Option<ferry_core::session::SessionBinding>,
    /// The application's state: what its turns rewrite, and its state adapter captures.
    pub state: Bytes,
    /// The ticks of its game loop run so far, counted from the world's start.
    pub ticks: u64,
}

impl Cell {
    /// Runs the ticks of a large unit's game loop due by tick `due` that it has not run yet:
    /// done when the unit is next looked at (a turn, a snapshot, a seal), as running them all
    /// when due would only make the simulator slower.
    pub fn catch_up(&mut self, unit: usize, due: u64) {
        if self.state.len() > SMALL_STATE {
            for tick in self.ticks.max(due.saturating_sub(CATCH_UP))..due {
                rewrite(&mut self.state, unit, TICKER, tick);
            }
        }
        self.ticks = self.ticks.max(due);
    }
}

/// One lane: a room with its members, or an Actor alone.
#[derive(Debug)]
pub(crate) struct Lane {
    pub stance: LaneMove,
    /// The room, or the lone Actor: what moves.
    pub primary: usize,
    pub cells: BTreeMap<usize, Cell>,
    /// Accepted and not run yet: saved work if the lane is captured now.
    pub queue: VecDeque<Parcel>,
    /// Arrived after the capture: relayed at the handover.
    pub hold: Vec<Parcel>,
    /// Relayed at the handover, kept until the target commits.
    pub relayed: Vec<Parcel>,
    /// The move whose seal waits for the turn boundary: what arrives queues, to be captured.
    pub sealing: Option<u64>,
    /// On a move's target, before it opens: what arrived here, to run after the relay records.
    pub gated: Vec<Parcel>,
    /// Binds held back during a move's quiet spell, in arrival order.
    pub deferred: Vec<Parcel>,
}

impl Lane {
    pub fn new(primary: usize, cells: BTreeMap<usize, Cell>, stance: LaneMove) -> Lane {
        Lane {
            stance,
            primary,
            cells,
            queue: VecDeque::new(),
            hold: Vec::new(),
            relayed: Vec::new(),
            sealing: None,
            gated: Vec::new(),
            deferred: Vec::new(),
        }
    }
}

impl World {
    /// Puts every unit in place at the start, with its record.
    pub(crate) fn populate(&mut self) {
        let shape = self.shape;
        for room in 0..shape.rooms {
            let mut cell = self.fresh_cell(room);
            let members: Vec<usize> = (0..shape.actors / 2)
                .filter(|a| a % shape.rooms == room)
                .map(|a| shape.rooms + a)
                .collect();
            cell.members = members.iter().copied().collect();
            let mut cells = BTreeMap::from([(room, cell)]);
            for &m in &members {
                cells.insert(
                    m,
                    Cell {
                        spot: Some(room),
                        ..self.fresh_cell(m)
                    },
                );
            }
            let home = room % shape.nodes;
            self.place(home, room, cells);
        }
        for a in shape.actors / 2..shape.actors {
            let actor = shape.rooms + a;
            self.place(
                actor % shape.nodes,
                actor,
                BTreeMap::from([(actor, self.fresh_cell(actor))]),
            );
        }
    }

    /// A running lane on `node` for `cells`, recorded in the store as there.
    fn place(&mut self, node: usize, primary: usize, cells: BTreeMap<usize, Cell>) {
        let lease = self.nodes[node].lease.map_or(0, |(g, _)| g);
        let mut puts = Vec::new();
        for (&u, cell) in &cells {
            self.lives[u].exists = true;
            let record = UnitRecord::created(
                node_id(node),
                lease,
                ObjectGeneration(u as u64 + 1),
                self.factory(u),
                true,
            )
            .in_spot(cell.spot.map(|s| self.spot_id(s)));
            puts.push((Key::Unit(u), Value::Unit(record)));
        }
        self.store.apply(
            &Op::Batch {
                conds: Vec::new(),
                puts,
                deletes: Vec::new(),
            },
            self.now,
            true,
        );
        self.add_lane(node, Lane::new(primary, cells, LaneMove::running()));
    }

    /// A unit's cell as it is created or rebuilt, with the state [`Shape::large`] gives it.
    ///
    /// [`Shape::large`]: super::Shape::large
    pub(crate) fn fresh_cell(&self, u: usize) -> Cell {
        let len = match u % 8 {
            _ if self.shape.large == 0 => SMALL_STATE,
            0 if self.is_room(u) => self.shape.large,
            4 => MIN_IMAGE,
            _ => SMALL_STATE,
        };
        Cell {
            state: Bytes::from(vec![u as u8; len]),
            ticks: self.ticks_due(),
            ..Cell::default()
        }
    }

    /// The ticks of a game loop due by now, counted from the world's start.
    pub(crate) fn ticks_due(&self) -> u64 {
        (self.now.duration_since(self.start).as_millis() / TICK_MS) as u64
    }

    pub(crate) fn factory(&self, u: usize) -> &'static str {
        if self.is_room(u) { "room" } else { "player" }
    }

    pub(crate) fn spot_id(&self, room: usize) -> ferry_core::ids::SpotId {
        match self.unit_id(room) {
            ferry_core::ids::UnitId::Spot(spot) => spot,
            ferry_core::ids::UnitId::Actor(_) => unreachable!("rooms are spots"),
        }
    }

    /// Registers a lane on `node`: its units are hosted there from now on.
    pub(crate) fn add_lane(&mut self, node: usize, lane: Lane) -> u64 {
        let id = self.fresh();
        for &u in lane.cells.keys() {
            self.nodes[node].directory.insert(u, id);
            self.touched.insert(u);
        }
        self.nodes[node].lanes.insert(id, lane);
        id
    }

    /// Removes a lane and its units' directory entries (those that still point at it).
    pub(crate) fn drop_lane(&mut self, node: usize, id: u64) -> Option<Lane> {
        let lane = self.nodes[node].lanes.remove(&id)?;
        self.standby_left(node, lane.primary);
        for u in lane.cells.keys() {
            self.touched.insert(*u);
            if self.nodes[node].directory.get(u) == Some(&id) {
                self.nodes[node].directory.remove(u);
            }
        }
        Some(lane)
    }

    /// The lane hosting `unit` on `node`.
    pub(crate) fn lane_of(&self, node: usize, unit: usize) -> Option<u64> {
        self.nodes[node].directory.get(&unit).copied()
    }

    /// Where a unit's lane runs: the live node whose directory has it.
    pub(crate) fn host(&self, unit: usize) -> Option<(usize, u64)> {
        (0..self.nodes.len())
            .filter(|&n| self.nodes[n].up)
            .find_map(|n| self.lane_of(n, unit).map(|l| (n, l)))
    }

    /// Whether `node` may run a turn now: its lease is certainly held, or its peers vouch for it.
    pub(crate) fn node_may_run(&self, node: usize) -> bool {
        let n = &self.nodes[node];
        may_run(self.now, n.lease_until, true, &TIMES, || {
            n.witness.vouch(TIMES.grace)
        })
    }

    /// A message reaches a lane of `node`: it runs now, or waits in the queue or the hold.
    pub(crate) fn enqueue(&mut self, node: usize, lane: u64, parcel: Parcel) {
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        if l.stance.is_restored() && !l.stance.is_open() {
            l.gated.push(parcel);
            return;
        }
        match l.stance.arrival() {
            Arrival::Hold => l.hold.push(parcel),
            Arrival::Queue if !l.stance.is_open() || l.sealing.is_some() || !l.queue.is_empty() => {
                l.queue.push_back(parcel)
            }
            Arrival::Queue => self.run(node, lane, parcel),
        }
    }

    /// Runs what the lane has queued, in order, while it may.
    pub(crate) fn run_queue(&mut self, node: usize, lane: u64) {
        while let Some(parcel) = self.next_queued(node, lane) {
            self.run(node, lane, parcel);
        }
    }

    /// The lane runs the next message it has queued, if it may, and comes back for the one after.
    pub(crate) fn next_turn(&mut self, node: usize, lane: u64) {
        let Some(parcel) = self.next_queued(node, lane) else {
            return;
        };
        self.run(node, lane, parcel);
        if self.nodes[node]
            .lanes
            .get(&lane)
            .is_some_and(|l| !l.queue.is_empty())
        {
            self.events.push(Event::Turn { node, lane });
        }
    }

    /// The message the lane runs next, taken off its queue, if it may run one now.
    fn next_queued(&mut self, node: usize, lane: u64) -> Option<Parcel> {
        let l = self.nodes[node].lanes.get_mut(&lane)?;
        if !l.stance.is_open() || l.sealing.is_some() || l.stance.suspended() {
            return None;
        }
        l.queue.pop_front()
    }

    /// The turn of a room that keeps a standby, `unit`, that just ran tells it something more if
    /// [`follows_up`] says so: queued behind what the lane holds, to run at a later turn.
    fn follow_up(&mut self, node: usize, lane: u64, unit: usize) {
        if !self.policy(unit).keeps_standby() {
            return;
        }
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        let Some(log) = l.cells.get(&unit).map(|c| &c.log) else {
            return;
        };
        if !log.last().is_some_and(|&(who, seq)| follows_up(who, seq)) {
            return;
        }
        let place = log.len() as u64;
        l.queue.push_back(Parcel {
            to: unit,
            work: Work::Tell {
                sender: FOLLOW_UP,
                seq: place,
            },
            origin: node,
            hops: 0,
        });
        self.events.push(Event::Turn { node, lane });
    }

    /// One turn: the lane runs one message.
    fn run(&mut self, node: usize, lane: u64, parcel: Parcel) {
        if !self.node_may_run(node) {
            self.fence_node(
                node,
                "the owner lease ran out, and the mesh no longer vouches for it",
            );
            return;
        }
        let to = parcel.to;
        let due = self.ticks_due();
        let Some(cell) = self.nodes[node]
            .lanes
            .get_mut(&lane)
            .and_then(|l| l.cells.get_mut(&to))
        else {
            // Not a unit of this lane (any more): it goes wherever the unit is.
            self.send_parcel(node, parcel);
            return;
        };
        self.touched.insert(to);
        cell.catch_up(to, due);
        match parcel.work {
            Work::Bind { .. } | Work::Unbind { .. } => self.session_op(node, lane, parcel),
            Work::Tell { sender, seq } => {
                cell.log.push((sender, seq));
                rewrite(&mut cell.state, to, sender, seq);
                self.tells_ran += 1;
                self.follow_up(node, lane, to);
                self.standby_turn(node, lane, to);
            }
            Work::Ask { sender, seq, id } => {
                cell.log.push((sender, seq));
                rewrite(&mut cell.state, to, sender, seq);
                self.tells_ran += 1;
                self.follow_up(node, lane, to);
                let turn = self.standby_turn(node, lane, to);
                self.reply_after(node, to, turn, (parcel.origin, id));
            }
            Work::Fence { id } => self.post(node, parcel.origin, Msg::Reply { id, ok: true }),
            Work::Input { client, seq } => {
                cell.log.push((client, seq));
                rewrite(&mut cell.state, to, client, seq);
                self.tells_ran += 1;
                self.follow_up(node, lane, to);
                self.standby_turn(node, lane, to);
            }
        }
    }

    /// A message that cannot be delivered: a request gets its error, a tell is counted lost
    /// (with no crash or store loss to explain it, that breaks exactly-once).
    pub(crate) fn give_up(&mut self, node: usize, parcel: Parcel, why: &str) {
        trace!(self, "n{node}: gives up {parcel:?}: {why}");
        match parcel.work {
            Work::Ask { id, .. } | Work::Fence { id } | Work::Bind { id, .. } => {
                self.post(node, parcel.origin, Msg::Reply { id, ok: false });
            }
            Work::Tell { .. } | Work::Input { .. } => {
                if self.lives[parcel.to].exists && !self.lives[parcel.to].renewed {
                    self.lost += 1;
                }
            }
            Work::Unbind { .. } => {}
        }
    }

    // ---- membership ---------------------------------------------------------------------------

    /// An Actor alone on the room's node joins the room, as `Node::join` does there.
    pub(crate) fn join(&mut self, room: usize, pick: usize) {
        let Some((node, room_lane)) = self.host(room) else {
            return;
        };
        let alone: Vec<(usize, u64)> = self.nodes[node]
            .lanes
            .iter()
            .filter(|(_, l)| !self.is_room(l.primary) && l.cells.len() == 1)
            .filter(|(_, l)| l.cells.get(&l.primary).is_some_and(|c| c.spot.is_none()))
            .map(|(&id, l)| (l.primary, id))
            .collect();
        if alone.is_empty() {
            return;
        }
        let (actor, actor_lane) = alone[pick % alone.len()];
        let refused = |w: &World, lane: u64, change: Change| {
            w.nodes[node]
                .lanes
                .get(&lane)
                .map(|l| l.stance.change(change))
        };
        let verdict = match refused(self, actor_lane, Change::Own) {
            Some(Verdict::Apply) => refused(self, room_lane, Change::Attach),
            other => other,
        };
        if verdict != Some(Verdict::Apply) {
            trace!(
                self,
                "n{node}: p{actor} joins r{room}: refused ({verdict:?})"
            );
            return;
        }
        trace!(self, "n{node}: p{actor} joins r{room}");
        let Some(mut alone) = self.drop_lane(node, actor_lane) else {
            return;
        };
        let Some(mut cell) = alone.cells.remove(&actor) else {
            return;
        };
        cell.spot = Some(room);
        let Some(l) = self.nodes[node].lanes.get_mut(&room_lane) else {
            return;
        };
        if let Some(r) = l.cells.get_mut(&room) {
            r.members.insert(actor);
        }
        l.cells.insert(actor, cell);
        // Sent to the Actor before it joined: it runs first.
        for parcel in alone.queue.into_iter().rev() {
            l.queue.push_front(parcel);
        }
        self.nodes[node].directory.insert(actor, room_lane);
        self.touched.insert(actor);
        self.run_queue(node, room_lane);
        self.record_spot(node, actor, Some(room), RECORD_TRIES);
    }

    /// A member leaves its room into a lane of its own, as `Node::leave` does.
    pub(crate) fn leave(&mut self, room: usize, pick: usize) {
        let Some((node, room_lane)) = self.host(room) else {
            return;
        };
        let Some(l) = self.nodes[node].lanes.get(&room_lane) else {
            return;
        };
        let members: Vec<usize> = l
            .cells
            .get(&room)
            .map(|c| c.members.iter().copied().collect())
            .unwrap_or_default();
        if members.is_empty() {
            return;
        }
        let actor = members[pick % members.len()];
        let verdict = l.stance.change(Change::Own);
        if verdict != Verdict::Apply {
            trace!(
                self,
                "n{node}: p{actor} leaves r{room}: refused ({verdict:?})"
            );
            return;
        }
        trace!(self, "n{node}: p{actor} leaves r{room}");
        let Some(l) = self.nodes[node].lanes.get_mut(&room_lane) else {
            return;
        };
        if let Some(r) = l.cells.get_mut(&room) {
            r.members.remove(&actor);
        }
        let Some(mut cell) = l.cells.remove(&actor) else {
            return;
        };
        cell.spot = None;
        let queued = take_where(&mut l.queue, |p| p.to == actor);
        let mut alone = Lane::new(actor, BTreeMap::from([(actor, cell)]), LaneMove::running());
        alone.queue.extend(queued);
        let id = self.add_lane(node, alone);
        self.run_queue(node, id);
        self.record_spot(node, actor, None, RECORD_TRIES);
    }

    /// Writes the room an Actor is in into its record: read, then a conditional write.
    fn record_spot(&mut self, node: usize, actor: usize, spot: Option<usize>, tries: u8) {
        if tries == 0 {
            trace!(
                self,
                "n{node}: p{actor}'s room not recorded: MembershipNotRecorded"
            );
            return;
        }
        self.call(
            node,
            Op::ReadBack(vec![actor]),
            Purpose::SpotRead { actor, spot, tries },
        );
    }

    pub(crate) fn spot_read(
        &mut self,
        node: usize,
        actor: usize,
        spot: Option<usize>,
        tries: u8,
        reply: Reply,
    ) {
        let Reply::Got(found) = reply else {
            trace!(self, "n{node}: p{actor}'s room not recorded: {reply:?}");
            return;
        };
        let Some(Some((version, mut record))) = found.into_iter().next() else {
            return;
        };
        let wanted = spot.map(|s| self.spot_id(s));
        if record.spot == wanted || record.owner != node_id(node) {
            return;
        }
        record.spot = wanted;
        let lease = self.lease_cond(node);
        self.call(
            node,
            Op::Batch {
                conds: vec![Cond::Version(Key::Unit(actor), version), lease],
                puts: vec![(Key::Unit(actor), Value::Unit(record))],
                deletes: Vec::new(),
            },
            Purpose::SpotWrite { actor, spot, tries },
        );
    }

    pub(crate) fn spot_written(
        &mut self,
        node: usize,
        actor: usize,
        spot: Option<usize>,
        tries: u8,
        reply: Reply,
    ) {
        if reply != Reply::Committed {
            // Changed meanwhile, or the answer was lost: the next read tells.
            self.record_spot(node, actor, spot, tries - 1);
        }
    }

    /// The condition that makes a write an owner's: this node's lease, live and current.
    pub(crate) fn lease_cond(&self, node: usize) -> Cond {
        Cond::Lease {
            node,
            generation: self.nodes[node].lease.map_or(0, |(g, _)| g),
        }
    }

    // ---- creation and stops -------------------------------------------------------------------

    /// Creates a unit that does not exist on `node`: a gated lane, then a claim of its record.
    pub(crate) fn create(&mut self, unit: usize, node: usize) {
        if self.lives[unit].exists || !self.nodes[node].up || self.host(unit).is_some() {
            return;
        }
        // Placement puts no new unit on a node that drains or drained.
        if self.nodes[node].state != ferry_core::authority::NodeState::Serving {
            return;
        }
        trace!(self, "n{node}: creates {unit}");
        let record = UnitRecord::created(
            node_id(node),
            self.nodes[node].lease.map_or(0, |(g, _)| g),
            ObjectGeneration(self.fresh()),
            self.factory(unit),
            true,
        );
        self.claim(
            node,
            unit,
            (BTreeMap::from([(unit, self.fresh_cell(unit))]), Vec::new()),
            record,
            vec![Cond::Absent(Key::Unit(unit))],
        );
    }

    /// A gated lane for `cells` and what they run first (a promoted copy's saved queue) on
    /// `node`, opened once its record (`wrote`, under `conds` and this node's lease) is written:
    /// its id.
    pub(crate) fn claim(
        &mut self,
        node: usize,
        unit: usize,
        (cells, saved): (BTreeMap<usize, Cell>, Vec<Parcel>),
        wrote: UnitRecord,
        mut conds: Vec<Cond>,
    ) -> u64 {
        let mut gated = Lane::new(unit, cells, LaneMove::creating());
        gated.queue.extend(saved);
        // What this node sent the unit before it was hosted here runs next.
        let id = self.unit_id(unit);
        gated.queue.extend(self.nodes[node].routes.hosted(&id));
        let lane = self.add_lane(node, gated);
        conds.push(self.lease_cond(node));
        self.call(
            node,
            Op::Batch {
                conds,
                puts: vec![(Key::Unit(unit), Value::Unit(wrote.clone()))],
                deletes: Vec::new(),
            },
            Purpose::Claim { unit, lane, wrote },
        );
        lane
    }

    /// A claim's answer (or, `read`, its read back): open the lane, give it up, or read back.
    pub(crate) fn claimed(
        &mut self,
        node: usize,
        unit: usize,
        lane: u64,
        wrote: UnitRecord,
        reply: Reply,
        read: bool,
    ) {
        let write = ConditionalWrite::new(wrote.clone());
        let settled = match (&reply, read) {
            (Reply::Committed, false) => Settled::Won,
            (Reply::Conflict { .. } | Reply::Unavailable | Reply::Reset, false) => Settled::Lost,
            (Reply::Unknown, false) => Settled::ReadBack,
            (Reply::Got(found), true) => {
                write.on_read(Ok(found.first().and_then(|f| f.as_ref()).map(|(_, r)| r)))
            }
            (_, true) => Settled::ReadBack,
            _ => Settled::Lost,
        };
        match settled {
            Settled::Won => {
                let rebuilt = wrote.owner_generation > 1;
                trace!(
                    self,
                    "n{node}: u{unit} recorded here; its lane opens{}",
                    if rebuilt {
                        " (rebuilt, state restarted)"
                    } else {
                        ""
                    }
                );
                // What was sent to the id before this incarnation may still arrive: it runs
                // here, but in no order with what is sent to the new one.
                let floors = self.sent_so_far();
                let life = &mut self.lives[unit];
                life.exists = true;
                life.renewed |= !rebuilt;
                life.rebuilt |= rebuilt;
                if !rebuilt {
                    life.floors = floors;
                }
                self.standby_opened(node, lane, unit);
                if let Some(l) = self.nodes[node].lanes.get_mut(&lane) {
                    l.stance.open();
                }
                self.run_queue(node, lane);
            }
            Settled::Lost => {
                trace!(
                    self,
                    "n{node}: u{unit} not recorded here ({reply:?}); its lane is given up"
                );
                self.given_up_promotion(node, lane);
                self.discard(node, lane);
            }
            Settled::ReadBack | Settled::Unknown => {
                self.call(
                    node,
                    Op::ReadBack(vec![unit]),
                    Purpose::ClaimRead { unit, lane, wrote },
                );
            }
        }
    }

    /// Gives up a lane that never opened: what reached it follows the unit's owner.
    pub(crate) fn discard(&mut self, node: usize, lane: u64) {
        let Some(l) = self.drop_lane(node, lane) else {
            return;
        };
        // A restored copy's saved work is the source's too: it runs there.
        let mut rest: Vec<Parcel> = Vec::new();
        if !l.stance.is_restored() {
            rest.extend(l.queue);
        }
        rest.extend(l.gated);
        for parcel in rest {
            self.send_parcel(node, parcel);
        }
    }

    /// Stops the unit that moved last where it runs and creates its id again at once on another
    /// node (the next one, if `node` is where it ran): what is sent to the new incarnation must
    /// find it, whatever routes its moves left behind (a unit moved away and back, then stopped,
    /// leaves both nodes pointing at each other).
    pub(crate) fn recreate(&mut self, node: usize) {
        let Some(unit) = self.last_moved else {
            return;
        };
        let Some((host, _)) = self.host(unit) else {
            return;
        };
        self.stop(unit);
        if !self.lives[unit].exists {
            let to = if node == host {
                (node + 1) % self.nodes.len()
            } else {
                node
            };
            self.create(unit, to);
        }
    }

    /// An Actor that ends lets its session go: its gateway hears why.
    pub(crate) fn binding_ended(&mut self, node: usize, unit: usize, cell: &mut Cell, why: &str) {
        if let (Some(binding), UnitId::Actor(actor)) = (cell.binding.take(), self.unit_id(unit)) {
            let notice = ferry_core::session::binding::ended(&actor, binding, why);
            self.notify(node, unit, notice.gateway, notice.frame);
        }
    }

    /// Stops a unit where it runs: a lone Actor or a room without members.
    pub(crate) fn stop(&mut self, unit: usize) {
        let Some((node, lane)) = self.host(unit) else {
            return;
        };
        let Some(l) = self.nodes[node].lanes.get(&lane) else {
            return;
        };
        if l.cells.len() != 1 {
            return;
        }
        let verdict = l.stance.change(Change::Own);
        if verdict != Verdict::Apply {
            trace!(self, "n{node}: stop u{unit}: refused ({verdict:?})");
            return;
        }
        trace!(self, "n{node}: stops u{unit}");
        let life = &mut self.lives[unit];
        life.exists = false;
        life.renewed = true;
        let Some(mut l) = self.drop_lane(node, lane) else {
            return;
        };
        // The route this node kept while it hosted the unit is void now.
        let id = self.unit_id(unit);
        self.nodes[node].routes.stopped(&id);
        if let Some(cell) = l.cells.get_mut(&unit) {
            self.binding_ended(node, unit, cell, "the Actor stopped");
        }
        for parcel in l.queue {
            self.give_up(node, parcel, "the unit stopped");
        }
        let lease = self.lease_cond(node);
        self.call(
            node,
            Op::Batch {
                conds: vec![lease],
                puts: Vec::new(),
                deletes: vec![Key::Unit(unit)],
            },
            Purpose::Release { unit },
        );
    }
}

/// What a turn (`who`'s `seq`th message to `unit`, or a tick) does to the unit's state: a small
/// state gets a few bytes rewritten; a large one a range from a few bytes to ten of pre-copy's
/// blocks, so that its rounds converge, or keep shrinking up to the round limit; and one of
/// `MIN_IMAGE` (every eighth unit from the fifth) all of its bytes, so that its rounds never
/// shrink.
fn rewrite(state: &mut Bytes, unit: usize, who: usize, seq: u64) {
    let len = state.len();
    if len == 0 {
        return;
    }
    let mut draw = Rng::new(((unit as u64) << 48) ^ ((who as u64) << 32) ^ seq);
    let (start, end) = if len > SMALL_STATE && unit % 8 == 4 {
        (0, len)
    } else {
        let span = match draw.below(8) {
            _ if len <= SMALL_STATE => 8,
            0..=3 => 100,
            4..=5 => 3 * BLOCK,
            6 => 6 * BLOCK,
            _ => 10 * BLOCK,
        }
        .min(len);
        let start = draw.below((len - span + 1) as u64) as usize;
        (start, start + span)
    };
    // Rewritten in place when no capture or frame shares the bytes.
    let mut bytes = std::mem::take(state)
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    for b in &mut bytes[start..end] {
        *b = b.wrapping_add(seq as u8 | 1);
    }
    *state = bytes.freeze();
}
