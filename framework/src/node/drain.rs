//! Host operations: drain every unit off this node (planned maintenance or a rolling update),
//! with a deadline, a status stream, events and metrics.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ferry_core::drain::{Batch, Decision, Drain, Ended, Found, IN_FLIGHT, safe_to_shutdown};
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::handle::Node;
use super::sealing::SealGate;
use crate::cluster::authority::NodeState;
use crate::error::ResumeError;
use crate::ids::UnitId;
use crate::relocation::protocol::MoveEnd;
use crate::relocation::reports::{
    BUDGET_KIB, BlockedReason, HostStatus, MoveReport, RelocateMode, RelocateOptions,
    RelocateOutcome, RelocationEvent,
};
use crate::unit::cell::AnyFactory;
use crate::unit::factory::{ExecutionMode, FactoryKind, PolicyKind};

/// A unit's factory, as the directory keeps it.
type Factory = Arc<dyn AnyFactory<Node>>;

/// What the moves of one drain share: the window of units sealed at once, and the budget of
/// bytes in flight after the seal.
#[derive(Clone)]
pub(super) struct DrainShare {
    pub gate: Arc<SealGate>,
    pub budget: Arc<Semaphore>,
}

impl Node {
    /// Follows the host status (progress of a drain, SafeToShutdown).
    pub fn watch_status(&self) -> watch::Receiver<HostStatus> {
        self.core.host.status.subscribe()
    }

    /// Follows relocation events from now on.
    pub fn relocation_events(&self) -> broadcast::Receiver<RelocationEvent> {
        self.core.host.events.subscribe()
    }

    pub(super) fn emit(&self, event: RelocationEvent) {
        let _ = self.core.host.events.send(event);
    }

    /// Moves every relocatable unit off this node before `options.deadline`. A second call with
    /// the same options joins the first; with other options it is `Blocked(OperationInProgress)`.
    pub async fn relocate(&self, options: RelocateOptions) -> RelocateOutcome {
        let done = {
            let mut running = self.core.host.running.lock();
            if let Some((current, outcome)) = &*running {
                if *current != options {
                    return blocked(BlockedReason::OperationInProgress, Vec::new());
                }
                Err(outcome.clone())
            } else {
                match self.state() {
                    NodeState::Serving | NodeState::Relocated => {}
                    NodeState::Draining | NodeState::Stopped => {
                        return blocked(BlockedReason::ShutdownRequested, Vec::new());
                    }
                    _ => return blocked(BlockedReason::RuntimeNotReady, Vec::new()),
                }
                let (tx, rx) = watch::channel(None);
                *running = Some((options.clone(), rx));
                Ok(tx)
            }
        };
        match done {
            Err(mut joined) => match joined.wait_for(Option::is_some).await {
                Ok(outcome) => outcome
                    .clone()
                    .unwrap_or_else(|| blocked(BlockedReason::RelocationFailed, Vec::new())),
                Err(_) => blocked(BlockedReason::RelocationFailed, Vec::new()),
            },
            Ok(tx) => {
                // Under the relocation target, which a host exports as traces.
                let span = tracing::info_span!(target: "ferry::relocation", "drain", node = %self.id(), mode = ?options.mode);
                let outcome = self.drain(&options).instrument(span).await;
                tracing::info!(?outcome, "drain ended");
                self.emit(RelocationEvent::Completed(outcome.clone()));
                let _ = tx.send(Some(outcome.clone()));
                *self.core.host.running.lock() = None;
                outcome
            }
        }
    }

    /// The other nodes that are drained (`Relocated`) as this node last read the cluster: those
    /// `resume` would bring back to take units.
    pub fn drained_peers(&self) -> Vec<crate::ids::NodeId> {
        self.cluster_view()
            .into_iter()
            .filter(|d| d.node != *self.id() && d.state == NodeState::Relocated)
            .map(|d| d.node)
            .collect()
    }

    /// Puts a drained node back into service: a `Relocated` node serves again and takes units
    /// (placement, moves, recovery), as it did before its drain. A node that serves already stays
    /// as it is. The cluster hears of it at once, or at the next membership refresh if the store
    /// cannot be reached now.
    pub async fn resume(&self) -> Result<(), ResumeError> {
        {
            // Under the drain's lock, so no drain starts or ends meanwhile.
            let running = self.core.host.running.lock();
            match self.state() {
                NodeState::Serving => return Ok(()),
                NodeState::Relocated if running.is_none() => self.set_state(NodeState::Serving),
                NodeState::Relocating | NodeState::Relocated => {
                    return Err(ResumeError::Draining {
                        node: self.id().clone(),
                    });
                }
                state => {
                    return Err(ResumeError::Ended {
                        node: self.id().clone(),
                        state,
                    });
                }
            }
        }
        tracing::info!(node = %self.id(), "back in service after a drain");
        self.publish_status(|_| {});
        if let Err(error) = self.refresh_membership().await {
            tracing::warn!(%error, "back in service; the store hears of it at the next refresh");
        }
        Ok(())
    }

