//! The location store: unit records, node descriptors and owner leases, with versions from one
//! revision counter, an epoch, and the faults a real store has (an answer lost, a node cut off, a
//! restart that forgets everything, a failover that loses acknowledged writes). A call reaches the
//! store as one event and its answer reaches the node as another, so both orders are explored.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use ferry_core::authority::{NodeDescriptor, UnitRecord};
use ferry_core::standby::checkpoints::Record;
use ferry_core::standby::promotion::Named;

use super::{Event, TTL, World};

/// A key of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// A unit's authority record.
    Unit(usize),
    /// A node's descriptor.
    Node(usize),
    /// A room's standby: which node holds the copy recovery promotes.
    Standby(usize),
}

/// A value of the store: a unit's record (descriptors are written by their own calls).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Unit(UnitRecord),
    Standby(Named),
}

/// A condition of a batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cond {
    /// The key is at this version.
    Version(Key, u64),
    /// The key is absent.
    Absent(Key),
    /// The writer's lease is live at this generation: an owner's write needs it.
    Lease { node: usize, generation: u64 },
}

/// What a node asks the store.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Read some unit records.
    Get(Vec<usize>),
    /// Read some unit records back after a write whose answer was lost: the store answers once
    /// its replicas hold everything it shows (`WAIT`), so what it shows survives a failover.
    ReadBack(Vec<usize>),
    /// Puts and deletes, applied all together if every condition holds, else none.
    Batch {
        conds: Vec<Cond>,
        puts: Vec<(Key, Value)>,
        deletes: Vec<Key>,
    },
    /// Every unit record, and every standby record.
    Scan,
}

/// What the store answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The records asked for, each with its version (`None`: absent).
    Got(Vec<Option<(u64, UnitRecord)>>),
    /// The batch was applied.
    Committed,
    /// A condition failed; nothing was written. Whether it was the writer's lease.
    Conflict { lease: bool },
    /// Every unit record with its version, and every standby record with its version.
    Scanned(Vec<(usize, u64, UnitRecord)>, Vec<(usize, u64, Named)>),
    /// The node could not reach the store: nothing was done.
    Unavailable,
    /// The answer was lost: the call may or may not have been applied.
    Unknown,
    /// The store is not the one this process knew (another epoch, or a revision it has seen
    /// passed): nothing was done.
    Reset,
}

/// One call on its way to the store.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub node: usize,
    pub process: u64,
    pub id: u64,
    pub op: Op,
    pub epoch: u64,
    pub floor: u64,
}

/// What a call's answer is for, on the node that made it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Purpose {
    /// A route lookup of a unit, the `tries`th read.
    /// `confirmed`: read back as the store confirms it, after an answer naming this node.
    Lookup {
        unit: usize,
        tries: u8,
        confirmed: bool,
    },
    /// A read to tell `origin`, which sent a message here, where the unit is.
    Hint { unit: usize, origin: usize },
    /// A new unit's record (or a rebuilt one's), written for a lane gated until it lands.
    Claim {
        unit: usize,
        lane: u64,
        wrote: UnitRecord,
    },
    /// A claim whose answer was lost, read back.
    ClaimRead {
        unit: usize,
        lane: u64,
        wrote: UnitRecord,
    },
    /// A stopped unit's record, deleted.
    Release { unit: usize },
    /// An Actor's record read, to write the room it is in (`tries` left).
    SpotRead {
        actor: usize,
        spot: Option<usize>,
        tries: u8,
    },
    /// An Actor's record written with the room it is in.
    SpotWrite {
        actor: usize,
        spot: Option<usize>,
        tries: u8,
    },
    /// A source reads the records of the units it moves.
    Records { rel: u64 },
    /// A target's commit.
    Commit { rel: u64 },
    /// A target reads its commit back.
    ReadBack { rel: u64 },
    /// A source's reclaim.
    Fence { rel: u64 },
    /// A source reads the records again after its reclaim met a conflict.
    FenceRead { rel: u64 },
    /// The coordinator reads every record to recover dead nodes' units.
    Recovery,
    /// An owner writes which node holds its room's standby, or that none does.
    Record { unit: usize, record: Record },
    /// A restarted process reads every record to take back what its earlier process held.
    Adopt,
    /// A gateway reads a bound Actor's record: bind again once it is rebuilt off `gone`, or
    /// anyway at `until`.
    Rebind {
        client: usize,
        number: u64,
        unit: usize,
        epoch: u32,
        gone: usize,
        until: Instant,
    },
}

/// What one write replaced, for a failover that loses the write to put back.
#[derive(Debug, Clone)]
enum Undo {
    Unit(usize, Option<(u64, UnitRecord)>),
    Node(usize, Option<(u64, NodeDescriptor)>),
    Standby(usize, Option<(u64, Named)>),
    Lease(usize, Option<StoreLease>),
}

