//! The simulated cluster: nodes running the core's decisions, a store, links that number and
//! resend their frames, one clock, and the pending events between them.
//!
//! - `store`: the location store: records, descriptors and leases, and its faults.
//! - `links`: frames between nodes, numbered and resent with the core's delivery rules, and a
//!   bounded backlog for a peer that takes nothing.
//! - `lanes`: the lanes that run units' turns, membership, creation and stops.
//! - `routing`: how a node sends to units it does not host, with the core's route table.
//! - `moves`: the source and target of a move, driving the core's machines.
//! - `precopy`: a move's rounds of its unit's image while the unit runs, within the node's budget,
//!   and what a target holds of them; then the drain's seal window.
//! - `draining`: drains, as the core's drain decides them.
//! - `liveness`: leases, the mesh's witness, probes, crashes, restarts and recovery.
//! - `sessions`: game clients, their gateways and their bound Actors.
//! - `shutdown`: a node's graceful stop.
//! - `standby`: rooms' warm standbys: checkpoints to another node, confirmed replies, promotion.
//! - `check`: the invariants.

/// Adds a line to the world's trace, formatting it only when the world keeps one.
macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if $world.tracing {
            let line = format!($($arg)*);
            $world.log(line);
        }
    };
}

mod check;
mod draining;
mod lanes;
mod links;
mod liveness;
mod moves;
mod precopy;
pub use precopy::Recipes;
mod routing;
mod sessions;
mod shutdown;
mod standby;
mod store;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use ferry_core::ids::{ActorId, NodeId, SpotId, UnitId};
use ferry_core::routes::Routes;
use ferry_core::witness::{Times, Witness};

use self::lanes::Lane;
use self::links::Link;
use self::sessions::Gateway;
use self::store::{Purpose, Store};
use super::plan::Step;

pub(crate) use self::store::Reply;

/// How big a simulated cluster is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// How many node ids, numbered from 0; a process starts under each with the world.
    pub nodes: usize,
    /// Rooms (SpotWide spots), placed round-robin at the start.
    pub rooms: usize,
    /// Actors: the first half start as members of a room, the rest alone.
    pub actors: usize,
    /// Senders, each on node `sender % nodes`.
    pub senders: usize,
    /// Game clients, each with its gateway on node `client % nodes`.
    pub clients: usize,
    /// Whether rooms keep a warm standby: the first of every three in confirmed mode, the
    /// second periodic, the third none.
    pub standby: bool,
    /// Bytes of state in every eighth unit that is a room, from pre-copy's `MIN_IMAGE` up, so that
    /// their moves ship it while they run. Every eighth unit from the fifth holds `MIN_IMAGE`, all
    /// of it rewritten every turn; the others hold a few bytes. 0: every unit holds a few bytes.
    pub large: usize,
}

impl Shape {
    /// How many units (rooms, then Actors).
    pub fn units(&self) -> usize {
        self.rooms + self.actors
    }
}

/// The owner lease's TTL; renewed every third of it, and the peer grace is half of it.
const TTL: Duration = Duration::from_secs(6);
/// How often a node renews its lease, reads membership and (as coordinator) recovers.
const KEEP_EVERY: Duration = Duration::from_secs(2);
/// How often a node probes its peers.
const PROBE_EVERY: Duration = Duration::from_millis(750);
/// The witness's timing.
const TIMES: Times = Times {
    grace: Duration::from_secs(3),
    lease_ttl: TTL,
    outage_limit: Duration::from_secs(20),
};
/// How long a request waits for its terminal before it times out.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a route switch waits for its fence at most: it ends sooner when the fence runs, or
/// when the path it took is lost (its peer left the cluster or restarted). Only a path cut off
/// for longer, with both ends alive, gives the switch up.
const FENCE_WAIT: Duration = Duration::from_secs(60);
/// How many events a run may take to settle after its plan, at the least; a big cluster gets
/// more, for every node probes every other.
const SETTLE_BUDGET: usize = 30_000;
/// Where game clients' sessions start among the ids of a unit's log (see `sessions::input_id`).
const CLIENTS: usize = 1_000_000;

/// A sender's id in a unit's log: each process of its node is another sender, whose order is its
/// own.
fn sender_id(sender: usize, process: u64) -> usize {
    sender + 100 * process as usize
}

