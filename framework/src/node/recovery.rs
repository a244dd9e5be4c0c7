//! Crash recovery: when a node's lease lapses it is dead to the cluster, and one deterministic
//! survivor (the coordinator: the serving node with the lowest id) brings its units back.
//!
//! One scan of the store collects the dead node's units and counts every survivor's. Relocatable
//! units are rebuilt fresh on the survivors by a balanced fill that fills no node past its
//! capacity; each rebuild is a conditional write gated on the record still naming the dead node,
//! so a repeated or resumed pass (a successor coordinator) does nothing twice. A rebuild that
//! fails, or finds no room, leaves the record naming the dead node, and the next pass (every
//! refresh period, while any record names a dead node) retries it.
//! A room comes back with its members: the fill places the room as one unit, and each Actor whose
//! record names it as its spot is rebuilt on the room's node and joins it again (its callbacks run
//! as for any join; its state, like the room's, starts fresh). A member whose room is not rebuilt
//! comes back on its own, its record naming no spot.
//! Units that are not recoverable, and Instance Spots that are not remembered, have their ids freed
//! instead (an Instance Spot comes back on its next message). Units force-stopped at a drain's
//! deadline are rebuilt the same way. Remembered units are also brought back after a cold start of
//! the whole cluster.
//!
//! The plan (the census of records, the fill, rooms with their members, who coordinates) is pure,
//! in `ferry_core::recovery`; this module reads the store, asks it, and carries it out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use ferry_core::recovery::{
    Census, Found, NamedRecords, Promote, census, coordinator, earlier_process_stopped,
    forgets_descriptor, left_by_earlier_process, plan_node,
};
use ferry_core::standby::promotion::Named;
use tokio::sync::broadcast;

use super::handle::Node;
use super::units::Claim;
use crate::cluster::authority::{
    NODE_PREFIX, NodeDescriptor, NodeState, REMEMBERED_PREFIX, STANDBY_PREFIX, UNIT_PREFIX,
    UnitRecord, node_key, standby_key, unit_of_key, unit_of_remembered_key, unit_of_standby_key,
};
use crate::cluster::frames::{Call, CreateAnswer};
use crate::cluster::recovery::{RecoveryEvent, RecoveryStall};
use crate::error::UnitError;
use crate::ids::{NodeId, SpotId, UnitId};
use crate::store::{Condition, Op, StoreError, Versioned};
use crate::unit::factory::FactoryKind;

/// The stall when every live node is drained or stopping: none coordinates recovery.
const NO_SERVING_NODE: &str = "no live node is serving (every one is drained, stopping or \
    failed), so none can rebuild them: put a drained node back into service (`ferry resume`) \
    or start a node";

/// The stall when serving nodes are there but none can take some unit.
const NO_ROOM: &str = "no serving node that registers their factories has room: start one, or \
    raise `capacity`, or put a drained node back into service (`ferry resume`)";

/// What one dead node's pass could not place.
#[derive(Debug, Default)]
struct Unplaced {
    /// Units no serving node had room (or the factory) for.
    no_room: usize,
    /// Actors set aside for the next pass: their room was promoted in this one.
    deferred: usize,
}

/// Where a pass has placed units so far: how many each live node runs, and where each room runs.
struct Placed<'a> {
    tally: &'a mut BTreeMap<NodeId, u64>,
    spots: &'a mut BTreeMap<SpotId, NodeId>,
}

impl Placed<'_> {
    /// `id` runs on `node` now.
    fn took(&mut self, id: &UnitId, node: NodeId) {
        *self.tally.entry(node.clone()).or_default() += 1;
        if let UnitId::Spot(spot) = id {
            self.spots.insert(spot.clone(), node);
        }
    }
}

/// The most records read per page.
const PAGE: usize = 1024;

impl Node {
    /// Follows recovery events from now on.
    pub fn recovery_events(&self) -> broadcast::Receiver<RecoveryEvent> {
        self.core.cluster.recovery.subscribe()
    }

    fn recovery_event(&self, event: RecoveryEvent) {
        tracing::info!(?event, "recovery");
        let _ = self.core.cluster.recovery.send(event);
    }