/// A lease as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreLease {
    pub generation: u64,
    pub holder: u64,
    pub expires: Instant,
}

/// The one location store of the world: what it holds, and what a failover may lose.
#[derive(Debug)]
pub(crate) struct Store {
    units: BTreeMap<usize, (u64, UnitRecord)>,
    nodes: BTreeMap<usize, (u64, NodeDescriptor)>,
    standbys: BTreeMap<usize, (u64, Named)>,
    leases: BTreeMap<usize, StoreLease>,
    /// The last lease generation per node, kept across releases so generations only grow.
    generations: BTreeMap<usize, u64>,
    revision: u64,
    pub epoch: u64,
    /// The writes the replicas may not hold yet, oldest first: the revision before each, and
    /// what it replaced. A failover loses some of them, never a write the store confirmed.
    history: VecDeque<(u64, Vec<Undo>)>,
}

/// How many writes back a failover can go.
const HISTORY: usize = 4;

impl Store {
    pub fn new() -> Store {
        Store {
            units: BTreeMap::new(),
            nodes: BTreeMap::new(),
            standbys: BTreeMap::new(),
            leases: BTreeMap::new(),
            generations: BTreeMap::new(),
            revision: 1,
            epoch: 1,
            history: VecDeque::new(),
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn record(&self, unit: usize) -> Option<&(u64, UnitRecord)> {
        self.units.get(&unit)
    }

    /// The version of the room's standby record, if it has one.
    pub fn standby_version(&self, unit: usize) -> Option<u64> {
        self.standbys.get(&unit).map(|(version, _)| *version)
    }

    pub fn descriptors(&self) -> impl Iterator<Item = (&usize, &(u64, NodeDescriptor))> {
        self.nodes.iter()
    }

    /// The node's lease, if live at `now`.
    pub fn live_lease(&self, node: usize, now: Instant) -> Option<StoreLease> {
        self.leases.get(&node).filter(|l| l.expires > now).copied()
    }

    /// A write took effect. Confirmed (its answer says so, after `WAIT`), the replicas hold it
    /// and, replication being one stream, everything before it.
    fn wrote(&mut self, undo: Vec<Undo>, confirmed: bool) {
        self.history.push_back((self.revision, undo));
        self.revision += 1;
        if confirmed {
            self.history.clear();
        } else if self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    /// A new lease for `node`, taking over whatever lease was there.
    pub fn acquire(&mut self, node: usize, holder: u64, now: Instant) -> u64 {
        let generation = self.generations.entry(node).or_default();
        *generation += 1;
        let generation = *generation;
        let lease = StoreLease {
            generation,
            holder,
            expires: now + TTL,
        };
        let before = self.leases.insert(node, lease);
        self.wrote(vec![Undo::Lease(node, before)], true);
        generation
    }

    /// Renews a live lease of this generation; `false`: lost.
    pub fn renew(&mut self, node: usize, generation: u64, now: Instant) -> bool {
        match self.leases.get_mut(&node) {
            Some(lease) if lease.generation == generation && lease.expires > now => {
                lease.expires = now + TTL;
                true
            }
            _ => false,
        }
    }

    /// The node's lease as held now, live or not: generation and holder.
    pub fn lease_of(&self, node: usize, now: Instant) -> Option<StoreLease> {
        self.live_lease(node, now)
    }

    /// Writes a descriptor, unconditionally.
    pub fn publish(&mut self, node: usize, descriptor: NodeDescriptor) {
        let before = self.nodes.insert(node, (self.revision + 1, descriptor));
        self.wrote(vec![Undo::Node(node, before)], true);
    }

    fn holds(&self, cond: &Cond, now: Instant) -> bool {
        match cond {
            Cond::Version(Key::Unit(u), v) => self.units.get(u).is_some_and(|(at, _)| at == v),
            Cond::Version(Key::Node(n), v) => self.nodes.get(n).is_some_and(|(at, _)| at == v),
            Cond::Absent(Key::Unit(u)) => !self.units.contains_key(u),
            Cond::Absent(Key::Node(n)) => !self.nodes.contains_key(n),
            Cond::Version(Key::Standby(u), v) => {
                self.standbys.get(u).is_some_and(|(at, _)| at == v)
            }
            Cond::Absent(Key::Standby(u)) => !self.standbys.contains_key(u),
            Cond::Lease { node, generation } => self
                .live_lease(*node, now)
                .is_some_and(|l| l.generation == *generation),
        }
    }

    /// Applies one operation at `now`; `confirmed`: a write's answer will say it is replicated.
    pub fn apply(&mut self, op: &Op, now: Instant, confirmed: bool) -> Reply {
        match op {
            Op::Get(units) => {
                Reply::Got(units.iter().map(|u| self.units.get(u).cloned()).collect())
            }
            Op::ReadBack(units) => {
                // The replicas caught up with everything before the answer.
                self.history.clear();
                Reply::Got(units.iter().map(|u| self.units.get(u).cloned()).collect())
            }
            Op::Scan => Reply::Scanned(
                self.units
                    .iter()
                    .map(|(u, (v, r))| (*u, *v, r.clone()))
                    .collect(),
                self.standbys
                    .iter()
                    .map(|(u, (v, n))| (*u, *v, n.clone()))
                    .collect(),
            ),
            Op::Batch {
                conds,
                puts,
                deletes,
            } => {
                if let Some(failed) = conds.iter().find(|c| !self.holds(c, now)) {
                    return Reply::Conflict {
                        lease: matches!(failed, Cond::Lease { .. }),
                    };
                }
                let version = self.revision + 1;
                let mut undo = Vec::new();
                for (key, value) in puts {
                    match (key, value) {
                        (Key::Unit(u), Value::Unit(r)) => {
                            undo.push(Undo::Unit(*u, self.units.insert(*u, (version, r.clone()))))
                        }
                        (Key::Standby(u), Value::Standby(n)) => undo.push(Undo::Standby(
                            *u,
                            self.standbys.insert(*u, (version, n.clone())),
                        )),
                        _ => {}
                    }
                }
                for key in deletes {
                    match key {
                        Key::Unit(u) => undo.push(Undo::Unit(*u, self.units.remove(u))),
                        Key::Node(n) => undo.push(Undo::Node(*n, self.nodes.remove(n))),
                        Key::Standby(u) => undo.push(Undo::Standby(*u, self.standbys.remove(u))),
                    }
                }
                self.wrote(undo, confirmed);
                Reply::Committed
            }
        }
    }

    /// Restarts empty, under a new epoch.
    pub fn wipe(&mut self) {
        self.units.clear();
        self.nodes.clear();
        self.standbys.clear();
        self.leases.clear();
        self.history.clear();
        self.epoch += 1;
        self.revision = 1;
    }

    /// Fails over to a replica that lacks up to `lose` of the writes it was not confirmed to hold;
    /// `false` if it holds every write.
    pub fn fail_over(&mut self, lose: usize) -> bool {
        if self.history.is_empty() {
            return false;
        }
        for _ in 0..lose.min(self.history.len()) {
            let Some((revision, undo)) = self.history.pop_back() else {
                return false;
            };
            for change in undo.into_iter().rev() {
                match change {
                    Undo::Unit(u, Some(v)) => drop(self.units.insert(u, v)),
                    Undo::Unit(u, None) => drop(self.units.remove(&u)),
                    Undo::Node(n, Some(v)) => drop(self.nodes.insert(n, v)),
                    Undo::Node(n, None) => drop(self.nodes.remove(&n)),
                    Undo::Standby(u, Some(v)) => drop(self.standbys.insert(u, v)),
                    Undo::Standby(u, None) => drop(self.standbys.remove(&u)),
                    Undo::Lease(n, Some(v)) => drop(self.leases.insert(n, v)),
                    Undo::Lease(n, None) => drop(self.leases.remove(&n)),
                }
            }
            self.revision = revision;
        }
        true
    }
}

impl World {
    /// A node asks the store: the call travels as an event, and its answer as another.
    pub(crate) fn call(&mut self, node: usize, op: Op, purpose: Purpose) {
        let id = self.fresh();
        let n = &mut self.nodes[node];
        n.calls.insert(id, purpose);
        let call = Call {
            node,
            process: n.process,
            id,
            op,
            epoch: n.epoch,
            floor: n.floor,
        };
        self.events.push(Event::Store(call));
    }

    /// The store takes a call (unless the node is cut off from it, or it is another store than
    /// the node knew) and sends its answer.
    pub(crate) fn store_call(&mut self, call: Call) {
        let node = call.node;
        let reply = if self.nodes[node].store_cut && self.nodes[node].process == call.process {
            Reply::Unavailable
        } else if call.epoch != self.store.epoch || self.store.revision() < call.floor {
            Reply::Reset
        } else {
            let write = matches!(call.op, Op::Batch { .. });
            let blind = if write {
                self.faults.blind.take()
            } else {
                None
            };
            match blind {
                Some(false) => Reply::Unknown,
                Some(true) => {
                    let applied = self.store.apply(&call.op, self.now, false);
                    self.touch_op(&call.op);
                    trace!(
                        self,
                        "store: n{node} call {} applied ({applied:?}), answer lost", call.id
                    );
                    Reply::Unknown
                }
                None => {
                    let reply = self.store.apply(&call.op, self.now, true);
                    if reply == Reply::Committed {
                        self.touch_op(&call.op);
                    }
                    reply
                }
            }
        };
        trace!(
            self,
            "store: n{node} call {} {:?} -> {}",
            call.id,
            brief_op(&call.op),
            brief_reply(&reply)
        );
        self.events.push(Event::Answer {
            node,
            process: call.process,
            call: call.id,
            reply,
        });
    }

    fn touch_op(&mut self, op: &Op) {
        if let Op::Batch { puts, deletes, .. } = op {
            for key in puts.iter().map(|(k, _)| k).chain(deletes) {
                if let Key::Unit(u) = key {
                    self.touched.insert(*u);
                }
            }
        }
    }

    /// An answer reaches the node that asked.
    pub(crate) fn answer(&mut self, node: usize, call: u64, reply: Reply) {
        let Some(purpose) = self.nodes[node].calls.remove(&call) else {
            return;
        };
        if !matches!(reply, Reply::Unknown | Reply::Unavailable | Reply::Reset) {
            let revision = self.store.revision();
            let n = &mut self.nodes[node];
            n.floor = n.floor.max(revision);
        }
        match purpose {
            Purpose::Lookup {
                unit,
                tries,
                confirmed,
            } => self.looked_up(node, unit, (tries, confirmed), reply),
            Purpose::Hint { unit, origin } => self.hint_read(node, unit, origin, reply),
            Purpose::Claim { unit, lane, wrote } => {
                self.claimed(node, unit, lane, wrote, reply, false)
            }
            Purpose::ClaimRead { unit, lane, wrote } => {
                self.claimed(node, unit, lane, wrote, reply, true)
            }
            Purpose::Release { unit } => {
                trace!(self, "n{node}: r{unit} record released: {reply:?}")
            }
            Purpose::SpotRead { actor, spot, tries } => {
                self.spot_read(node, actor, spot, tries, reply)
            }
            Purpose::SpotWrite { actor, spot, tries } => {
                self.spot_written(node, actor, spot, tries, reply)
            }
            Purpose::Records { rel } => self.records_read(node, rel, reply),
            Purpose::Commit { rel } => self.committed(node, rel, reply),
            Purpose::ReadBack { rel } => self.read_back(node, rel, reply),
            Purpose::Fence { rel } => self.fenced_write(node, rel, reply),
            Purpose::FenceRead { rel } => self.fence_reread(node, rel, reply),
            Purpose::Recovery => self.recovery_scan(node, reply),
            Purpose::Adopt => self.adopted(node, reply),
            Purpose::Record { unit, record } => self.standby_recorded(node, unit, record, reply),
            Purpose::Rebind {
                client,
                number,
                unit,
                epoch,
                gone,
                until,
            } => self.rebind_read(client, number, unit, epoch, (gone, until), reply),
        }
    }

    /// The store restarts empty.
    pub(crate) fn store_wipe(&mut self) {
        trace!(self, "store: restarted empty (a new epoch)");
        self.lossy = true;
        self.store.wipe();
        self.touched.extend(0..self.shape.units());
    }

    /// The store fails over and loses its last writes.
    pub(crate) fn store_failover(&mut self, lose: usize) {
        if self.store.fail_over(lose) {
            trace!(
                self,
                "store: failed over, losing writes it had not confirmed"
            );
            self.touched.extend(0..self.shape.units());
        }
    }
}

fn brief_op(op: &Op) -> String {
    match op {
        Op::Get(units) => format!("get {units:?}"),
        Op::ReadBack(units) => format!("read back {units:?}"),
        Op::Scan => "scan".into(),
        Op::Batch {
            conds,
            puts,
            deletes,
        } => format!(
            "batch if {:?} put {:?} delete {deletes:?}",
            conds,
            puts.iter()
                .map(|(k, v)| match v {
                    Value::Unit(r) => format!("{k:?}={}/{}", r.owner, r.owner_generation),
                    Value::Standby(n) => format!("{k:?}={}/{:?}", n.holder, n.series),
                })
                .collect::<Vec<_>>()
        ),
    }
}

fn brief_reply(reply: &Reply) -> String {
    match reply {
        Reply::Got(found) => format!(
            "{:?}",
            found
                .iter()
                .map(|f| f
                    .as_ref()
                    .map(|(v, r)| format!("{}/{}@{v}", r.owner, r.owner_generation)))
                .collect::<Vec<_>>()
        ),
        Reply::Scanned(all, standbys) => {
            format!("{} records, {} standbys", all.len(), standbys.len())
        }
        other => format!("{other:?}"),
    }
}
