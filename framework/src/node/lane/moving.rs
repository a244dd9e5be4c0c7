//! A lane's part in a move: seal at a turn boundary and capture, hold what arrives, hand over
//! (relay and cutover), and then resume, release or force-stop; on the target, restore from a
//! capture into a lane that does not run until it is opened.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use ferry_core::relocation::ReadyOutcome;
use ferry_core::relocation::lane::{LaneMove, Resumed, Seal};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Lane, panic_text};
use crate::error::MessageError;
use crate::ids::{NodeId, UnitId};
use crate::node::handle::Node;
use crate::node::handover::Handover;
use crate::node::hosted::{Control, Entry, LaneTx};
use crate::relocation::RelocationId;
use crate::relocation::capture::{
    Capture, CellCapture, MembershipData, PendingCallback, QueuedOp, ReadyOutcomeData,
};
use crate::relocation::frames::Refusal;
use crate::timer::TimerSet;
use crate::unit::cell::{Membership, UnitCell};
use crate::unit::envelope::{Envelope, Payload};
use crate::unit::factory::{AdapterError, ExecutionMode, FactoryKind, ReadinessMode};
use crate::unit::lane::Slot;
use crate::unit::lane::{SealDone, SealRefused};

impl Lane {
    /// The unit this lane is: the spot of a SpotWide room, else its only cell.
    pub(super) fn primary(&self) -> Option<UnitId> {
        self.primary_spot()
            .or_else(|| self.cells.ids().next().cloned())
    }

    /// Whether the primary is a SpotWide spot that seals only when the application says so.
    pub(super) fn app_signaled(&self) -> bool {
        self.primary()
            .and_then(|id| self.cells.get(&id))
            .is_some_and(|c| {
                let info = c.info();
                info.kind == FactoryKind::UserSpot(ExecutionMode::SpotWide)
                    && info.readiness == ReadinessMode::ApplicationSignaled
            })
    }

    /// A move asks to seal this lane.
    pub(super) fn seal(&mut self, rel: RelocationId, done: SealDone) {
        match self.stance.seal(rel, self.app_signaled()) {
            Seal::Capture => self.capture(rel, done, false),
            Seal::Wait => self.seal_done = Some(done),
            Seal::Refused => {
                let why = "the unit is not running here, or already moving";
                let _ = done.send(Err(SealRefused::Busy(why.into())));
            }
        }
    }

    /// A move gives up waiting for the seal: the lane runs on as it was.
    pub(super) fn cancel_seal(&mut self, rel: RelocationId) {
        let quiet_ended = self.stance.cancel_seal(rel);
        if self.stance.moving().is_none() {
            // Nobody waits for a capture any more.
            self.seal_done = None;
        }
        if quiet_ended {
            self.quiet_ended();
        }
    }

    /// After a turn: an ApplicationSignaled spot said its state is whole.
    pub(super) fn deferred(&mut self, id: &UnitId) {
        let Some(rel) = self.stance.deferred() else {
            // No move is prepared: the spot carries on, and hears so before its next turn.
            self.continued(id.clone());
            return;
        };
        match self.seal_done.take() {
            Some(done) => self.capture(rel, done, true),
            None => {
                // Nobody waits for the capture: the spot carries on here.
                let owed = self.stance.captured(rel, true, false);
                self.quiet_ended();
                self.hears(id.clone(), owed);
            }
        }
    }

    /// The spot hears, before its next turn, that it carries on here.
    fn continued(&mut self, id: UnitId) {
        self.hears(id, Some(ReadyOutcome::Continued));
    }

    /// The spot hears, before its next turn, how the move it signalled for ended, if it is owed.
    fn hears(&mut self, id: UnitId, owed: Option<ReadyOutcome>) {
        if let Some(outcome) = owed {
            self.sys
                .push_front((id, PendingCallback::ReadyCompleted(outcome.into())));
        }
    }

    /// The quiet spell ended: binds held back take their place at the head of the queue again,
    /// and member news that waited for it is applied.
    fn quiet_ended(&mut self) {
        self.requeue_deferred();
        self.apply_parked();
    }

    /// Seals at this turn boundary and captures everything that moves. A capture that fails
    /// leaves the lane running: the move ends, and the unit runs on here.
    fn capture(&mut self, rel: RelocationId, done: SealDone, signaled: bool) {
        match self.take_capture(rel) {
            Ok((capture, now)) => {
                self.stance.captured(rel, signaled, true);
                if done.send(Ok((capture, now))).is_err() {
                    // Nobody waits for it any more: carry on here (nothing was handed over).
                    self.resume(rel, None);
                }
            }
            Err(refused) => {
                let owed = self.stance.captured(rel, signaled, false);
                self.quiet_ended();
                if let Some(primary) = self.primary() {
                    self.hears(primary, owed);
                }
                let _ = done.send(Err(refused));
            }
        }
    }