    fn publish_status(&self, edit: impl FnOnce(&mut HostStatus)) {
        let state = self.state();
        let safe = safe_to_shutdown(state, self.unit_count(), self.may_arrive());
        self.core.host.status.send_modify(|s| {
            edit(s);
            s.state = state;
            s.safe_to_shutdown = safe;
        });
    }

    /// Runs the core's [`Drain`]: takes the inventory (again after each round, so units that
    /// arrive meanwhile join it), starts the moves it decides, feeds back how each ended, and
    /// reports as it goes.
    async fn drain(&self, options: &RelocateOptions) -> RelocateOutcome {
        let deadline = Instant::now() + options.deadline;
        let version = match &options.mode {
            RelocateMode::PlannedMaintenance => None,
            RelocateMode::RollingUpdate { target_version } => Some(target_version.clone()),
        };
        // A fresh count before the state says a drain runs, so no reader mixes two drains' counts.
        self.core.host.status.send_modify(|s| {
            *s = HostStatus {
                total: 0,
                moved: 0,
                failed: 0,
                bytes: 0,
                ..s.clone()
            }
        });
        self.set_state(NodeState::Relocating);
        // Moves into this node that have not reached their commit go back to their sources: a
        // draining node takes no units, and those still committing join the inventory once open.
        self.stop_arrivals();
        let mut plan = Drain::new(self.id().clone(), version, deadline.into_std(), IN_FLIGHT);
        // Tell the cluster first, so no new unit is placed here.
        if let Err(reason) = self.refresh_until(deadline).await {
            tracing::warn!(%reason, "store unreachable; drain blocked");
            self.set_state(NodeState::Serving);
            let stayed = self.with_members(self.inventory().iter().map(|f| &f.unit));
            return blocked(BlockedReason::StoreUnavailable, stayed);
        }
        let share = DrainShare {
            gate: Arc::default(),
            budget: Arc::new(Semaphore::new(BUDGET_KIB as usize)),
        };
        let mut moves = JoinSet::new();
        let mut started = false;
        let mut refreshed = Instant::now();
        loop {
            // Arrivals first, then the inventory: a move into the node that opens in between is
            // then counted as arriving or found, never neither.
            let arriving = self.may_arrive();
            let now = Instant::now().into_std();
            if plan.inventory_due(arriving, now, self.config().refresh) {
                for found in self.inventory() {
                    if let Some(decision) = plan.found(found) {
                        self.carry_out(decision, &mut moves, deadline, &share);
                    }
                }
                plan.inventoried(now);
            }
            plan.arriving(arriving);
            plan.lapsed(self.core.cluster.suspected.read().len());
            self.publish_status(|s| s.total = plan.total());
            if !started {
                started = true;
                self.emit(RelocationEvent::Started {
                    units: plan.total(),
                });
            }
            if self.state() != NodeState::Relocating {
                // A shutdown began: what is left closes with the node.
                plan.stopping();
            }
            let view = self.cluster_view();
            let hosted = |unit: &UnitId| self.here_or_moving(unit);
            let now = Instant::now().into_std();
            for decision in plan.next(now, &view, hosted, self.store_reachable()) {
                self.carry_out(decision, &mut moves, deadline, &share);
            }
            if plan.done(Instant::now().into_std()) {
                break;
            }
            // Wait for a move to end, or look again soon: a node of the right kind may come up,
            // the store may answer again, a move into this node may open.
            let now = Instant::now();
            let retry = plan
                .next_try()
                .map(|at| Instant::from_std(at).saturating_duration_since(now));
            let wait = self
                .config()
                .refresh
                .min(retry.unwrap_or(Duration::MAX))
                .min(deadline.saturating_duration_since(now));
            tokio::select! {
                Some(joined) = moves.join_next() => {
                    if let Ok((unit, report)) = joined {
                        self.ended(&mut plan, &unit, report, &mut moves, deadline, &share);
                    }
                }
                () = tokio::time::sleep(wait) => {
                    // A unit's retry pause wakes the loop sooner; the store is read once a period.
                    if refreshed.elapsed() >= self.config().refresh {
                        refreshed = Instant::now();
                        let _ = tokio::time::timeout_at(deadline, self.refresh_membership()).await;
                    }
                }
            }
            while let Some(Ok((unit, report))) = moves.try_join_next() {
                self.ended(&mut plan, &unit, report, &mut moves, deadline, &share);
            }
        }
        tracing::info!(
            window = share.gate.limit(),
            "units sealed at once at the drain's end"
        );
        if self.state() != NodeState::Relocating {
            plan.stopping();
        }
        let (stays, outcome) = plan.finish(|unit| self.members_of(unit));
        for decision in stays {
            self.carry_out(decision, &mut moves, deadline, &share);
        }
        if let RelocateOutcome::Blocked {
            reason: BlockedReason::NoServingPeer,
            ..
        } = &outcome
        {
            self.say_nowhere_to_go();
        }
        let next = match outcome {
            RelocateOutcome::Relocated { .. } => NodeState::Relocated,
            _ => NodeState::Serving,
        };
        // A shutdown that began meanwhile owns the state from then on.
        if self.state() == NodeState::Relocating {
            self.set_state(next);
        }
        let _ = tokio::time::timeout_at(
            deadline.max(Instant::now() + self.config().refresh),
            self.refresh_membership(),
        )
        .await;
        self.publish_status(|_| {});
        outcome
    }

