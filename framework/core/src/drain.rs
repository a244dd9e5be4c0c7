//! A drain as decisions: which units leave and in what order, where each goes, which failed moves
//! are tried again, which units stay and why, and when the node is truly safe to stop.
//!
//! The runtime (and the simulator) moves the units and feeds back how each move ended. Units that
//! arrive while the drain runs (a move into the node that was already past its offer) join the
//! inventory when they open, and the drain does not end while such a move may still open here:
//! otherwise a node reported drained would receive a room after its drain, and stopping it would
//! end that room.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::authority::{NodeDescriptor, NodeState};
use crate::ids::{NodeId, UnitId};
use crate::placement::place;

/// How long a unit whose move may go through later waits before it is tried again.
pub const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How many moves a drain runs at once, unless told otherwise.
pub const IN_FLIGHT: usize = 128;

/// Why a drain did not move every unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockedReason {
    /// No serving node could take some unit (factory, version or capacity).
    TargetUnavailable,
    /// No other node serves or is starting: nothing can take any unit, so a drain for
    /// maintenance ends at once (a rolling update waits for nodes of its version instead).
    /// Drained nodes can be brought back with `resume`; without one, stopping this node ends its
    /// units.
    NoServingPeer,
    /// The location store could not be reached.
    StoreUnavailable,
    /// Some unit's factory is registered with `RelocationPolicy::Disabled`.
    RelocationDisabled,
    /// A target could not restore some unit's state.
    StateIncompatible,
    /// A state adapter failed or panicked while capturing some unit; it runs on here with its
    /// state, and the node's log names it.
    AdapterFailed,
    /// The deadline passed with units still here.
    DeadlineExceeded,
    /// Some move failed for another reason (see the events).
    RelocationFailed,
    /// The node is not serving (still starting, or failed).
    RuntimeNotReady,
    /// The node is shutting down.
    ShutdownRequested,
    /// Another operation is running: a drain with other options, or a move of the same unit.
    OperationInProgress,
}

impl BlockedReason {
    /// Whether a move that ended for this reason may go through when tried again: another target
    /// may come up, the store may answer, another move of the unit may end.
    fn retryable(self) -> bool {
        matches!(
            self,
            BlockedReason::StoreUnavailable
                | BlockedReason::TargetUnavailable
                | BlockedReason::OperationInProgress
        )
    }
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelocateOutcome {
    /// Every unit moved; the node hosts none and is `Relocated`.
    Relocated {
        /// How many units moved.
        moved: usize,
    },
    /// Some unit did not move; those stay and run here, and the node serves again.
    Blocked {
        /// Of the stayed units' reasons, the one that says most (a shutdown or the deadline first).
        reason: BlockedReason,
        /// The units that stayed.
        stayed: Vec<UnitId>,
    },
    /// At the deadline some units were past the point of no return and the store had not said
    /// whether their target's commit or this node's reclaim won: each is held (it runs nowhere)
    /// until the store answers, then runs where the winning write says, with nothing lost.
    Undecided {
        /// The units held: each runs nowhere until the store says whose write won.
        units: Vec<UnitId>,
        /// The units that stayed here.
        stayed: Vec<UnitId>,
    },
}

/// When a unit leaves in a drain: PerActor spot shells first (their members then move alone),
/// then Actors, then rooms and Instance Spots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Batch {
    /// The shell of a PerActor spot.
    Shell,
    /// An Actor on its own.
    Actor,
    /// A SpotWide room with its members, or an Instance Spot.
    Room,
}

/// A unit the drain found on its node: at the start, or arrived since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The unit (a room's spot for a room).
    pub unit: UnitId,
    /// How many units move with it, itself included: a room counts its members, as a node's
    /// load does.
    pub size: usize,
    /// Its factory's type name, which a target must have.
    pub factory: String,
    /// Which batch it leaves in: PerActor shells first, then Actors, then rooms.
    pub batch: Batch,
    /// False for a factory registered with `RelocationPolicy::Disabled`.
    pub relocatable: bool,
    /// The node that keeps its standby copy, if any: the drain sends it there when that node
    /// could take it, where its move has the least to ship and the cluster the least to set up.
    pub standby: Option<NodeId>,
}

/// How one of the drain's moves ended, as the runtime saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The unit runs on its target.
    Moved,
    /// Past the point of no return, the store has not said who owns it: held until it does.
    Undecided,
    /// It runs here still (or again), for this reason where the move knows it.
    NotMoved(Option<BlockedReason>),
}