    /// Takes the capture of everything that moves at this turn boundary.
    fn take_capture(&mut self, rel: RelocationId) -> Result<(Capture, Instant), SealRefused> {
        let Some(unit) = self.primary() else {
            return Err(SealRefused::Busy("the lane is empty".into()));
        };
        let now = Instant::now();
        // Binds held back for this move are saved work too, ahead of what is still queued.
        self.requeue_deferred();
        // Everything accepted so far is saved work.
        self.data.take(&mut self.backlog);
        // Ticks due now are pending ticks: they run first, wherever the unit runs next.
        for (_, cell) in self.cells.iter_mut() {
            for tick in cell.take_due(now) {
                self.ticks.push_back((cell.id().clone(), tick));
            }
        }
        self.next_due = self.cells.iter().filter_map(|(_, c)| c.next_due()).min();
        let cells = self.cells_now(&unit, now, Some(rel))?;
        let journal = self.encode_in_place(Side::Backlog, Unplaced::Lost);
        let callbacks = self.sys.iter().cloned().collect();
        let capture = Capture {
            unit,
            cells,
            callbacks,
            ticks: self.ticks.iter().cloned().collect(),
            journal,
        };
        Ok((capture, now))
    }

    /// Every cell of the unit as it is now, the primary first: its state as its adapter takes
    /// it, its timers, membership and session.
    fn cells_now(
        &self,
        unit: &UnitId,
        now: Instant,
        rel: Option<RelocationId>,
    ) -> Result<Vec<CellCapture>, SealRefused> {
        let mut cells = Vec::new();
        let mut order: Vec<UnitId> = vec![unit.clone()];
        order.extend(self.cells.ids().filter(|k| *k != unit).cloned());
        for id in &order {
            let Some(cell) = self.cells.get(id) else {
                continue;
            };
            // The adapter is application code: its panic ends this move, not the unit. Capture
            // only reads the state, so the unit runs on here with it.
            let captured =
                catch_unwind(AssertUnwindSafe(|| cell.capture_state())).unwrap_or_else(|panic| {
                    Err(AdapterError(format!(
                        "its state adapter panicked: {}",
                        panic_text(&*panic)
                    )))
                });
            match captured {
                Ok(state) => cells.push(CellCapture {
                    id: id.clone(),
                    factory: cell.info().type_name.to_string(),
                    state,
                    timers: cell.timer_snapshot(now),
                    membership: membership_data(cell.membership()),
                    binding: cell.binding().cloned(),
                }),
                Err(error) => {
                    tracing::error!(relocation = ?rel, unit = %id, %error, "state not captured; the move ends and the unit runs on here");
                    let why = format!("{id} could not be captured: {error}");
                    return Err(SealRefused::Adapter(why));
                }
            }
        }
        Ok(cells)
    }

    /// An image of the unit as it runs, for a pre-copy round: its cells only (what is queued
    /// goes at the seal). Nothing while no image may be taken, or if its state cannot be taken
    /// (the seal then finds out and says why).
    pub(super) fn snapshot(&self) -> Option<Vec<u8>> {
        self.cells_capture()?.into_image().ok()
    }

    /// An image of the unit for its standby that carries what is queued: its cells, and what a
    /// move would take with them (the messages accepted so far, among them a member's tell to its
    /// room, pending callbacks and ticks), so that a promoted copy runs what the turns it holds
    /// caused. Nothing when [`Lane::snapshot`] would give nothing.
    pub(super) fn checkpoint_image(&mut self) -> Option<Vec<u8>> {
        let mut capture = self.cells_capture()?;
        self.data.take(&mut self.backlog);
        capture.callbacks = self.sys.iter().cloned().collect();
        capture.ticks = self.ticks.iter().cloned().collect();
        capture.journal = self.encode_in_place(Side::Backlog, Unplaced::StaysQueued);
        // The next turn's time starts after this work, not at the end of the turn before it.
        self.clock = None;
        capture.into_image().ok()
    }

