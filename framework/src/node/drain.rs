//! Host operations: drain every unit off this node (planned maintenance or a rolling update),
//! with a deadline, a status stream, events and metrics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use super::handle::Node;
use crate::cluster::authority::NodeState;
use crate::error::ResumeError;
use crate::ids::{NodeId, UnitId};
use crate::relocation::protocol::MoveEnd;
use crate::relocation::reports::{
    BUDGET_KIB, BlockedReason, HostStatus, MoveError, MoveReport, RelocateMode, RelocateOptions,
    RelocateOutcome, RelocationEvent,
};
use crate::unit::factory::{ExecutionMode, FactoryKind, PolicyKind};

/// How many moves a drain runs at once.
const IN_FLIGHT: usize = 128;

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
        let units = self.unit_count();
        self.core.host.status.send_modify(|s| {
            edit(s);
            s.state = state;
            s.safe_to_shutdown =
                units == 0 && matches!(state, NodeState::Relocated | NodeState::Stopped);
        });
    }

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
        // Tell the cluster first, so no new unit is placed here.
        if let Err(reason) = self.refresh_until(deadline).await {
            tracing::warn!(%reason, "store unreachable; drain blocked");
            self.set_state(NodeState::Serving);
            return blocked(BlockedReason::StoreUnavailable, self.inventory());
        }
        let units = self.inventory();
        // Counted as `unit_count` counts: a room moves with its members, and each is a unit.
        let lanes = self.lanes();
        let moving_with = |unit: &UnitId| lanes.get(unit).map_or(1, |m| m.len());
        let total = units.iter().map(moving_with).sum();
        self.publish_status(|s| s.total = total);
        self.emit(RelocationEvent::Started { units: total });

        let mut stayed: Vec<(UnitId, BlockedReason)> = Vec::new();
        let mut movable = Vec::new();
        for unit in units {
            match self.core.directory.get(&unit) {
                Some(e) if e.factory.info().policy == PolicyKind::Disabled => {
                    self.not_moved(&unit, moving_with(&unit), "RelocationPolicy::Disabled");
                    stayed.push((unit, BlockedReason::RelocationDisabled));
                }
                Some(_) => movable.push(unit),
                None => {}
            }
        }

        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        let budget = Arc::new(Semaphore::new(BUDGET_KIB as usize));
        let mut planned: BTreeMap<NodeId, u64> = BTreeMap::new();
        let mut moves = JoinSet::new();
        let mut undecided = Vec::new();
        // Units with a target start at once; the others wait (for a node of the right kind to
        // come up, or for the store to answer) without holding back the rest, each with the
        // reason it would stay for.
        let mut waiting: Vec<(UnitId, BlockedReason)> = movable
            .into_iter()
            .map(|unit| (unit, BlockedReason::TargetUnavailable))
            .collect();
        loop {
            let mut still = Vec::new();
            for (unit, _) in std::mem::take(&mut waiting) {
                let target = match self.pick_spread(&unit, version.as_deref(), &planned) {
                    Ok(target) => target,
                    Err(MoveError::NoTarget { .. }) => {
                        still.push((unit, BlockedReason::TargetUnavailable));
                        continue;
                    }
                    Err(MoveError::StoreUnavailable { .. }) => {
                        still.push((unit, BlockedReason::StoreUnavailable));
                        continue;
                    }
                    // A shutdown began: what is left closes with the node.
                    Err(MoveError::NotServing { .. }) => {
                        self.not_moved(&unit, moving_with(&unit), "the node began shutting down");
                        stayed.push((unit, BlockedReason::ShutdownRequested));
                        continue;
                    }
                    // Gone or stopped meanwhile: nothing to move.
                    Err(_) => continue,
                };
                *planned.entry(target.clone()).or_default() += 1;
                let Ok(Ok(slot)) =
                    tokio::time::timeout_at(deadline, slots.clone().acquire_owned()).await
                else {
                    self.not_moved(
                        &unit,
                        moving_with(&unit),
                        "the deadline passed before it could start",
                    );
                    stayed.push((unit, BlockedReason::DeadlineExceeded));
                    continue;
                };
                let node = self.clone();
                let budget = budget.clone();
                let count = moving_with(&unit);
                moves.spawn(async move {
                    let report = node.move_to(&unit, target, deadline, Some(budget)).await;
                    drop(slot);
                    (unit, count, report)
                });
                // Collect what finished meanwhile, so progress is reported as it goes.
                while let Some(Ok(ended)) = moves.try_join_next() {
                    self.account(ended, deadline, &mut still, &mut stayed, &mut undecided);
                }
            }
            waiting = still;
            let shutting_down = self.state() != NodeState::Relocating;
            let nothing_left = waiting.is_empty() && moves.is_empty();
            if nothing_left || Instant::now() >= deadline || shutting_down {
                break;
            }
            // Maybe a node of the right kind is on its way, or the store answers again: look
            // again soon, and report the moves that end meanwhile (one that may succeed on
            // another try waits with the others).
            let wait = self.config().refresh.min(deadline - Instant::now());
            let look_again = tokio::time::sleep(wait);
            tokio::pin!(look_again);
            loop {
                tokio::select! {
                    () = &mut look_again, if !waiting.is_empty() => break,
                    Some(joined) = moves.join_next() => {
                        if let Ok(ended) = joined {
                            self.account(ended, deadline, &mut waiting, &mut stayed, &mut undecided);
                        }
                    }
                    else => break,
                }
            }
            let _ = self.refresh_membership().await;
        }
        // The deadline passed or a shutdown began: the moves still running end on their own.
        while let Some(joined) = moves.join_next().await {
            if let Ok(ended) = joined {
                self.account(ended, deadline, &mut waiting, &mut stayed, &mut undecided);
            }
        }
        let shutting_down = self.state() != NodeState::Relocating;
        for (unit, reason) in waiting {
            let (why, reason) = match reason {
                _ if shutting_down => (
                    "the node began shutting down",
                    BlockedReason::ShutdownRequested,
                ),
                BlockedReason::StoreUnavailable => (
                    "the location store did not answer in time",
                    BlockedReason::StoreUnavailable,
                ),
                reason => ("no serving node can take it", reason),
            };
            self.not_moved(&unit, moving_with(&unit), why);
            stayed.push((unit, reason));
        }
        // Every unit that stayed is named, a room's members with it.
        let stayed_units = self.with_members(stayed.iter().map(|(u, _)| u));
        let outcome = if !undecided.is_empty() {
            RelocateOutcome::Undecided {
                units: undecided,
                stayed: stayed_units,
            }
        } else if self.state() != NodeState::Relocating {
            // A shutdown began (perhaps before the inventory was taken): it closes what is left.
            blocked(BlockedReason::ShutdownRequested, stayed_units)
        } else if stayed.is_empty() {
            RelocateOutcome::Relocated {
                moved: self.core.host.status.borrow().moved,
            }
        } else {
            blocked(main_reason(&stayed), stayed_units)
        };
        let next = match outcome {
            RelocateOutcome::Relocated { .. } => NodeState::Relocated,
            _ => NodeState::Serving,
        };
        // A shutdown that began meanwhile owns the state from then on.
        if self.state() == NodeState::Relocating {
            self.set_state(next);
        }
        let _ = self.refresh_membership().await;
        self.publish_status(|_| {});
        outcome
    }

    /// A unit that stays: counted as failed (with its members), named in the log at the default
    /// level, and told on the event stream.
    fn not_moved(&self, unit: &UnitId, count: usize, reason: &str) {
        tracing::warn!(%unit, reason, "unit not moved; it runs on here");
        // Never sent, so no move's own metrics count it: counted here.
        metrics::counter!("ferry_relocation_units_failed_total").increment(count as u64);
        self.publish_status(|s| s.failed += count);
        self.emit(RelocationEvent::UnitFailed {
            unit: unit.clone(),
            reason: reason.to_owned(),
        });
    }

    /// Every hosted unit with the units that share its lane and move with it (a room and its
    /// members), itself included.
    fn lanes(&self) -> HashMap<UnitId, Arc<Vec<UnitId>>> {
        let mut by_lane: HashMap<usize, Vec<UnitId>> = HashMap::new();
        let all = self.core.directory.all();
        for (id, entry) in &all {
            let key = Arc::as_ptr(&entry.lane) as usize;
            by_lane.entry(key).or_default().push(id.clone());
        }
        let mut lanes = HashMap::new();
        for ids in by_lane.into_values() {
            let ids = Arc::new(ids);
            for id in ids.iter() {
                lanes.insert(id.clone(), ids.clone());
            }
        }
        lanes
    }

    /// `units` with the units that share their lanes now, each once, in order.
    fn with_members<'a>(&self, units: impl Iterator<Item = &'a UnitId>) -> Vec<UnitId> {
        let lanes = self.lanes();
        let mut seen = HashSet::new();
        let mut named = Vec::new();
        for unit in units {
            let members = lanes.get(unit).map(|m| m.as_slice()).unwrap_or_default();
            for id in std::iter::once(unit).chain(members) {
                if seen.insert(id.clone()) {
                    named.push(id.clone());
                }
            }
        }
        named
    }

    /// Reports a move that ended. One that met an unreachable store or a target that took no
    /// units goes back to `waiting`, while the drain has time, to be tried again.
    fn account(
        &self,
        (unit, count, report): (UnitId, usize, MoveReport),
        deadline: Instant,
        waiting: &mut Vec<(UnitId, BlockedReason)>,
        stayed: &mut Vec<(UnitId, BlockedReason)>,
        undecided: &mut Vec<UnitId>,
    ) {
        match &report.end {
            MoveEnd::Moved => {
                let bytes = report.bytes;
                self.publish_status(|s| {
                    s.moved += count;
                    s.bytes += bytes;
                });
                self.emit(RelocationEvent::UnitMoved(Box::new(report)));
            }
            MoveEnd::Undecided => {
                tracing::warn!(%unit, relocation = %report.relocation, "unit held until the store says whether it moved");
                self.publish_status(|s| s.failed += count);
                self.emit(RelocationEvent::UnitFailed {
                    unit: unit.clone(),
                    reason: "past the point of no return at the deadline, and the store has not \
                             said who owns it: held until it does"
                        .into(),
                });
                undecided.push(unit);
            }
            end => {
                // The move says why where it knows (a refusal, the store, the deadline).
                let reason = report.blocked.unwrap_or(BlockedReason::RelocationFailed);
                let retryable = matches!(
                    reason,
                    BlockedReason::StoreUnavailable | BlockedReason::TargetUnavailable
                );
                let still_here = self.core.directory.get(&unit).is_some();
                if retryable
                    && still_here
                    && Instant::now() < deadline
                    && self.state() == NodeState::Relocating
                {
                    tracing::info!(%unit, ?reason, ?end, relocation = %report.relocation, "move not made; tried again");
                    waiting.push((unit, reason));
                    return;
                }
                tracing::warn!(%unit, ?reason, ?end, relocation = %report.relocation, "unit not moved; it runs on here");
                self.publish_status(|s| s.failed += count);
                self.emit(RelocationEvent::UnitFailed {
                    unit: unit.clone(),
                    reason: format!("{end:?}"),
                });
                stayed.push((unit, reason));
            }
        }
    }

    /// Like `pick_target`, spreading a drain's units evenly: what this drain already sent to a node
    /// counts as load there.
    fn pick_spread(
        &self,
        unit: &UnitId,
        version: Option<&str>,
        planned: &BTreeMap<NodeId, u64>,
    ) -> Result<NodeId, MoveError> {
        // Validate as a single move would (hosted here, not disabled).
        self.pick_target(unit, None, version)?;
        let Some(entry) = self.core.directory.get(unit) else {
            return Err(MoveError::NotHosted { id: unit.clone() });
        };
        let type_name = entry.factory.info().type_name.to_string();
        let view: Vec<_> = self
            .cluster_view()
            .into_iter()
            .filter(|d| d.node != *self.id())
            .map(|mut d| {
                d.units += planned.get(&d.node).copied().unwrap_or(0);
                d
            })
            .collect();
        crate::cluster::placement::place(&view, &type_name, version).ok_or_else(|| {
            MoveError::NoTarget {
                id: unit.clone(),
                reason: "no serving node with room".into(),
            }
        })
    }

    /// Publishes this node's state, retrying until the store answers or the deadline passes.
    async fn refresh_until(&self, deadline: Instant) -> Result<(), String> {
        loop {
            match self.refresh_membership().await {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() + Duration::from_millis(100) >= deadline => {
                    return Err(error.to_string());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The units this node hosts, one id per unit, in the order a drain moves them: PerActor spot
    /// shells, then actors, then rooms and Instance Spots.
    fn inventory(&self) -> Vec<UnitId> {
        let mut by_lane: Vec<(usize, Vec<(UnitId, FactoryKind)>)> = Vec::new();
        for (id, entry) in self.core.directory.all() {
            let key = Arc::as_ptr(&entry.lane) as usize;
            let kind = entry.factory.info().kind;
            match by_lane.iter_mut().find(|(k, _)| *k == key) {
                Some((_, ids)) => ids.push((id, kind)),
                None => by_lane.push((key, vec![(id, kind)])),
            }
        }
        let mut units: Vec<(u8, UnitId)> = by_lane
            .into_iter()
            .filter_map(|(_, ids)| {
                let spot = ids.iter().find(|(id, _)| matches!(id, UnitId::Spot(_)));
                let (id, kind) = spot.or(ids.first())?.clone();
                let batch = match kind {
                    FactoryKind::UserSpot(ExecutionMode::PerActor) => 0,
                    FactoryKind::Actor => 1,
                    _ => 2,
                };
                Some((batch, id))
            })
            .collect();
        units.sort();
        units.into_iter().map(|(_, id)| id).collect()
    }
}

fn blocked(reason: BlockedReason, stayed: Vec<UnitId>) -> RelocateOutcome {
    RelocateOutcome::Blocked { reason, stayed }
}

/// The reason that says most about why units stayed: the deadline, then missing targets, then
/// the rest.
fn main_reason(stayed: &[(UnitId, BlockedReason)]) -> BlockedReason {
    const ORDER: [BlockedReason; 7] = [
        BlockedReason::ShutdownRequested,
        BlockedReason::DeadlineExceeded,
        BlockedReason::TargetUnavailable,
        BlockedReason::AdapterFailed,
        BlockedReason::StateIncompatible,
        BlockedReason::RelocationFailed,
        BlockedReason::RelocationDisabled,
    ];
    ORDER
        .into_iter()
        .find(|r| stayed.iter().any(|(_, s)| s == r))
        .unwrap_or(BlockedReason::RelocationFailed)
}