    /// Why recovery waits now, as this node last saw it: `None` when it does not (or when this
    /// node is neither the coordinator nor sees that there is none).
    pub fn recovery_stall(&self) -> Option<RecoveryStall> {
        self.core.cluster.recovery_stall.lock().clone()
    }

    /// Records why recovery waits (or that it no longer does): a warning in the log and an event
    /// when that changes, nothing while it stays the same.
    fn set_recovery_stall(&self, stall: Option<RecoveryStall>) {
        let mut current = self.core.cluster.recovery_stall.lock();
        if *current == stall {
            return;
        }
        *current = stall.clone();
        drop(current);
        match stall {
            Some(stall) => {
                let dead: Vec<String> = stall.dead.iter().map(ToString::to_string).collect();
                let units = stall
                    .units
                    .map_or("their units".to_owned(), |n| format!("{n} of their units"));
                tracing::warn!(
                    dead = %dead.join(","),
                    "recovery waits: {units} cannot be rebuilt: {}",
                    stall.reason
                );
                let _ = self
                    .core
                    .cluster
                    .recovery
                    .send(RecoveryEvent::Waiting(stall));
            }
            None => {
                tracing::warn!("recovery no longer waits");
                let _ = self.core.cluster.recovery.send(RecoveryEvent::Unblocked);
            }
        }
    }

    /// On a node that does not coordinate recovery: notes whether recovery waits because no
    /// live node serves (so none coordinates) while dead nodes' records remain.
    pub(crate) fn check_recovery_can_run(&self) {
        let dead = self.core.cluster.dead.read().clone();
        let serving = self
            .cluster_view()
            .iter()
            .any(|d| d.state == NodeState::Serving);
        if !dead.is_empty() && !serving {
            self.set_recovery_stall(Some(RecoveryStall {
                dead,
                units: None,
                reason: NO_SERVING_NODE.to_owned(),
            }));
        } else {
            // Some node coordinates now: what waits is its to say.
            self.set_recovery_stall(None);
        }
    }

    /// Switches recovery on or off for one unit, over its factory's and the system's default: a unit
    /// that is not recoverable is stopped with its node and its id freed.
    pub async fn set_recoverable(
        &self,
        id: &UnitId,
        recoverable: bool,
    ) -> Result<(), crate::error::UnitError> {
        let key = crate::cluster::authority::unit_key(id);
        let unavailable = |e: StoreError| crate::error::UnitError::StoreUnavailable {
            what: format!("setting recovery for {id}"),
            reason: e.to_string(),
        };
        // A concurrent write (a move, say) changes the version: read again and retry.
        for _ in 0..8 {
            let Some(current) = self.store().get(&key).await.map_err(unavailable)? else {
                return Err(crate::error::UnitError::UnknownId { id: id.clone() });
            };
            let mut record =
                UnitRecord::decode(&key, &current.value).map_err(|e| unavailable(e.into()))?;
            record.recoverable = recoverable;
            let written = self
                .store()
                .batch(
                    vec![Condition::version(key.clone(), current.version)],
                    vec![Op::put(key.clone(), record.encode())],
                )
                .await
                .map_err(unavailable)?;
            if let crate::store::BatchOutcome::Committed { .. } = written {
                return Ok(());
            }
        }
        Err(crate::error::UnitError::Unavailable {
            what: format!("setting recovery for {id}"),
            reason: "its record kept changing; retry".into(),
        })
    }

    /// Whether this node coordinates recovery: the serving node with the lowest id.
    pub fn is_coordinator(&self) -> bool {
        self.state() == NodeState::Serving && coordinator(&self.cluster_view()) == Some(self.id())
    }

    /// Runs recovery now, if this node is the coordinator: rebuilds or frees the units of dead
    /// nodes, and brings back remembered units that no node hosts. Idempotent.
    pub async fn recover_now(&self) -> Result<(), StoreError> {
        // A pass that promoted rooms set their members aside: the next one, at once, rebuilds any
        // the copies did not hold (their rooms run again by then).
        if self.recovery_pass().await? {
            self.recovery_pass().await?;
        }
        Ok(())
    }