/// What the drain decided; the runtime carries each out and reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start a move of `unit` to `to`.
    Move {
        /// The unit to move (a room's spot for a room: its members go with it).
        unit: UnitId,
        /// The node picked to take it, by load counting what this drain already sent there.
        to: NodeId,
    },
    /// `unit` and the `size - 1` units with it moved.
    Moved {
        /// The unit that now runs on its target.
        unit: UnitId,
        /// Units that moved with it, itself included.
        size: usize,
    },
    /// `unit` is held until the store says whether it moved.
    Held {
        /// The unit held: it runs nowhere until the store answers.
        unit: UnitId,
        /// Units held with it, itself included.
        size: usize,
    },
    /// `unit` stays here, with its members.
    Stays {
        /// The unit that stays on this node.
        unit: UnitId,
        /// Units that stay with it, itself included.
        size: usize,
        /// Why, for the outcome.
        reason: BlockedReason,
        /// Why, in words for the log and the events.
        why: String,
    },
    /// A move of `unit` did not go through but may when tried again: it waits again.
    Again {
        /// The unit that waits again for a target.
        unit: UnitId,
        /// Why the move did not go through.
        reason: BlockedReason,
    },
    /// `unit` left the node by another path (a move of its own, or it stopped): the drain has
    /// nothing more to do for it, and counts it no more.
    Left {
        /// The unit no longer here: it leaves the drain's total.
        unit: UnitId,
        /// Units that left with it, itself included.
        size: usize,
    },
}

#[derive(Debug, Clone)]
struct Unit {
    size: usize,
    factory: String,
    batch: Batch,
    /// The node that keeps its standby copy.
    standby: Option<NodeId>,
    /// Why it waits, while it does.
    waits: BlockedReason,
    /// A unit tried again waits this long first, so a target that cannot take it yet (its link
    /// backlogged, a move of the unit still ending there) is not offered it in a tight loop.
    not_before: Option<Instant>,
}

/// One drain of one node.
#[derive(Debug)]
pub struct Drain {
    me: NodeId,
    version: Option<String>,
    deadline: Instant,
    /// How many moves run at once.
    limit: usize,
    units: BTreeMap<UnitId, Unit>,
    /// Units to start, in the order they leave.
    waiting: BTreeSet<(Batch, UnitId)>,
    /// Waiting units tried again, by when each may start: the next retry without a look at
    /// every unit that waits.
    paused: BTreeSet<(Instant, UnitId)>,
    /// Units moving now, with their targets.
    moving: BTreeMap<UnitId, NodeId>,
    /// Units this drain sent to each node so far, which count as load there.
    planned: BTreeMap<NodeId, u64>,
    /// Moves into this node that may still open here.
    arriving: usize,
    /// When the node's units were last looked at.
    inventoried: Option<Instant>,
    stopping: bool,
    /// Whether the cluster was looked at for a node to take anything.
    looked: bool,
    /// Peers whose lease lapsed but whom the mesh does not confirm dead: they may serve again.
    lapsed: usize,
    /// No other node served or started when the drain began: nothing can take a unit.
    nowhere: bool,
    total: usize,
    moved: usize,
    stayed: Vec<(UnitId, BlockedReason)>,
    undecided: Vec<UnitId>,
}

impl Drain {
    /// A drain of node `me` to nodes of `version` (any, without one), ending by `deadline`, with
    /// at most `limit` moves at once.
    pub fn new(me: NodeId, version: Option<String>, deadline: Instant, limit: usize) -> Self {
        Drain {
            me,
            version,
            deadline,
            limit: limit.max(1),
            units: BTreeMap::new(),
            waiting: BTreeSet::new(),
            paused: BTreeSet::new(),
            moving: BTreeMap::new(),
            planned: BTreeMap::new(),
            arriving: 0,
            inventoried: None,
            stopping: false,
            looked: false,
            lapsed: 0,
            nowhere: false,
            total: 0,
            moved: 0,
            stayed: Vec::new(),
            undecided: Vec::new(),
        }
    }

    /// Units in the inventory so far, members counted.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Units moved so far, members counted.
    pub fn moved(&self) -> usize {
        self.moved
    }

    /// Adds a unit found on the node. A unit known already is ignored (one that left is
    /// forgotten: should it come back, taken back by this node's new process, it is found anew);
    /// one that may not move stays at once.
    pub fn found(&mut self, found: Found) -> Option<Decision> {
        if self.units.contains_key(&found.unit) {
            return None;
        }
        self.total += found.size;
        let unit = Unit {
            size: found.size,
            factory: found.factory,
            batch: found.batch,
            standby: found.standby,
            waits: BlockedReason::TargetUnavailable,
            not_before: None,
        };
        let id = found.unit;
        self.units.insert(id.clone(), unit);
        if !found.relocatable {
            return Some(self.stay(
                id,
                BlockedReason::RelocationDisabled,
                "RelocationPolicy::Disabled".into(),
            ));
        }
        self.waiting.insert((found.batch, id));
        None
    }