/// The sender an id of a unit's log stands for.
fn sender_of(id: usize) -> usize {
    id % 100
}

/// Something due to happen at no particular time, in an order the plan picks.
#[derive(Debug, Clone)]
enum Event {
    /// A call reaches the store.
    Store(store::Call),
    /// The store's answer reaches the node that asked.
    Answer {
        node: usize,
        process: u64,
        call: u64,
        reply: Reply,
    },
    /// A lane reaches a turn boundary: the move sealing it captures.
    Boundary { node: usize, lane: u64, rel: u64 },
    /// A move's target finished restoring the unit.
    Restore { node: usize, lane: u64, rel: u64 },
    /// A move's source takes a snapshot of its running unit, for a pre-copy round.
    Snapshot { node: usize, rel: u64 },
    /// A lane takes the next message it has queued.
    Turn { node: usize, lane: u64 },
    /// A node that began to drain or stop gives back the moves staged on it that have not reached
    /// their commit. It comes after the node said it no longer serves, as in the runtime, where
    /// other tasks run in between: a cutover may reach the node first.
    StopArrivals { node: usize },
}

impl Event {
    fn node(&self) -> usize {
        match self {
            Event::Store(call) => call.node,
            Event::Answer { node, .. }
            | Event::Boundary { node, .. }
            | Event::Restore { node, .. }
            | Event::Snapshot { node, .. }
            | Event::Turn { node, .. }
            | Event::StopArrivals { node } => *node,
        }
    }
}

/// Something due at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// A move's source machine asked to be woken.
    Source { node: usize, process: u64, rel: u64 },
    /// A move's target machine asked to be woken.
    Target { node: usize, process: u64, rel: u64 },
    /// A move's pre-copy stops waiting: for a round's answer, its budget, a place in its
    /// drain's window, or a snapshot.
    Copy { node: usize, process: u64, rel: u64 },
    /// A drain's seal window may let the next move through: a place in it became stuck.
    Admit { gate: u64 },
    /// Renew the lease, read membership, recover.
    Keep { node: usize, process: u64 },
    /// Probe the peers.
    Probe { node: usize, process: u64 },
    /// Recover again: the last pass set members of promoted rooms aside.
    Recover { node: usize, process: u64 },
    /// Send the checkpoints gathered to go together.
    Ship { node: usize, process: u64 },
    /// A route switch stops waiting for its fence.
    Fence {
        node: usize,
        process: u64,
        token: u64,
    },
    /// A request stops waiting for its terminal.
    Request { node: usize, process: u64, id: u64 },
    /// A move's target that is still restoring says so.
    Progress { node: usize, process: u64, rel: u64 },
    /// A process a duplicate start took over from resumes its keeper round.
    Ghost { node: usize, process: u64 },
    /// A restarted process rebuilds what its earlier process held, which now runs no turns.
    Adopt { node: usize, process: u64 },
    /// A shutdown stops waiting for moves into its node to be decided.
    Shutdown { node: usize, process: u64 },
    /// A gateway's session machine asked to be woken.
    Session { client: usize },
    /// A gateway looks again whether a bound Actor was rebuilt.
    Rebind {
        node: usize,
        process: u64,
        client: usize,
        number: u64,
        unit: usize,
        epoch: u32,
        gone: usize,
        /// When it binds anyway (`REBIND_WAIT` after the node left).
        until: Instant,
    },
}

