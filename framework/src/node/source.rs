//! The source side of a move, as an async shell around [`SourceMachine`]: it seals the lane, ships
//! the capture, hands over, and carries out whatever the machine decides.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use super::drain::DrainShare;
use super::handle::Node;
use super::hosted::{Control, LaneTx};
use super::move_ctx::MoveCtx;
use super::sealing::SealPass;
use crate::cluster::authority::{NodeState, unit_key};
use crate::ids::{ActorId, NodeId, UnitId};
use crate::relocation::RelocationId;
use crate::relocation::capture::{Capture, QueuedOp};
use crate::relocation::frames::{RecordAt, Refusal, RefusedBecause, RelocFrame};
use crate::relocation::moves::Outgoing;
use crate::relocation::phases::{MovePhases, TargetPhases};
use crate::relocation::precopy::{Precopy, Round};
use crate::relocation::protocol::{
    MoveEnd, SessionsTo, SourceAction, SourceEvent, SourceMachine, SourceTiming, fence_conflict,
    told_at_quiesce,
};
use crate::relocation::reports::{BlockedReason, MoveError, MoveReport, RelocationEvent};
use crate::session::SessionBinding;
use crate::session::frames::{BoundActor, SessionFrame};
use crate::store::{BatchOutcome, Condition, Op, StoreError};
use crate::unit::factory::PolicyKind;
use crate::unit::lane::SealRefused;
use ferry_core::sealing::windowed;

impl Node {
    /// Moves one unit (a SpotWide spot with its members, an actor, an Instance Spot) to `target`,
    /// or to a node placement picks. Runs the whole procedure; see the relocation contract.
    pub async fn move_unit(
        &self,
        id: &UnitId,
        target: Option<NodeId>,
    ) -> Result<MoveReport, MoveError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let target = self.pick_target(id, target, None)?;
        Ok(self.move_to(id, target, deadline, None).await)
    }

    /// Checks that `id` can move from here and picks its target.
    pub(crate) fn pick_target(
        &self,
        id: &UnitId,
        target: Option<NodeId>,
        version: Option<&str>,
    ) -> Result<NodeId, MoveError> {
        let state = self.state();
        if !matches!(state, NodeState::Serving | NodeState::Relocating) {
            return Err(MoveError::NotServing { state });
        }
        if !self.store_reachable() {
            return Err(MoveError::StoreUnavailable { id: id.clone() });
        }
        let entry = self
            .core
            .units
            .directory
            .get(id)
            .ok_or_else(|| MoveError::NotHosted { id: id.clone() })?;
        let info = entry.factory.info();
        if info.policy == PolicyKind::Disabled {
            return Err(MoveError::RelocationDisabled { id: id.clone() });
        }
        if let UnitId::Actor(_) = id
            && let Some(spot) = self.core.units.directory.spot_sharing(&entry.lane)
        {
            return Err(MoveError::MovesWithSpot {
                id: id.clone(),
                spot,
            });
        }
        let view: Vec<_> = self
            .cluster_view()
            .into_iter()
            .filter(|d| d.node != *self.id())
            .collect();
        let type_name = info.type_name.to_string();
        match target {
            Some(t) => {
                let ok = view.iter().any(|d| {
                    d.node == t
                        && d.state == NodeState::Serving
                        && d.factories.contains(&type_name)
                        && version.is_none_or(|v| d.app_version == v)
                });
                if ok {
                    Ok(t)
                } else {
                    Err(MoveError::NoTarget {
                        id: id.clone(),
                        reason: format!("{t} is not a serving node with factory {type_name:?}"),
                    })
                }
            }
            None => crate::cluster::placement::place(&view, &type_name, version).ok_or_else(|| {
                MoveError::NoTarget {
                    id: id.clone(),
                    reason: format!("no other serving node has factory {type_name:?} and room"),
                }
            }),
        }
    }

    /// Runs one move to `target`, ending by `deadline` one way or another; inside a drain, the
    /// move seals its unit only once the drain's window lets it, and the bytes it sends after
    /// the seal (in KiB) are taken from the drain's budget while they are in flight.
    pub(super) async fn move_to(
        &self,
        id: &UnitId,
        target: NodeId,
        deadline: Instant,
        drain: Option<DrainShare>,
    ) -> MoveReport {
        let rel = RelocationId(rand::random());
        // Under the relocation target, which a host exports as traces.
        let span = tracing::info_span!(target: "ferry::relocation", "relocation", relocation = %rel, unit = %id, to = %target);
        self.move_in_span(rel, id, target, deadline, drain)
            .instrument(span)
            .await
    }

    async fn move_in_span(
        &self,
        rel: RelocationId,
        id: &UnitId,
        target: NodeId,
        deadline: Instant,
        drain: Option<DrainShare>,
    ) -> MoveReport {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let outgoing = Outgoing {
            unit: id.clone(),
            events: events_tx.clone(),
            target: TargetPhases::default(),
        };
        self.core.moves.outgoing.lock().insert(rel, outgoing);
        let lane = self.core.units.directory.get(id).map(|e| e.lane);
        let mut run = SourceRun {
            ctx: MoveCtx::new(self.clone()),
            lane,
            drain,
            permit: None,
            precopy: self
                .standby_move_to(id, &target)
                .map_or_else(Precopy::new, Precopy::from_standby),
            image: None,
            rel,
            id: id.clone(),
            target: target.clone(),
            machine: SourceMachine::new(
                Instant::now().into_std(),
                deadline.into_std(),
                self.source_timing(),
            ),
            events: events_tx,
            capture: None,
            bindings: BTreeMap::new(),
            prefetched: Vec::new(),
            records: Vec::new(),
            relayed: Vec::new(),
            bytes: 0,
            phases: MovePhases::default(),
            sealed_at: None,
            offered_at: None,
            ready_at: None,
            cut_at: None,
            committed_at: None,
            blocked: None,
        };
        run.go(&mut events).await;
        let reported = self
            .core
            .moves
            .outgoing
            .lock()
            .remove(&rel)
            .map(|o| o.target)
            .unwrap_or_default();
        let report = run.report(reported);
        if report.end != MoveEnd::Moved {
            self.standby_stays(id);
        }
        if report.end == MoveEnd::Undecided {
            tracing::warn!("the store has not said who owns the unit; it is held until it does");
            tokio::spawn(run.settle(events).in_current_span());
        }
        report
    }

    /// How a move from here times its steps: a gateway is waited for as long as the mesh takes
    /// to notice that its link died.
    fn source_timing(&self) -> SourceTiming {
        let timing = SourceTiming::default();
        SourceTiming {
            link_timeout: self
                .config()
                .mesh
                .as_ref()
                .map_or(timing.link_timeout, |mesh| mesh.idle_timeout),
            ..timing
        }
    }
}