    /// A capture of the unit's cells as they are now, with nothing queued: `None` while no
    /// image may be taken ([`LaneMove::imageable`]), or if its state cannot be taken.
    fn cells_capture(&self) -> Option<Capture> {
        if !self.stance.imageable() {
            return None;
        }
        let unit = self.primary()?;
        let cells = self.cells_now(&unit, Instant::now(), None).ok()?;
        Some(Capture {
            unit,
            cells,
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: Vec::new(),
        })
    }

    /// Encodes the backlog or the hold in place (so it can still run here) and returns copies.
    fn encode_in_place(&mut self, side: Side, unplaced: Unplaced) -> Vec<QueuedOp> {
        let queue = match side {
            Side::Backlog => std::mem::take(&mut self.backlog),
            Side::Hold => std::mem::take(&mut self.hold).into(),
        };
        let mut kept = VecDeque::with_capacity(queue.len());
        let mut ops = Vec::with_capacity(queue.len());
        for envelope in queue {
            let Some(cell) = self.cells.at(envelope.to) else {
                match unplaced {
                    Unplaced::Lost => self.lost(envelope),
                    Unplaced::StaysQueued => kept.push_back(envelope),
                }
                continue;
            };
            let Envelope { to, payload, reply } = envelope;
            let id = cell.id().clone();
            match payload.into_wire(|p| cell.encode(p)) {
                Ok((bytes, session)) => {
                    ops.push(QueuedOp {
                        to: id,
                        payload: bytes.clone(),
                        session: session.clone(),
                        reply: reply.as_deref().cloned(),
                    });
                    kept.push_back(Envelope {
                        to,
                        payload: Payload::from_wire(bytes, session),
                        reply,
                    });
                }
                Err(reason) => {
                    if let Some(reply_to) = reply {
                        self.node
                            .complete(&reply_to, Err(MessageError::Codec { id, reason }));
                    }
                }
            }
        }
        match side {
            Side::Backlog => self.backlog = kept,
            Side::Hold => self.hold = kept.into(),
        }
        ops
    }

    /// The point of no return: route the unit's ids to the target, relay what was held, in order,
    /// and send the cutover, all before anyone here can send to the unit by its new route.
    pub(super) fn handover(
        &mut self,
        rel: RelocationId,
        target: NodeId,
        done: oneshot::Sender<Vec<QueuedOp>>,
    ) {
        if !self.stance.handover(rel, target.clone()) {
            return;
        }
        let node = self.node.clone();
        let handover = Handover {
            node: &node,
            target: &target,
            rel,
        };
        let units: Vec<(UnitId, Slot)> = self
            .cells
            .iter()
            .map(|(s, c)| (c.id().clone(), s))
            .collect();
        let mut records = Vec::new();
        // Messages this node was still looking the unit up for: they follow the new route.
        let mut displaced = Vec::new();
        for (id, slot) in &units {
            let mut shard = node.core.units.directory.lock(id);
            displaced.extend(node.core.links.router.hand_over(id.clone(), target.clone()));
            if shard
                .get(id)
                .is_some_and(|e| std::ptr::eq(Arc::as_ptr(&e.lane), self.me.as_ptr()))
            {
                shard.remove(id);
            }
            // Everything sent along the old route is queued by now: hold it, then relay it.
            self.hold.extend(self.data.drain());
            let start = records.len();
            let mut rest = Vec::with_capacity(self.hold.len());
            let mut mine = Vec::new();
            for envelope in std::mem::take(&mut self.hold) {
                if envelope.to == *slot {
                    mine.push(envelope);
                } else {
                    rest.push(envelope);
                }
            }
            self.hold = mine;
            records.extend(self.encode_in_place(Side::Hold, Unplaced::Lost));
            for op in &records[start..] {
                handover.relay(op.clone());
            }
            self.relayed.append(&mut self.hold);
            self.hold = rest;
            drop(shard);
        }
        handover.cutover(&records);
        for deliver in displaced {
            node.route(deliver);
        }
        let _ = done.send(records);
    }