/// One process of a node id.
#[derive(Debug)]
struct Node {
    /// Whether a process runs under this id.
    up: bool,
    /// Which process it is (each start is a new one).
    process: u64,
    /// Lanes by id.
    lanes: BTreeMap<u64, Lane>,
    /// Which lane hosts each unit here.
    directory: BTreeMap<usize, u64>,
    /// Moves into this node, by move.
    incoming: BTreeMap<u64, moves::Target>,
    /// What this node holds of moves' pre-copies, by move, until their offer takes it.
    precopied: BTreeMap<u64, precopy::Precopied>,
    /// The share of the link its moves' pre-copy rounds may take while unanswered.
    budget: precopy::Budget,
    /// Its lifecycle state: Serving, or Relocating while it drains, or Relocated once drained.
    state: ferry_core::authority::NodeState,
    /// Its drain reported it safe to shut down: it must hold no unit and receive none.
    safe: bool,
    /// It shuts down: it closes once no move into it may still open there.
    stopping: bool,
    /// Units an earlier process of this id left may still be taken back here.
    adopting: bool,
    /// Where messages for units not hosted here go.
    routes: Routes<lanes::Parcel>,
    /// The owner lease held: generation and holder.
    lease: Option<(u64, u64)>,
    /// The lease generation this process started with: records under an older one are an
    /// earlier process's.
    first_generation: u64,
    /// Until when the lease is certainly held (from the send of its last confirmed renewal).
    lease_until: Instant,
    /// The mesh's account of the peers.
    witness: Witness,
    /// The live nodes as last read (this one included).
    view: Vec<ferry_core::authority::NodeDescriptor>,
    /// Nodes whose lease lapsed but whom the mesh does not confirm dead.
    suspected: BTreeSet<usize>,
    /// Nodes taken for dead at the last read.
    dead: BTreeSet<usize>,
    /// Nodes membership declared gone and not seen live since: no route is taken to them.
    gone: BTreeSet<usize>,
    /// This node cannot reach the store.
    store_cut: bool,
    /// The highest store revision this process has seen, and the store epoch it connected to.
    floor: u64,
    epoch: u64,
    /// Store calls in flight, by number: what their answer is for.
    calls: BTreeMap<u64, Purpose>,
    /// Requests (asks and route fences) waiting for their terminal.
    requests: BTreeMap<u64, routing::Request>,
    /// The peer each request was handed to, and its process then: if that process goes, so
    /// does the request.
    handed: BTreeMap<u64, (usize, u64)>,
}

impl Node {
    fn new(now: Instant) -> Node {
        Node {
            up: false,
            process: 0,
            lanes: BTreeMap::new(),
            directory: BTreeMap::new(),
            incoming: BTreeMap::new(),
            precopied: BTreeMap::new(),
            budget: precopy::Budget::default(),
            state: ferry_core::authority::NodeState::Serving,
            safe: false,
            stopping: false,
            adopting: false,
            routes: Routes::default(),
            lease: None,
            first_generation: 0,
            lease_until: now,
            witness: Witness::new(now),
            view: Vec::new(),
            suspected: BTreeSet::new(),
            dead: BTreeSet::new(),
            gone: BTreeSet::new(),
            store_cut: false,
            floor: 0,
            epoch: 0,
            calls: BTreeMap::new(),
            requests: BTreeMap::new(),
            handed: BTreeMap::new(),
        }
    }
}

/// A sender of tells and requests, on one node.
#[derive(Debug, Default)]
struct Sender {
    next: u64,
    /// Every number `tell` or `request` accepted, per unit, in order.
    sent: BTreeMap<usize, Vec<u64>>,
    /// The requests among them: the process that asked, and each terminal it got (one, once it
    /// ended; none owed once that process is gone).
    asked: BTreeMap<(usize, u64), (u64, Vec<Terminal>)>,
    /// Tells reported lost to the sender's node (a route lookup that kept failing).
    dropped: BTreeSet<(usize, u64)>,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Terminal {
    /// Its reply: it ran.
    Reply,
    /// An error that says it did not run, or may not have (the unit is unknown, its node left).
    Error,
    /// It waited too long: it may have run.
    Timeout,
}

/// What happened to one unit over the run, as the checks need it.
#[derive(Debug, Default, Clone)]
struct Life {
    /// It exists (created, not stopped).
    exists: bool,
    /// It was stopped or created again at some point: its log restarted.
    renewed: bool,
    /// It was rebuilt after a crash: its state and queue restarted.
    rebuilt: bool,
    /// The longest log a copy running it had: its state never goes back.
    high: usize,
    /// Per sender, the last number sent before the unit was last created: what was sent to its
    /// earlier incarnation keeps no order with what is sent to this one.
    floors: BTreeMap<usize, u64>,
    /// How often an ApplicationSignaled room deferred a move, and how often it heard how one
    /// ended: exactly once per defer.
    defers: usize,
    completions: usize,
    /// A message for it that a backlogged link refused was looked up again, and may have
    /// overtaken what still waited on that link: what was sent to it before keeps no order with
    /// what followed (see `floors`), though each still runs exactly once.
    disordered: bool,
}

/// How often a move waited for what a node or a drain shares out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// Pre-copy rounds that waited for their node's budget of bytes in flight.
    pub budget: usize,
    /// Moves that waited for a place in their drain's seal window.
    pub window: usize,
    /// Moves that waited for their drain's leave to copy ahead of its seals.
    pub copy: usize,
}