    /// Whether the node's units are worth looking at again at `now`, with `arriving` moves into
    /// the node that may still open: at first; while moves may open here (or might at the last
    /// look, so that one that opened since is found); else once a `period`, for a unit that
    /// came another way. A drain of many units would otherwise look at all of them again each
    /// time one of its moves ends.
    pub fn inventory_due(&self, arriving: usize, now: Instant, period: Duration) -> bool {
        self.inventoried
            .is_none_or(|at| arriving > 0 || self.arriving > 0 || now >= at + period)
    }

    /// The node's units were looked at, at `now`.
    pub fn inventoried(&mut self, now: Instant) {
        self.inventoried = Some(now);
    }

    /// How many moves into this node may still open here (staged, or committing).
    pub fn arriving(&mut self, count: usize) {
        self.arriving = count;
    }

    /// When the first unit tried again may start, if one still pauses.
    pub fn next_try(&self) -> Option<Instant> {
        self.paused.first().map(|(at, _)| *at)
    }

    /// How many peers' leases lapsed while the mesh does not confirm them dead (a store that fails
    /// over may have lost their renewals): while any is, a drain does not judge that no node
    /// can take its units.
    pub fn lapsed(&mut self, count: usize) {
        self.lapsed = count;
    }

    /// A shutdown began: no move starts any more, and what waits stays.
    pub fn stopping(&mut self) {
        self.stopping = true;
    }

    /// Starts what can start now: for each waiting unit in order, while fewer than the limit
    /// move, a target from `view` (the cluster as last read), spread by what this drain already
    /// sent. `hosted` says whether a unit still runs here, or is in a move from here that has not
    /// ended (it may come back); `store_reachable` whether a move could commit now.
    pub fn next(
        &mut self,
        now: Instant,
        view: &[NodeDescriptor],
        hosted: impl Fn(&UnitId) -> bool,
        store_reachable: bool,
    ) -> Vec<Decision> {
        let mut decided = Vec::new();
        if self.stopping || now >= self.deadline {
            return decided;
        }
        let peers: Vec<NodeDescriptor> =
            view.iter().filter(|d| d.node != self.me).cloned().collect();
        // A rolling update waits for nodes of its version to come up; a drain for maintenance
        // that finds no other node serving when it starts has nowhere to go, and says so at
        // once. Judged once, on a view the store just gave with no peer's lease lapsed unconfirmed:
        // peers missing from a later view (a store failing over) may well come back, and are
        // waited for.
        if !self.looked && store_reachable && self.lapsed == 0 {
            self.looked = true;
            self.nowhere = self.version.is_none()
                && !peers
                    .iter()
                    .any(|d| matches!(d.state, NodeState::Serving | NodeState::Preparing));
        }
        // Walked in order without a copy: a drain of many units decides after every move that ends.
        let mut last: Option<(Batch, UnitId)> = None;
        while self.moving.len() < self.limit {
            let next = match &last {
                None => self.waiting.first(),
                Some(last) => self.waiting.range((Excluded(last), Unbounded)).next(),
            };
            let Some((batch, id)) = next.cloned() else {
                break;
            };
            last = Some((batch, id.clone()));
            if !hosted(&id) {
                self.waiting.remove(&(batch, id.clone()));
                if let Some(unit) = self.units.remove(&id) {
                    if let Some(at) = unit.not_before {
                        self.paused.remove(&(at, id.clone()));
                    }
                    self.total -= unit.size;
                    decided.push(Decision::Left {
                        unit: id,
                        size: unit.size,
                    });
                }
                continue;
            }
            let Some(unit) = self.units.get_mut(&id) else {
                continue;
            };
            if let Some(at) = unit.not_before {
                if now < at {
                    continue;
                }
                // Its pause is over: it waits now, if at all, for what it waits for.
                unit.not_before = None;
                self.paused.remove(&(at, id.clone()));
            }
            if !store_reachable {
                unit.waits = BlockedReason::StoreUnavailable;
                continue;
            }
            let loaded = peers.iter().map(|d| {
                let mut d = d.clone();
                d.units += self.planned.get(&d.node).copied().unwrap_or(0);
                d
            });
            let loaded: Vec<NodeDescriptor> = loaded.collect();
            let holder = unit.standby.as_ref().and_then(|holder| {
                let holder = loaded.iter().filter(|d| d.node == *holder);
                place(holder, &unit.factory, self.version.as_deref())
            });
            let to = holder.or_else(|| place(&loaded, &unit.factory, self.version.as_deref()));
            let Some(to) = to else {
                unit.waits = if self.nowhere {
                    BlockedReason::NoServingPeer
                } else {
                    BlockedReason::TargetUnavailable
                };
                continue;
            };
            *self.planned.entry(to.clone()).or_default() += unit.size as u64;
            self.waiting.remove(&(batch, id.clone()));
            self.moving.insert(id.clone(), to.clone());
            decided.push(Decision::Move { unit: id, to });
        }
        decided
    }