    /// How many moves into this node may still open here, and whether units an earlier process
    /// of this id left may still be taken back.
    fn may_arrive(&self) -> usize {
        self.arriving() + usize::from(self.adopting())
    }

    /// Whether `unit` runs here, or is in a move from here that has not ended (it may come back).
    fn here_or_moving(&self, unit: &UnitId) -> bool {
        self.core.units.directory.get(unit).is_some()
            || self
                .core
                .moves
                .outgoing
                .lock()
                .values()
                .any(|o| o.unit == *unit)
    }

    fn adopting(&self) -> bool {
        self.core
            .ownership
            .adopting
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Logs, once, that no other node serves, naming the drained nodes that could be brought
    /// back to take the units.
    fn say_nowhere_to_go(&self) {
        let drained: Vec<String> = self
            .drained_peers()
            .iter()
            .map(ToString::to_string)
            .collect();
        if drained.is_empty() {
            tracing::warn!(
                "no other node serves, so nothing can take this node's units; start a node to                  drain to, or stopping this one ends its units and their state is lost"
            );
        } else {
            tracing::warn!(
                drained = %drained.join(","),
                "no other node serves, so nothing can take this node's units; `ferry resume`                  brings a drained node back to take them, or stopping this one ends its units                  and their state is lost"
            );
        }
    }

    /// Carries out one of the drain's decisions.
    fn carry_out(
        &self,
        decision: Decision,
        moves: &mut JoinSet<(UnitId, MoveReport)>,
        deadline: Instant,
        share: &DrainShare,
    ) {
        match decision {
            Decision::Move { unit, to } => {
                let node = self.clone();
                let share = share.clone();
                moves.spawn(async move {
                    let report = node.move_to(&unit, to, deadline, Some(share)).await;
                    (unit, report)
                });
            }
            Decision::Moved { .. } | Decision::Held { .. } => {}
            Decision::Again { unit, reason } => {
                tracing::info!(%unit, ?reason, "move not made; tried again");
            }
            Decision::Left { unit, size } => {
                tracing::info!(%unit, "left this node by another move while the drain ran");
                let total = self.core.host.status.borrow().total;
                self.publish_status(|s| s.total = total.saturating_sub(size));
            }
            Decision::Stays {
                unit,
                size,
                reason,
                why,
            } => {
                let ends = matches!(reason, BlockedReason::ShutdownRequested);
                if ends {
                    tracing::warn!(%unit, why, "unit not moved; it closes with the node");
                } else {
                    tracing::warn!(%unit, why, "unit not moved; it runs on here");
                }
                // Never sent, or sent and not taken: counted here.
                metrics::counter!("ferry_relocation_units_failed_total").increment(size as u64);
                self.publish_status(|s| s.failed += size);
                self.emit(RelocationEvent::UnitFailed { unit, reason: why });
            }
        }
    }

    /// Feeds a move that ended to the drain and reports it.
    fn ended(
        &self,
        plan: &mut Drain,
        unit: &UnitId,
        report: MoveReport,
        moves: &mut JoinSet<(UnitId, MoveReport)>,
        deadline: Instant,
        share: &DrainShare,
    ) {
        let result = match report.end {
            MoveEnd::Moved => Ended::Moved,
            MoveEnd::Undecided => Ended::Undecided,
            _ => Ended::NotMoved(report.blocked),
        };
        let hosted = self.here_or_moving(unit);
        let decision = plan.ended(unit, result, Instant::now().into_std(), hosted);
        match &decision {
            Decision::Moved { size, .. } => {
                let (size, bytes) = (*size, report.bytes);
                self.publish_status(|s| {
                    s.moved += size;
                    s.bytes += bytes;
                });
                self.emit(RelocationEvent::UnitMoved(Box::new(report)));
            }
            Decision::Held { size, .. } => {
                tracing::warn!(%unit, relocation = %report.relocation, "unit held until the store says whether it moved");
                let size = *size;
                self.publish_status(|s| s.failed += size);
                self.emit(RelocationEvent::UnitFailed {
                    unit: unit.clone(),
                    reason: "past the point of no return at the deadline, and the store has not \
                             said who owns it: held until it does"
                        .into(),
                });
            }
            Decision::Stays { .. } => {
                tracing::warn!(%unit, end = ?report.end, relocation = %report.relocation, "move not made");
            }
            _ => {}
        }
        self.carry_out(decision, moves, deadline, share);
    }

    /// The units that share `unit`'s lane now, itself excluded.
    fn members_of(&self, unit: &UnitId) -> Vec<UnitId> {
        let Some(entry) = self.core.units.directory.get(unit) else {
            return Vec::new();
        };
        self.core
            .units
            .directory
            .all()
            .into_iter()
            .filter(|(id, e)| id != unit && Arc::ptr_eq(&e.lane, &entry.lane))
            .map(|(id, _)| id)
            .collect()
    }

    /// `units` with the units that share their lanes now, each once, in order.
    fn with_members<'a>(&self, units: impl Iterator<Item = &'a UnitId>) -> Vec<UnitId> {
        let mut seen = HashSet::new();
        let mut named = Vec::new();
        for unit in units {
            for id in std::iter::once(unit.clone()).chain(self.members_of(unit)) {
                if seen.insert(id.clone()) {
                    named.push(id);
                }
            }
        }
        named
    }

