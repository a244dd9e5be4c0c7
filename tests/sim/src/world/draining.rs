//! Drains: the core's [`Drain`] decides which unit leaves for which node, what is tried again and
//! when the drain is over; the world starts the moves it decides, feeds back how each ended, and
//! takes in units that open on the draining node meanwhile. A node whose drain ended with
//! everything moved is reported safe to shut down: from then on it must hold no unit and receive
//! none (checked in `check`). The drain's moves seal only as many units at once as its seal window
//! ([`SealWindow`]) lets through.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use ferry_core::authority::{NodeDescriptor, NodeState};
use ferry_core::drain::{
    Batch, BlockedReason, Decision, Drain, Ended, Found, IN_FLIGHT, RelocateOutcome,
};
use ferry_core::ids::{NodeId, UnitId};
use ferry_core::relocation::protocol::MoveEnd;
use ferry_core::sealing::SealWindow;

use super::{Event, World, node_id};

/// How often a drain looks at its node's units when no move into the node may open: the
/// runtime's default `NodeConfig::refresh`.
const REFRESH: Duration = Duration::from_secs(1);

/// How long a drain may take, as an operator would set it: the runtime's 30 s, and a second more
/// per node, for a big cluster's moves end at their own short deadlines and are tried again.
fn drain_deadline(nodes: usize) -> Duration {
    Duration::from_secs(30 + nodes as u64)
}

/// What a drain sent where, as the world counts it: a room weighs on its target with all its
/// players, so that each unit goes to a target no more loaded than another serving one.
#[derive(Debug, Default)]
pub(crate) struct Spread {
    /// Each unit's size (a room with its players) as the drain last found it: a unit that left
    /// is found anew.
    sizes: BTreeMap<UnitId, usize>,
    /// Where each unit the drain moves now goes.
    moving: BTreeMap<UnitId, usize>,
    /// The node that kept each unit's standby copy as the drain last found it.
    standbys: BTreeMap<UnitId, Option<NodeId>>,
    /// How many units each target was sent and did not give back.
    sent: BTreeMap<usize, usize>,
    /// Units that left the node while it drained: found again, they are found anew.
    left: BTreeSet<UnitId>,
}

/// A drain's seal window, and the moves that wait for a place in it or for leave to pre-copy,
/// each in the order they asked.
#[derive(Debug)]
pub(crate) struct Gate {
    pub node: usize,
    pub window: SealWindow,
    pub waiting: VecDeque<u64>,
    pub copiers: VecDeque<u64>,
}

impl Spread {
    fn size(&self, unit: &UnitId) -> usize {
        self.sizes.get(unit).copied().unwrap_or(1)
    }
}

impl World {
    /// A drain of `node` begins: it takes no unit any more, and moves into it that have not
    /// reached their commit go back to their sources.
    pub(crate) fn drain(&mut self, node: usize) {
        if !self.nodes[node].up || self.drains.contains_key(&node) {
            return;
        }
        trace!(self, "n{node}: drain begins");
        let deadline = self.now + drain_deadline(self.nodes.len());
        let plan = Drain::new(node_id(node), None, deadline, IN_FLIGHT);
        self.drains.insert(node, plan);
        let gate = Gate {
            node,
            window: SealWindow::new(),
            waiting: VecDeque::new(),
            copiers: VecDeque::new(),
        };
        let id = self.fresh();
        self.gates.insert(id, gate);
        self.spreads.insert(node, Spread::default());
        self.nodes[node].state = NodeState::Relocating;
        self.nodes[node].safe = false;
        self.events.push(Event::StopArrivals { node });
        self.publish(node);
        self.drive_drain(node);
    }