    /// Runs the unit here again: saved work, then what was held, in their original order.
    pub(super) fn resume(&mut self, rel: RelocationId, me: Option<&Arc<LaneTx>>) {
        let Some(Resumed { handed, signaled }) = self.stance.resume(rel) else {
            return;
        };
        // What the target sent back while the move was undecided: it arrived after all the unit
        // held, so it runs after it.
        let mut returned = Vec::new();
        if handed {
            let node = self.node.clone();
            for (slot, cell) in self.cells.iter() {
                let Some(factory) = node.core.factory(&cell.info().type_name) else {
                    continue;
                };
                let Some(lane) = me.cloned().or_else(|| self.me.upgrade()) else {
                    continue;
                };
                let id = cell.id();
                let entry = Entry::new(lane, factory, slot);
                node.core.units.directory.lock(id).insert(id.clone(), entry);
                returned.extend(
                    node.core
                        .links
                        .router
                        .taken_back(id)
                        .into_iter()
                        .map(|deliver| Envelope {
                            to: slot,
                            payload: Payload::from_wire(
                                deliver.payload,
                                deliver.session.map(|op| *op),
                            ),
                            reply: deliver.reply,
                        }),
                );
            }
        }
        self.backlog.extend(self.relayed.drain(..));
        self.backlog.extend(self.hold.drain(..));
        self.backlog.extend(returned);
        if signaled && let Some(primary) = self.primary() {
            self.continued(primary);
        }
        self.apply_parked();
    }

    /// Applies the member news that waited for the move to end, in arrival order.
    pub(super) fn apply_parked(&mut self) {
        for (actor, joined) in std::mem::take(&mut self.parked) {
            self.control(Control::Member { actor, joined });
        }
    }

    /// The target owns the unit now: drop this copy without callbacks; stragglers follow it.
    pub(super) fn release(&mut self, rel: RelocationId) {
        let Some(target) = self.stance.release(rel) else {
            return;
        };
        // Member news that reached this copy after its capture goes to the copy that runs.
        if let Some(UnitId::Spot(spot)) = self.primary() {
            for (actor, joined) in std::mem::take(&mut self.parked) {
                self.node
                    .forward_member(target.clone(), spot.clone(), actor, joined);
            }
        }
        self.backlog.clear();
        self.relayed.clear();
        let late = std::mem::take(&mut self.hold);
        for envelope in late {
            self.reroute(envelope);
        }
        for envelope in self.data.drain() {
            self.reroute(envelope);
        }
        // What the target sent back before its commit was known follows the unit there.
        for (_, cell) in self.cells.iter() {
            self.node.moved_away(cell.id());
        }
        self.standby_gone();
        self.finish_moving();
    }

    fn finish_moving(&mut self) {
        self.cells.clear();
        self.sys.clear();
        self.ticks.clear();
    }

    /// On the target: opens the restored unit with the relay records behind its saved work.
    pub(super) fn open_moved(&mut self, relay: Vec<QueuedOp>) {
        for op in relay {
            match self.queued(op) {
                Ok(envelope) => self.backlog.push_back(envelope),
                // Not a unit of this lane: it goes wherever that unit is.
                Err(op) => self.node.send_encoded(
                    op.to,
                    Payload::from_wire(op.payload, op.session),
                    op.reply,
                    None,
                ),
            }
        }
        self.stance.open();
        self.apply_parked();
    }

    /// A queued operation from a move, addressed to its unit's slot here; `Err` if no unit of
    /// this lane is its addressee.
    fn queued(&self, op: QueuedOp) -> Result<Envelope<Slot>, QueuedOp> {
        match self.cells.slot(&op.to) {
            Some(slot) => Ok(Envelope {
                to: slot,
                payload: Payload::from_wire(op.payload, op.session),
                reply: op.reply.map(Box::new),
            }),
            None => Err(op),
        }
    }

