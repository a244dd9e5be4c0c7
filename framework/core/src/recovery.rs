//! Recovery as a plan: who coordinates, which units dead nodes left, which of those are freed and
//! which rebuilt, and on which survivor. The runtime reads the store, asks this, and carries the
//! plan out; every coordinator computes the same plan from the same records.
//!
//! A node that restarts under its id is live again before anyone takes it for dead, so the
//! coordinator never rebuilds what its earlier process held: the new process rebuilds those units
//! itself, once the earlier process certainly runs no turns ([`left_by_earlier_process`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::authority::{NodeDescriptor, NodeState, UnitRecord};
use crate::ids::{NodeId, SpotId, UnitId};
use crate::standby::Series;
use crate::standby::promotion::{Fresh, Named, Promotion, choose};
use crate::witness::Times;

/// Whether a node rebuilds a dead node's units when a coordinator asks: only while it serves. A
/// node that drains or drained takes none (the coordinator's view of it may predate its drain), so
/// nothing lands on a node once it was reported safe to shut down; the coordinator places the unit
/// elsewhere on its next pass.
pub fn takes_rebuilds(state: NodeState) -> bool {
    state == NodeState::Serving
}

/// The node that coordinates recovery: the serving node with the lowest id.
pub fn coordinator(view: &[NodeDescriptor]) -> Option<&NodeId> {
    view.iter()
        .filter(|d| d.state == NodeState::Serving)
        .map(|d| &d.node)
        .min()
}

/// One unit's authority record as read, with the store version a rebuild is conditional on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The unit the record is about.
    pub id: UnitId,
    /// The record, naming the owner to rebuild it from.
    pub record: UnitRecord,
    /// The store version it was read at.
    pub version: u64,
}

/// What the records say about the cluster.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// How many units each live node runs.
    pub tally: BTreeMap<NodeId, u64>,
    /// Where each room of a live node runs (its members are rebuilt next to it).
    pub spots: BTreeMap<SpotId, NodeId>,
    /// The units each dead node left.
    pub orphans: BTreeMap<NodeId, Vec<Found>>,
    /// Every unit that has a record.
    pub recorded: BTreeSet<UnitId>,
}

/// Sorts the records into live nodes' units and orphans. A unit of a node whose lease lapsed but
/// whom the mesh does not confirm dead (`suspected`) is left alone: it may still run it. So is one
/// recorded on the coordinator itself (`me`), which knows its own units.
pub fn census(
    records: Vec<Found>,
    live: &BTreeSet<NodeId>,
    suspected: &BTreeSet<NodeId>,
    me: &NodeId,
) -> Census {
    let mut census = Census::default();
    for found in records {
        census.recorded.insert(found.id.clone());
        let owner = &found.record.owner;
        if live.contains(owner) {
            *census.tally.entry(owner.clone()).or_default() += 1;
            if let UnitId::Spot(spot) = &found.id {
                census.spots.insert(spot.clone(), owner.clone());
            }
        } else if !suspected.contains(owner) && owner != me {
            census.orphans.entry(owner.clone()).or_default().push(found);
        }
    }
    census
}

/// The units an earlier process of this node id left: their records name `me` under a lease
/// generation older than the one this process started with, so this process never held them, and
/// no coordinator rebuilds them (it takes `me` for live). Rooms first, then Actors, each by id.
pub fn left_by_earlier_process(
    records: Vec<Found>,
    me: &NodeId,
    first_generation: u64,
) -> Vec<Found> {
    let mut left: Vec<Found> = records
        .into_iter()
        .filter(|f| f.record.owner == *me && f.record.lease_generation < first_generation)
        .collect();
    left.sort_by(|a, b| a.id.cmp(&b.id));
    left
}

/// When an earlier process of this node id, whose lease this process took over at `took_over`,
/// certainly runs no turns: its last renewal was sent before the takeover, so its lease was
/// certainly held until `took_over` plus the TTL at most, and it runs at most the outage limit
/// past that, however its peers vouch for it. The margin covers the pace of two clocks. (It may
/// also have crashed long before: nothing here can tell a crash from a stall.)
pub fn earlier_process_stopped(took_over: Instant, times: &Times) -> Instant {
    took_over + times.lease_ttl + times.outage_limit + times.margin()
}

/// Whether a recovery pass removes a node's descriptor, found at `version`: only the very
/// descriptor the node was taken for dead under (`dead_at`: its version at the membership read the
/// pass works from), once no unit record names the node (`named`). Any other descriptor is a live
/// process's, written after that read: a node that joined, or that restarted under its id. Removed,
/// it would make every peer take that node for gone until it writes its descriptor again.
pub fn forgets_descriptor(version: u64, dead_at: Option<u64>, named: bool) -> bool {
    dead_at == Some(version) && !named
}