    /// One recovery pass; says whether it set members of promoted rooms aside.
    async fn recovery_pass(&self) -> Result<bool, StoreError> {
        if !self.is_coordinator() {
            return Ok(false);
        }
        if !self.store_reachable() {
            return Err(StoreError::Unavailable {
                reason: "this node's lease is not confirmed by the store; recovery waits".into(),
            });
        }
        let records = self.unit_records().await?;
        let live: BTreeSet<NodeId> = self.cluster_view().into_iter().map(|d| d.node).collect();
        let suspected: BTreeSet<NodeId> =
            self.core.cluster.suspected.read().iter().cloned().collect();
        let Census {
            mut tally,
            mut spots,
            orphans,
            recorded,
        } = census(records, &live, &suspected, self.id());
        let named = if orphans.is_empty() {
            NamedRecords::new()
        } else {
            self.standby_records().await?
        };
        let mut stalled = Vec::new();
        let mut waiting = 0;
        let mut deferred = false;
        for (dead, units) in orphans {
            let mut placed = Placed {
                tally: &mut tally,
                spots: &mut spots,
            };
            let failed = self
                .recover_node(dead.clone(), units, &named, &mut placed)
                .await;
            deferred |= failed.deferred > 0;
            if failed.no_room > 0 {
                stalled.push(dead);
                waiting += failed.no_room;
            }
        }
        self.set_recovery_stall((!stalled.is_empty()).then(|| RecoveryStall {
            dead: stalled,
            units: Some(waiting),
            reason: NO_ROOM.to_owned(),
        }));
        self.bring_back_remembered(&recorded).await?;
        self.forget_dead_descriptors().await?;
        Ok(deferred)
    }

    /// Every standby record in the store, by room, with its version.
    async fn standby_records(&self) -> Result<NamedRecords, StoreError> {
        let records = self.scan_values(STANDBY_PREFIX).await?.into_iter();
        Ok(records
            .filter_map(|(key, value)| {
                let id = unit_of_standby_key(&key)?;
                let named = Named::decode(&key, &value.value).ok()?;
                Some((id, (named, value.version)))
            })
            .collect())
    }

    /// Whether a unit's factory keeps a standby, so that starting it from nothing is reported.
    fn keeps_standby(&self, found: &Found) -> bool {
        self.core
            .factory(&found.record.factory)
            .is_some_and(|f| f.info().standby.keeps_standby())
    }

    /// Every unit record in the store.
    async fn unit_records(&self) -> Result<Vec<Found>, StoreError> {
        let records = self.scan_values(UNIT_PREFIX).await?.into_iter();
        Ok(records
            .filter_map(|(key, value)| {
                let id = unit_of_key(&key)?;
                let record = UnitRecord::decode(&key, &value.value).ok()?;
                Some(Found {
                    id,
                    record,
                    version: value.version,
                })
            })
            .collect())
    }

    /// Whether recovery frees a unit's id instead of rebuilding it: it is not recoverable, or an
    /// Instance Spot that is not remembered (it comes back on its next message).
    fn freed_on_recovery(&self, record: &UnitRecord) -> bool {
        let lazy_instance = self
            .core
            .factory(&record.factory)
            .is_some_and(|f| f.info().kind == FactoryKind::InstanceSpot && !f.info().remembered);
        !record.recoverable || lazy_instance
    }

