//! An execution lane: the task that runs one unit's turns, one at a time, from its own queue.
//!
//! A lane is a unit: a SpotWide spot with its members, or one Actor, or one PerActor spot shell, or
//! one Instance Spot. Control messages (joins, leaves, closing) overtake queued work at the next
//! turn boundary; messages run in the order they were accepted.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

mod cells;
mod moving;
mod sessions;
mod standby;

use ferry_core::relocation::lane::{Arrival, Change, LaneMove, Unsettled, Verdict};
use ferry_core::standby::checkpoints::Outbox;

use self::cells::Cells;
use super::handle::Node;
use super::hosted::{Control, Entry, LaneTx};
use crate::cluster::frames::Deliver;
use crate::error::{MessageError, UnitError};
use crate::ids::{ActorId, SpotId, UnitId};
use crate::mailbox::{self, mailbox};
use crate::relocation::capture::PendingCallback;
use crate::timer::Tick;
use crate::unit::cell::{Membership, ReplyMode, Turn, TurnEffects, TurnReply, UnitCell};
use crate::unit::envelope::{Envelope, Payload};
use crate::unit::factory::{ExecutionMode, FactoryKind, OnPanic};
use crate::unit::lane::Slot;
use crate::unit::lane::{Done, SealDone};

/// How many turns a lane runs before it lets other tasks on its thread go.
const TURNS_PER_YIELD: u32 = 256;

/// After this many messages in a row, a lane that finds its queue empty lets other tasks run once
/// before it sleeps: a sender still streaming to it has usually queued more by then, and is
/// spared waking the lane for every message.
const LINGER_AFTER: u32 = 64;

/// Why a unit stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopKind {
    /// The application asked (`ctx.stop()`): closing callbacks run, the record is released.
    Requested,
    /// A handler panicked: no closing callback, the record is released.
    Panicked,
    /// The node stops it (shutdown, or an operator): closing callbacks run; the node releases the
    /// record itself.
    ByNode,
}

/// The state of one running lane.
pub(crate) struct Lane {
    node: Node,
    cells: Cells,
    data: mailbox::Receiver<Envelope<Slot>>,
    ctl: mpsc::UnboundedReceiver<Control>,
    sys: VecDeque<(UnitId, PendingCallback)>,
    backlog: VecDeque<Envelope<Slot>>,
    next_due: Option<Instant>,
    /// Where the lane stands: whether turns run yet (a lane for a unit not yet recorded as owned
    /// here only queues), whether it was restored from a capture (its backlog is then the saved
    /// work of a move's source, which keeps it too, or of a promoted copy), and its place in a
    /// move, if any.
    stance: LaneMove,
    /// Where the capture goes once a seal that waits for the application's safe point is taken.
    seal_done: Option<SealDone>,
    me: Weak<LaneTx>,
    /// Timer ticks taken from their timers and not run yet (those due at a seal among them), run
    /// before anything else but callbacks.
    ticks: VecDeque<(UnitId, Tick)>,
    /// What arrived after the seal (the ingress hold).
    hold: Vec<Envelope<Slot>>,
    /// What was relayed at the handover, kept (encoded) until the target commits.
    relayed: Vec<Envelope<Slot>>,
    /// Set when the node shuts down: close once the queued work has run.
    closing: Option<oneshot::Sender<()>>,
    /// Binds held back while a move is about to seal this lane, in arrival order.
    deferred: Vec<Envelope<Slot>>,
    /// Members joining or leaving this PerActor spot while it moves, in arrival order: applied
    /// wherever the spot runs once the move has ended.
    parked: Vec<(ActorId, bool)>,
    /// How long each turn took, and how many message turns ran (looked up once per lane).
    metrics: TurnMetrics,
    /// When the last turn ended, until the lane's loop comes round again: the next step reads
    /// this instead of the clock, so a stream of messages costs one clock reading per turn.
    clock: Option<Instant>,
    /// The room's checkpoints, if its factory keeps a standby and it runs here.
    standby: Option<Arc<crate::node::hosted::Room>>,
    /// When the room's next checkpoint falls due if no turn runs before.
    standby_due: Option<Instant>,
    /// The room's turns counted for its standby, and the last whose answers may leave the node.
    standby_turns: u64,
    standby_released: u64,
    /// Answers held until the room's standby holds their turns (confirmed mode).
    outbox: Outbox<standby::Effect>,
}