/// The per-move metrics: units moved and failed, bytes moved, the S0 -> S1 interruption, and the
/// phases of each move that got through.
fn record_metrics(
    end: &MoveEnd,
    bytes: u64,
    sealed: Option<Instant>,
    cut: Option<Instant>,
    phases: &MovePhases,
) {
    match end {
        MoveEnd::Moved => {
            metrics::counter!("ferry_relocation_units_moved_total").increment(1);
            metrics::counter!("ferry_relocation_bytes_total").increment(bytes);
            for (phase, took) in phases.named() {
                metrics::histogram!("ferry_relocation_phase_seconds", "phase" => phase)
                    .record(took.as_secs_f64());
            }
        }
        _ => metrics::counter!("ferry_relocation_units_failed_total").increment(1),
    }
    if let (Some(s0), Some(s1)) = (sealed, cut) {
        metrics::histogram!("ferry_relocation_interruption_seconds")
            .record(s1.duration_since(s0).as_secs_f64());
    }
}

/// Why a move could not take its units' records.
#[derive(Debug, thiserror::Error)]
enum RecordsFailure {
    /// The store did not answer: the move may be tried again once it does.
    #[error("the location store could not be read: {0}")]
    Store(StoreError),
    /// What the store holds says the unit cannot move from here.
    #[error("{0}")]
    Wrong(String),
}

struct SourceRun {
    /// What the move may touch of its node.
    ctx: MoveCtx,
    /// The unit's lane, held here because the handover removes it from the directory.
    lane: Option<Arc<LaneTx>>,
    /// The drain's seal window and in-flight byte budget, if the move is part of a drain, and
    /// this move's share of the budget.
    drain: Option<DrainShare>,
    permit: Option<OwnedSemaphorePermit>,
    /// What the target holds of the unit's image, and what was sent.
    precopy: Precopy,
    /// The image as sealed, until the target has it: sent whole again if the target lost the
    /// pre-copy it was a difference to.
    image: Option<Bytes>,
    rel: RelocationId,
    id: UnitId,
    target: NodeId,
    machine: SourceMachine,
    /// Where this move's events go: a gateway on this node acknowledges through it.
    events: mpsc::UnboundedSender<SourceEvent>,
    /// The unit as sealed, until it is sent.
    capture: Option<Capture>,
    /// The sessions bound to the unit's Actors, by gateway; `true` once that gateway was told.
    bindings: BTreeMap<NodeId, Vec<(BoundActor, bool)>>,
    /// The records of the units on the lane, read before the seal so that the pause waits for
    /// no store round trip; a stale one only fails the commit's compare-and-swap.
    prefetched: Vec<RecordAt>,
    records: Vec<RecordAt>,
    relayed: Vec<QueuedOp>,
    bytes: u64,
    /// The phases the source measures itself.
    phases: MovePhases,
    sealed_at: Option<Instant>,
    /// When the offer went out, and when the target answered it was ready for the relay.
    offered_at: Option<Instant>,
    ready_at: Option<Instant>,
    cut_at: Option<Instant>,
    committed_at: Option<Instant>,
    /// Why the move failed, where that is known for certain.
    blocked: Option<BlockedReason>,
}