/// A survivor as the fill sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survivor {
    /// The units it hosts.
    pub units: u64,
    /// The most units it takes (its capacity).
    pub capacity: u64,
}

/// How many orphans each survivor gets: the emptiest are raised to a common level, the remainder
/// goes one each to the emptiest, ties broken by node id. No survivor is filled past its capacity:
/// orphans that fit nowhere get no share, and a later pass retries them.
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

/// What recovery does with one dead node's units.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// Units whose ids are freed rather than rebuilt.
    pub free: Vec<Found>,
    /// Rooms and lone Actors, each with the survivor it is rebuilt on, in order.
    pub rebuild: Vec<(Found, NodeId)>,
    /// Actors rebuilt after their room, on whichever node the room runs by then.
    pub members: Vec<Found>,
    /// Units no serving node that registers their factory has room for; the next pass retries.
    pub unplaced: Vec<Found>,
    /// Rooms made again out of their standby copy, on the node that holds it; their members
    /// come with them in the copy, and the next pass rebuilds any the copy did not hold.
    pub promote: Vec<Promote>,
    /// Rooms whose factory keeps a standby, rebuilt from nothing all the same, and why.
    pub fresh: Vec<(UnitId, Fresh)>,
    /// Actors whose records name a room promoted in this pass: its copy brings back those it
    /// held, and the next pass, due as soon as the promotions landed, rebuilds any it did not.
    pub deferred: Vec<UnitId>,
}

/// A room to promote from its standby copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promote {
    /// The room's record, as read.
    pub room: Found,
    /// The node that holds the copy.
    pub holder: NodeId,
    /// The oldest series the copy may be in.
    pub series: Series,
    /// The version of the standby record the promotion is conditional on.
    pub standby_version: u64,
}

/// The store's standby records, with their versions, for the rooms a plan looks at.
pub type NamedRecords = BTreeMap<UnitId, (Named, u64)>;

/// Which of a dead node's rooms are promoted from their standby copy, and which of the rest are
/// reported as starting from nothing (`keeps_standby`: their factory keeps one). A room is
/// promoted only as [`choose`] says: the record's owner is `dead`, the store names a copy of
/// this incarnation, and its holder takes rebuilds.
fn promotions(
    rooms: Vec<Found>,
    named: &NamedRecords,
    keeps_standby: impl Fn(&Found) -> bool,
    view: &[NodeDescriptor],
) -> (Vec<Promote>, Vec<(UnitId, Fresh)>, Vec<Found>) {
    let takers: BTreeSet<NodeId> = view
        .iter()
        .filter(|d| takes_rebuilds(d.state))
        .map(|d| d.node.clone())
        .collect();
    let (mut promote, mut fresh, mut rebuild) = (Vec::new(), Vec::new(), Vec::new());
    for room in rooms {
        let dead = BTreeSet::from([room.record.owner.clone()]);
        let record = named.get(&room.id);
        match choose(&room.record, record.map(|(n, _)| n), &dead, &takers) {
            Promotion::Promote { holder, series } => {
                let standby_version = record.map_or(0, |(_, v)| *v);
                promote.push(Promote {
                    room,
                    holder,
                    series,
                    standby_version,
                });
            }
            Promotion::Rebuild(why) => {
                if keeps_standby(&room) {
                    fresh.push((room.id.clone(), why));
                }
                rebuild.push(room);
            }
            // Not reached: a plan is only made for a node taken for dead.
            Promotion::Wait => rebuild.push(room),
        }
    }
    (promote, fresh, rebuild)
}