    /// A move of the drain ended. One that may go through when tried again waits again while
    /// the drain has time; `hosted` says whether the unit still runs here.
    pub fn ended(&mut self, id: &UnitId, ended: Ended, now: Instant, hosted: bool) -> Decision {
        let target = self.moving.remove(id);
        let size = self.units.get(id).map_or(1, |u| u.size);
        match ended {
            Ended::Moved => {
                self.moved += size;
                Decision::Moved {
                    unit: id.clone(),
                    size,
                }
            }
            Ended::Undecided => {
                self.undecided.push(id.clone());
                Decision::Held {
                    unit: id.clone(),
                    size,
                }
            }
            Ended::NotMoved(_) if !hosted => {
                // It left by another path meanwhile (another move of it went through).
                self.total -= size;
                self.units.remove(id);
                Decision::Left {
                    unit: id.clone(),
                    size,
                }
            }
            Ended::NotMoved(reason) => {
                let reason = reason.unwrap_or(BlockedReason::RelocationFailed);
                let time_left = now < self.deadline && !self.stopping;
                // A room sent to the node that keeps its standby, which did not take it (that
                // node may have died with its lease still running), is tried again wherever the
                // drain would have sent it without a standby.
                let unit = self.units.get_mut(id);
                let to_standby = match unit {
                    Some(ref unit) => target.is_some() && unit.standby == target,
                    None => false,
                };
                match unit {
                    Some(unit) if time_left && (reason.retryable() || to_standby) => {
                        if to_standby {
                            unit.standby = None;
                        }
                        unit.waits = reason;
                        unit.not_before = Some(now + RETRY_PAUSE);
                        self.paused.insert((now + RETRY_PAUSE, id.clone()));
                        self.waiting.insert((unit.batch, id.clone()));
                        // The target it was planned for did not take it.
                        if let Some(count) = target.and_then(|to| self.planned.get_mut(&to)) {
                            *count = count.saturating_sub(size as u64);
                        }
                        Decision::Again {
                            unit: id.clone(),
                            reason,
                        }
                    }
                    _ => self.stay(id.clone(), reason, format!("{reason:?}")),
                }
            }
        }
    }

    fn stay(&mut self, unit: UnitId, reason: BlockedReason, why: String) -> Decision {
        let size = self.units.get(&unit).map_or(1, |u| u.size);
        self.stayed.push((unit.clone(), reason));
        Decision::Stays {
            unit,
            size,
            reason,
            why,
        }
    }

    /// Whether the drain is over: nothing moves, and nothing waits or may still arrive, or the
    /// deadline passed, a shutdown began, or no other node can take anything.
    pub fn done(&self, now: Instant) -> bool {
        if !self.moving.is_empty() {
            return false;
        }
        let settled = self.waiting.is_empty() && self.arriving == 0;
        settled || now >= self.deadline || self.stopping || self.nowhere
    }