/// The per-turn metrics of a lane: handles, so a turn records without a registry lookup.
struct TurnMetrics {
    seconds: metrics::Histogram,
    messages: metrics::Counter,
}

impl TurnMetrics {
    fn new() -> Self {
        TurnMetrics {
            seconds: metrics::histogram!("ferry_turn_seconds"),
            messages: metrics::counter!("ferry_messages_total"),
        }
    }
}

impl Lane {
    /// Starts a lane for `cell` that queues arrivals but runs nothing until [`Control::Open`];
    /// its first turn is then `on_start`.
    pub fn start_gated(node: Node, cell: Box<dyn UnitCell<Node>>, slot: Slot) -> Arc<LaneTx> {
        let id = cell.id().clone();
        let (tx, mut lane) = Lane::new(node, cell, slot);
        lane.stance = LaneMove::creating();
        lane.sys.push_back((id, PendingCallback::Start));
        tokio::spawn(lane.run());
        tx
    }

    fn new(node: Node, cell: Box<dyn UnitCell<Node>>, slot: Slot) -> (Arc<LaneTx>, Lane) {
        let (data_tx, data) = mailbox();
        let (ctl_tx, ctl) = mpsc::unbounded_channel();
        let mut cells = Cells::default();
        let next_due = cell.next_due();
        cells.insert(slot, cell);
        let tx = Arc::new(LaneTx {
            data: data_tx,
            ctl: ctl_tx,
        });
        let lane = Lane {
            node,
            cells,
            data,
            ctl,
            sys: VecDeque::new(),
            backlog: VecDeque::new(),
            next_due,
            stance: LaneMove::running(),
            seal_done: None,
            me: Arc::downgrade(&tx),
            ticks: VecDeque::new(),
            hold: Vec::new(),
            relayed: Vec::new(),
            closing: None,
            deferred: Vec::new(),
            parked: Vec::new(),
            metrics: TurnMetrics::new(),
            clock: None,
            standby: None,
            standby_due: None,
            standby_turns: 0,
            standby_released: 0,
            outbox: Outbox::default(),
        };
        (tx, lane)
    }