/// Plans one dead node's units. `freed` says which records are freed rather than rebuilt (not
/// recoverable, or an Instance Spot that comes back by activation). Rooms are placed whole: the
/// fill places each room as one unit, and an Actor whose record names a room rebuilt now, or one
/// running on a live node that is not drained, goes with it; an Actor whose room is gone is placed
/// on its own. The
/// fill runs per factory, over the serving nodes that register it, counting what earlier
/// factories of this plan placed. A room the store names a standby copy for is promoted on its
/// holder instead (as [`choose`] decides), its members with it.
pub fn plan_node(
    units: Vec<Found>,
    freed: impl Fn(&UnitRecord) -> bool,
    view: &[NodeDescriptor],
    tally: &BTreeMap<NodeId, u64>,
    spots: &BTreeMap<SpotId, NodeId>,
    named: &NamedRecords,
    keeps_standby: impl Fn(&Found) -> bool,
) -> NodePlan {
    let mut plan = NodePlan::default();
    let (free, kept): (Vec<Found>, Vec<Found>) = units.into_iter().partition(|f| freed(&f.record));
    plan.free = free;
    let (rooms, others): (Vec<Found>, Vec<Found>) = kept
        .into_iter()
        .partition(|f| matches!(f.id, UnitId::Spot(_)));
    let (promote, fresh, rebuilt_rooms) = promotions(rooms, named, keeps_standby, view);
    plan.fresh = fresh;
    let promoted: BTreeSet<&SpotId> = promote
        .iter()
        .filter_map(|p| match &p.room.id {
            UnitId::Spot(spot) => Some(spot),
            UnitId::Actor(_) => None,
        })
        .collect();
    // A promoted room's members come back in its copy: the next pass sees any it did not hold.
    let (deferred, others): (Vec<Found>, Vec<Found>) = others
        .into_iter()
        .partition(|f| f.record.spot.as_ref().is_some_and(|s| promoted.contains(s)));
    plan.deferred = deferred.into_iter().map(|f| f.id).collect();
    let rebuilt: Vec<Found> = rebuilt_rooms.into_iter().chain(others).collect();
    plan.promote = promote;
    let rooms: BTreeSet<&SpotId> = rebuilt
        .iter()
        .filter_map(|f| match &f.id {
            UnitId::Spot(spot) => Some(spot),
            UnitId::Actor(_) => None,
        })
        .collect();
    // A drained node hosts nothing: a room's record that still names it outlived the room (its
    // release was not answered), and a member sent there would wait for ever.
    let drained = |node: &NodeId| {
        view.iter()
            .any(|d| d.node == *node && d.state == NodeState::Relocated)
    };
    let goes_with_room = |f: &Found| {
        f.record
            .spot
            .as_ref()
            .is_some_and(|s| rooms.contains(s) || spots.get(s).is_some_and(|node| !drained(node)))
    };
    let (mut members, alone): (Vec<Found>, Vec<Found>) =
        rebuilt.iter().cloned().partition(|f| goes_with_room(f));
    let mut by_factory: BTreeMap<String, Vec<Found>> = BTreeMap::new();
    for found in alone {
        by_factory
            .entry(found.record.factory.clone())
            .or_default()
            .push(found);
    }
    let mut load = tally.clone();
    for (factory, mut units) in by_factory {
        units.sort_by(|a, b| a.id.cmp(&b.id));
        let survivors: BTreeMap<NodeId, Survivor> = view
            .iter()
            .filter(|d| d.state == NodeState::Serving && d.factories.contains(&factory))
            .map(|d| {
                let survivor = Survivor {
                    units: load.get(&d.node).copied().unwrap_or(0),
                    capacity: d.capacity,
                };
                (d.node.clone(), survivor)
            })
            .collect();
        let share = balanced_fill(&survivors, units.len() as u64);
        let mut slots = share
            .iter()
            .flat_map(|(node, n)| std::iter::repeat_n(node.clone(), *n as usize));
        for found in units {
            match slots.next() {
                Some(target) => {
                    *load.entry(target.clone()).or_default() += 1;
                    plan.rebuild.push((found, target));
                }
                None => plan.unplaced.push(found),
            }
        }
    }
    members.sort_by(|a, b| a.id.cmp(&b.id));
    plan.members = members;
    plan
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::authority::Stage;
    use crate::ids::{ActorId, ObjectGeneration};

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    #[test]
    fn only_the_descriptor_a_node_was_taken_for_dead_under_is_forgotten() {
        assert!(forgets_descriptor(7, Some(7), false));
        assert!(!forgets_descriptor(7, Some(7), true), "a record names it");
        assert!(
            !forgets_descriptor(9, Some(7), false),
            "written since: the node restarted"
        );
        assert!(
            !forgets_descriptor(9, None, false),
            "not dead at the read: live, suspected, or joined since"
        );
    }

    fn descriptor(id: &str, state: NodeState, factories: &[&str], capacity: u64) -> NodeDescriptor {
        NodeDescriptor {
            node: node(id),
            mesh_addr: Some(SocketAddr::from(([127, 0, 0, 1], 7000))),
            app_version: "1".into(),
            state,
            capacity,
            units: 0,
            weight: 0,
            factories: factories.iter().map(|f| (*f).to_owned()).collect(),
            lease_generation: 1,
            peers: Vec::new(),
        }
    }

    fn found(id: UnitId, owner: &str, factory: &str, spot: Option<&str>) -> Found {
        Found {
            id,
            record: UnitRecord {
                owner: node(owner),
                lease_generation: 1,
                object_generation: ObjectGeneration(1),
                owner_generation: 1,
                factory: factory.into(),
                stage: Stage::Active,
                spot: spot.map(|s| SpotId::new(s).unwrap()),
                recoverable: true,
            },
            version: 3,
        }
    }

    fn room(name: &str) -> UnitId {
        UnitId::Spot(SpotId::new(name).unwrap())
    }

    fn player(name: &str) -> UnitId {
        UnitId::Actor(ActorId::new(name).unwrap())
    }

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

    #[test]
    fn the_coordinator_is_the_lowest_serving_id() {
        let view = [
            descriptor("a", NodeState::Relocated, &[], 10),
            descriptor("c", NodeState::Serving, &[], 10),
            descriptor("b", NodeState::Serving, &[], 10),
        ];
        assert_eq!(coordinator(&view), Some(&node("b")));
        assert_eq!(coordinator(&view[..1]), None);
    }

    #[test]
    fn a_restarted_node_takes_back_only_what_its_earlier_processes_held() {
        let mut old = found(room("r2"), "me", "room", None);
        old.record.lease_generation = 3;
        let mut mine = found(room("r1"), "me", "room", None);
        mine.record.lease_generation = 5;
        let mut older = found(player("p1"), "me", "player", Some("r2"));
        older.record.lease_generation = 1;
        let records = vec![mine, older, found(room("r3"), "other", "room", None), old];
        let left = left_by_earlier_process(records, &node("me"), 5);
        let ids: Vec<&UnitId> = left.iter().map(|f| &f.id).collect();
        assert_eq!(ids, [&room("r2"), &player("p1")], "rooms first");
        let times = Times {
            grace: std::time::Duration::from_secs(4),
            lease_ttl: std::time::Duration::from_secs(10),
            outage_limit: std::time::Duration::from_secs(60),
        };
        let now = Instant::now();
        assert_eq!(
            earlier_process_stopped(now, &times),
            now + std::time::Duration::from_secs(72)
        );
    }

    #[test]
    fn the_census_leaves_suspected_and_own_units_alone() {
        let records = vec![
            found(room("r1"), "live", "room", None),
            found(room("r2"), "dead", "room", None),
            found(room("r3"), "suspect", "room", None),
            found(room("r4"), "me", "room", None),
        ];
        let live = BTreeSet::from([node("live")]);
        let suspected = BTreeSet::from([node("suspect")]);
        let census = census(records, &live, &suspected, &node("me"));
        assert_eq!(census.tally, BTreeMap::from([(node("live"), 1)]));
        assert_eq!(
            census.spots,
            BTreeMap::from([(SpotId::new("r1").unwrap(), node("live"))])
        );
        assert_eq!(census.orphans.keys().collect::<Vec<_>>(), [&node("dead")]);
        assert_eq!(census.recorded.len(), 4);
    }

    fn named(holder: &str) -> Named {
        Named {
            holder: node(holder),
            series: Series {
                generation: 1,
                epoch: 1,
            },
            incarnation: ObjectGeneration(1),
        }
    }

    #[test]
    fn a_room_with_a_standby_is_promoted_on_its_holder_with_its_members() {
        let view = [
            descriptor("a", NodeState::Serving, &["room", "player"], 10),
            descriptor("b", NodeState::Serving, &["room", "player"], 10),
        ];
        let units = vec![
            found(room("r1"), "dead", "room", None),
            found(player("p1"), "dead", "player", Some("r1")),
            found(room("r2"), "dead", "room", None),
        ];
        let named = BTreeMap::from([(room("r1"), (named("b"), 9))]);
        let plan = plan_node(
            units,
            |_| false,
            &view,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &named,
            |_| true,
        );
        assert_eq!(plan.promote.len(), 1);
        let promote = &plan.promote[0];
        assert_eq!(promote.room.id, room("r1"));
        assert_eq!(promote.holder, node("b"));
        assert_eq!(promote.standby_version, 9, "conditional on the record read");
        assert!(
            plan.members.is_empty(),
            "the promoted room's member comes back in its copy: {:?}",
            plan.members
        );
        assert_eq!(
            plan.deferred,
            [player("p1")],
            "the next pass finds it if the copy did not"
        );
        let rebuilt: Vec<&UnitId> = plan.rebuild.iter().map(|(f, _)| &f.id).collect();
        assert_eq!(rebuilt, [&room("r2")]);
        assert_eq!(plan.fresh, [(room("r2"), Fresh::NoStandby)]);
    }

    #[test]
    fn a_room_whose_holder_died_or_drains_starts_from_nothing_and_says_why() {
        let view = [
            descriptor("a", NodeState::Serving, &["room"], 10),
            descriptor("c", NodeState::Draining, &["room"], 10),
        ];
        let units = vec![
            found(room("r1"), "dead", "room", None),
            found(room("r2"), "dead", "room", None),
            found(room("r3"), "dead", "room", None),
        ];
        let named = BTreeMap::from([
            (room("r1"), (named("gone"), 4)),
            (room("r2"), (named("c"), 5)),
        ]);
        let keeps = |f: &Found| f.id != room("r3");
        let plan = plan_node(
            units,
            |_| false,
            &view,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &named,
            keeps,
        );
        assert!(plan.promote.is_empty());
        assert_eq!(plan.rebuild.len(), 3, "all three start again on a");
        assert_eq!(
            plan.fresh,
            [
                (room("r1"), Fresh::HolderGone),
                (room("r2"), Fresh::HolderGone)
            ],
            "r3's factory keeps no standby: nothing to report"
        );
    }

    #[test]
    fn a_member_whose_room_is_recorded_on_a_drained_node_is_placed_on_its_own() {
        let view = [
            descriptor("a", NodeState::Serving, &["room", "player"], 10),
            descriptor("c", NodeState::Relocated, &["room", "player"], 10),
        ];
        // The room's record outlived it on c (its release was not answered); c takes no rebuild.
        let spots = BTreeMap::from([(SpotId::new("ghost").unwrap(), node("c"))]);
        let units = vec![found(player("p1"), "dead", "player", Some("ghost"))];
        let plan = plan_node(
            units,
            |_| false,
            &view,
            &BTreeMap::new(),
            &spots,
            &BTreeMap::new(),
            |_| false,
        );
        assert!(plan.members.is_empty());
        let placed: Vec<(UnitId, String)> = plan
            .rebuild
            .iter()
            .map(|(f, n)| (f.id.clone(), n.to_string()))
            .collect();
        assert_eq!(placed, [(player("p1"), "a".to_owned())]);
    }

    #[test]
    fn rooms_are_placed_whole_and_members_follow_them() {
        let view = [
            descriptor("a", NodeState::Serving, &["room", "player"], 10),
            descriptor("b", NodeState::Serving, &["room", "player"], 10),
            descriptor("c", NodeState::Relocated, &["room", "player"], 10),
        ];
        let units = vec![
            found(room("r1"), "dead", "room", None),
            found(room("r2"), "dead", "room", None),
            found(player("p1"), "dead", "player", Some("r1")),
            found(player("p2"), "dead", "player", Some("elsewhere")),
            found(player("p3"), "dead", "player", Some("gone")),
            found(room("lazy"), "dead", "instance", None),
        ];
        let spots = BTreeMap::from([(SpotId::new("elsewhere").unwrap(), node("b"))]);
        let tally = BTreeMap::from([(node("a"), 3), (node("b"), 1)]);
        let plan = plan_node(
            units,
            |r| r.factory == "instance",
            &view,
            &tally,
            &spots,
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(
            plan.free.iter().map(|f| &f.id).collect::<Vec<_>>(),
            [&room("lazy")]
        );
        // The lone player whose room is gone goes to the emptier b; the two rooms then level a and
        // b at 3 with one each, handed out in node order.
        let placed: Vec<(UnitId, String)> = plan
            .rebuild
            .iter()
            .map(|(f, n)| (f.id.clone(), n.to_string()))
            .collect();
        assert_eq!(
            placed,
            [
                (player("p3"), "b".to_owned()),
                (room("r1"), "a".to_owned()),
                (room("r2"), "b".to_owned()),
            ]
        );
        let members: Vec<&UnitId> = plan.members.iter().map(|f| &f.id).collect();
        assert_eq!(members, [&player("p1"), &player("p2")]);
        assert!(plan.unplaced.is_empty());
    }

    #[test]
    fn what_fits_nowhere_is_unplaced() {
        let view = [descriptor("a", NodeState::Serving, &["room"], 1)];
        let units = vec![
            found(room("r1"), "dead", "room", None),
            found(room("r2"), "dead", "room", None),
            found(room("r3"), "dead", "other", None),
        ];
        let plan = plan_node(
            units,
            |_| false,
            &view,
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(plan.rebuild.len(), 1);
        let unplaced: Vec<&UnitId> = plan.unplaced.iter().map(|f| &f.id).collect();
        assert_eq!(unplaced, [&room("r3"), &room("r2")]);
    }
}
