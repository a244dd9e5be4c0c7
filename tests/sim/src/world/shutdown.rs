//! A node's graceful stop, as the runtime's shutdown does it: the node takes no unit any more,
//! moves into it that have not reached their commit go back to their sources
//! ([`TargetEvent::Stopping`]), a commit in flight is waited for (up to the deadline) so that a
//! unit it opens is closed and released with the others, then every unit it runs ends and its
//! record is released, and the process exits.

use std::time::Duration;

use ferry_core::authority::NodeState;
use ferry_core::relocation::lane::Moving;
use ferry_core::relocation::protocol::TargetEvent;

use super::store::{Key, Op, Purpose};
use super::{Event, Timer, World};

/// How long a shutdown waits for moves into its node to be decided: the runtime's default.
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(30);

impl World {
    /// `node`, which began to drain or stop, gives back the moves staged on it that have not
    /// reached their commit ([`TargetEvent::Stopping`]); a commit in flight is waited for.
    pub(super) fn stop_arrivals(&mut self, node: usize) {
        let staged: Vec<u64> = self.nodes[node].incoming.keys().copied().collect();
        for rel in staged {
            self.target_event(node, rel, TargetEvent::Stopping);
        }
    }

    /// `node` begins to shut down (unless it is the last one up, which a crash spares too).
    pub(crate) fn shutdown(&mut self, node: usize) {
        let up = self.nodes.iter().filter(|n| n.up).count();
        let n = &self.nodes[node];
        if !n.up || n.stopping || up < 2 {
            return;
        }
        trace!(self, "n{node}: shutdown begins");
        self.nodes[node].state = NodeState::Draining;
        self.nodes[node].safe = false;
        self.drains.remove(&node);
        self.publish(node);
        self.events.push(Event::StopArrivals { node });
        self.nodes[node].stopping = true;
        let process = self.nodes[node].process;
        self.arm(
            self.now + SHUTDOWN_WITHIN,
            Timer::Shutdown { node, process },
        );
        self.shut_once_decided(node);
    }

    /// A shutting-down node closes once no move into it may still open there.
    pub(crate) fn shut_once_decided(&mut self, node: usize) {
        let n = &self.nodes[node];
        if n.up && n.stopping && !n.incoming.values().any(|t| t.machine.may_open()) {
            self.close(node, false);
        }
    }

    /// Whether the store records `unit` on `node`, by the process that runs there now.
    fn recorded_on(&self, node: usize, unit: usize) -> bool {
        self.store.record(unit).is_some_and(|(_, r)| {
            super::node_index(&r.owner) == node
                && r.lease_generation >= self.nodes[node].first_generation
        })
    }

    /// A unit that exists and is recorded on a node that closes has a copy there to close and
    /// release (it may be in a move still undecided), or a release of it is under way.
    fn check_closable(&mut self, node: usize) {
        for unit in 0..self.shape.units() {
            let n = &self.nodes[node];
            let releasing = n
                .calls
                .values()
                .any(|p| matches!(p, Purpose::Release { unit: u } if *u == unit));
            if self.lives[unit].exists
                && self.recorded_on(node, unit)
                && !n.lanes.values().any(|l| l.cells.contains_key(&unit))
                && !releasing
            {
                self.broken.get_or_insert(format!(
                    "u{unit} stays recorded on n{node}, which shuts down with no copy of it"
                ));
            }
        }
    }

    /// Every unit the node runs ends, their records are released, and the process exits. What
    /// is still in a move (handed over, or, `at_deadline`, committing here) is left to the
    /// store's decision, as a process that exits leaves it.
    pub(crate) fn close(&mut self, node: usize, at_deadline: bool) {
        self.check_closable(node);
        let process = self.nodes[node].process;
        let undecided: Vec<u64> = if at_deadline {
            let incoming = self.nodes[node].incoming.values();
            incoming.filter_map(|t| t.lane).collect()
        } else {
            Vec::new()
        };
        let closing: Vec<u64> = self.nodes[node]
            .lanes
            .iter()
            .filter(|(id, l)| {
                !undecided.contains(id) && !matches!(l.stance.moving(), Some(Moving::Handed { .. }))
            })
            .map(|(id, _)| *id)
            .collect();
        let mut released = Vec::new();
        for lane in closing {
            let Some(l) = self.nodes[node].lanes.get(&lane) else {
                continue;
            };
            // Its closing callback runs only on a copy that opened: a staged one never does.
            if l.stance.is_restored() && !l.stance.is_open() {
                self.broken.get_or_insert(format!(
                    "n{node} closes a staged copy of u{} that never opened",
                    l.primary
                ));
            }
            let Some(mut l) = self.drop_lane(node, lane) else {
                continue;
            };
            for (&unit, cell) in l.cells.iter_mut() {
                // A copy whose claim did not win (a rebuild another node made first) has
                // nothing to release.
                if !self.recorded_on(node, unit) {
                    continue;
                }
                let life = &mut self.lives[unit];
                life.exists = false;
                life.renewed = true;
                released.push(Key::Unit(unit));
                self.binding_ended(node, unit, cell, "the node shut down");
            }
            for parcel in l.queue.into_iter().chain(l.hold).chain(l.gated) {
                self.give_up(node, parcel, "the node shut down");
            }
        }
        trace!(
            self,
            "n{node}: closes its units and releases {} records",
            released.len()
        );
        // The runtime waits for its releases before it exits; a store out of reach leaves them
        // to recovery.
        if self.store_reachable(node) {
            let lease = self.lease_cond(node);
            self.store.apply(
                &Op::Batch {
                    conds: vec![lease],
                    puts: Vec::new(),
                    deletes: released,
                },
                self.now,
                true,
            );
        }
        if self.nodes[node].process == process {
            self.end_process(node, "shut down");
        }
    }
}