    async fn run(mut self) {
        let mut turns = 0u32;
        let mut busy = 0u32;
        while !self.cells.is_empty() {
            // The end of the turn just run, if one did: nothing but these checks came since.
            let mut now = self.clock.take().unwrap_or_else(Instant::now);
            if !self.stance.is_open() || self.node.fenced_at(now) {
                // Nothing runs: only controls (open, discard, close) are taken.
                match self.ctl.recv().await {
                    Some(control) => self.control(control),
                    None => break,
                }
                continue;
            }
            if self.stance.arrival() == Arrival::Hold {
                // Sealed for a move: no turn runs; what arrives is held in order.
                let mut arrived = VecDeque::new();
                tokio::select! {
                    biased;
                    control = self.ctl.recv() => match control {
                        Some(control) => self.control(control),
                        None => break,
                    },
                    true = self.data.take_next(&mut arrived) => self.hold.extend(arrived),
                    else => break,
                }
                continue;
            }
            turns += 1;
            if turns.is_multiple_of(TURNS_PER_YIELD) {
                tokio::task::yield_now().await;
                now = Instant::now();
            }
            // Framework callbacks (on_start first of all) run before controls can move a unit away,
            // and so do ticks taken from their timers: a unit that joins or leaves a spot takes
            // its timers along, not the ticks already taken from them.
            if let Some((id, turn)) = self.sys.pop_front() {
                self.system_turn(&id, turn);
                continue;
            }
            if let Some((id, tick)) = self.ticks.pop_front() {
                if let Some(slot) = self.cells.slot(&id) {
                    self.turn(slot, Turn::Tick(&tick), None);
                }
                continue;
            }
            if let Ok(control) = self.ctl.try_recv() {
                self.control(control);
                continue;
            }
            if let Some(due) = self.next_due
                && due <= now
            {
                self.queue_due_ticks(now);
                continue;
            }
            if self.standby_due_by(now) {
                self.standby_checkpoint(now);
                continue;
            }
            // A message already queued here starts its turn now; a batch just taken, after it.
            let started = if self.backlog.is_empty() {
                self.data.take(&mut self.backlog);
                None
            } else {
                Some(now)
            };
            if let Some(envelope) = self.backlog.pop_front() {
                busy += 1;
                self.dispatch(envelope, started);
                continue;
            }
            if busy >= LINGER_AFTER {
                // A stream that just ran dry: look once more before sleeping.
                busy = 0;
                tokio::task::yield_now().await;
                continue;
            }
            busy = 0;
            if let Some(done) = self.closing.take() {
                // Everything accepted has run.
                self.close_all(done);
                continue;
            }
            let due = match (self.next_due, self.standby_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Arrivals only wake the lane: the loop above decides what runs first.
            tokio::select! {
                biased;
                Some(control) = self.ctl.recv() => self.control(control),
                true = self.data.take_next(&mut self.backlog) => {}
                () = sleep_until(due), if due.is_some() => {}
                // No sender is left anywhere: nothing can reach these units any more.
                else => break,
            }
        }
        // Nothing is hosted here any more; whatever still arrives follows its unit or ends.
        self.data.close();
        self.data.take(&mut self.backlog);
        for envelope in std::mem::take(&mut self.backlog) {
            self.reroute(envelope);
        }
    }

    /// Sends a message queued here after its unit, which does not run here any more: to its new
    /// lane here, or, encoded by its cell, to its owner elsewhere.
    fn reroute(&self, envelope: Envelope<Slot>) {
        let Some(cell) = self.cells.at(envelope.to) else {
            self.lost(envelope);
            return;
        };
        let id = cell.id().clone();
        let reply = envelope.reply.clone();
        let envelope = match self.node.push(envelope.readdress(id.clone()), None) {
            Ok(None) => return,
            Ok(Some(envelope)) => envelope,
            Err(error) => {
                if let Some(reply_to) = reply {
                    self.node.complete(&reply_to, Err(error));
                }
                return;
            }
        };
        match envelope.payload.into_wire(|p| cell.encode(p)) {
            Ok((payload, session)) => self.node.route(Deliver {
                to: id,
                payload,
                session: session.map(Box::new),
                reply,
                activate: None,
                origin: self.node.id().clone(),
                hops: 0,
            }),
            Err(reason) => {
                if let Some(reply_to) = reply {
                    self.node
                        .complete(&reply_to, Err(MessageError::Codec { id, reason }));
                }
            }
        }
    }

    /// Ends a message whose unit left this lane without it. Every way out of a lane takes the
    /// unit's queued messages along, so this is a fault: it is logged, and a request ends.
    fn lost(&self, envelope: Envelope<Slot>) {
        tracing::error!(slot = ?envelope.to, "a queued message lost track of its unit; dropped");
        if let Some(reply_to) = envelope.reply {
            let reason = "its unit left the lane it was queued on without it; send it again";
            self.node.complete(
                &reply_to,
                Err(MessageError::ReplyLost {
                    reason: reason.to_owned(),
                }),
            );
        }
    }

    /// Ends a message queued for a unit that stopped.
    fn stopped(&self, id: &UnitId, envelope: Envelope<Slot>) {
        if let Some(reply_to) = envelope.reply {
            let id = id.clone();
            self.node
                .complete(&reply_to, Err(MessageError::UnitStopped { id }));
        }
    }

    /// Runs a message's turn (or applies its session change); `started` is a clock reading taken
    /// just before, if there is one.
    fn dispatch(&mut self, envelope: Envelope<Slot>, started: Option<Instant>) {
        let slot = envelope.to;
        if self.cells.at(slot).is_none() {
            if self.ctl.is_empty() {
                self.lost(envelope);
            } else {
                // An Actor joining this lane comes by a control sent before its first message
                // here: the loop runs controls first, and what the Actor brings goes ahead.
                self.backlog.push_front(envelope);
            }
            return;
        }
        let Envelope { payload, reply, .. } = envelope;
        let payload = match payload {
            Payload::Session(op) => {
                self.session_op(slot, op, reply);
                return;
            }
            other => other,
        };
        let mode = match &reply {
            None => ReplyMode::Drop,
            Some(r) if r.node == *self.node.id() => ReplyMode::Local,
            Some(_) => ReplyMode::Encoded,
        };
        let outcome = self.turn(slot, Turn::Message(payload, mode), started);
        if let Some(reply_to) = reply {
            match outcome {
                Some(terminal) => self.answer(reply_to, terminal),
                None => self.lost(Envelope {
                    to: slot,
                    payload: Payload::Empty,
                    reply: Some(reply_to),
                }),
            }
        }
    }

    fn system_turn(&mut self, id: &UnitId, turn: PendingCallback) {
        let turn = match &turn {
            PendingCallback::Start => Turn::Start,
            PendingCallback::MemberJoined(a) => Turn::MemberJoined(a),
            PendingCallback::MemberLeft(a) => Turn::MemberLeft(a),
            PendingCallback::Joined(s) => Turn::Joined(s),
            PendingCallback::Left(s) => Turn::Left(s),
            PendingCallback::ReadyCompleted(o) => Turn::ReadyCompleted((*o).into()),
        };
        if let Some(slot) = self.cells.slot(id) {
            self.turn(slot, turn, None);
        }
    }

    /// Takes the ticks due at `now` into the pending ticks, which run one turn at a time: a
    /// checkpoint or a seal between two of them carries those not run yet, whose timers are
    /// spent.
    fn queue_due_ticks(&mut self, now: Instant) {
        for (_, cell) in self.cells.iter_mut() {
            for tick in cell.take_due(now) {
                self.ticks.push_back((cell.id().clone(), tick));
            }
        }
        self.next_due = self.cells.iter().filter_map(|(_, c)| c.next_due()).min();
    }

    /// Runs one turn on the unit in `slot`, catching a panic; `started` is a clock reading taken
    /// just before, if there is one. A message turn yields its reply.
    fn turn(&mut self, slot: Slot, turn: Turn<'_>, started: Option<Instant>) -> TurnReply {
        let hold_pushes = self.holds_effects();
        let cell = self.cells.at_mut(slot)?;
        let mut effects = TurnEffects {
            hold_pushes,
            ..TurnEffects::default()
        };
        let node = &self.node;
        if matches!(turn, Turn::Message(..)) {
            self.metrics.messages.increment(1);
        }
        let started = started.unwrap_or_else(Instant::now);
        let ran = catch_unwind(AssertUnwindSafe(|| cell.turn(node, turn, &mut effects)));
        let ended = Instant::now();
        self.metrics.seconds.record((ended - started).as_secs_f64());
        match ran {
            Ok(reply) => {
                if let Some(due) = cell.next_due() {
                    self.next_due = Some(self.next_due.map_or(due, |d| d.min(due)));
                }
                if effects.stop {
                    let id = cell.id().clone();
                    self.stop_unit(&id, StopKind::Requested);
                } else {
                    let deferred = effects.deferred.then(|| cell.id().clone());
                    if deferred.is_none() {
                        self.clock = Some(ended);
                    }
                    // Counted, and checkpointed if one may go, before a deferring turn's capture:
                    // what the turn caused is held by the standby as any turn's is, not until
                    // the move ends.
                    self.standby_turn(ended);
                    if let Some(id) = deferred {
                        self.deferred(&id);
                    }
                }
                self.held_pushes(std::mem::take(&mut effects.pushes));
                reply
            }
            Err(panic) => {
                let id = cell.id().clone();
                let what = panic_text(&*panic);
                tracing::error!(unit = %id, panic = %what, "handler panicked");
                let restart = cell.info().on_panic == OnPanic::Restart;
                if restart {
                    cell.rebuild();
                    self.sys.push_front((id.clone(), PendingCallback::Start));
                } else {
                    self.stop_unit(&id, StopKind::Panicked);
                }
                // Pushes it made before it failed are numbered: they go as the last turn's.
                self.held_pushes(std::mem::take(&mut effects.pushes));
                Some(Err(MessageError::UnitFailed { id }))
            }
        }
    }

    /// Stops a unit (with its members, for a SpotWide spot): unregisters it, then answers what was
    /// queued for it with `UnitStopped`.
    fn stop_unit(&mut self, id: &UnitId, kind: StopKind) {
        if !self.cells.contains(id) {
            return;
        }
        // Binds held back for a move are queued work like any other: they end with the unit.
        self.requeue_deferred();
        let Some(cell) = self.cells.get(id) else {
            return;
        };
        let mut gone = vec![id.clone()];
        let spot_wide = cell.info().kind == FactoryKind::UserSpot(ExecutionMode::SpotWide);
        let mut per_actor_spot = None;
        match cell.membership().clone() {
            Membership::Spot { members } if spot_wide => {
                gone.extend(members.iter().map(|a| UnitId::Actor(a.clone())));
            }
            Membership::Actor { spot: Some(spot) } => {
                if let Some(host) = self.cells.get_mut(&UnitId::Spot(spot.clone())) {
                    if let (Membership::Spot { members }, UnitId::Actor(a)) =
                        (host.membership_mut(), id)
                    {
                        members.remove(a);
                    }
                } else {
                    per_actor_spot = Some(spot.clone());
                }
            }
            _ => {}
        }
        if kind != StopKind::Panicked && !self.node.fenced() {
            for unit in &gone {
                self.turn_quietly(unit, Turn::Closing);
            }
        }
        let reason = match kind {
            StopKind::Requested => "the Actor stopped",
            StopKind::Panicked => "the Actor failed (its handler panicked)",
            StopKind::ByNode => "the node running the Actor stopped it",
        };
        self.unbind_gone(&gone, reason);
        let mut removed = Vec::with_capacity(gone.len());
        for unit in &gone {
            self.unregister(unit);
            self.node
                .core
                .links
                .router
                .with(unit, |routes| routes.stopped(unit));
            if let Some((slot, _)) = self.cells.remove(unit) {
                removed.push((unit, slot));
            }
            if kind != StopKind::ByNode {
                self.node.release_record(unit.clone());
            }
        }
        if let (Some(spot), UnitId::Actor(actor)) = (per_actor_spot, id) {
            self.node.notify_member(&spot, actor.clone(), false);
        }
        // Every send along the removed routes happened before the removal: it is queued by now.
        for (unit, slot) in removed {
            for envelope in self.take_queued_for(slot) {
                self.stopped(unit, envelope);
            }
        }
        self.sys.retain(|(unit, _)| !gone.contains(unit));
        self.ticks.retain(|(unit, _)| !gone.contains(unit));
        self.standby_left(id);
    }

    /// Runs a closing callback whose panic only gets logged: the unit is going anyway.
    fn turn_quietly(&mut self, id: &UnitId, turn: Turn<'_>) {
        let Some(cell) = self.cells.get_mut(id) else {
            return;
        };
        let mut effects = TurnEffects::default();
        let node = &self.node;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| cell.turn(node, turn, &mut effects))) {
            tracing::error!(unit = %id, panic = %panic_text(&*panic), "closing callback panicked");
        }
    }

    /// Refuses a control that changes which units exist here or which spot an Actor is in, when
    /// the lane's place in a move says so (see [`LaneMove::change`]): from the quiet spell of a
    /// move on, while sealed or staged on a move's target, or while not yet recorded as created.
    /// A PerActor spot's member news has no one to refuse to, so it waits for the move to end.
    /// Returns the control otherwise.
    fn refuse_unsettled(&mut self, control: Control) -> Option<Control> {
        let change = match &control {
            Control::Join { .. } | Control::Leave { .. } | Control::Stop { .. } => Change::Own,
            Control::Attach { .. } => Change::Attach,
            Control::Member { .. } => Change::MemberNews,
            _ => return Some(control),
        };
        let why = match self.stance.change(change) {
            Verdict::Apply => return Some(control),
            Verdict::Refuse(why) => why,
            Verdict::Park => Unsettled::Moving,
        };
        let Some(id) = self.primary() else {
            return Some(control);
        };
        let error = match why {
            Unsettled::Moving => UnitError::Moving { id },
            Unsettled::Creating => UnitError::Unavailable {
                what: format!("changing {id}"),
                reason: "it is still being created".to_owned(),
            },
        };
        match control {
            Control::Join { done, .. }
            | Control::Leave { done, .. }
            | Control::Stop { done, .. } => {
                let _ = done.send(Err(error));
            }
            Control::Attach {
                mut cell,
                slot,
                backlog,
                done,
            } => {
                // The Actor stays out of the spot, in a lane of its own, with what was sent to it.
                *cell.membership_mut() = Membership::Actor { spot: None };
                let id = cell.id().clone();
                self.spin_off(&id, cell, slot, backlog, None);
                let _ = done.send(Err(error));
            }
            Control::Member { actor, joined } => self.parked.push((actor, joined)),
            other => return Some(other),
        }
        None
    }

    fn control(&mut self, control: Control) {
        let Some(control) = self.refuse_unsettled(control) else {
            return;
        };
        match control {
            Control::Join {
                actor,
                spot,
                spot_entry,
                done,
            } => self.join(actor, spot, spot_entry, done),
            Control::Attach {
                mut cell,
                slot,
                backlog,
                done,
            } => {
                let actor = cell.id().clone();
                let spot = match cell.membership_mut() {
                    Membership::Actor { spot } => spot.clone(),
                    Membership::Spot { .. } => None,
                };
                let (UnitId::Actor(actor_id), Some(spot)) = (&actor, spot) else {
                    let _ = done.send(Err(UnitError::NotAllowed {
                        id: actor,
                        reason: "only Actors join spots".into(),
                    }));
                    return;
                };
                let spot_unit = UnitId::Spot(spot.clone());
                if let Some(Membership::Spot { members }) =
                    self.cells.get_mut(&spot_unit).map(|c| c.membership_mut())
                {
                    members.insert(actor_id.clone());
                }
                if let Some(due) = cell.next_due() {
                    self.next_due = Some(self.next_due.map_or(due, |d| d.min(due)));
                }
                self.cells.insert(slot, cell);
                // Sent before anything that reached this lane for the Actor: it runs first.
                for envelope in backlog.into_iter().rev() {
                    self.backlog.push_front(envelope);
                }
                self.sys
                    .push_back((spot_unit, PendingCallback::MemberJoined(actor_id.clone())));
                self.sys.push_back((actor, PendingCallback::Joined(spot)));
                let _ = done.send(Ok(()));
            }
            Control::Member { actor, joined } => {
                let Some(spot) = self.primary_spot() else {
                    return;
                };
                if let Some(Membership::Spot { members }) =
                    self.cells.get_mut(&spot).map(|c| c.membership_mut())
                {
                    let changed = if joined {
                        members.insert(actor.clone())
                    } else {
                        members.remove(&actor)
                    };
                    if changed {
                        let turn = if joined {
                            PendingCallback::MemberJoined(actor)
                        } else {
                            PendingCallback::MemberLeft(actor)
                        };
                        self.sys.push_back((spot, turn));
                    }
                }
            }
            Control::Leave { actor, done } => {
                let result = self.leave(actor);
                let _ = done.send(result);
            }
            Control::Stop { unit, done } => {
                let result = if self.cells.contains(&unit) {
                    self.stop_unit(&unit, StopKind::ByNode);
                    Ok(())
                } else {
                    Err(UnitError::UnknownId { id: unit })
                };
                let _ = done.send(result);
            }
            Control::Open { owned } => {
                self.stance.open();
                self.apply_parked();
                self.standby_open(owned, Instant::now());
            }
            Control::Seal { rel, done } => self.seal(rel, done),
            Control::Quiesce { rel, unit, done } => {
                let _ = done.send(self.quiesce(rel, &unit));
            }
            Control::CancelSeal { rel } => self.cancel_seal(rel),
            Control::Snapshot { done } => {
                let _ = done.send(self.snapshot());
            }
            Control::Handover { rel, target, done } => self.handover(rel, target, done),
            Control::Resume { rel, me, done } => {
                self.resume(rel, Some(&me));
                let _ = done.send(());
            }
            Control::Release { rel } => self.release(rel),
            Control::OpenMoved {
                relay,
                committed,
                owned,
            } => {
                self.open_moved(relay);
                self.standby_open(owned, Instant::now());
                // S2 (committed) -> S3 (dispatch open on the target).
                metrics::histogram!("ferry_relocation_target_resume_seconds")
                    .record(committed.elapsed().as_secs_f64());
            }
            Control::Checkpoint => self.standby_checkpoint(Instant::now()),
            Control::Discard => self.discard(),
            Control::Close { done, now: false } if self.stance.is_open() && !self.node.fenced() => {
                // Finish what was accepted first; the loop closes once the queues are empty.
                self.closing = Some(done);
            }
            Control::Close { done, .. } => self.close_all(done),
        }
    }

    /// Removes a unit's directory entry if it still points at this lane.
    fn unregister(&self, unit: &UnitId) {
        self.node
            .core
            .units
            .directory
            .remove_if_on(unit, self.me.as_ptr());
    }

    /// Gives up every unit of a lane that never opened: what reached it follows the owner. A
    /// restored unit's saved work is dropped, not sent on: a move's source still has it and runs
    /// it, and a copy whose promotion lost is not the room.
    fn discard(&mut self) {
        let ids: Vec<UnitId> = self.cells.ids().cloned().collect();
        for id in &ids {
            self.unregister(id);
        }
        if self.stance.is_restored() {
            self.backlog.clear();
            self.ticks.clear();
        }
        for (actor, joined) in std::mem::take(&mut self.parked) {
            tracing::warn!(%actor, joined, "member news for a staged spot that was given up is dropped; the spot runs on its source");
        }
        self.data.take(&mut self.backlog);
        for envelope in std::mem::take(&mut self.backlog) {
            self.reroute(envelope);
        }
        self.cells.clear();
        self.sys.clear();
    }

    /// Closes every unit of the lane now.
    fn close_all(&mut self, done: oneshot::Sender<()>) {
        let ids: Vec<UnitId> = self.cells.ids().cloned().collect();
        for id in ids {
            self.stop_unit(&id, StopKind::ByNode);
        }
        let _ = done.send(());
    }

    fn primary_spot(&self) -> Option<UnitId> {
        self.cells
            .ids()
            .find(|id| matches!(id, UnitId::Spot(_)))
            .cloned()
    }

    fn join(&mut self, actor: ActorId, spot: SpotId, spot_entry: Entry, done: Done) {
        let id = UnitId::Actor(actor.clone());
        let Some(cell) = self.cells.get_mut(&id) else {
            let _ = done.send(Err(UnitError::UnknownId { id }));
            return;
        };
        if let Membership::Actor {
            spot: Some(current),
        } = cell.membership()
        {
            let result = if *current == spot {
                Ok(())
            } else {
                Err(UnitError::NotAllowed {
                    id,
                    reason: format!("is a member of {current}; leave it first"),
                })
            };
            let _ = done.send(result);
            return;
        }
        *cell.membership_mut() = Membership::Actor {
            spot: Some(spot.clone()),
        };
        if spot_entry.factory.info().kind == FactoryKind::UserSpot(ExecutionMode::PerActor) {
            let _ = spot_entry.lane.ctl.send(Control::Member {
                actor,
                joined: true,
            });
            self.sys.push_back((id, PendingCallback::Joined(spot)));
            let _ = done.send(Ok(()));
            return;
        }
        // SpotWide: the Actor's cell and its queued messages go over to the spot's lane.
        let Some((slot, cell)) = self.cells.remove(&id) else {
            return;
        };
        let node = self.node.clone();
        let mut shard = node.core.units.directory.lock(&id);
        let Some(own) = shard.get(&id).cloned() else {
            let _ = done.send(Err(UnitError::UnknownId { id }));
            return;
        };
        let lane = spot_entry.lane.clone();
        shard.insert(id.clone(), Entry::new(lane, own.factory.clone(), slot));
        let moving = self.take_queued_for(slot);
        let attach = Control::Attach {
            cell,
            slot,
            backlog: moving,
            done,
        };
        if let Err(mpsc::error::SendError(attach)) = spot_entry.lane.ctl.send(attach) {
            // The spot closed meanwhile: the Actor stays here, with its messages in order.
            shard.insert(id.clone(), Entry::new(own.lane, own.factory, slot));
            if let Control::Attach {
                mut cell,
                slot,
                backlog,
                done,
            } = attach
            {
                *cell.membership_mut() = Membership::Actor { spot: None };
                self.cells.insert(slot, cell);
                for envelope in backlog.into_iter().rev() {
                    self.backlog.push_front(envelope);
                }
                let _ = done.send(Err(UnitError::UnknownId {
                    id: UnitId::Spot(spot),
                }));
            }
        }
    }

    fn leave(&mut self, actor: ActorId) -> Result<(), UnitError> {
        let id = UnitId::Actor(actor.clone());
        let Some(cell) = self.cells.get_mut(&id) else {
            return Err(UnitError::UnknownId { id });
        };
        let Membership::Actor { spot: Some(spot) } = cell.membership().clone() else {
            return Err(UnitError::NotAllowed {
                id,
                reason: "is not a member of any spot".into(),
            });
        };
        *cell.membership_mut() = Membership::Actor { spot: None };
        let spot_unit = UnitId::Spot(spot.clone());
        if !self.cells.contains(&spot_unit) {
            // A PerActor member: it stays in its own lane.
            self.sys
                .push_back((id, PendingCallback::Left(spot.clone())));
            self.node.notify_member(&spot, actor, false);
            return Ok(());
        }
        // A SpotWide member: it goes back to a lane of its own, with its queued messages.
        let Some((slot, cell)) = self.cells.remove(&id) else {
            return Ok(());
        };
        if let Some(Membership::Spot { members }) =
            self.cells.get_mut(&spot_unit).map(|c| c.membership_mut())
        {
            members.remove(&actor);
        }
        self.sys
            .push_back((spot_unit, PendingCallback::MemberLeft(actor.clone())));
        self.spin_off(
            &id,
            cell,
            slot,
            Vec::new(),
            Some(PendingCallback::Left(spot)),
        );
        Ok(())
    }

    /// Starts a lane of its own for an Actor's cell that leaves this lane, and points the Actor's
    /// id at it: what was sent to it (`first`, then what is queued here) goes along, in order,
    /// and `callback` runs first.
    fn spin_off(
        &mut self,
        id: &UnitId,
        cell: Box<dyn UnitCell<Node>>,
        slot: Slot,
        first: Vec<Envelope<Slot>>,
        callback: Option<PendingCallback>,
    ) {
        let (tx, mut lane) = Lane::new(self.node.clone(), cell, slot);
        lane.sys.extend(callback.map(|c| (id.clone(), c)));
        lane.backlog.extend(first);
        let node = self.node.clone();
        let mut shard = node.core.units.directory.lock(id);
        if let Some(factory) = shard.get(id).map(|e| e.factory.clone()) {
            shard.insert(id.clone(), Entry::new(tx, factory, slot));
        }
        lane.backlog.extend(self.take_queued_for(slot));
        drop(shard);
        tokio::spawn(lane.run());
    }

    /// Takes every message queued here for the unit in `slot` out of this lane, in order. Call it
    /// when the unit leaves the lane, under the write lock of its directory shard and after
    /// repointing or removing its entry, so that nothing more can arrive for it here.
    fn take_queued_for(&mut self, slot: Slot) -> Vec<Envelope<Slot>> {
        // What arrived after a capture belongs in the hold: the backlog was captured already, and
        // anything added to it now would never be relayed.
        if self.stance.arrival() == Arrival::Hold {
            self.hold.extend(self.data.drain());
        } else {
            self.data.take(&mut self.backlog);
        }
        // Binds held back were taken from the queue before what is still in it; what was relayed
        // and held arrived after it.
        let mut taken = take_for(&mut self.deferred, slot);
        let mut backlog = Vec::from(std::mem::take(&mut self.backlog));
        taken.extend(take_for(&mut backlog, slot));
        self.backlog = backlog.into();
        taken.extend(take_for(&mut self.relayed, slot));
        taken.extend(take_for(&mut self.hold, slot));
        taken
    }
}

/// Takes the messages for `slot` out of `queue`, keeping the order of both parts.
fn take_for(queue: &mut Vec<Envelope<Slot>>, slot: Slot) -> Vec<Envelope<Slot>> {
    let (mine, kept) = std::mem::take(queue)
        .into_iter()
        .partition(|e| e.to == slot);
    *queue = kept;
    mine
}

async fn sleep_until(due: Option<Instant>) {
    if let Some(due) = due {
        tokio::time::sleep_until(due).await;
    }
}

pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests;