impl SourceRun {
    /// What the move did so far, with the phases the target reported; logged and counted.
    fn report(&self, target: TargetPhases) -> MoveReport {
        let phases = self.phases(target);
        let end = match self.machine.end() {
            Some(end) => end.clone(),
            None if self.machine.fencing() => MoveEnd::Undecided,
            None => MoveEnd::NotSealed("the move did not finish".into()),
        };
        tracing::info!(?end, bytes = self.bytes, "move ended");
        // An undecided move is counted once, when the store has decided it.
        if end != MoveEnd::Undecided {
            record_metrics(&end, self.bytes, self.sealed_at, self.cut_at, &phases);
        }
        let elapsed = |t: Option<Instant>| match (self.sealed_at, t) {
            (Some(s), Some(t)) => Some(t.duration_since(s)),
            _ => None,
        };
        let moved = end == MoveEnd::Moved;
        // A move that stayed because its deadline passed says so, whatever step it was at.
        let deadline_passed = self.machine.deadline_passed();
        let blocked = match self.blocked {
            None if !moved && deadline_passed => Some(BlockedReason::DeadlineExceeded),
            blocked => blocked,
        };
        MoveReport {
            relocation: self.rel,
            unit: self.id.clone(),
            from: self.ctx.id().clone(),
            to: self.target.clone(),
            after_deadline: moved && deadline_passed,
            end,
            bytes: self.bytes,
            copied: self.precopy.copied(),
            interruption: elapsed(self.cut_at),
            pause: elapsed(self.committed_at),
            phases,
            blocked,
        }
    }

