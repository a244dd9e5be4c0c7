//! Who is alive, and who may run turns: owner leases renewed every third of their TTL, the mesh's
//! witness ([`Witness`], [`may_run`]) fed by probes, membership read from the store, processes
//! that crash, restart, start twice or stop for good, and recovery of dead nodes' units by the
//! coordinator with the core's planner ([`census`], [`plan_node`]).
//!
//! [`Witness`]: ferry_core::witness::Witness
//! [`may_run`]: ferry_core::witness::may_run

use std::collections::{BTreeMap, BTreeSet};

use ferry_core::authority::{NodeDescriptor, UnitRecord};
use ferry_core::ids::ObjectGeneration;
use ferry_core::lease::{self, HeldLease, Retake};
use ferry_core::recovery::{
    Found, NamedRecords, census, coordinator, earlier_process_stopped, left_by_earlier_process,
    plan_node, takes_rebuilds,
};
use ferry_core::standby::Series;
use ferry_core::witness::{Lapsed, Verdict, Witness};

use super::links::Msg;
use super::store::{Cond, Key, Op, Purpose, Reply};
use super::{KEEP_EVERY, Node, PROBE_EVERY, TIMES, TTL, Timer, World, node_id, node_index};

impl World {
    /// Starts a process of node `n`: it takes over the lease of its id and joins the mesh.
    pub(crate) fn boot(&mut self, n: usize) {
        let holder = self.fresh();
        let now = self.now;
        let process = self.nodes[n].process + 1;
        let mut node = Node::new(now);
        node.up = true;
        node.process = process;
        let generation = self.store.acquire(n, holder, now);
        node.lease = Some((generation, holder));
        node.first_generation = generation;
        node.lease_until = now + TTL;
        node.epoch = self.store.epoch;
        node.floor = self.store.revision();
        node.witness = Witness::new(now);
        self.nodes[n] = node;
        self.arm(now + KEEP_EVERY, Timer::Keep { node: n, process });
        self.arm(now + PROBE_EVERY, Timer::Probe { node: n, process });
        if generation > 1 {
            self.nodes[n].adopting = true;
            self.arm(
                earlier_process_stopped(now, &TIMES),
                Timer::Adopt { node: n, process },
            );
        }
        self.links_up(n);
        trace!(
            self,
            "n{n}: process {process} up, lease generation {generation}"
        );
    }

    fn descriptor(&self, n: usize) -> NodeDescriptor {
        let node = &self.nodes[n];
        NodeDescriptor {
            node: node_id(n),
            mesh_addr: None,
            app_version: "1".into(),
            state: node.state,
            capacity: 1_000_000,
            units: node.directory.len() as u64,
            weight: 0,
            factories: vec!["player".into(), "room".into()],
            lease_generation: node.lease.map_or(0, |(g, _)| g),
            peers: node.witness.peers(),
        }
    }

    /// Whether a call from `n` reaches the store it knows.
    pub(crate) fn store_reachable(&self, n: usize) -> bool {
        let node = &self.nodes[n];
        !node.store_cut && node.epoch == self.store.epoch && self.store.revision() >= node.floor
    }

    /// Writes the node's descriptor.
    pub(crate) fn publish(&mut self, n: usize) {
        if self.store_reachable(n) {
            let descriptor = self.descriptor(n);
            self.store.publish(n, descriptor);
            self.nodes[n].floor = self.store.revision();
        }
    }