    /// Ends the drain: what still waits stays, each with the reason it waited for. Returns the
    /// decisions for those units and the outcome; `members` names a unit with the units that
    /// share its lane, for the outcome's list of what stayed.
    pub fn finish(
        &mut self,
        members: impl Fn(&UnitId) -> Vec<UnitId>,
    ) -> (Vec<Decision>, RelocateOutcome) {
        let mut decided = Vec::new();
        self.paused.clear();
        for (_, id) in std::mem::take(&mut self.waiting) {
            let waits = self
                .units
                .get(&id)
                .map_or(BlockedReason::TargetUnavailable, |u| u.waits);
            let (reason, why) = if self.stopping {
                (
                    BlockedReason::ShutdownRequested,
                    "the node began shutting down",
                )
            } else {
                match waits {
                    BlockedReason::StoreUnavailable => (
                        BlockedReason::StoreUnavailable,
                        "the location store did not answer in time",
                    ),
                    BlockedReason::NoServingPeer => (
                        BlockedReason::NoServingPeer,
                        "no other node serves: nothing can take it",
                    ),
                    reason => (reason, "no serving node can take it"),
                }
            };
            decided.push(self.stay(id, reason, why.into()));
        }
        let mut seen = BTreeSet::new();
        let mut stayed = Vec::new();
        for (unit, _) in &self.stayed {
            for id in std::iter::once(unit.clone()).chain(members(unit)) {
                if seen.insert(id.clone()) {
                    stayed.push(id);
                }
            }
        }
        let outcome = if !self.undecided.is_empty() {
            RelocateOutcome::Undecided {
                units: self.undecided.clone(),
                stayed,
            }
        } else if self.stopping {
            RelocateOutcome::Blocked {
                reason: BlockedReason::ShutdownRequested,
                stayed,
            }
        } else if self.stayed.is_empty() && self.arriving == 0 {
            RelocateOutcome::Relocated { moved: self.moved }
        } else if self.stayed.is_empty() {
            // Past the deadline with a move into this node still undecided.
            RelocateOutcome::Blocked {
                reason: BlockedReason::DeadlineExceeded,
                stayed,
            }
        } else {
            RelocateOutcome::Blocked {
                reason: main_reason(&self.stayed),
                stayed,
            }
        };
        (decided, outcome)
    }
}

/// Whether a node can be stopped without ending a unit: it is drained or stopped, hosts none,
/// and no move into it may still open there.
pub fn safe_to_shutdown(state: NodeState, hosted: usize, arriving: usize) -> bool {
    hosted == 0 && arriving == 0 && matches!(state, NodeState::Relocated | NodeState::Stopped)
}