/// Faults armed for the next chance.
#[derive(Debug, Default)]
struct Faults {
    /// The store's answer to its next write is lost; whether the write landed.
    blind: Option<bool>,
    capture_fails: bool,
    restore_fails: bool,
}

/// The whole simulated cluster.
#[derive(Debug)]
pub struct World {
    shape: Shape,
    /// Time zero.
    start: Instant,
    now: Instant,
    nodes: Vec<Node>,
    /// The processes a duplicate start took over from, still running until they notice.
    ghosts: Vec<(usize, Node)>,
    store: Store,
    links: BTreeMap<(usize, usize), Link>,
    /// The links with frames on the wire.
    wired: BTreeSet<(usize, usize)>,
    /// Pairs of nodes that hear nothing of each other until they heal.
    partitions: BTreeSet<(usize, usize)>,
    /// Since when each partition holds.
    parted_at: BTreeMap<links::Cut, Instant>,
    /// Moves out of their source node, by move.
    outgoing: BTreeMap<u64, (usize, moves::Source)>,
    /// Drains running, by node.
    drains: BTreeMap<usize, ferry_core::drain::Drain>,
    /// Each drain's seal window, by a number of its own (a drain's moves may outlive it).
    gates: BTreeMap<u64, draining::Gate>,
    /// The state of each cell a move sealed, by move: what its target must restore.
    sealed: BTreeMap<u64, BTreeMap<usize, bytes::Bytes>>,
    /// The unit whose move went through last.
    last_moved: Option<usize>,
    /// What each node's last drain sent where.
    spreads: BTreeMap<usize, draining::Spread>,
    /// The moves drains started: the draining node, and the unit.
    drain_moves: BTreeMap<u64, (usize, UnitId)>,
    timers: BTreeMap<(Instant, u64), Timer>,
    timer_seq: u64,
    events: Vec<Event>,
    senders: Vec<Sender>,
    gateways: Vec<Gateway>,
    lives: Vec<Life>,
    faults: Faults,
    next: u64,
    /// Units whose copies, record or log changed since the last check.
    touched: BTreeSet<usize>,
    /// Whether a process died or the store lost writes: exactly-once is then not owed.
    lossy: bool,
    /// Whether the faults have ended for the run to settle.
    calmed: bool,
    moves_ended: usize,
    /// Pre-copy rounds that waited for their node's budget, and moves for a place in their
    /// drain's seal window.
    waits: Waits,
    /// Seals that sent a recipe of deltas, and recipes found rebuilt wrong.
    recipes: precopy::Recipes,
    /// Units a drain found again after they had left its node.
    found_again: usize,
    /// When a drain last ended with its node serving again, taking the rebuilds it refused
    /// while it drained: a run settles only after the keeper rounds that follow.
    rebuilds_reopened: Option<Instant>,
    tells_ran: usize,
    /// Messages lost without a crash or a store loss to explain them.
    lost: usize,
    /// Rooms' standbys: owners' checkpoints, standbys' copies, promotions.
    standby: standby::Standbys,
    /// An invariant found broken in the middle of a step.
    broken: Option<String>,
    settled: usize,
    /// Whether the trace is kept (a replay), or not (a search, which is faster).
    tracing: bool,
    trace: Vec<String>,
}