    /// The keeper's round: renew the lease (or take it again), read membership, recover.
    pub(crate) fn keep(&mut self, n: usize) {
        let process = self.nodes[n].process;
        self.arm(self.now + KEEP_EVERY, Timer::Keep { node: n, process });
        if !self.node_may_run(n) {
            self.fence_node(
                n,
                "the owner lease ran out, and the mesh no longer vouches for it",
            );
            return;
        }
        // A drain looks again: a move into the node may have opened, a target may be free.
        self.drive_drain(n);
        if !self.store_reachable(n) {
            return;
        }
        let Some((generation, holder)) = self.nodes[n].lease else {
            return;
        };
        if self.store.renew(n, generation, self.now) {
            self.nodes[n].lease_until = self.now + TTL;
        } else {
            // The store let the lease lapse (an outage), or another process took it.
            let found = self.store.lease_of(n, self.now).map(|l| HeldLease {
                generation: l.generation,
                holder: l.holder,
            });
            match lease::after_lost(holder, generation, found) {
                Retake::TakenByAnother => {
                    self.fence_node(n, "another process took over its owner lease");
                    return;
                }
                // The simulated store answers every acquisition: none of this process's is lost.
                Retake::AlreadyOurs | Retake::Acquire => {
                    let generation = self.store.acquire(n, holder, self.now);
                    self.nodes[n].lease = Some((generation, holder));
                    self.publish(n);
                    if !self.node_may_run(n) {
                        self.fence_node(n, "the lease was taken again too late");
                        return;
                    }
                    self.nodes[n].lease_until = self.now + TTL;
                    trace!(
                        self,
                        "n{n}: lease lapsed while the store was out of reach; taken again (generation {generation})"
                    );
                }
            }
        }
        self.refresh(n);
        self.standby_keep(n);
    }

    /// Reads membership: who is live, who lapsed, and whom the mesh confirms dead.
    pub(crate) fn refresh(&mut self, n: usize) {
        if !self.store_reachable(n) {
            return;
        }
        self.publish(n);
        let now = self.now;
        let mut live = Vec::new();
        let mut lapsed = Vec::new();
        for (&m, (version, d)) in self.store.descriptors() {
            let lease = self.store.live_lease(m, now);
            if lease.is_some_and(|l| l.generation == d.lease_generation) {
                live.push(d.clone());
            } else if m != n {
                lapsed.push(Lapsed {
                    node: d.node.clone(),
                    version: *version,
                    generation: d.lease_generation,
                    counts_on_me: d.peers.contains(&node_id(n)),
                });
            }
        }
        let peers: Vec<_> = live
            .iter()
            .map(|d| d.node.clone())
            .chain(lapsed.iter().map(|l| l.node.clone()))
            .filter(|p| *p != node_id(n))
            .collect();
        let verdicts = self.nodes[n]
            .witness
            .read(now, now, &peers, &lapsed, &TIMES, true);
        let mut dead = BTreeSet::new();
        let mut suspected = BTreeSet::new();
        for (node, verdict) in verdicts {
            match verdict {
                Verdict::Dead => dead.insert(node_index(&node)),
                Verdict::Suspected => suspected.insert(node_index(&node)),
            };
        }
        let present: BTreeSet<usize> = live
            .iter()
            .map(|d| node_index(&d.node))
            .chain(suspected.iter().copied())
            .collect();
        let before: BTreeSet<usize> = self.nodes[n]
            .view
            .iter()
            .map(|d| node_index(&d.node))
            .chain(self.nodes[n].suspected.iter().copied())
            .collect();
        for gone in before
            .difference(&present)
            .copied()
            .filter(|&g| g != n)
            .collect::<Vec<_>>()
        {
            trace!(self, "n{n}: n{gone} left the cluster");
            self.owner_left(n, gone);
            self.forget_peer(n, gone);
            self.nodes[n].routes.forget_node(&node_id(gone));
            self.nodes[n].gone.insert(gone);
            // Moves from it will never get their cutover, nor offer what they pre-copied.
            self.nodes[n].precopied.retain(|_, p| p.source != gone);
            let staged: Vec<u64> = self.nodes[n]
                .incoming
                .iter()
                .filter(|(_, t)| t.from == gone)
                .map(|(&r, _)| r)
                .collect();
            for rel in staged {
                self.target_event(
                    n,
                    rel,
                    ferry_core::relocation::protocol::TargetEvent::Silence,
                );
            }
        }
        for p in &present {
            self.nodes[n].gone.remove(p);
        }
        let node = &mut self.nodes[n];
        node.view = live;
        node.suspected = suspected;
        node.dead = dead;
        self.recover(n);
    }

    /// A recovery pass, if this node coordinates recovery and knows of a dead node.
    pub(crate) fn recover(&mut self, n: usize) {
        let coordinates = coordinator(&self.nodes[n].view) == Some(&node_id(n));
        if coordinates
            && !self.nodes[n].dead.is_empty()
            && self.node_may_run(n)
            && self.nodes[n].lease_until > self.now
        {
            self.call(n, Op::Scan, Purpose::Recovery);
        }
    }