    /// The source's phases with the target's, the round trips less what the target spent in them.
    fn phases(&self, target: TargetPhases) -> MovePhases {
        let between = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_duration_since(a),
            _ => Duration::ZERO,
        };
        let reached =
            |end: Option<Instant>, d: Duration| if end.is_some() { d } else { Duration::ZERO };
        // The target's own spans are counted within the source's intervals they fall in: a
        // commit the target began while the source's task had not yet noted its cutover is
        // partly the handover's already, so that the phases stay disjoint parts of the pause.
        let offered = between(self.offered_at, self.ready_at);
        let restore = reached(self.ready_at, target.restore).min(offered);
        let after_cut = between(self.cut_at, self.committed_at);
        let commit = reached(self.committed_at, target.commit).min(after_cut);
        MovePhases {
            transfer: offered - restore,
            restore,
            handover: between(self.ready_at, self.cut_at),
            commit,
            commit_wait: after_cut - commit,
            ..self.phases
        }
    }

    fn lane(&self, control: Control) -> bool {
        self.lane
            .as_ref()
            .is_some_and(|lane| lane.ctl.send(control).is_ok())
    }

    /// Runs the unit on the source again and waits until it does.
    async fn resume(&self) {
        let Some(me) = self.lane.clone() else {
            return;
        };
        let (done, resumed) = oneshot::channel();
        if self.lane(Control::Resume {
            rel: self.rel,
            me,
            done,
        }) {
            let _ = resumed.await;
        }
    }

    /// The move's deadline, as the runtime's clock reads it.
    fn deadline(&self) -> Instant {
        Instant::from_std(self.machine.deadline())
    }

    /// Runs the move until it ends, or until it is undecided at its deadline: pre-copies the
    /// unit while it runs, waits for the drain's window (if any), then seals and moves it.
    async fn go(&mut self, events: &mut mpsc::UnboundedReceiver<SourceEvent>) {
        self.precopy(events).await;
        let pass = self.enter().await;
        let first = match pass {
            Some(_) => self.quiesce().await,
            None => SourceEvent::Deadline,
        };
        self.feed(first).await;
        self.drive(events, false).await;
        if let Some(Some(mut pass)) = pass {
            // Given back here: the window learns how long the unit was paused.
            pass.paused(self.committed_at.zip(self.sealed_at).map(|(c, s)| c - s));
        }
        if self.precopy.left_behind(self.offered_at.is_some())
            && let Err(error) = self.send_precopy(RelocFrame::Withdraw { rel: self.rel })
        {
            tracing::debug!(%error, "withdrawal of the pre-copy not sent");
        }
    }

    /// Waits for the drain's seal window, if the move is part of a drain and its unit seals
    /// where the node says ([`windowed`]); `None` if the deadline passes first. The unit's record
    /// is read first, so that a place in the window holds no store round trip.
    async fn enter(&mut self) -> Option<Option<SealPass>> {
        let Some(gate) = self
            .drain
            .as_ref()
            .filter(|_| windowed(self.waits_for_the_app()))
            .map(|drain| drain.gate.clone())
        else {
            return Some(None);
        };
        self.prefetch(std::slice::from_ref(&self.id.clone())).await;
        tokio::time::timeout_at(self.deadline(), gate.enter())
            .await
            .ok()
            .map(Some)
    }

    /// Ships the unit's image to the target while the unit runs, round after round of what
    /// changed, for as long as the core says it is worth it ([`Precopy::round`]). A move of a
    /// drain waits for its window's leave to copy ahead of the seals before its first snapshot,
    /// which would go stale while it waited (unless it has no pre-copy to do, as a move to the
    /// unit's standby); each round waits for its share of the node's pre-copy budget, and for
    /// the target to say it holds it.
    async fn precopy(&mut self, events: &mut mpsc::UnboundedReceiver<SourceEvent>) {
        let deadline = self.deadline();
        let _copying = match self.drain.as_ref().filter(|_| !self.precopy.is_over()) {
            Some(drain) => {
                let Ok(pass) = tokio::time::timeout_at(deadline, drain.gate.copy()).await else {
                    self.precopy.lost();
                    return;
                };
                Some(pass)
            }
            None => None,
        };
        loop {
            let Some(image) = self.snapshot().await else {
                return;
            };
            let Round::Send {
                round,
                pieces,
                base,
            } = self.precopy.round(image)
            else {
                return;
            };
            let bytes: usize = pieces.iter().map(|(_, piece)| piece.len()).sum();
            // The phase counts the rounds' streaming: from the budget taken to the answer.
            let started = Instant::now();
            let Ok(Ok(_permit)) =
                tokio::time::timeout_at(deadline, self.ctx.precopy_budget(bytes)).await
            else {
                self.precopy.lost();
                return;
            };
            for (offset, bytes) in pieces {
                let frame = RelocFrame::Precopy {
                    rel: self.rel,
                    len: base.len,
                    offset,
                    crc: crc32c::crc32c(&bytes),
                    bytes,
                };
                if self.send_precopy(frame).is_err() {
                    self.precopy.lost();
                    return;
                }
            }
            let end = RelocFrame::PrecopyEnd {
                rel: self.rel,
                round,
                base,
            };
            if self.send_precopy(end).is_err() {
                self.precopy.lost();
                return;
            }
            let step = Instant::now() + self.machine.step();
            loop {
                match tokio::time::timeout_at(step.min(deadline), events.recv()).await {
                    Ok(Some(SourceEvent::PrecopyHeld {
                        round: answered,
                        holds,
                    })) => {
                        self.precopy.answered(answered, holds);
                        if answered == round {
                            self.phases.precopy += started.elapsed();
                            break;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => {
                        self.precopy.lost();
                        return;
                    }
                }
            }
        }
    }

    /// An image of the unit as it runs now, taken by its lane at a turn boundary.
    async fn snapshot(&self) -> Option<Bytes> {
        let (done, image) = oneshot::channel();
        if !self.lane(Control::Snapshot { done }) {
            return None;
        }
        let image = tokio::time::timeout_at(self.deadline(), image)
            .await
            .ok()?
            .ok()??;
        Some(Bytes::from(image))
    }

    /// Feeds the machine what is heard and the times it asks to be woken at; with `settling`,
    /// also past the deadline while the fence is asked, until the store decides.
    async fn drive(&mut self, events: &mut mpsc::UnboundedReceiver<SourceEvent>, settling: bool) {
        while self.machine.end().is_none() && (settling || !self.machine.undecided()) {
            let Some(wake) = self.machine.poll_timeout() else {
                return;
            };
            match tokio::time::timeout_at(Instant::from_std(wake), events.recv()).await {
                Ok(Some(event)) => self.feed(event).await,
                Ok(None) => self.feed(SourceEvent::Silence).await,
                Err(_) => {
                    let actions = self.machine.handle_timeout(Instant::now().into_std());
                    self.carry(actions, Vec::new()).await;
                }
            }
        }
    }

    /// Of these gateways, told to seal and not heard from, those that are gone: no mesh link is
    /// up to them (it broke and does not come back), or the cluster counts them dead.
    fn gone_gateways(&self, unacked: BTreeSet<NodeId>) -> Vec<NodeId> {
        let gone = self.ctx.gone();
        unacked
            .into_iter()
            .filter(|gateway| gateway != self.ctx.id())
            .filter(|gateway| gone(gateway))
            .collect()
    }

    /// Asks the lane for the sessions bound to the unit's Actors (it holds back new binds from
    /// now on), and notes them by gateway.
    async fn quiesce(&mut self) -> SourceEvent {
        let deadline = self.deadline();
        let (done, answer) = oneshot::channel();
        let control = Control::Quiesce {
            rel: self.rel,
            unit: self.id.clone(),
            done,
        };
        if !self.lane(control) {
            return SourceEvent::SealRefused("the unit stopped".into());
        }
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(Ok(quiet))) => {
                self.prefetch(&quiet.units).await;
                let bound = self.note_bindings(quiet.bindings);
                let gateways = told_at_quiesce(bound, self.waits_for_the_app());
                SourceEvent::Quiesced { gateways }
            }
            Ok(Ok(Err(why))) => {
                // In another move (or not open yet): once that ends, it has left or may go.
                self.blocked = Some(BlockedReason::OperationInProgress);
                SourceEvent::SealRefused(why)
            }
            Ok(Err(_)) => SourceEvent::SealRefused("the unit stopped".into()),
            Err(_) => SourceEvent::Deadline,
        }
    }

    /// Reads the records of those of these units not read yet, ahead of the seal. Unread ones are
    /// read after the seal instead, and their error ends the move there.
    async fn prefetch(&mut self, units: &[UnitId]) {
        let unread: Vec<UnitId> = units
            .iter()
            .filter(|id| !self.prefetched.iter().any(|at| at.id == **id))
            .cloned()
            .collect();
        if unread.is_empty() {
            return;
        }
        if let Ok(Ok(records)) =
            tokio::time::timeout_at(self.deadline(), self.read_records(&unread)).await
        {
            self.prefetched.extend(records);
        }
    }

    /// Whether the unit seals only where the application says (`ApplicationSignaled`).
    fn waits_for_the_app(&self) -> bool {
        self.ctx.waits_for_the_app(&self.id)
    }

    /// Adds bindings not seen yet; returns the gateways that have some not yet told to seal.
    fn note_bindings(
        &mut self,
        bindings: impl IntoIterator<Item = (ActorId, SessionBinding)>,
    ) -> BTreeSet<NodeId> {
        for (actor, binding) in bindings {
            let bound = BoundActor {
                actor,
                session: binding.session.session,
                epoch: binding.session.epoch,
            };
            let at = self.bindings.entry(binding.session.gateway).or_default();
            if !at.iter().any(|(b, _)| *b == bound) {
                at.push((bound, false));
            }
        }
        self.bindings
            .iter()
            .filter(|(_, actors)| actors.iter().any(|(_, told)| !told))
            .map(|(gateway, _)| gateway.clone())
            .collect()
    }

    /// Tells these gateways to hold the inputs of the Actors they were not told about yet, for
    /// as long as the move may still take.
    fn seal_gateways(&mut self, gateways: &BTreeSet<NodeId>) {
        let hold = self.deadline().saturating_duration_since(Instant::now());
        for gateway in gateways {
            let Some(at) = self.bindings.get_mut(gateway) else {
                continue;
            };
            let actors: Vec<BoundActor> = at
                .iter_mut()
                .filter(|(_, told)| !*told)
                .map(|(bound, told)| {
                    *told = true;
                    bound.clone()
                })
                .collect();
            let frame = SessionFrame::Seal {
                rel: self.rel,
                actors,
                hold,
            };
            // A gateway on this node acknowledges through `on_session_frame` at once.
            if let Err(error) = self.ctx.to_gateway(gateway, frame) {
                // Not a peer any more (or hopelessly behind): its sessions went with it.
                tracing::warn!(%gateway, %error, "seal not sent; moving without that gateway");
                let _ = self
                    .events
                    .send(SourceEvent::GatewaySealed(gateway.clone()));
            }
        }
    }

    /// Tells every gateway told to seal where the unit's Actors run now.
    fn release_sessions(&self, to: SessionsTo) {
        let owner = match to {
            SessionsTo::Target => Some(self.target.clone()),
            SessionsTo::Source => Some(self.ctx.id().clone()),
        };
        for (gateway, actors) in &self.bindings {
            let actors: Vec<BoundActor> = actors
                .iter()
                .filter(|(_, told)| *told)
                .map(|(bound, _)| bound.clone())
                .collect();
            if actors.is_empty() {
                continue;
            }
            let frame = SessionFrame::Release {
                rel: self.rel,
                actors,
                owner: owner.clone(),
            };
            if let Err(error) = self.ctx.to_gateway(gateway, frame) {
                tracing::warn!(%gateway, %error, "release not sent to a session gateway");
            }
        }
    }

    /// Seals the lane at its next turn boundary and waits for the capture.
    async fn seal_unit(&mut self) -> SourceEvent {
        let asked = Instant::now();
        let deadline = self.deadline();
        let (done, sealed) = oneshot::channel();
        if !self.lane(Control::Seal {
            rel: self.rel,
            done,
        }) {
            return SourceEvent::SealRefused("the unit stopped".into());
        }
        let capture = match tokio::time::timeout_at(deadline, sealed).await {
            Ok(Ok(Ok((capture, sealed_at)))) => {
                // The pause counts from the seal at the lane, its capture and encoding included.
                self.sealed_at = Some(sealed_at);
                self.phases.seal_wait = sealed_at.saturating_duration_since(asked);
                self.phases.capture = sealed_at.elapsed();
                capture
            }
            Ok(Ok(Err(refused))) => {
                self.blocked = Some(match refused {
                    SealRefused::Adapter(_) => BlockedReason::AdapterFailed,
                    // Another move of the unit runs: once it ends, the unit has left or may go.
                    SealRefused::Busy(_) => BlockedReason::OperationInProgress,
                });
                return SourceEvent::SealRefused(refused.to_string());
            }
            Ok(Err(_)) => return SourceEvent::SealRefused("the unit stopped".into()),
            Err(_) => return SourceEvent::Deadline,
        };
        if capture.unit != self.id {
            // An actor of a SpotWide room: the room is the unit.
            self.resume().await;
            return SourceEvent::SealRefused(format!("{} moves with {}", self.id, capture.unit));
        }
        // Actors that joined the unit since it was asked may have sessions of their own.
        let bound: Vec<(ActorId, SessionBinding)> = capture
            .cells
            .iter()
            .filter_map(|cell| match (&cell.id, &cell.binding) {
                (UnitId::Actor(actor), Some(binding)) => Some((actor.clone(), binding.clone())),
                _ => None,
            })
            .collect();
        let late = self.note_bindings(bound);
        self.capture = Some(capture);
        SourceEvent::Captured { late }
    }

    /// Takes the records of every cell (reading those of cells that joined since the quiesce),
    /// then sends the manifest and the chunks: what the target lacks of the image.
    async fn send_capture(&mut self, capture: Capture) -> Result<(), String> {
        let deadline = self.deadline();
        let reading = Instant::now();
        let mut known: HashMap<UnitId, RecordAt> = std::mem::take(&mut self.prefetched)
            .into_iter()
            .map(|at| (at.id.clone(), at))
            .collect();
        let unread: Vec<UnitId> = capture
            .cells
            .iter()
            .filter(|cell| !known.contains_key(&cell.id))
            .map(|cell| cell.id.clone())
            .collect();
        let read = self.read_records(&unread).await.map_err(|failure| {
            if let RecordsFailure::Store(_) = failure {
                self.blocked = Some(BlockedReason::StoreUnavailable);
            }
            failure.to_string()
        })?;
        for at in read {
            known.insert(at.id.clone(), at);
        }
        let records: Vec<RecordAt> = capture
            .cells
            .iter()
            .filter_map(|cell| known.remove(&cell.id))
            .collect();
        self.records = records.clone();
        let encoding = Instant::now();
        self.phases.store_read = encoding.duration_since(reading);
        let image = Bytes::from(capture.into_image().map_err(|e| e.to_string())?);
        let sealed = self.precopy.seal(image.clone(), self.ctx.deltas());
        self.phases.encode = encoding.elapsed();
        self.bytes = sealed.manifest.len;
        let max = self.ctx.max_state();
        if sealed.manifest.len > max {
            return Err(format!(
                "its capture is {} bytes, over this node's max_state of {max}; keep less state in \
                 the unit or raise max_state on every node",
                sealed.manifest.len
            ));
        }
        self.image = Some(image);
        if let Some(drain) = &self.drain {
            let sent: usize = sealed.pieces.iter().map(|(_, piece)| piece.len()).sum();
            let kib = u32::try_from(sent.div_ceil(1024))
                .unwrap_or(u32::MAX)
                .clamp(1, crate::relocation::reports::BUDGET_KIB);
            self.permit = drain.budget.clone().acquire_many_owned(kib).await.ok();
        }
        self.offered_at = Some(Instant::now());
        let offer = RelocFrame::Offer {
            rel: self.rel,
            unit: self.id.clone(),
            records,
            manifest: sealed.manifest,
            within: deadline.saturating_duration_since(Instant::now()),
        };
        self.offer(offer)?;
        self.send_pieces(sealed.pieces)
    }

    /// The target lost the pre-copy the capture was a difference to: sends the whole image.
    fn send_whole(&mut self) -> Result<(), String> {
        let Some(image) = self.image.clone() else {
            return Err("the sealed image is gone".into());
        };
        let sealed = self.precopy.whole(image);
        tracing::info!(
            bytes = sealed.manifest.len,
            "the target lost the pre-copy; sending the whole image"
        );
        self.offer(RelocFrame::Resend {
            rel: self.rel,
            manifest: sealed.manifest,
        })?;
        self.send_pieces(sealed.pieces)
    }

    /// Sends the image's pieces as the offer's chunks, in order.
    fn send_pieces(&mut self, pieces: Vec<(u64, Bytes)>) -> Result<(), String> {
        for (index, (offset, bytes)) in pieces.into_iter().enumerate() {
            self.offer(RelocFrame::Chunk {
                rel: self.rel,
                index: index as u32,
                offset,
                bytes,
            })?;
        }
        Ok(())
    }

    /// Sends a frame of the offer. One the link does not take (it is down, or backlogged) makes
    /// the target unavailable for now: a drain tries the unit again while it has time.
    fn offer(&mut self, frame: RelocFrame) -> Result<(), String> {
        let sent = self.send(frame);
        if sent.is_err() {
            self.blocked = self.blocked.or(Some(BlockedReason::TargetUnavailable));
        }
        sent
    }

    /// Reads these units' authority records, all at once, and checks that each names this node.
    async fn read_records(&self, ids: &[UnitId]) -> Result<Vec<RecordAt>, RecordsFailure> {
        let reads = ids.iter().map(|id| async move {
            let key = unit_key(id);
            let found = self
                .ctx
                .store()
                .get(&key)
                .await
                .map_err(RecordsFailure::Store)?;
            let Some(v) = found else {
                return Err(RecordsFailure::Wrong(format!(
                    "{id} has no authority record"
                )));
            };
            let record = crate::cluster::authority::UnitRecord::decode(&key, &v.value)
                .map_err(|e| RecordsFailure::Wrong(e.to_string()))?;
            if record.owner != *self.ctx.id() {
                return Err(RecordsFailure::Wrong(format!(
                    "{id} is recorded on {}, not here",
                    record.owner
                )));
            }
            Ok(RecordAt {
                id: id.clone(),
                record,
                version: v.version,
            })
        });
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .collect()
    }

    fn send(&self, frame: RelocFrame) -> Result<(), String> {
        self.ctx
            .to_target(&self.target, frame)
            .map_err(|e| format!("the target is unreachable: {e}"))
    }

    /// Sends one of pre-copy's own frames, on the link's bulk stream
    /// ([`MoveCtx::precopy_to_target`]).
    fn send_precopy(&self, frame: RelocFrame) -> Result<(), String> {
        self.ctx
            .precopy_to_target(&self.target, frame)
            .map_err(|e| format!("the target is unreachable: {e}"))
    }

    /// Feeds an event and carries out the actions, feeding back their results until none is left.
    async fn feed(&mut self, event: SourceEvent) {
        self.carry(Vec::new(), vec![event]).await;
    }

    /// Carries out `actions`, then feeds back their results and `pending`, until none is left.
    async fn carry(&mut self, actions: Vec<SourceAction>, mut pending: Vec<SourceEvent>) {
        for action in actions {
            if let Some(next) = self.act(action).await {
                pending.push(next);
            }
        }
        while let Some(event) = pending.pop() {
            match &event {
                SourceEvent::RelayReady => {
                    self.ready_at = Some(Instant::now());
                    // The target holds the image: it is never sent again.
                    self.image = None;
                }
                SourceEvent::Committed => self.committed_at = Some(Instant::now()),
                SourceEvent::Refused(refusal) => {
                    let reason = match refusal.because {
                        RefusedBecause::NotServing => Some(BlockedReason::TargetUnavailable),
                        RefusedBecause::StateIncompatible => Some(BlockedReason::StateIncompatible),
                        RefusedBecause::Busy => Some(BlockedReason::OperationInProgress),
                        RefusedBecause::Other => None,
                    };
                    self.blocked = self.blocked.or(reason);
                }
                // The target gave the unit back (it began to drain or stop, or heard no cutover):
                // another target may take it.
                SourceEvent::Aborted(_) => {
                    self.blocked = self.blocked.or(Some(BlockedReason::TargetUnavailable));
                }
                _ => {}
            }
            for action in self.machine.on(event, Instant::now().into_std()) {
                if let Some(next) = self.act(action).await {
                    pending.push(next);
                }
            }
        }
    }

    async fn act(&mut self, action: SourceAction) -> Option<SourceEvent> {
        let rel = self.rel;
        match action {
            SourceAction::SealGateways(gateways) => {
                self.seal_gateways(&gateways);
                None
            }
            SourceAction::CheckGateways(unacked) => {
                for gateway in self.gone_gateways(unacked) {
                    tracing::warn!(%gateway, unit = %self.id, "session gateway gone (its link broke or its lease lapsed): its sessions went with it; moving without it");
                    let _ = self.events.send(SourceEvent::GatewaySealed(gateway));
                }
                None
            }
            SourceAction::SealUnit => Some(self.seal_unit().await),
            SourceAction::ReleaseSessions(to) => {
                self.release_sessions(to);
                None
            }
            SourceAction::SendCapture => {
                let capture = self.capture.take()?;
                match self.send_capture(capture).await {
                    Ok(()) => None,
                    Err(why) => Some(SourceEvent::Refused(Refusal::other(why))),
                }
            }
            SourceAction::SendWhole => match self.send_whole() {
                Ok(()) => None,
                Err(why) => Some(SourceEvent::Refused(Refusal::other(why))),
            },
            SourceAction::Withdraw => {
                // Unsent means the link is down: the offer is lost with it, nothing is staged.
                if let Err(error) = self.send(RelocFrame::Withdraw { rel }) {
                    tracing::debug!(%error, "withdrawal not sent");
                }
                None
            }
            SourceAction::CancelSeal => {
                self.lane(Control::CancelSeal { rel });
                None
            }
            SourceAction::Handover => {
                let (done, relayed) = oneshot::channel();
                let target = self.target.clone();
                if !self.lane(Control::Handover { rel, target, done }) {
                    return Some(SourceEvent::Silence);
                }
                self.relayed = relayed.await.unwrap_or_default();
                self.cut_at = Some(Instant::now());
                None
            }
            SourceAction::ResendHandover => {
                self.ctx.handover(&self.target, rel).again(&self.relayed);
                None
            }
            SourceAction::Resume => {
                self.resume().await;
                None
            }
            SourceAction::Release => {
                self.lane(Control::Release { rel });
                None
            }
            SourceAction::FenceReclaim { wait } => Some(self.fence(wait).await),
        }
    }

    /// Goes on asking the store, past the deadline, until it says whether the reclaim won, then
    /// carries out the end of the move. The unit is held (it runs nowhere) until then.
    async fn settle(mut self, mut events: mpsc::UnboundedReceiver<SourceEvent>) {
        self.drive(&mut events, true).await;
        let report = self.report(TargetPhases::default());
        let event = match report.end {
            MoveEnd::Moved => RelocationEvent::UnitMoved(Box::new(report)),
            ref end => RelocationEvent::UnitFailed {
                unit: report.unit.clone(),
                reason: format!("{end:?} once the store answered, after the deadline"),
            },
        };
        self.ctx.emit(event);
    }

    /// The conditional write that decides, after the point of no return, who owns the unit:
    /// gated on every record being as the source read it before the move.
    ///
    /// A conflict means the record changed; the core says whether it changed hands (the target
    /// committed, or the unit was rebuilt or came back by another move) or is stale (an earlier
    /// fence that landed unseen): then the conditions take what the store holds now.
    async fn fence(&mut self, wait: Duration) -> SourceEvent {
        match self.fence_write(wait).await {
            SourceEvent::FenceLost => self
                .reread_records()
                .await
                .unwrap_or(SourceEvent::FenceUnknown),
            decided => decided,
        }
    }

    /// Reads the unit's records again, as the store confirms them, and lets the core judge the
    /// conflict ([`fence_conflict`]); a stale fence takes the records as they stand now for its
    /// next try. `Err` if the store cannot be read.
    async fn reread_records(&mut self) -> Result<SourceEvent, ()> {
        let mut now = Vec::with_capacity(self.records.len());
        for at in &self.records {
            let key = unit_key(&at.id);
            let found = self.ctx.store().get_confirmed(&key).await.map_err(|_| ())?;
            let read = found
                .map(|v| {
                    crate::cluster::authority::UnitRecord::decode(&key, &v.value)
                        .map(|record| (record, v.version))
                })
                .transpose()
                .map_err(|_| ())?;
            now.push(read);
        }
        let pairs = self.records.iter().zip(&now);
        let verdict = fence_conflict(
            self.ctx.id(),
            pairs.map(|(at, now)| (&at.record, now.as_ref().map(|(record, _)| record))),
        );
        if verdict == SourceEvent::FenceStale {
            for (at, (record, version)) in self.records.iter_mut().zip(now.into_iter().flatten()) {
                at.record = record;
                at.version = version;
            }
        }
        Ok(verdict)
    }

    async fn fence_write(&self, wait: Duration) -> SourceEvent {
        let mut conditions = Vec::with_capacity(self.records.len());
        let mut ops = Vec::with_capacity(self.records.len());
        for at in &self.records {
            let key = unit_key(&at.id);
            let record = at.record.fenced();
            conditions.push(Condition::version(key.clone(), at.version));
            ops.push(Op::put(key, record.encode()));
        }
        // A source whose lease was superseded fences nothing: it must not run the unit again.
        conditions.push(Condition::lease(&self.ctx.lease()));
        let write = self.ctx.store().batch(conditions, ops);
        match tokio::time::timeout(wait, write).await {
            Ok(Ok(BatchOutcome::Committed { .. })) => SourceEvent::FenceWon,
            // Nothing was written, and nothing says the target won: this node's lease lapsed
            // (an outage) or was taken. Asked again once it is taken again; if it was taken by
            // another process, this one stops meanwhile.
            Ok(Ok(refused)) if refused.lease_refused(self.ctx.id()) => {
                tracing::warn!(
                    "fence write refused: the store does not hold this node's lease; asking again"
                );
                SourceEvent::FenceUnknown
            }
            Ok(Ok(BatchOutcome::Conflict { .. })) => SourceEvent::FenceLost,
            Ok(Err(error)) => {
                tracing::warn!(%error, "fence write failed; asking again");
                SourceEvent::FenceUnknown
            }
            Err(_) => SourceEvent::FenceUnknown,
        }
    }
}