    /// On the target: builds a lane from a capture, gated, running the application's factories
    /// and state adapters. Nothing is registered here yet: see [`Restored::register`].
    pub(crate) fn restore(node: &Node, capture: Capture) -> Result<Restored, Refusal> {
        let now = Instant::now();
        let mut cells: Vec<Box<dyn UnitCell<Node>>> = Vec::new();
        for c in capture.cells {
            let factory = node.core.factory(&c.factory).ok_or_else(|| {
                Refusal::incompatible(format!(
                    "no factory {:?} is registered on {}",
                    c.factory,
                    node.id()
                ))
            })?;
            // Factories and adapters are application code: a panic refuses the unit, and the
            // source runs it on.
            let built =
                catch_unwind(AssertUnwindSafe(|| factory.build_cell(&c.id))).map_err(|p| {
                    Refusal::incompatible(format!(
                        "factory {:?} panicked: {}",
                        c.factory,
                        panic_text(&*p)
                    ))
                })?;
            let mut cell = built.ok_or_else(|| {
                Refusal::incompatible(format!("factory {:?} does not build {}", c.factory, c.id))
            })?;
            if let Some(state) = &c.state {
                catch_unwind(AssertUnwindSafe(|| cell.restore_state(state)))
                    .unwrap_or_else(|p| {
                        Err(AdapterError(format!(
                            "its state adapter panicked: {}",
                            panic_text(&*p)
                        )))
                    })
                    .map_err(|e| {
                        tracing::error!(unit = %c.id, error = %e, "a moved unit could not be restored here; it stays on its source");
                        Refusal::incompatible(format!("{} could not be restored: {e}", c.id))
                    })?;
            }
            cell.set_timers(TimerSet::restore(c.timers, now.into_std()));
            *cell.binding_mut() = c.binding;
            *cell.membership_mut() = match c.membership {
                MembershipData::Spot(members) => Membership::Spot {
                    members: members.into_iter().collect(),
                },
                MembershipData::Actor(spot) => Membership::Actor { spot },
            };
            cells.push(cell);
        }
        let mut cells = cells.into_iter();
        let first = cells
            .next()
            .ok_or_else(|| Refusal::other("the capture has no cells"))?;
        let directory = &node.core.units.directory;
        let (tx, mut lane) = Lane::new(node.clone(), first, directory.new_slot());
        for cell in cells {
            if let Some(due) = cell.next_due() {
                lane.next_due = Some(lane.next_due.map_or(due, |d| d.min(due)));
            }
            lane.cells.insert(directory.new_slot(), cell);
        }
        lane.stance = LaneMove::staged();
        lane.sys = capture.callbacks.into_iter().collect();
        if lane.app_signaled() {
            lane.sys.push_front((
                capture.unit.clone(),
                PendingCallback::ReadyCompleted(ReadyOutcomeData::Relocated),
            ));
        }
        lane.ticks = capture.ticks.into();
        for op in capture.journal {
            let envelope = lane.queued(op).map_err(|op| {
                Refusal::other(format!(
                    "the capture queues work for {}, which it does not hold",
                    op.to
                ))
            })?;
            lane.backlog.push_back(envelope);
        }
        Ok(Restored { tx, lane })
    }
}

/// A lane restored on a move's target, not registered yet.
pub(crate) struct Restored {
    tx: Arc<LaneTx>,
    lane: Lane,
}

impl Restored {
    /// Registers the lane's ids here and starts it, gated: called only while its move still
    /// wants it, so a copy given up meanwhile is never seen here. What this node sent the units
    /// before, on another path than through `source`, runs first.
    pub(crate) fn register(self, node: &Node, source: &NodeId) -> Result<Arc<LaneTx>, Refusal> {
        self.register_with(node, |id, entry| node.arrive(id, source, entry))
    }

    /// Registers the lane's ids here and starts it, gated; `arrive` hands each id's entry what
    /// this node holds for it.
    pub(crate) fn register_with(
        self,
        node: &Node,
        arrive: impl Fn(&UnitId, &Entry),
    ) -> Result<Arc<LaneTx>, Refusal> {
        let Restored { tx, lane } = self;
        let directory = &node.core.units.directory;
        let units: Vec<(UnitId, Slot, String)> = lane
            .cells
            .iter()
            .map(|(slot, c)| (c.id().clone(), slot, c.info().type_name.to_string()))
            .collect();
        let mut registered = Vec::new();
        for (id, slot, type_name) in &units {
            let mut shard = directory.lock(id);
            let factory = node.core.factory(type_name);
            match (shard.contains_key(id), factory) {
                (false, Some(factory)) => {
                    let entry = Entry::new(tx.clone(), factory, *slot);
                    arrive(id, &entry);
                    shard.insert(id.clone(), entry);
                    registered.push(id.clone());
                }
                _ => {
                    drop(shard);
                    for done in &registered {
                        directory.lock(done).remove(done);
                    }
                    return Err(Refusal::other(format!(
                        "{id} is already hosted on {}",
                        node.id()
                    )));
                }
            }
        }
        tokio::spawn(lane.run());
        Ok(tx)
    }
}

/// Which queue to encode.
#[derive(Clone, Copy)]
enum Side {
    Backlog,
    Hold,
}

/// What becomes of a queued message whose unit has no cell in the lane yet (a member whose join
/// the lane has not applied): a move's capture reports it lost, as a fault; a checkpoint leaves it
/// queued, to run once the member is in, and out of the image.
#[derive(Clone, Copy)]
enum Unplaced {
    Lost,
    StaysQueued,
}

fn membership_data(m: &Membership) -> MembershipData {
    match m {
        Membership::Spot { members } => MembershipData::Spot(members.iter().cloned().collect()),
        Membership::Actor { spot } => MembershipData::Actor(spot.clone()),
    }
}