    /// The coordinator read every record: it rebuilds what dead nodes left, as the core plans.
    pub(crate) fn recovery_scan(&mut self, n: usize, reply: Reply) {
        let Reply::Scanned(all, standbys) = reply else {
            return;
        };
        let records: Vec<Found> = all
            .into_iter()
            .map(|(u, version, record)| Found {
                id: self.unit_id(u),
                record,
                version,
            })
            .collect();
        let node = &self.nodes[n];
        let live: BTreeSet<_> = node.view.iter().map(|d| d.node.clone()).collect();
        let suspected: BTreeSet<_> = node.suspected.iter().map(|&s| node_id(s)).collect();
        let census = census(records, &live, &suspected, &node_id(n));
        let mut tally = census.tally;
        let mut spots = census.spots;
        let mut deferred = false;
        for (dead, units) in census.orphans {
            if !self.nodes[n].dead.contains(&node_index(&dead)) {
                continue;
            }
            let owner_descriptor = self.nodes[n].witness.dead_at(&dead);
            let named: NamedRecords = standbys
                .iter()
                .map(|(u, version, named)| (self.unit_id(*u), (named.clone(), *version)))
                .collect();
            let keeps_standby = |f: &Found| self.policy(self.unit_index(&f.id)).keeps_standby();
            let view = &self.nodes[n].view;
            let plan = plan_node(
                units,
                |_| false,
                view,
                &tally,
                &spots,
                &named,
                keeps_standby,
            );
            for (id, why) in &plan.fresh {
                trace!(self, "n{n}: recovery rebuilds {id} from nothing: {why}");
            }
            deferred |= !plan.deferred.is_empty();
            // A room with a standby goes to its holder, whose copy is promoted.
            let promoted = plan.promote.into_iter().map(|p| {
                let promote = Some((p.series, p.standby_version));
                (p.room, p.holder, promote)
            });
            let rebuilt = plan
                .rebuild
                .into_iter()
                .map(|(f, target)| (f, target, None));
            for (found, target, promote) in promoted.chain(rebuilt).collect::<Vec<_>>() {
                trace!(
                    self,
                    "n{n}: recovery brings back {} of dead {dead} on {target}", found.id
                );
                *tally.entry(target.clone()).or_default() += 1;
                if let ferry_core::ids::UnitId::Spot(spot) = &found.id {
                    spots.insert(spot.clone(), target.clone());
                }
                self.send_recover(n, node_index(&target), found, (owner_descriptor, promote));
            }
            for found in plan.members {
                let Some(target) = found
                    .record
                    .spot
                    .as_ref()
                    .and_then(|s| spots.get(s))
                    .cloned()
                else {
                    continue;
                };
                self.send_recover(n, node_index(&target), found, (owner_descriptor, None));
            }
        }
        // Members of rooms promoted now: the next pass, once the promotions landed, rebuilds any
        // their copies did not hold. The runtime runs it as soon as its promotions are answered;
        // here, where they land later, it comes a probe period on.
        if deferred {
            let process = self.nodes[n].process;
            self.arm(self.now + PROBE_EVERY, Timer::Recover { node: n, process });
        }
    }

    /// The earlier process of this id certainly runs no turns now: read what it held.
    pub(crate) fn adopt(&mut self, n: usize) {
        self.call(n, Op::Scan, Purpose::Adopt);
    }