    /// Takes back the units an earlier process of this node id left (it crashed and this one
    /// started, or this start superseded it): their records name this node, which the cluster
    /// takes for live, so no coordinator rebuilds them. Once that process certainly runs no turns
    /// (this process took its lease over at `took_over`), each is rebuilt here fresh, or its id
    /// freed, as recovery would; looked at again every refresh period while any is left.
    pub(crate) async fn adopt_left_units(
        self,
        took_over: tokio::time::Instant,
        first_generation: u64,
    ) {
        let stopped = earlier_process_stopped(took_over.into_std(), &self.config().witness_times());
        let mut wait = tokio::time::sleep_until(stopped.into());
        loop {
            tokio::select! {
                () = self.core.stop.cancelled() => return,
                () = wait => {}
            }
            match self.adopt_pass(first_generation).await {
                Ok(0) => {
                    self.core.ownership.adopting.store(false, Ordering::Release);
                    return;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "units of an earlier process of this node not read; looking again")
                }
            }
            wait = tokio::time::sleep(self.config().refresh);
        }
    }

    /// One look at what an earlier process of this node left: how many units it found left. Told
    /// as a recovery of this node id's units.
    async fn adopt_pass(&self, first_generation: u64) -> Result<usize, StoreError> {
        let records = self.unit_records().await?;
        let left = left_by_earlier_process(records, self.id(), first_generation);
        let found = left.len();
        if found == 0 {
            return Ok(0);
        }
        let me = Some(self.id().clone());
        self.recovery_event(RecoveryEvent::Started { dead: me.clone() });
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        for Found {
            id,
            record,
            version,
        } in left
        {
            let result = if self.freed_on_recovery(&record) {
                self.free_own_id(&id, version)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                let claim = Claim::Adopt {
                    version,
                    previous: record,
                };
                match self.rebuild_here(id.clone(), claim).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("its record changed meanwhile".to_owned()),
                    Err(error) => Err(error.to_string()),
                }
            };
            match result {
                Ok(()) => done.push(id),
                Err(reason) => {
                    tracing::warn!(unit = %id, %reason, "not taken back from an earlier process of this node; the next look retries");
                    failed.push(id);
                }
            }
        }
        if !done.is_empty() {
            self.recovery_event(RecoveryEvent::Completed {
                dead: me.clone(),
                ids: done,
            });
        }
        if !failed.is_empty() {
            self.recovery_event(RecoveryEvent::Failed {
                dead: me,
                ids: failed,
            });
        }
        Ok(found)
    }

    /// Frees the id of a unit an earlier process of this node left, while its record is as read.
    async fn free_own_id(&self, id: &UnitId, version: u64) -> Result<(), StoreError> {
        let key = crate::cluster::authority::unit_key(id);
        let conditions = vec![
            Condition::version(key.clone(), version),
            Condition::lease(&self.lease()),
        ];
        self.store()
            .batch(conditions, vec![Op::delete(key)])
            .await
            .map(|_| ())
    }

    /// Rebuilds or frees one dead node's units, as the core's plan says: rooms first, then the
    /// Actors their records name as members, on whichever node their room runs by then.
    async fn recover_node(
        &self,
        dead: NodeId,
        units: Vec<Found>,
        named: &NamedRecords,
        placed: &mut Placed<'_>,
    ) -> Unplaced {
        let mut unplaced = Unplaced::default();
        self.recovery_event(RecoveryEvent::Started {
            dead: Some(dead.clone()),
        });
        let freed = |record: &UnitRecord| self.freed_on_recovery(record);
        let keeps = |found: &Found| self.keeps_standby(found);
        let view = self.cluster_view();
        let plan = plan_node(
            units,
            freed,
            &view,
            placed.tally,
            placed.spots,
            named,
            keeps,
        );
        let mut done = Vec::new();
        let mut failed = Vec::new();
        unplaced.deferred = plan.deferred.len();
        for (id, why) in plan.fresh {
            tracing::warn!(unit = %id, %why, "room rebuilt from nothing");
            self.recovery_event(RecoveryEvent::FromNothing {
                dead: Some(dead.clone()),
                id,
                why,
            });
        }
        // Side by side: each is one call to its holder and one write, and a crash that leaves a
        // thousand rooms should not queue their promotions one behind the other.
        let promotions = plan.promote.into_iter().map(|promote| async move {
            let id = promote.room.id.clone();
            let holder = promote.holder.clone();
            (id, holder, self.promote_on(promote).await)
        });
        let mut promoted = Vec::new();
        for (id, holder, result) in futures_util::future::join_all(promotions).await {
            match result {
                Ok(()) => {
                    placed.took(&id, holder);
                    promoted.push(id);
                }
                Err(reason) => {
                    tracing::warn!(unit = %id, %holder, %reason, "promotion failed; the next pass retries");
                    failed.push(id);
                }
            }
        }
        if !promoted.is_empty() {
            self.recovery_event(RecoveryEvent::Promoted {
                dead: Some(dead.clone()),
                ids: promoted,
            });
        }
        for found in plan.free {
            match self
                .free_id(&found.id, &found.record.owner, found.version)
                .await
            {
                Ok(()) => done.push(found.id),
                Err(_) => failed.push(found.id),
            }
        }
        for found in plan.unplaced {
            tracing::warn!(unit = %found.id, factory = %found.record.factory, "no serving node with this factory has room; the next pass retries: start one or raise capacity");
            unplaced.no_room += 1;
            failed.push(found.id);
        }
        for (
            Found {
                id,
                record,
                version,
            },
            target,
        ) in plan.rebuild
        {
            match self.rebuild_on(&target, &id, record, version).await {
                Ok(()) => {
                    placed.took(&id, target);
                    done.push(id);
                }
                Err(reason) => {
                    tracing::warn!(unit = %id, %target, %reason, "rebuild failed; the next pass retries");
                    failed.push(id);
                }
            }
        }
        for Found {
            id,
            record,
            version,
        } in plan.members
        {
            let Some(target) = record
                .spot
                .as_ref()
                .and_then(|s| placed.spots.get(s))
                .cloned()
            else {
                // Its room was not rebuilt in this pass: the next pass places both.
                tracing::warn!(unit = %id, "waits for its room to be rebuilt; the next pass retries");
                failed.push(id);
                continue;
            };
            match self.rebuild_on(&target, &id, record, version).await {
                Ok(()) => {
                    placed.took(&id, target);
                    done.push(id);
                }
                Err(reason) => {
                    tracing::warn!(unit = %id, %target, %reason, "rebuild failed; the next pass retries");
                    failed.push(id);
                }
            }
        }
        if !done.is_empty() {
            self.recovery_event(RecoveryEvent::Completed {
                dead: Some(dead.clone()),
                ids: done,
            });
        }
        if !failed.is_empty() {
            self.recovery_event(RecoveryEvent::Failed {
                dead: Some(dead),
                ids: failed,
            });
        }
        unplaced
    }

    /// Rebuilds a unit on `target`, gated on its record still being the dead owner's.
    async fn rebuild_on(
        &self,
        target: &NodeId,
        id: &UnitId,
        previous: UnitRecord,
        version: u64,
    ) -> Result<(), String> {
        let owner_descriptor = self.core.cluster.witness.dead_at(&previous.owner);
        let result = if target == self.id() {
            self.recover_here(id.clone(), version, previous, owner_descriptor)
                .await
        } else {
            let call = Call::Recover {
                id: id.clone(),
                version,
                previous,
                owner_descriptor,
            };
            self.call::<CreateAnswer>(target, call)
                .await
                .and_then(|answer| answer)
        };
        result.map(|_| ()).map_err(|e| e.to_string())
    }

    /// Promotes a room's standby copy on its holder, gated on its record still being the dead
    /// owner's and on the standby record recovery read. A holder that answers it has no copy that
    /// may be promoted has its standby record removed (while it is the one read), so that the
    /// next pass rebuilds the room from nothing and says why.
    async fn promote_on(&self, promote: Promote) -> Result<(), String> {
        let Promote {
            room,
            holder,
            series,
            standby_version,
        } = promote;
        let Found {
            id,
            record: previous,
            version,
        } = room;
        let owner_descriptor = self.core.cluster.witness.dead_at(&previous.owner);
        let result = if holder == *self.id() {
            self.promote_here(
                id.clone(),
                version,
                previous,
                owner_descriptor,
                series,
                standby_version,
            )
            .await
        } else {
            let call = Call::Promote {
                id: id.clone(),
                version,
                previous,
                owner_descriptor,
                series,
                standby_version,
            };
            self.call::<CreateAnswer>(&holder, call)
                .await
                .and_then(|answer| answer)
        };
        match result {
            Ok(true) => Ok(()),
            Ok(false) => Err("its record changed meanwhile".to_owned()),
            Err(UnitError::NoStandbyCopy { why, .. }) => {
                let key = standby_key(&id);
                let conditions = vec![
                    Condition::version(key.clone(), standby_version),
                    Condition::lease(&self.lease()),
                ];
                let forgot = self.store().batch(conditions, vec![Op::delete(key)]).await;
                Err(format!(
                    "{why} (standby record {})",
                    if forgot.is_ok() {
                        "removed"
                    } else {
                        "not removed yet"
                    }
                ))
            }
            Err(error) => Err(error.to_string()),
        }
    }

    /// Frees the id of a unit that is not rebuilt, while its record still names the dead node and
    /// that node's descriptor is as it was when it was taken for dead.
    async fn free_id(&self, id: &UnitId, owner: &NodeId, version: u64) -> Result<(), StoreError> {
        let key = crate::cluster::authority::unit_key(id);
        let dead_at = self.core.cluster.witness.dead_at(owner);
        let owner_condition = Condition::as_read(node_key(owner), dead_at);
        self.store()
            .batch(
                vec![
                    Condition::version(key.clone(), version),
                    owner_condition,
                    Condition::lease(&self.lease()),
                ],
                vec![Op::delete(key)],
            )
            .await
            .map(|_| ())
    }

    /// After a cold start: remembered units that no node hosts are created again, where placement
    /// puts them.
    async fn bring_back_remembered(&self, recorded: &BTreeSet<UnitId>) -> Result<(), StoreError> {
        let remembered = self.scan_values(REMEMBERED_PREFIX).await?;
        let missing: Vec<(UnitId, String)> = remembered
            .into_iter()
            .filter_map(|(key, value)| {
                let id = unit_of_remembered_key(&key)?;
                let factory = String::from_utf8(value.value.to_vec()).ok()?;
                (!recorded.contains(&id)).then_some((id, factory))
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.recovery_event(RecoveryEvent::Started { dead: None });
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        for (id, factory) in missing {
            let result = match &id {
                UnitId::Spot(spot) => match self.core.factory(&factory).map(|f| f.info().kind) {
                    Some(FactoryKind::InstanceSpot) => {
                        self.activate_remembered(&factory, spot).await
                    }
                    _ => self.get_or_create_spot(&factory, spot).await.map(|_| ()),
                },
                UnitId::Actor(actor) => self.create_actor(&factory, actor).await,
            };
            match result {
                Ok(()) | Err(crate::error::UnitError::AlreadyExists { .. }) => done.push(id),
                Err(error) => {
                    tracing::warn!(unit = %id, %error, "remembered unit not brought back yet");
                    failed.push(id);
                }
            }
        }
        if !done.is_empty() {
            self.recovery_event(RecoveryEvent::Completed {
                dead: None,
                ids: done,
            });
        }
        if !failed.is_empty() {
            self.recovery_event(RecoveryEvent::Failed {
                dead: None,
                ids: failed,
            });
        }
        Ok(())
    }

    /// Activates a remembered Instance Spot where placement puts it.
    async fn activate_remembered(
        &self,
        factory: &str,
        spot: &crate::ids::SpotId,
    ) -> Result<(), crate::error::UnitError> {
        let target = crate::cluster::placement::place(&self.cluster_view(), factory, None)
            .unwrap_or_else(|| self.id().clone());
        self.activate_on(&target, factory, spot).await.map(|_| ())
    }

    /// Removes the descriptors of dead nodes that no record names any more (see
    /// `forgets_descriptor`: never one written since the membership read).
    async fn forget_dead_descriptors(&self) -> Result<(), StoreError> {
        let records = self.scan_values(UNIT_PREFIX).await?;
        let owners: BTreeSet<NodeId> = records
            .iter()
            .filter_map(|(k, v)| UnitRecord::decode(k, &v.value).ok())
            .map(|r| r.owner)
            .collect();
        for (key, value) in self.scan_values(NODE_PREFIX).await? {
            let Ok(descriptor) = NodeDescriptor::decode(&key, &value.value) else {
                continue;
            };
            let dead_at = self.core.cluster.witness.dead_at(&descriptor.node);
            if !forgets_descriptor(value.version, dead_at, owners.contains(&descriptor.node)) {
                continue;
            }
            let key = node_key(&descriptor.node);
            self.store()
                .batch(
                    vec![Condition::version(key.clone(), value.version)],
                    vec![Op::delete(key)],
                )
                .await?;
        }
        Ok(())
    }

    /// Every key and value under a prefix, page by page.
    async fn scan_values(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, StoreError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store().scan(prefix, after.as_deref(), PAGE).await?;
            all.extend(page.items);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }
}