    /// Takes the inventory again, starts what the drain decides, and ends it once it is over.
    pub(crate) fn drive_drain(&mut self, node: usize) {
        if !self.nodes[node].up {
            self.drains.remove(&node);
            return;
        }
        let Some(mut plan) = self.drains.remove(&node) else {
            return;
        };
        // Arrivals first, then the inventory, as the runtime's drain takes them: only while moves
        // into the node may open, or once a refresh period ([`Drain::inventory_due`]).
        let arriving = self.nodes[node].incoming.len() + usize::from(self.nodes[node].adopting);
        if plan.inventory_due(arriving, self.now, REFRESH) {
            for found in self.inventory(node) {
                if let Some(spread) = self.spreads.get_mut(&node) {
                    spread.sizes.entry(found.unit.clone()).or_insert(found.size);
                    let standby = found.standby.clone();
                    spread.standbys.entry(found.unit.clone()).or_insert(standby);
                    if spread.left.remove(&found.unit) {
                        self.found_again += 1;
                    }
                }
                if let Some(decision) = plan.found(found) {
                    self.carry_out(node, decision);
                }
            }
            plan.inventoried(self.now);
        }
        plan.arriving(arriving);
        plan.lapsed(self.nodes[node].suspected.len());
        let view = self.nodes[node].view.clone();
        let hosted = |unit: &UnitId| self.here_or_moving(node, self.unit_index(unit));
        let decided = plan.next(self.now, &view, hosted, !self.nodes[node].store_cut);
        self.spread(node, &decided);
        // The newest gate of the node is its drain's.
        let gate = self.gates.iter().rev().find(|(_, g)| g.node == node);
        let gate = gate.map(|(id, _)| *id);
        for decision in decided {
            if let Decision::Move { unit, to } = &decision {
                self.carry_out(node, decision.clone());
                let u = self.unit_index(unit);
                let to = super::node_index(to);
                // As the runtime's drain, it moves only what runs on its node: a unit whose lane
                // is in another move from there waits for that move's end.
                let here = self.lane_of(node, u).is_some()
                    && self.host(u).is_some_and(|(from, _)| from == node);
                match here.then(|| self.move_unit(u, to, gate)).flatten() {
                    Some(rel) => {
                        self.drain_moves.insert(rel, (node, unit.clone()));
                    }
                    None => {
                        let hosted = self.here_or_moving(node, u);
                        let reason = if here {
                            BlockedReason::TargetUnavailable
                        } else {
                            BlockedReason::OperationInProgress
                        };
                        let why = Ended::NotMoved(Some(reason));
                        let next = plan.ended(unit, why, self.now, hosted);
                        self.carry_out(node, next);
                    }
                }
                continue;
            }
            self.carry_out(node, decision);
        }
        if !plan.done(self.now) {
            self.drains.insert(node, plan);
            return;
        }
        let (stays, outcome) = plan.finish(|_| Vec::new());
        for decision in stays {
            self.carry_out(node, decision);
        }
        let hosted = self.nodes[node].lanes.len();
        let n = &self.nodes[node];
        let arriving = n.incoming.len() + usize::from(n.adopting);
        trace!(self, "n{node}: drain ends {outcome:?}");
        let n = &mut self.nodes[node];
        if let RelocateOutcome::Relocated { .. } = outcome {
            n.state = NodeState::Relocated;
            n.safe = ferry_core::drain::safe_to_shutdown(n.state, hosted, arriving);
        } else {
            n.state = NodeState::Serving;
            // It takes rebuilds again: what recovery sent it meanwhile comes in the next rounds.
            self.rebuilds_reopened = Some(self.now);
        }
        self.publish(node);
        self.operate();
    }

    /// A move the drain of its source started ended: the drain hears how.
    pub(crate) fn drain_move_ended(&mut self, rel: u64, end: &MoveEnd) {
        let Some((node, unit)) = self.drain_moves.remove(&rel) else {
            return;
        };
        let hosted = self.here_or_moving(node, self.unit_index(&unit));
        let ended = match end {
            MoveEnd::Moved => Ended::Moved,
            MoveEnd::Undecided => Ended::Undecided,
            MoveEnd::NotSealed(_) => Ended::NotMoved(Some(BlockedReason::OperationInProgress)),
            MoveEnd::Restored(_) | MoveEnd::Reclaimed => {
                Ended::NotMoved(Some(BlockedReason::TargetUnavailable))
            }
        };
        let now = self.now;
        let Some(plan) = self.drains.get_mut(&node) else {
            return;
        };
        let decision = plan.ended(&unit, ended, now, hosted);
        self.carry_out(node, decision);
        self.drive_drain(node);
    }

