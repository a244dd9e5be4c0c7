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

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::broadcast;

use super::authority::{
    NODE_PREFIX, NodeDescriptor, REMEMBERED_PREFIX, UNIT_PREFIX, UnitRecord, node_key, unit_of_key,
    unit_of_remembered_key,
};
use super::frames::{Call, CreateAnswer};
use crate::ids::{NodeId, SpotId, UnitId};
use crate::node::{Node, NodeState};
use crate::registry::FactoryKind;
use crate::store::{Condition, Op, StoreError, Versioned};

/// What recovery does, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryEvent {
    /// A pass started for a dead node (`None`: remembered units after a cold start).
    Started {
        /// The dead node.
        dead: Option<NodeId>,
    },
    /// These units were rebuilt on survivors (or freed, if not recoverable).
    Completed {
        /// The dead node.
        dead: Option<NodeId>,
        /// The units dealt with.
        ids: Vec<UnitId>,
    },
    /// These units could not be rebuilt in this pass; the next pass retries them.
    Failed {
        /// The dead node.
        dead: Option<NodeId>,
        /// The units still waiting.
        ids: Vec<UnitId>,
    },
    /// Recovery waits: dead nodes' units cannot be rebuilt until something changes (the stall
    /// says what). Told once when it starts waiting, and again if the reason changes.
    Waiting(RecoveryStall),
    /// Recovery no longer waits: what it waited for is there (or nothing is left to recover).
    Unblocked,
}

/// Why recovery cannot rebuild dead nodes' units now, and what would let it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryStall {
    /// The dead nodes whose units wait.
    pub dead: Vec<NodeId>,
    /// How many units wait, when the coordinator counted them (`None` when no node serves to
    /// coordinate recovery, so none counted).
    pub units: Option<usize>,
    /// What is missing, and what to do about it, in a sentence.
    pub reason: String,
}

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
}

/// The most records read per page.
const PAGE: usize = 1024;

/// A survivor as the fill sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survivor {
    /// The units it hosts.
    pub units: u64,
    /// The most units it takes (its `NodeConfig::capacity`).
    pub capacity: u64,
}

/// How many orphans each survivor gets: the emptiest are raised to a common level, the remainder
/// goes one each to the emptiest, ties broken by node id. No survivor is filled past its capacity:
/// orphans that fit nowhere get no share, and a later pass retries them. Pure, so every
/// coordinator computes the same plan from the same tally.
pub fn balanced_fill(
    survivors: &BTreeMap<NodeId, Survivor>,
    orphans: u64,
) -> BTreeMap<NodeId, u64> {
    let mut share: BTreeMap<NodeId, u64> = survivors.keys().map(|n| (n.clone(), 0)).collect();
    for _ in 0..orphans {
        // The emptiest survivor with room now (units plus its share so far); ties by node id.
        let Some(node) = survivors
            .iter()
            .map(|(n, s)| (n, s.units + share.get(n).copied().unwrap_or(0), s.capacity))
            .filter(|(_, load, capacity)| load < capacity)
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(b.0)))
            .map(|(n, _, _)| n.clone())
        else {
            break;
        };
        *share.entry(node).or_default() += 1;
    }
    share
}

impl Node {
    /// Follows recovery events from now on.
    pub fn recovery_events(&self) -> broadcast::Receiver<RecoveryEvent> {
        self.core.recovery.subscribe()
    }

    fn recovery_event(&self, event: RecoveryEvent) {
        tracing::info!(?event, "recovery");
        let _ = self.core.recovery.send(event);
    }

    /// Why recovery waits now, as this node last saw it: `None` when it does not (or when this
    /// node is neither the coordinator nor sees that there is none).
    pub fn recovery_stall(&self) -> Option<RecoveryStall> {
        self.core.recovery_stall.lock().clone()
    }