/// The reason that says most about why units stayed: a shutdown, the deadline, missing targets
/// or store, then the rest.
fn main_reason(stayed: &[(UnitId, BlockedReason)]) -> BlockedReason {
    const ORDER: [BlockedReason; 10] = [
        BlockedReason::ShutdownRequested,
        BlockedReason::DeadlineExceeded,
        BlockedReason::NoServingPeer,
        BlockedReason::StoreUnavailable,
        BlockedReason::TargetUnavailable,
        BlockedReason::OperationInProgress,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::SpotId;

    fn node(id: &str, units: u64, state: NodeState) -> NodeDescriptor {
        NodeDescriptor {
            node: NodeId::new(id).unwrap(),
            mesh_addr: None,
            app_version: "1".into(),
            state,
            capacity: 100_000,
            units,
            weight: 1,
            factories: vec!["room".into()],
            lease_generation: 1,
            peers: Vec::new(),
        }
    }

    fn room(id: &str, size: usize) -> Found {
        Found {
            unit: UnitId::Spot(SpotId::new(id).unwrap()),
            size,
            factory: "room".into(),
            batch: Batch::Room,
            relocatable: true,
            standby: None,
        }
    }

    fn drain(now: Instant) -> Drain {
        Drain::new(
            NodeId::new("p1").unwrap(),
            None,
            now + Duration::from_secs(30),
            1000,
        )
    }

    /// A rolling update to version 2 with a deadline a second away, of one room.
    fn rolling_update_of_one_room(now: Instant) -> Drain {
        let mut d = Drain::new(
            NodeId::new("p1").unwrap(),
            Some("2".into()),
            now + Duration::from_secs(1),
            10,
        );
        d.found(room("a", 1));
        d
    }

    #[test]
    fn the_units_are_looked_at_again_while_moves_may_arrive_and_else_once_a_period() {
        let now = Instant::now();
        let period = Duration::from_millis(200);
        let mut d = drain(now);
        assert!(d.inventory_due(0, now, period));
        d.inventoried(now);
        d.arriving(0);
        assert!(!d.inventory_due(0, now + Duration::from_millis(1), period));
        assert!(d.inventory_due(0, now + period, period));
        // A move into the node may open: look each time, and once more after it opened.
        assert!(d.inventory_due(1, now, period));
        d.arriving(1);
        assert!(d.inventory_due(0, now, period));
        d.arriving(0);
        assert!(!d.inventory_due(0, now, period));
    }

    fn targets(decided: &[Decision]) -> BTreeMap<String, usize> {
        let mut to = BTreeMap::new();
        for d in decided {
            if let Decision::Move { to: n, .. } = d {
                *to.entry(n.to_string()).or_default() += 1;
            }
        }
        to
    }

    #[test]
    fn a_room_goes_to_the_node_that_keeps_its_standby_when_that_node_can_take_it() {
        let now = Instant::now();
        let mut d = drain(now);
        let kept_on = |id: &str, holder: &str| Found {
            standby: Some(NodeId::new(holder).unwrap()),
            ..room(id, 1)
        };
        d.found(kept_on("on-p3", "p3"));
        d.found(kept_on("on-full", "p4"));
        d.found(kept_on("on-draining", "p5"));
        d.found(room("none", 1));
        let mut full = node("p4", 0, NodeState::Serving);
        full.capacity = 0;
        // p3 is the busiest node that serves: only its standby sends a room there.
        let view = [
            node("p1", 4, NodeState::Relocating),
            node("p2", 0, NodeState::Serving),
            node("p3", 50, NodeState::Serving),
            full,
            node("p5", 0, NodeState::Relocating),
        ];
        let decided = d.next(now, &view, |_| true, true);
        let to: BTreeMap<String, String> = decided
            .iter()
            .filter_map(|d| match d {
                Decision::Move { unit, to } => Some((unit.to_string(), to.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(to.get("spot:on-p3").map(String::as_str), Some("p3"));
        assert_eq!(
            to.get("spot:on-full").map(String::as_str),
            Some("p2"),
            "its holder is full"
        );
        assert_eq!(
            to.get("spot:on-draining").map(String::as_str),
            Some("p2"),
            "its holder drains"
        );
        assert_eq!(to.get("spot:none").map(String::as_str), Some("p2"));
    }

    #[test]
    fn a_room_its_standbys_node_did_not_take_is_tried_again_where_it_would_have_gone() {
        let now = Instant::now();
        let mut d = drain(now);
        d.found(Found {
            standby: Some(NodeId::new("p3").unwrap()),
            ..room("r", 1)
        });
        let view = [
            node("p1", 4, NodeState::Relocating),
            node("p2", 0, NodeState::Serving),
            node("p3", 50, NodeState::Serving),
        ];
        let first = d.next(now, &view, |_| true, true);
        assert_eq!(
            targets(&first).get("p3"),
            Some(&1),
            "its standby's node first"
        );
        // p3 died with its lease still running: the move fails for a reason not retried as such.
        let failed = Ended::NotMoved(Some(BlockedReason::RelocationFailed));
        let again = d.ended(&room("r", 1).unit, failed.clone(), now, true);
        assert!(matches!(again, Decision::Again { .. }), "{again:?}");
        let later = now + RETRY_PAUSE;
        let second = d.next(later, &view, |_| true, true);
        assert_eq!(
            targets(&second).get("p2"),
            Some(&1),
            "then where it would have gone"
        );
        // A move that fails again for that reason is not retried: the room stays.
        let stays = d.ended(&room("r", 1).unit, failed, later, true);
        assert!(matches!(stays, Decision::Stays { .. }), "{stays:?}");
    }

    #[test]
    fn a_room_with_its_players_weighs_on_its_target_as_all_its_units() {
        let now = Instant::now();
        let mut d = drain(now);
        // 39 rooms of five units each; p2 holds 60 units, p3 holds 195.
        for i in 0..39 {
            assert_eq!(d.found(room(&format!("fps-{i}"), 5)), None);
        }
        let view = [
            node("p1", 195, NodeState::Relocating),
            node("p2", 60, NodeState::Serving),
            node("p3", 195, NodeState::Serving),
        ];
        let decided = d.next(now, &view, |_| true, true);
        let to = targets(&decided);
        // 450 units in all: each ends with 225, give or take a room. Counted as one per room, p2
        // would take all 39 (60 + 39 is still below 195).
        assert_eq!(to.values().sum::<usize>(), 39);
        let p2 = to.get("p2").copied().unwrap_or(0);
        assert!((32..=34).contains(&p2), "p2 took {p2} rooms: {to:?}");
    }

    #[test]
    fn a_unit_that_left_and_came_back_is_moved_too() {
        let now = Instant::now();
        let mut d = drain(now);
        let view = [node("p2", 0, NodeState::Serving)];
        let a = room("a", 2);
        d.found(a.clone());
        let first = d.next(now, &view, |_| false, true);
        assert_eq!(
            first,
            vec![Decision::Left {
                unit: a.unit.clone(),
                size: 2
            }]
        );
        // Taken back here (an earlier process of this node held it): it leaves with the rest.
        assert_eq!(d.found(a), None);
        let second = d.next(now, &view, |_| true, true);
        assert_eq!(targets(&second).get("p2"), Some(&1));
        assert!(!d.done(now));
    }

    #[test]
    fn a_move_still_arriving_keeps_the_drain_open_and_its_unit_joins_it() {
        let now = Instant::now();
        let mut d = drain(now);
        let view = [node("p2", 0, NodeState::Serving)];
        d.found(room("a", 1));
        d.arriving(1);
        let first = d.next(now, &view, |_| true, true);
        assert_eq!(targets(&first).get("p2"), Some(&1));
        d.ended(&room("a", 1).unit, Ended::Moved, now, false);
        assert!(!d.done(now), "a move into the node may still open there");
        // It opened here: it joins the inventory and leaves too.
        d.arriving(0);
        d.found(room("b", 4));
        assert!(!d.done(now));
        let second = d.next(now, &view, |_| true, true);
        assert_eq!(targets(&second).get("p2"), Some(&1));
        d.ended(&room("b", 4).unit, Ended::Moved, now, false);
        assert!(d.done(now));
        let (_, outcome) = d.finish(|_| Vec::new());
        assert_eq!(outcome, RelocateOutcome::Relocated { moved: 5 });
        assert_eq!(d.total(), 5);
    }

    #[test]
    fn a_drain_past_its_deadline_with_a_move_still_arriving_is_not_relocated() {
        let now = Instant::now();
        let mut d = drain(now);
        d.arriving(1);
        let later = now + Duration::from_secs(31);
        assert!(d.done(later));
        let (_, outcome) = d.finish(|_| Vec::new());
        assert!(
            matches!(
                outcome,
                RelocateOutcome::Blocked {
                    reason: BlockedReason::DeadlineExceeded,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert!(!safe_to_shutdown(NodeState::Serving, 0, 1));
        assert!(!safe_to_shutdown(NodeState::Relocated, 0, 1));
        assert!(safe_to_shutdown(NodeState::Relocated, 0, 0));
    }

    #[test]
    fn a_unit_whose_target_could_not_take_it_yet_is_tried_again_after_a_pause() {
        let now = Instant::now();
        let mut d = drain(now);
        let view = [node("p2", 0, NodeState::Serving)];
        let a = room("a", 1);
        d.found(a.clone());
        assert_eq!(d.next(now, &view, |_| true, true).len(), 1);
        let again = d.ended(
            &a.unit,
            Ended::NotMoved(Some(BlockedReason::TargetUnavailable)),
            now,
            true,
        );
        assert!(matches!(again, Decision::Again { .. }), "{again:?}");
        assert_eq!(d.next_try(), Some(now + RETRY_PAUSE));
        assert!(d.next(now, &view, |_| true, true).is_empty(), "not at once");
        let moved = d.next(now + RETRY_PAUSE, &view, |_| true, true);
        assert!(
            matches!(&moved[..], [Decision::Move { unit, .. }] if *unit == a.unit),
            "{moved:?}"
        );
        assert_eq!(
            d.next_try(),
            None,
            "a unit that started again pauses no more"
        );
    }

    #[test]
    fn the_next_try_is_the_earliest_pause_of_a_unit_still_here() {
        let now = Instant::now();
        let mut d = drain(now);
        let view = [node("p2", 0, NodeState::Serving)];
        let (a, b) = (room("a", 1), room("b", 1));
        d.found(a.clone());
        d.found(b.clone());
        assert_eq!(d.next(now, &view, |_| true, true).len(), 2);
        let busy = Ended::NotMoved(Some(BlockedReason::TargetUnavailable));
        let later = now + Duration::from_millis(7);
        d.ended(&b.unit, busy.clone(), later, true);
        d.ended(&a.unit, busy, now, true);
        assert_eq!(d.next_try(), Some(now + RETRY_PAUSE));
        // `a` left by another path while it paused: only `b`'s pause is left to wait for.
        let left = d.next(now, &view, |unit| *unit != a.unit, true);
        assert!(matches!(&left[..], [Decision::Left { .. }]), "{left:?}");
        assert_eq!(d.next_try(), Some(later + RETRY_PAUSE));
    }

    #[test]
    fn a_unit_another_move_took_away_is_not_reported_as_stayed() {
        let now = Instant::now();
        let mut d = drain(now);
        let view = [node("p2", 0, NodeState::Serving)];
        let a = room("a", 3);
        d.found(a.clone());
        d.next(now, &view, |_| true, true);
        // Its lane was in another move: tried again while that one runs...
        let again = d.ended(
            &a.unit,
            Ended::NotMoved(Some(BlockedReason::OperationInProgress)),
            now,
            true,
        );
        assert!(matches!(again, Decision::Again { .. }), "{again:?}");
        // ...and once it went through, the unit is gone from here: it left, it did not stay.
        let left = d.next(now, &view, |_| false, true);
        assert_eq!(
            left,
            vec![Decision::Left {
                unit: a.unit.clone(),
                size: 3
            }]
        );
        assert!(d.done(now));
        let (stays, outcome) = d.finish(|_| Vec::new());
        assert!(stays.is_empty());
        assert_eq!(outcome, RelocateOutcome::Relocated { moved: 0 });
    }

    #[test]
    fn with_no_other_node_serving_the_drain_ends_at_once_and_says_so() {
        let now = Instant::now();
        let mut d = drain(now);
        d.found(room("a", 5));
        let view = [
            node("p1", 5, NodeState::Relocating),
            node("p2", 0, NodeState::Relocated),
        ];
        assert!(d.next(now, &view, |_| true, true).is_empty());
        assert!(d.done(now), "nothing can take anything: no need to wait");
        let (stays, outcome) = d.finish(|_| Vec::new());
        assert!(matches!(
            stays.as_slice(),
            [Decision::Stays {
                reason: BlockedReason::NoServingPeer,
                size: 5,
                ..
            }]
        ));
        assert!(
            matches!(
                outcome,
                RelocateOutcome::Blocked {
                    reason: BlockedReason::NoServingPeer,
                    ..
                }
            ),
            "{outcome:?}"
        );
    }

    #[test]
    fn peers_missing_from_a_later_view_are_waited_for() {
        let now = Instant::now();
        let mut d = drain(now);
        d.found(room("a", 1));
        d.found(room("b", 1));
        let view = [node("p2", 0, NodeState::Serving)];
        let started = d.next(now, &view, |_| true, true);
        assert_eq!(targets(&started).get("p2"), Some(&2));
        d.ended(
            &room("a", 1).unit,
            Ended::NotMoved(Some(BlockedReason::StoreUnavailable)),
            now,
            true,
        );
        // The store failed over and gave a view without p2: it may come back.
        assert!(d.next(now, &[], |_| true, true).is_empty());
        assert!(!d.done(now));
    }

    #[test]
    fn a_drain_that_begins_while_a_peers_lease_lapsed_unconfirmed_waits_for_it() {
        let now = Instant::now();
        let mut d = drain(now);
        d.found(room("a", 1));
        // The store failed over and lost the peer's renewals: it is missing from the view, but
        // the mesh still vouches for it.
        d.lapsed(1);
        assert!(d.next(now, &[], |_| true, true).is_empty());
        assert!(!d.done(now), "not judged while a peer may serve again");
        let view = [node("p2", 0, NodeState::Serving)];
        d.lapsed(0);
        let moved = d.next(now, &view, |_| true, true);
        assert!(matches!(&moved[..], [Decision::Move { .. }]), "{moved:?}");
    }

    #[test]
    fn a_rolling_update_waits_for_a_node_of_its_version_even_with_no_other_node_up() {
        let now = Instant::now();
        let mut d = rolling_update_of_one_room(now);
        assert!(d.next(now, &[], |_| true, true).is_empty());
        assert!(!d.done(now), "a node of version 2 may come up");
    }

    #[test]
    fn a_node_of_the_wrong_version_is_waited_for_until_the_deadline() {
        let now = Instant::now();
        let mut d = rolling_update_of_one_room(now);
        let view = [node("p2", 0, NodeState::Serving)];
        assert!(d.next(now, &view, |_| true, true).is_empty());
        assert!(!d.done(now), "a node of version 2 may come up");
        let later = now + Duration::from_secs(2);
        assert!(d.done(later));
        let (_, outcome) = d.finish(|_| Vec::new());
        assert!(matches!(
            outcome,
            RelocateOutcome::Blocked {
                reason: BlockedReason::TargetUnavailable,
                ..
            }
        ));
    }

    #[test]
    fn moves_start_in_order_and_no_more_than_the_limit_at_once() {
        let now = Instant::now();
        let mut d = Drain::new(
            NodeId::new("p1").unwrap(),
            None,
            now + Duration::from_secs(30),
            2,
        );
        let view = [node("p2", 0, NodeState::Serving)];
        d.found(room("r", 1));
        let actor = Found {
            unit: UnitId::Actor(crate::ids::ActorId::new("a").unwrap()),
            factory: "room".into(),
            batch: Batch::Actor,
            ..room("x", 1)
        };
        d.found(actor.clone());
        d.found(room("s", 1));
        let first = d.next(now, &view, |_| true, true);
        let units: Vec<_> = first
            .iter()
            .filter_map(|d| match d {
                Decision::Move { unit, .. } => Some(unit.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(
            units,
            vec![actor.unit.to_string(), room("r", 1).unit.to_string()]
        );
        assert!(
            d.next(now, &view, |_| true, true).is_empty(),
            "two move already"
        );
    }
}