    /// Rebuilds here, fresh, every unit an earlier process of this id held; looks again at the
    /// next keeper round while any is left (the store did not answer, or a claim did not land).
    pub(crate) fn adopted(&mut self, n: usize, reply: Reply) {
        let Reply::Scanned(all, _) = reply else {
            let process = self.nodes[n].process;
            self.arm(self.now + KEEP_EVERY, Timer::Adopt { node: n, process });
            return;
        };
        let records: Vec<Found> = all
            .into_iter()
            .map(|(u, version, record)| Found {
                id: self.unit_id(u),
                record,
                version,
            })
            .collect();
        let first = self.nodes[n].first_generation;
        let left = left_by_earlier_process(records, &node_id(n), first);
        if left.is_empty() {
            self.nodes[n].adopting = false;
        } else {
            // Looked at again next round, until every one is taken back.
            let process = self.nodes[n].process;
            self.arm(self.now + KEEP_EVERY, Timer::Adopt { node: n, process });
        }
        for found in left {
            let unit = self.unit_index(&found.id);
            if self.lane_of(n, unit).is_some() {
                continue;
            }
            trace!(
                self,
                "n{n}: takes back u{unit}, which its earlier process held"
            );
            let wrote = self.rebuilt_record(n, &found.record);
            let cells = BTreeMap::from([(unit, self.fresh_cell(unit))]);
            self.claim(
                n,
                unit,
                (cells, Vec::new()),
                wrote,
                vec![Cond::Version(Key::Unit(unit), found.version)],
            );
        }
    }

    /// The record of a unit rebuilt here from `previous`: a new incarnation, owned here.
    fn rebuilt_record(&mut self, n: usize, previous: &UnitRecord) -> UnitRecord {
        // A new incarnation, as the runtime draws it at random.
        let incarnation = ObjectGeneration(self.fresh() + 1_000_000);
        previous.rebuilt(
            node_id(n),
            self.nodes[n].lease.map_or(0, |(g, _)| g),
            incarnation,
            &previous.factory,
        )
    }

    fn send_recover(
        &mut self,
        n: usize,
        target: usize,
        found: Found,
        (owner_descriptor, promote): (Option<u64>, Option<(Series, u64)>),
    ) {
        let unit = self.unit_index(&found.id);
        let msg = Msg::Recover {
            unit,
            version: found.version,
            previous: Box::new(found.record),
            owner_descriptor,
            promote,
        };
        self.post(n, target, msg);
    }

    /// Rebuilds a dead node's unit here, gated on its record and the dead node's descriptor
    /// being as the coordinator saw them, and on this node's lease; or promotes its standby copy
    /// held here, gated on the standby record too.
    pub(crate) fn on_recover(
        &mut self,
        n: usize,
        unit: usize,
        version: u64,
        previous: UnitRecord,
        (owner_descriptor, promote): (Option<u64>, Option<(Series, u64)>),
    ) {
        if self.lane_of(n, unit).is_some() || !takes_rebuilds(self.nodes[n].state) {
            return;
        }
        let owner = node_index(&previous.owner);
        let descriptor = match owner_descriptor {
            Some(at) => Cond::Version(Key::Node(owner), at),
            None => Cond::Absent(Key::Node(owner)),
        };
        let wrote = self.rebuilt_record(n, &previous);
        let mut conds = vec![Cond::Version(Key::Unit(unit), version), descriptor];
        let (cell, queue, promoted) = self.promoted_cell(n, (unit, owner), promote, &mut conds);
        let cells = BTreeMap::from([(unit, cell)]);
        let lane = self.claim(n, unit, (cells, queue), wrote, conds);
        if let Some(promoting) = promoted {
            self.promoting(n, lane, promoting);
        }
    }

    /// Probes every peer; stops running turns once no longer vouched for.
    pub(crate) fn probe(&mut self, n: usize) {
        let process = self.nodes[n].process;
        self.arm(self.now + PROBE_EVERY, Timer::Probe { node: n, process });
        if !self.node_may_run(n) {
            self.fence_node(
                n,
                "the owner lease ran out, and the mesh no longer vouches for it",
            );
            return;
        }
        let stamp = self.nodes[n].witness.stamp(self.now);
        let generation = self.nodes[n].lease.map_or(0, |(g, _)| g);
        for peer in self.nodes[n].witness.peers() {
            self.post(n, node_index(&peer), Msg::Probe { stamp, generation });
        }
        // Between keeper rounds membership is read again while a peer is silent, as the runtime
        // reads it: a crashed node is found soon after it can be.
        if self.nodes[n]
            .witness
            .read_due(self.now, KEEP_EVERY, PROBE_EVERY, true)
        {
            self.refresh(n);
        }
    }