    /// Records why recovery waits (or that it no longer does): a warning in the log and an event
    /// when that changes, nothing while it stays the same.
    fn set_recovery_stall(&self, stall: Option<RecoveryStall>) {
        let mut current = self.core.recovery_stall.lock();
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
                let _ = self.core.recovery.send(RecoveryEvent::Waiting(stall));
            }
            None => {
                tracing::warn!("recovery no longer waits");
                let _ = self.core.recovery.send(RecoveryEvent::Unblocked);
            }
        }
    }

    /// On a node that does not coordinate recovery: notes whether recovery waits because no
    /// live node serves (so none coordinates) while dead nodes' records remain.
    pub(crate) fn check_recovery_can_run(&self) {
        let dead = self.core.dead.read().clone();
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
        let key = super::authority::unit_key(id);
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
        self.state() == NodeState::Serving
            && self
                .cluster_view()
                .iter()
                .filter(|d| d.state == NodeState::Serving)
                .map(|d| &d.node)
                .min()
                == Some(self.id())
    }

    /// Runs one recovery pass now, if this node is the coordinator: rebuilds or frees the units of
    /// dead nodes, and brings back remembered units that no node hosts. Idempotent.
    pub async fn recover_now(&self) -> Result<(), StoreError> {
        if !self.is_coordinator() {
            return Ok(());
        }
        if !self.store_reachable() {
            return Err(StoreError::Unavailable {
                reason: "this node's lease is not confirmed by the store; recovery waits".into(),
            });
        }
        let records = self.scan_values(UNIT_PREFIX).await?;
        // Units of a node whose lease lapsed but whom the mesh does not confirm dead are left
        // alone: it may still run them.
        let live: BTreeSet<NodeId> = self.cluster_view().into_iter().map(|d| d.node).collect();
        let suspected: BTreeSet<NodeId> = self.core.suspected.read().iter().cloned().collect();
        let mut tally: BTreeMap<NodeId, u64> = BTreeMap::new();
        let mut orphans: BTreeMap<NodeId, Vec<(UnitId, UnitRecord, u64)>> = BTreeMap::new();
        // Where each running spot is: a member rebuilt after its room is rebuilt next to it.
        let mut spots = BTreeMap::new();
        let mut recorded = BTreeSet::new();
        for (key, value) in records {
            let (Some(id), Ok(record)) =
                (unit_of_key(&key), UnitRecord::decode(&key, &value.value))
            else {
                continue;
            };
            recorded.insert(id.clone());
            if live.contains(&record.owner) {
                *tally.entry(record.owner.clone()).or_default() += 1;
                if let UnitId::Spot(spot) = id {
                    spots.insert(spot, record.owner);
                }
            } else if !suspected.contains(&record.owner) && record.owner != *self.id() {
                orphans
                    .entry(record.owner.clone())
                    .or_default()
                    .push((id, record, value.version));
            }
        }
        let mut stalled = Vec::new();
        let mut waiting = 0;
        for (dead, units) in orphans {
            let failed = self
                .recover_node(dead.clone(), units, &mut tally, &mut spots)
                .await;
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
        self.forget_dead_descriptors().await
    }

    /// Rebuilds or frees one dead node's units. Rooms are placed whole: the fill plans each room
    /// as one unit, and the Actors its record names as members are rebuilt on the room's node
    /// after it, where they join it again.
    async fn recover_node(
        &self,
        dead: NodeId,
        units: Vec<(UnitId, UnitRecord, u64)>,
        tally: &mut BTreeMap<NodeId, u64>,
        spots: &mut BTreeMap<SpotId, NodeId>,
    ) -> Unplaced {
        let mut unplaced = Unplaced::default();
        self.recovery_event(RecoveryEvent::Started {
            dead: Some(dead.clone()),
        });
        let view = self.cluster_view();
        let mut done = Vec::new();
        let mut failed = Vec::new();
        let mut rebuilt = Vec::new();
        for (id, record, version) in units {
            let info = self.core.factory(&record.factory).map(|f| f.info().clone());
            let lazy_instance = info
                .as_ref()
                .is_some_and(|i| i.kind == FactoryKind::InstanceSpot && !i.remembered);
            if !record.recoverable || lazy_instance {
                match self.free_id(&id, &record.owner, version).await {
                    Ok(()) => done.push(id),
                    Err(_) => failed.push(id),
                }
            } else {
                rebuilt.push((id, record, version));
            }
        }
        let rooms: BTreeSet<SpotId> = rebuilt
            .iter()
            .filter_map(|(id, _, _)| match id {
                UnitId::Spot(spot) => Some(spot.clone()),
                UnitId::Actor(_) => None,
            })
            .collect();
        // A member goes with its room if the room is rebuilt now or runs on a live node; one whose
        // room is gone is rebuilt on its own, and its record then names no spot.
        let (members, alone): (Vec<_>, Vec<_>) = rebuilt.into_iter().partition(|(_, record, _)| {
            record
                .spot
                .as_ref()
                .is_some_and(|s| rooms.contains(s) || spots.contains_key(s))
        });
        let mut by_factory: BTreeMap<String, Vec<(UnitId, UnitRecord, u64)>> = BTreeMap::new();
        for unit in alone {
            by_factory
                .entry(unit.1.factory.clone())
                .or_default()
                .push(unit);
        }
        for (factory, mut units) in by_factory {
            units.sort_by(|a, b| a.0.cmp(&b.0));
            let survivors: BTreeMap<NodeId, Survivor> = view
                .iter()
                .filter(|d| d.state == NodeState::Serving && d.factories.contains(&factory))
                .map(|d| {
                    let units = tally.get(&d.node).copied().unwrap_or(0);
                    let survivor = Survivor {
                        units,
                        capacity: d.capacity,
                    };
                    (d.node.clone(), survivor)
                })
                .collect();
            let share = balanced_fill(&survivors, units.len() as u64);
            let mut slots = share
                .iter()
                .flat_map(|(node, n)| std::iter::repeat_n(node.clone(), *n as usize));
            for (id, record, version) in units {
                let Some(target) = slots.next() else {
                    tracing::warn!(unit = %id, %factory, "no serving node with this factory has room; the next pass retries: start one or raise capacity");
                    unplaced.no_room += 1;
                    failed.push(id);
                    continue;
                };
                match self.rebuild_on(&target, &id, record, version).await {
                    Ok(()) => {
                        *tally.entry(target.clone()).or_default() += 1;
                        if let UnitId::Spot(spot) = &id {
                            spots.insert(spot.clone(), target);
                        }
                        done.push(id);
                    }
                    Err(reason) => {
                        tracing::warn!(unit = %id, %target, %reason, "rebuild failed; the next pass retries");
                        failed.push(id);
                    }
                }
            }
        }
        let mut members = members;
        members.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, record, version) in members {
            let Some(target) = record.spot.as_ref().and_then(|s| spots.get(s)).cloned() else {
                // Its room was not rebuilt in this pass: the next pass places both.
                tracing::warn!(unit = %id, "waits for its room to be rebuilt; the next pass retries");
                failed.push(id);
                continue;
            };
            match self.rebuild_on(&target, &id, record, version).await {
                Ok(()) => {
                    *tally.entry(target).or_default() += 1;
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
        let owner_descriptor = self.core.witness.dead_at(&previous.owner);
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

    /// Frees the id of a unit that is not rebuilt, while its record still names the dead node and
    /// that node's descriptor is as it was when it was taken for dead.
    async fn free_id(&self, id: &UnitId, owner: &NodeId, version: u64) -> Result<(), StoreError> {
        let key = super::authority::unit_key(id);
        let descriptor = node_key(owner);
        let owner_condition = match self.core.witness.dead_at(owner) {
            Some(at) => Condition::version(descriptor, at),
            None => Condition::absent(descriptor),
        };
        self.store()
            .batch(
                vec![Condition::version(key.clone(), version), owner_condition],
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

    /// Removes the descriptors of dead nodes that no record names any more.
    async fn forget_dead_descriptors(&self) -> Result<(), StoreError> {
        let live: BTreeSet<NodeId> = self.cluster_view().into_iter().map(|d| d.node).collect();
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
            if live.contains(&descriptor.node)
                || owners.contains(&descriptor.node)
                || self.core.suspected.read().contains(&descriptor.node)
            {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(counts: &[(&str, u64)]) -> BTreeMap<NodeId, Survivor> {
        counts
            .iter()
            .map(|(n, c)| (*n, *c, u64::MAX))
            .map(|(n, units, capacity)| (NodeId::new(n).unwrap(), Survivor { units, capacity }))
            .collect()
    }

    fn shares(plan: &BTreeMap<NodeId, u64>) -> Vec<(String, u64)> {
        plan.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn the_emptiest_are_raised_to_a_common_level_first() {
        let plan = balanced_fill(&tally(&[("a", 10), ("b", 2), ("c", 4)]), 6);
        // b is raised to c's level (2), then both share the rest (2 each): b 8, c 8, a 10.
        assert_eq!(
            shares(&plan),
            vec![("a".into(), 0), ("b".into(), 4), ("c".into(), 2)]
        );
    }

    #[test]
    fn the_remainder_goes_to_the_emptiest_with_ties_by_node_id() {
        let plan = balanced_fill(&tally(&[("c", 0), ("a", 0), ("b", 0)]), 4);
        assert_eq!(
            shares(&plan),
            vec![("a".into(), 2), ("b".into(), 1), ("c".into(), 1)]
        );
        let total: u64 = plan.values().sum();
        assert_eq!(total, 4);
    }

    #[test]
    fn every_coordinator_computes_the_same_plan() {
        // Coordinators read the survivors in whatever order the store lists them: each order
        // gives the one plan, which is the balanced one (y and z are raised to x, then one each).
        let seen = [("x", 3), ("y", 1), ("z", 1)];
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for order in orders {
            let listed: Vec<(&str, u64)> = order.iter().map(|&i| seen[i]).collect();
            assert_eq!(
                shares(&balanced_fill(&tally(&listed), 7)),
                vec![("x".into(), 1), ("y".into(), 3), ("z".into(), 3)],
                "read in the order {order:?}"
            );
        }
        assert!(balanced_fill(&BTreeMap::new(), 3).is_empty());
    }

    #[test]
    fn no_survivor_is_filled_past_its_capacity() {
        let survivor = |units, capacity| Survivor { units, capacity };
        let survivors: BTreeMap<NodeId, Survivor> = [
            ("a", survivor(3, 4)),
            ("b", survivor(0, 0)),
            ("c", survivor(5, 100)),
        ]
        .into_iter()
        .map(|(n, s)| (NodeId::new(n).unwrap(), s))
        .collect();
        // a takes one (to its capacity of 4), b none (capacity 0), c the rest.
        let plan = balanced_fill(&survivors, 6);
        assert_eq!(
            shares(&plan),
            vec![("a".into(), 1), ("b".into(), 0), ("c".into(), 5)]
        );
        // With no room anywhere, the orphans get no share: a later pass retries them.
        let full: BTreeMap<NodeId, Survivor> = [(NodeId::new("a").unwrap(), survivor(4, 4))].into();
        assert_eq!(balanced_fill(&full, 3).values().sum::<u64>(), 0);
    }
}