    /// A move that ended, or whose end waits past its deadline for the store (as the runtime's
    /// `SourceRun::go` returns then), gives its place in its drain's window back, with its unit's
    /// pause; a move waiting for a place may take it.
    pub(crate) fn leave_window(&mut self, rel: u64) {
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        if s.placed.is_none() || (s.machine.end().is_none() && !s.machine.undecided()) {
            return;
        }
        let Some((ticket, _)) = s.placed.take() else {
            return;
        };
        let pause = s.committed_at.zip(s.sealed_at).map(|(c, s)| c - s);
        let Some(gate) = s.gate.take() else {
            return;
        };
        if let Some(g) = self.gates.get_mut(&gate) {
            g.window.left(ticket, pause);
            trace!(
                self,
                "n{} move {rel} leaves the drain's window after {pause:?}; it lets {} through",
                g.node,
                g.window.limit()
            );
        }
        self.admit(gate);
        self.let_copy(gate);
    }

    /// Whether `unit` runs on `node`, or is in a move from there that has not ended (it may come
    /// back): a drain counts it as still there.
    fn here_or_moving(&self, node: usize, unit: usize) -> bool {
        self.lane_of(node, unit).is_some()
            || self
                .outgoing
                .values()
                .any(|(n, s)| *n == node && !s.ended && s.cells.contains_key(&unit))
    }

    /// What a drain decides needs nothing more of the world than its trace, and its spread to
    /// hear what was given back.
    fn carry_out(&mut self, node: usize, decision: Decision) {
        trace!(self, "n{node}: drain {decision:?}");
        let Some(spread) = self.spreads.get_mut(&node) else {
            return;
        };
        match &decision {
            Decision::Again { unit, .. } => {
                let size = spread.size(unit);
                if let Some(to) = spread.moving.remove(unit)
                    && let Some(sent) = spread.sent.get_mut(&to)
                {
                    *sent = sent.saturating_sub(size);
                }
            }
            Decision::Moved { unit, .. }
            | Decision::Held { unit, .. }
            | Decision::Stays { unit, .. } => {
                spread.moving.remove(unit);
            }
            // The drain forgets a unit that left: should it come back, it is found anew, with
            // the size and standby it has then.
            Decision::Left { unit, .. } => {
                spread.moving.remove(unit);
                spread.sizes.remove(unit);
                spread.standbys.remove(unit);
                spread.left.insert(unit.clone());
            }
            Decision::Move { .. } => {}
        }
    }

    /// The moves one round of a drain starts, on the view it took them on: each goes to a serving
    /// node no more loaded than another, counting what the drain sent it already, or to the node
    /// that keeps the room's standby copy.
    fn spread(&mut self, node: usize, decided: &[Decision]) {
        let Some(spread) = self.spreads.get_mut(&node) else {
            return;
        };
        let me = node_id(node);
        for decision in decided {
            let Decision::Move { unit, to } = decision else {
                continue;
            };
            let load = |d: &NodeDescriptor| {
                d.units as usize + spread.sent.get(&super::node_index(&d.node)).unwrap_or(&0)
            };
            let serving = self.nodes[node]
                .view
                .iter()
                .filter(|d| d.node != me && d.state == NodeState::Serving);
            let least = serving.clone().map(load).min();
            let chosen = serving.clone().find(|d| d.node == *to).map(load);
            if let (Some(least), Some(chosen)) = (least, chosen)
                && chosen > least
                && spread.standbys.get(unit) != Some(&Some(to.clone()))
            {
                self.broken.get_or_insert(format!(
                    "n{node}'s drain sent {unit} to {to}, which had {chosen} units with what it \
                     was sent, while another serving node had {least}"
                ));
            }
            let to = super::node_index(to);
            *spread.sent.entry(to).or_default() += spread.size(unit);
            spread.moving.insert(unit.clone(), to);
        }
    }

    /// The units `node` runs, one per open lane (a room with its members), as a drain sees them.
    fn inventory(&self, node: usize) -> Vec<Found> {
        let n = &self.nodes[node];
        let staged: Vec<u64> = n.incoming.values().filter_map(|t| t.lane).collect();
        n.lanes
            .iter()
            .filter(|(id, _)| !staged.contains(id))
            .map(|(_, lane)| {
                let room = self.is_room(lane.primary);
                Found {
                    unit: self.unit_id(lane.primary),
                    size: lane.cells.len(),
                    factory: self.factory(lane.primary).into(),
                    batch: if room { Batch::Room } else { Batch::Actor },
                    relocatable: true,
                    standby: self.standby_holder(node, lane.primary),
                }
            })
            .collect()
    }
}