fn node_id(n: usize) -> NodeId {
    thread_local! {
        /// Node ids made once per thread: they are asked for on every frame.
        static IDS: std::cell::RefCell<Vec<NodeId>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    IDS.with_borrow_mut(|ids| {
        while ids.len() <= n {
            let next = NodeId::new(format!("n{}", ids.len())).expect("a valid node id");
            ids.push(next);
        }
        ids[n].clone()
    })
}

fn node_index(id: &NodeId) -> usize {
    id.as_str()[1..].parse().expect("a simulated node id")
}

impl World {
    /// A cluster of `shape`: every node up with its lease, every room on its node with its first
    /// members, every other Actor alone. `tracing`: keep a line for every step.
    pub fn new(shape: Shape, tracing: bool) -> World {
        let start = Instant::now();
        let mut world = World {
            shape,
            start,
            now: start,
            nodes: (0..shape.nodes).map(|_| Node::new(start)).collect(),
            ghosts: Vec::new(),
            store: Store::new(),
            links: BTreeMap::new(),
            wired: BTreeSet::new(),
            partitions: BTreeSet::new(),
            parted_at: BTreeMap::new(),
            outgoing: BTreeMap::new(),
            drains: BTreeMap::new(),
            gates: BTreeMap::new(),
            sealed: BTreeMap::new(),
            spreads: BTreeMap::new(),
            last_moved: None,
            drain_moves: BTreeMap::new(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            events: Vec::new(),
            senders: (0..shape.senders).map(|_| Sender::default()).collect(),
            gateways: (0..shape.clients).map(|_| Gateway::default()).collect(),
            lives: vec![Life::default(); shape.units()],
            faults: Faults::default(),
            next: 0,
            touched: BTreeSet::new(),
            lossy: false,
            calmed: false,
            moves_ended: 0,
            waits: Waits::default(),
            recipes: precopy::Recipes::default(),
            found_again: 0,
            rebuilds_reopened: None,
            tells_ran: 0,
            lost: 0,
            standby: standby::Standbys::default(),
            broken: None,
            settled: 0,
            tracing,
            trace: Vec::new(),
        };
        for n in 0..shape.nodes {
            world.boot(n);
        }
        for n in 0..shape.nodes {
            world.publish(n);
        }
        world.populate();
        for n in 0..shape.nodes {
            world.refresh(n);
        }
        for c in 0..shape.clients {
            world.open_session(c);
        }
        world
    }

    /// A fresh number for lanes, moves, calls, tokens and requests.
    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// The unit's id: rooms first, then Actors.
    fn unit_id(&self, u: usize) -> UnitId {
        if u < self.shape.rooms {
            UnitId::Spot(SpotId::new(format!("r{u}")).expect("a valid spot id"))
        } else {
            UnitId::Actor(ActorId::new(format!("p{}", u - self.shape.rooms)).expect("an id"))
        }
    }

    fn unit_index(&self, id: &UnitId) -> usize {
        match id {
            UnitId::Spot(s) => s.as_str()[1..].parse().expect("a simulated room"),
            UnitId::Actor(a) => self.shape.rooms + a.as_str()[1..].parse::<usize>().expect("an id"),
        }
    }

    fn is_room(&self, u: usize) -> bool {
        u < self.shape.rooms
    }

    /// The steps taken so far, one line each.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// The live nodes reported safe to shut down by their drain.
    pub fn drained(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&n| self.nodes[n].up && self.nodes[n].safe)
            .collect()
    }

    /// How many moves have ended.
    pub fn moves_ended(&self) -> usize {
        self.moves_ended
    }

    /// How often pre-copy rounds and seals waited.
    pub fn waits(&self) -> Waits {
        self.waits
    }

    /// How often seals sent a recipe of deltas, and targets found one rebuilt wrong.
    pub fn recipes(&self) -> precopy::Recipes {
        self.recipes
    }

    /// How many units a drain found again after they had left its node.
    pub fn found_again(&self) -> usize {
        self.found_again
    }

    /// How many tells, requests and inputs have run.
    pub fn tells_ran(&self) -> usize {
        self.tells_ran
    }

    /// How many messages promoted standby copies took over from their checkpoints' queues.
    pub fn requeued(&self) -> usize {
        self.standby.requeued
    }

    /// The last number each sender and each open session sent so far, by its id in a unit's log.
    fn sent_so_far(&self) -> BTreeMap<usize, u64> {
        self.senders
            .iter()
            .enumerate()
            .map(|(s, sender)| {
                let process = self.nodes[s % self.shape.nodes].process;
                (sender_id(s, process), sender.next)
            })
            .chain(self.gateways.iter().enumerate().map(|(c, g)| g.floor(c)))
            .collect()
    }

    /// A line for the trace, made only when the trace is kept.
    fn line(&self, make: impl FnOnce() -> String) -> String {
        if self.tracing { make() } else { String::new() }
    }

    fn log(&mut self, line: String) {
        let at = self.now.duration_since(self.start);
        self.trace.push(format!(
            "{:>5}.{:03} {line}",
            at.as_secs(),
            at.subsec_millis()
        ));
    }

    fn arm(&mut self, at: Instant, timer: Timer) {
        self.timer_seq += 1;
        self.timers.insert((at, self.timer_seq), timer);
    }

    /// How many choices a `Next` step has: links with frames to deliver, events, and the next
    /// timer.
    pub fn pending(&self) -> usize {
        self.busy_links().count() + self.events.len() + usize::from(!self.timers.is_empty())
    }

    /// Whether the run must settle for the full time: a process died or the store lost writes,
    /// so leases must lapse, nodes be taken for dead and their units rebuilt.
    pub fn lossy(&self) -> bool {
        self.lossy
    }

    /// Whether anything but timers that fire for ever (keepers, probes) is pending.
    pub fn active(&self) -> bool {
        self.busy_links().next().is_some()
            || self
                .rebuilds_reopened
                .is_some_and(|at| self.now < at + KEEP_EVERY * 2)
            || !self.events.is_empty()
            || self
                .timers
                .values()
                .any(|t| !matches!(t, Timer::Keep { .. } | Timer::Probe { .. }))
    }

    /// Whether settling may take another event.
    pub fn settling_budget(&mut self) -> bool {
        self.settled += 1;
        self.settled <= SETTLE_BUDGET.max(self.shape.nodes * self.shape.nodes * 200)
    }

    /// Ends every fault before the run settles: links heal, every node reaches the store, and a
    /// cluster with no process left starts again.
    pub fn calm(&mut self) {
        trace!(self, "calm: partitions heal, the store is reachable");
        self.heal();
        for n in 0..self.nodes.len() {
            self.nodes[n].store_cut = false;
        }
        self.faults = Faults::default();
        self.calmed = true;
        self.operate();
    }

    /// Once calm, a cluster with no process left is started again by its operator, and one whose
    /// live nodes are all drained has them resumed, so that what died elsewhere has a place to be
    /// rebuilt.
    pub(crate) fn operate(&mut self) {
        if !self.calmed {
            return;
        }
        if self.nodes.iter().all(|n| !n.up) {
            trace!(self, "operator: every node is down; starting them again");
            for n in 0..self.nodes.len() {
                self.restart(n);
            }
        }
        let serving = |n: &Node| n.up && n.state != ferry_core::authority::NodeState::Relocated;
        if !self.nodes.iter().any(serving) {
            for n in 0..self.nodes.len() {
                if self.nodes[n].up {
                    trace!(
                        self,
                        "operator: n{n} is drained and no node serves; resuming it"
                    );
                    self.nodes[n].state = ferry_core::authority::NodeState::Serving;
                    self.nodes[n].safe = false;
                    self.publish(n);
                }
            }
        }
    }

    /// Takes one step of a plan.
    pub fn step(&mut self, step: &Step) {
        let nodes = self.shape.nodes;
        let units = self.shape.units();
        let n = |b: u8| usize::from(b) % nodes;
        match *step {
            Step::Next(k) => self.next_event(k),
            Step::Wait(ms) => self.advance(self.now + Duration::from_millis(u64::from(ms))),
            Step::Tell { sender, unit } => {
                let s = usize::from(sender) % self.shape.senders;
                self.tell(s, usize::from(unit) % units, false);
            }
            Step::Ask { sender, unit } => {
                let s = usize::from(sender) % self.shape.senders;
                self.tell(s, usize::from(unit) % units, true);
            }
            Step::Move { unit, to } => {
                let _ = self.move_unit(usize::from(unit) % units, n(to), None);
            }
            Step::Drain { node } => self.drain(n(node)),
            Step::Join { room, pick } => {
                self.join(usize::from(room) % self.shape.rooms, usize::from(pick))
            }
            Step::Leave { room, pick } => {
                self.leave(usize::from(room) % self.shape.rooms, usize::from(pick))
            }
            Step::Create { unit, node } => self.create(usize::from(unit) % units, n(node)),
            Step::Stop { unit } => self.stop(usize::from(unit) % units),
            Step::Recreate { node } => self.recreate(n(node)),
            Step::Crash { node } => self.crash(n(node), "crash"),
            Step::Shutdown { node } => self.shutdown(n(node)),
            Step::Restart { node } => self.restart(n(node)),
            Step::Duplicate { node } => self.duplicate(n(node)),
            Step::Reset { a, b } => self.reset(n(a), n(b)),
            Step::Partition { a, b } => self.partition(n(a), n(b)),
            Step::Heal => self.heal(),
            Step::StoreCut { node } => {
                let node = n(node);
                trace!(self, "n{node} cut off from the store");
                self.nodes[node].store_cut = true;
            }
            Step::StoreHeal => {
                trace!(self, "every node reaches the store");
                for node in &mut self.nodes {
                    node.store_cut = false;
                }
            }
            Step::StoreBlind { applied } => {
                trace!(self, "store: next write's answer lost (applied {applied})");
                self.faults.blind = Some(applied);
            }
            Step::StoreWipe => self.store_wipe(),
            Step::StoreFailover { lose } => self.store_failover(usize::from(lose)),
            Step::CaptureFails => {
                trace!(self, "next capture fails");
                self.faults.capture_fails = true;
            }
            Step::RestoreFails => {
                trace!(self, "next restore fails");
                self.faults.restore_fails = true;
            }
            Step::Bind { client, actor } => {
                let actor = self.shape.rooms + usize::from(actor) % self.shape.actors;
                self.bind(usize::from(client) % self.shape.clients, actor);
            }
            Step::Input { client } => self.input(usize::from(client) % self.shape.clients),
        }
        self.operate();
    }

    /// The pending event at place `k` happens.
    fn next_event(&mut self, k: u32) {
        let busy = self.busy_links().count();
        let count = busy + self.events.len() + usize::from(!self.timers.is_empty());
        if count == 0 {
            return;
        }
        let at = k as usize % count;
        let link = self.busy_links().nth(at);
        if let Some((a, b)) = link {
            self.frame(a, b);
        } else if at - busy < self.events.len() {
            let event = self.events.remove(at - busy);
            self.event(event);
        } else if let Some((&(due, _), _)) = self.timers.iter().next() {
            self.advance(due.max(self.now));
        }
    }

    /// Moves the clock to `until`, firing every timer due by then in time order.
    fn advance(&mut self, until: Instant) {
        while let Some((&(due, seq), &timer)) = self.timers.iter().next() {
            if due > until {
                break;
            }
            self.timers.remove(&(due, seq));
            self.now = self.now.max(due);
            self.fire(timer);
        }
        self.now = self.now.max(until);
    }

    fn fire(&mut self, timer: Timer) {
        let live = |w: &World, node: usize, process: u64| {
            w.nodes[node].up && w.nodes[node].process == process
        };
        match timer {
            Timer::Source { node, process, rel } if live(self, node, process) => {
                self.source_timer(node, rel)
            }
            Timer::Target { node, process, rel } if live(self, node, process) => {
                self.target_timer(node, rel)
            }
            Timer::Copy { node, process, rel } if live(self, node, process) => {
                self.copy_timer(node, rel)
            }
            Timer::Admit { gate } => self.admit(gate),
            Timer::Keep { node, process } if live(self, node, process) => self.keep(node),
            Timer::Probe { node, process } if live(self, node, process) => self.probe(node),
            Timer::Recover { node, process } if live(self, node, process) => self.recover(node),
            Timer::Ship { node, process } if live(self, node, process) => self.ship_gathered(node),
            Timer::Fence {
                node,
                process,
                token,
            } if live(self, node, process) => self.fence_waited(node, token),
            Timer::Request { node, process, id } if live(self, node, process) => {
                self.request_timed_out(node, id)
            }
            Timer::Progress { node, process, rel } if live(self, node, process) => {
                self.progress(node, rel)
            }
            Timer::Ghost { node, process } => self.ghost_keep(node, process),
            Timer::Adopt { node, process } if live(self, node, process) => self.adopt(node),
            Timer::Shutdown { node, process } if live(self, node, process) => {
                self.close(node, true)
            }
            Timer::Session { client } => self.session_timer(client),
            Timer::Rebind {
                node,
                process,
                client,
                number,
                unit,
                epoch,
                gone,
                until,
            } if live(self, node, process) => {
                self.rebind_again(node, client, number, unit, epoch, (gone, until))
            }
            _ => {}
        }
    }

    /// A frame arrives at `node` from `from`.
    fn arrive(&mut self, node: usize, from: usize, msg: links::Msg) {
        use links::Msg;
        match msg {
            Msg::Deliver(parcel) => self.on_deliver(node, from, parcel),
            Msg::Reply { id, ok } => {
                let end = if ok { Terminal::Reply } else { Terminal::Error };
                self.terminal(node, id, end);
            }
            Msg::Hint { unit, owner } => self.on_hint(node, unit, owner),
            Msg::Reloc { rel, frame } => self.on_reloc(node, from, rel, frame),
            Msg::Probe { stamp, generation } => self.on_probe(node, from, stamp, generation),
            Msg::ProbeAnswer {
                stamp,
                running,
                vouched,
            } => self.on_probe_answer(node, from, stamp, running, vouched),
            Msg::Recover {
                unit,
                version,
                previous,
                owner_descriptor,
                promote,
            } => self.on_recover(node, unit, version, *previous, (owner_descriptor, promote)),
            Msg::Checkpoint {
                unit,
                checkpoint,
                cell,
                queue,
            } => self.on_checkpoint(node, from, unit, &checkpoint, *cell, queue),
            Msg::Checkpointed {
                unit,
                series,
                number,
                ok,
            } => self.on_checkpointed(node, unit, series, number, ok),
            Msg::Session(msg) => self.on_session(node, from, msg),
        }
    }

    /// The time now.
    pub fn clock(&self) -> Instant {
        self.now
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Store(call) => self.store_call(call),
            Event::Answer {
                node,
                process,
                call,
                reply,
            } => {
                if self.nodes[node].up && self.nodes[node].process == process {
                    self.answer(node, call, reply);
                }
            }
            Event::Boundary { node, lane, rel } => self.boundary(node, lane, rel),
            Event::Restore { node, lane, rel } => self.restored(node, lane, rel),
            Event::Snapshot { node, rel } => self.snapshot(node, rel),
            Event::Turn { node, lane } => self.next_turn(node, lane),
            Event::StopArrivals { node } => self.stop_arrivals(node),
        }
    }

    /// Drops what a process that ended had pending: its events and its timers.
    fn forget_process(&mut self, node: usize) {
        let process = self.nodes[node].process;
        self.events.retain(|e| match e {
            Event::Answer {
                node: n,
                process: p,
                ..
            } => !(*n == node && *p == process),
            Event::Store(call) => !(call.node == node && call.process == process),
            other => other.node() != node,
        });
        self.timers.retain(|_, t| match *t {
            Timer::Source {
                node: n,
                process: p,
                ..
            }
            | Timer::Target {
                node: n,
                process: p,
                ..
            }
            | Timer::Copy {
                node: n,
                process: p,
                ..
            }
            | Timer::Keep {
                node: n,
                process: p,
            }
            | Timer::Probe {
                node: n,
                process: p,
            }
            | Timer::Recover {
                node: n,
                process: p,
            }
            | Timer::Ship {
                node: n,
                process: p,
            }
            | Timer::Fence {
                node: n,
                process: p,
                ..
            }
            | Timer::Request {
                node: n,
                process: p,
                ..
            }
            | Timer::Progress {
                node: n,
                process: p,
                ..
            }
            | Timer::Adopt {
                node: n,
                process: p,
            }
            | Timer::Shutdown {
                node: n,
                process: p,
            }
            | Timer::Rebind {
                node: n,
                process: p,
                ..
            } => !(n == node && p == process),
            Timer::Ghost { .. } | Timer::Session { .. } | Timer::Admit { .. } => true,
        });
    }
}

/// Removes and returns every element of `queue` for which `pick` holds, keeping both orders.
fn take_where<T>(queue: &mut VecDeque<T>, pick: impl Fn(&T) -> bool) -> Vec<T> {
    let (taken, kept): (Vec<T>, Vec<T>) = std::mem::take(queue).into_iter().partition(|t| pick(t));
    *queue = kept.into();
    taken
}