    /// Publishes this node's state, retrying until the store answers or the deadline passes;
    /// no call outlives the deadline.
    async fn refresh_until(&self, deadline: Instant) -> Result<(), String> {
        loop {
            match tokio::time::timeout_at(deadline, self.refresh_membership()).await {
                Ok(Ok(())) => return Ok(()),
                Err(_) => return Err("the deadline passed".into()),
                Ok(Err(error)) if Instant::now() + Duration::from_millis(100) >= deadline => {
                    return Err(error.to_string());
                }
                Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The units this node hosts, one per lane (a room's spot for a room), with what the drain
    /// needs to know of each.
    fn inventory(&self) -> Vec<Found> {
        // A unit staged by a move into this node joins once that move opened it here.
        let staged: HashSet<UnitId> = self
            .core
            .moves
            .incoming
            .lock()
            .values()
            .flat_map(|staging| staging.records.iter().map(|at| at.id.clone()))
            .collect();
        let mut by_lane: HashMap<usize, Vec<(UnitId, Factory)>> = HashMap::new();
        for (id, entry) in self.core.units.directory.all() {
            if staged.contains(&id) {
                continue;
            }
            let key = Arc::as_ptr(&entry.lane) as usize;
            by_lane.entry(key).or_default().push((id, entry.factory));
        }
        by_lane
            .into_values()
            .filter_map(|ids| {
                let size = ids.len();
                let spot = ids.iter().find(|(id, _)| matches!(id, UnitId::Spot(_)));
                let (unit, factory) = spot.or(ids.first())?.clone();
                let info = factory.info();
                let standby = self.standby_aimed_at(&unit);
                let batch = match info.kind {
                    FactoryKind::UserSpot(ExecutionMode::PerActor) => Batch::Shell,
                    FactoryKind::Actor => Batch::Actor,
                    _ => Batch::Room,
                };
                Some(Found {
                    unit,
                    size,
                    factory: info.type_name.to_string(),
                    batch,
                    relocatable: info.policy != PolicyKind::Disabled,
                    standby,
                })
            })
            .collect()
    }
}

fn blocked(reason: BlockedReason, stayed: Vec<UnitId>) -> RelocateOutcome {
    RelocateOutcome::Blocked { reason, stayed }
}