    pub(crate) fn on_probe(&mut self, n: usize, from: usize, stamp: u64, generation: u64) {
        let now = self.now;
        let vouched = self.nodes[n]
            .witness
            .probed_by(&node_id(from), generation, now);
        let running = self.node_may_run(n);
        self.post(
            n,
            from,
            Msg::ProbeAnswer {
                stamp,
                running,
                vouched,
            },
        );
    }

    pub(crate) fn on_probe_answer(
        &mut self,
        n: usize,
        from: usize,
        stamp: u64,
        running: bool,
        vouched: bool,
    ) {
        if vouched {
            let now = self.now;
            self.nodes[n]
                .witness
                .answered(&node_id(from), stamp, running, now);
        } else {
            self.fence_node(n, &format!("n{from} has taken it for dead"));
        }
    }

    /// The node stops for good (its process exits): it may no longer run turns.
    pub(crate) fn fence_node(&mut self, n: usize, why: &str) {
        if self.nodes[n].up {
            self.end_process(n, &format!("stops: {why}"));
        }
    }

    /// A step kills a process.
    pub(crate) fn crash(&mut self, n: usize, why: &str) {
        let up = self.nodes.iter().filter(|n| n.up).count();
        if self.nodes[n].up && up > 1 {
            self.end_process(n, why);
        }
    }

    /// A process ends: everything it held is gone.
    pub(crate) fn end_process(&mut self, n: usize, why: &str) {
        trace!(self, "n{n}: process {} {why}", self.nodes[n].process);
        self.lossy = true;
        self.touched.extend(0..self.shape.units());
        self.forget_process(n);
        self.links_down(n);
        self.outgoing.retain(|_, (node, _)| *node != n);
        let node = &mut self.nodes[n];
        node.up = false;
        node.lanes.clear();
        node.directory.clear();
        node.incoming.clear();
        node.requests.clear();
        node.calls.clear();
        node.safe = false;
        self.drains.remove(&n);
        self.drain_moves.retain(|_, (node, _)| *node != n);
        self.gateway_down(n);
        self.standby_ended(n);
    }

    /// A process whose id has none running starts, empty; its last one is gone, so it takes
    /// over the lease at once.
    pub(crate) fn restart(&mut self, n: usize) {
        if self.nodes[n].up {
            return;
        }
        self.boot(n);
        self.publish(n);
        self.refresh(n);
    }

    /// A second process starts with a live node's id while the first stalls past the holder
    /// probe: it takes the lease over, and the first runs on until it notices.
    pub(crate) fn duplicate(&mut self, n: usize) {
        if !self.nodes[n].up {
            return;
        }
        trace!(
            self,
            "n{n}: a second process starts while process {} stalls", self.nodes[n].process
        );
        self.lossy = true;
        self.touched.extend(0..self.shape.units());
        self.links_down(n);
        self.drains.remove(&n);
        self.drain_moves.retain(|_, (node, _)| *node != n);
        // Cut off from the mesh, the stalled process's moves go no further.
        self.outgoing.retain(|_, (node, _)| *node != n);
        let now = self.now;
        let old = std::mem::replace(&mut self.nodes[n], Node::new(now));
        self.nodes[n].process = old.process + 1;
        let ghost_process = old.process;
        self.ghosts.push((n, old));
        // The new process is numbered after the ghost.
        self.nodes[n].process = ghost_process;
        self.boot(n);
        self.publish(n);
        self.refresh(n);
        // The stalled process wakes at its next keeper round.
        self.arm(
            now + KEEP_EVERY,
            Timer::Ghost {
                node: n,
                process: ghost_process,
            },
        );
    }

    /// A stalled process resumes its keeper round: the store says another process holds its id.
    pub(crate) fn ghost_keep(&mut self, n: usize, process: u64) {
        let Some(at) = self
            .ghosts
            .iter()
            .position(|(node, g)| *node == n && g.process == process)
        else {
            return;
        };
        let (_, ghost) = self.ghosts.remove(at);
        trace!(
            self,
            "n{n}: stalled process {process} stops: another process took over its owner lease ({} lanes dropped)",
            ghost.lanes.len()
        );
        self.touched.extend(0..self.shape.units());
    }
}
