//! The simulated cluster: nodes with their units' copies, a store of authority records, links that
//! number and resend their frames, senders, and the pending events between them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::authority::{Stage, UnitRecord};
use ferry_core::conditional::{ConditionalWrite, Settled};
use ferry_core::delivery::{Inbox, Outbox};
use ferry_core::ids::{NodeId, ObjectGeneration, SpotId, UnitId};
use ferry_core::relocation::capture::{QueuedOp, relay_digest};
use ferry_core::relocation::frames::Refusal;
use ferry_core::relocation::protocol::{
    SourceAction, SourceEvent, SourceMachine, SourceTiming, TargetAction, TargetEvent,
    TargetMachine,
};

use super::plan::Step;

/// How big a simulated cluster is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Nodes.
    pub nodes: usize,
    /// Units, placed round-robin at the start.
    pub units: usize,
    /// Senders, each on node `sender % nodes`.
    pub senders: usize,
}

/// The time to decide a move an offer gives its target.
const TARGET_WITHIN: Duration = Duration::from_secs(30);
/// A hop bound, as the router has one.
const MAX_HOPS: u8 = 8;
/// How many events a run may take to settle after its plan.
const SETTLE_BUDGET: usize = 20_000;

/// Work queued at a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// A sender's numbered tell.
    Tell { sender: usize, seq: u64 },
    /// A sender's order marker, answered to its node once everything before it ran.
    Fence {
        sender: usize,
        token: u64,
        origin: usize,
    },
}

impl Work {
    /// As a relay record's payload, so the core's relay digest covers it.
    fn encode(self, unit: usize) -> QueuedOp {
        let mut bytes = Vec::with_capacity(25);
        let (kind, a, b, c) = match self {
            Work::Tell { sender, seq } => (0u8, sender as u64, seq, 0),
            Work::Fence {
                sender,
                token,
                origin,
            } => (1u8, sender as u64, token, origin as u64),
        };
        bytes.push(kind);
        for n in [a, b, c] {
            bytes.extend_from_slice(&n.to_be_bytes());
        }
        QueuedOp {
            to: unit_id(unit),
            payload: Bytes::from(bytes),
            session: None,
            reply: None,
        }
    }

    fn decode(op: &QueuedOp) -> Work {
        let b = &op.payload;
        let n = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&b[at..at + 8]);
            u64::from_be_bytes(word)
        };
        match b[0] {
            0 => Work::Tell {
                sender: n(1) as usize,
                seq: n(9),
            },
            _ => Work::Fence {
                sender: n(1) as usize,
                token: n(9),
                origin: n(17) as usize,
            },
        }
    }
}

/// A frame between two nodes.
#[derive(Debug, Clone)]
enum Msg {
    Work {
        unit: usize,
        work: Work,
        hops: u8,
    },
    FenceDone {
        unit: usize,
        sender: usize,
        token: u64,
    },
    Hint {
        unit: usize,
        sender: usize,
        owner: usize,
    },
    Offer {
        rel: u64,
        unit: usize,
        version: u64,
        record: UnitRecord,
        log: Vec<(usize, u64)>,
        queue: Vec<Work>,
    },
    RelayReady(u64),
    Refused(u64),
    Relay(u64, QueuedOp),
    RelayReset(u64),
    Cutover(u64, u32, u32),
    Committed(u64),
    Aborted(u64),
    Withdraw(u64),
}

/// One unit's copy on one node.
#[derive(Debug)]
enum Copy {
    /// Running turns.
    Open { log: Vec<(usize, u64)> },
    /// The source of a move.
    Source(Box<Outgoing>),
    /// The target of a move.
    Target(Box<Incoming>),
}

#[derive(Debug)]
struct Outgoing {
    rel: u64,
    to: usize,
    machine: SourceMachine,
    /// The source's own time: it moves on only when the machine's timer fires.
    clock: Instant,
    /// Whether a timer event is pending for this move.
    armed: bool,
    log: Vec<(usize, u64)>,
    /// Queued before the capture (captured with the unit).
    queue: Vec<Work>,
    captured: bool,
    /// Arrived after the capture, relayed at the handover.
    held: Vec<Work>,
    handed: bool,
    /// Arrived after the handover: run here if the unit comes back, else sent on.
    after: Vec<Work>,
    version: u64,
    record: UnitRecord,
    /// The reclaim written, while the store is asked.
    reclaim: Option<UnitRecord>,
    ended: bool,
}

#[derive(Debug)]
struct Incoming {
    rel: u64,
    from: usize,
    machine: TargetMachine,
    log: Vec<(usize, u64)>,
    queue: Vec<Work>,
    relays: Vec<QueuedOp>,
    /// The relay record that just arrived, kept only if the machine says so.
    arriving: Option<QueuedOp>,
    /// Arrived here while staged.
    gated: Vec<Work>,
    restored: bool,
    version: u64,
    wrote: UnitRecord,
}

#[derive(Debug, Default)]
struct Node {
    dead: bool,
    incarnation: u64,
    copies: BTreeMap<usize, Copy>,
}

/// The traffic of one direction between two nodes.
#[derive(Debug, Default)]
struct Link {
    out: Outbox,
    /// Frames on the wire: sender incarnation, number, body.
    wire: VecDeque<(u64, u64, u64)>,
    /// The receiving side's account of what it delivered.
    inbox: Inbox,
}

/// Why a store write is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Commit { rel: u64 },
    Reclaim { rel: u64 },
    Rebuild,
}

#[derive(Debug, Clone)]
enum Answer {
    Won,
    Lost,
    Unknown,
    Read(UnitRecord, u64),
}

/// Something that is due to happen, in some order.
#[derive(Debug, Clone)]
enum Event {
    Write {
        node: usize,
        unit: usize,
        expect: u64,
        record: UnitRecord,
        why: Purpose,
    },
    Read {
        node: usize,
        unit: usize,
        why: Purpose,
    },
    Answer {
        node: usize,
        unit: usize,
        why: Purpose,
        answer: Answer,
    },
    Boundary(usize, usize),
    Restore(usize, usize),
    /// The source machine's next timeout passes (silence, the deadline, a fence retry...).
    SourceTimer(usize, usize),
    /// The target machine's staged time is over.
    TargetTimer(usize, usize),
}

#[derive(Debug, Default)]
struct Sender {
    next: u64,
    route: Vec<usize>,
    /// Per unit: the fence that is out, and the owner to switch to when it is answered.
    fence: Vec<Option<(u64, usize)>>,
    held: Vec<Vec<u64>>,
    /// Every number `tell` accepted, per unit.
    sent: Vec<Vec<u64>>,
}

/// The whole simulated cluster.
#[derive(Debug)]
pub struct World {
    shape: Shape,
    nodes: Vec<Node>,
    links: BTreeMap<(usize, usize), Link>,
    bodies: BTreeMap<u64, Msg>,
    next_body: u64,
    records: Vec<(u64, UnitRecord)>,
    version: u64,
    senders: Vec<Sender>,
    events: Vec<Event>,
    blind: Option<bool>,
    restore_fails: bool,
    next_rel: u64,
    next_token: u64,
    rebuilt: Vec<bool>,
    /// The records recovery wrote, while the store is asked whether they landed.
    rebuilding: BTreeMap<usize, UnitRecord>,
    /// Units whose copies, record or log changed since the last check.
    touched: BTreeSet<usize>,
    crashed: bool,
    lost: usize,
    moves_ended: usize,
    tells_ran: usize,
    settled: usize,
    trace: Vec<String>,
    /// Time zero of every move's clock.
    epoch: Instant,
}

fn node_id(n: usize) -> NodeId {
    NodeId::new(format!("n{n}")).expect("a valid node id")
}

fn unit_id(u: usize) -> UnitId {
    UnitId::Spot(SpotId::new(format!("room{u}")).expect("a valid spot id"))
}

fn owner_index(record: &UnitRecord) -> usize {
    record.owner.as_str()[1..]
        .parse()
        .expect("a simulated node id")
}

impl World {
    /// A cluster of `shape`, every unit open on its first node and recorded there.
    pub fn new(shape: Shape) -> World {
        let mut nodes: Vec<Node> = (0..shape.nodes).map(|_| Node::default()).collect();
        let mut records = Vec::new();
        for u in 0..shape.units {
            let home = u % shape.nodes;
            nodes[home].copies.insert(u, Copy::Open { log: Vec::new() });
            let record = UnitRecord {
                owner: node_id(home),
                lease_generation: 0,
                object_generation: ObjectGeneration(u as u64 + 1),
                owner_generation: 1,
                factory: "room".into(),
                stage: Stage::Active,
                spot: None,
                recoverable: true,
            };
            records.push((1, record));
        }
        let senders = (0..shape.senders)
            .map(|_| Sender {
                next: 0,
                route: (0..shape.units).map(|u| u % shape.nodes).collect(),
                fence: vec![None; shape.units],
                held: vec![Vec::new(); shape.units],
                sent: vec![Vec::new(); shape.units],
            })
            .collect();
        World {
            shape,
            nodes,
            links: BTreeMap::new(),
            bodies: BTreeMap::new(),
            next_body: 0,
            records,
            version: 1,
            senders,
            events: Vec::new(),
            blind: None,
            restore_fails: false,
            next_rel: 0,
            next_token: 0,
            rebuilt: vec![false; shape.units],
            rebuilding: BTreeMap::new(),
            touched: BTreeSet::new(),
            crashed: false,
            lost: 0,
            moves_ended: 0,
            tells_ran: 0,
            settled: 0,
            trace: Vec::new(),
            epoch: Instant::now(),
        }
    }

    /// The steps taken so far, one line each.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// How many moves have ended.
    pub fn moves_ended(&self) -> usize {
        self.moves_ended
    }

    /// How many tells have run.
    pub fn tells_ran(&self) -> usize {
        self.tells_ran
    }

    /// How many events are pending.
    pub fn pending(&self) -> usize {
        self.links.values().filter(|l| !l.wire.is_empty()).count() + self.events.len()
    }

    /// Whether settling may take another event.
    pub fn settling_budget(&mut self) -> bool {
        self.settled += 1;
        self.settled <= SETTLE_BUDGET
    }

    /// Takes one step of a plan.
    pub fn step(&mut self, step: &Step) {
        match *step {
            Step::Next(k) => {
                let busy: Vec<(usize, usize)> = self
                    .links
                    .iter()
                    .filter(|(_, link)| !link.wire.is_empty())
                    .map(|(&pair, _)| pair)
                    .collect();
                let count = busy.len() + self.events.len();
                if count == 0 {
                    return;
                }
                let at = k as usize % count;
                match busy.get(at) {
                    Some(&(a, b)) => self.frame(a, b),
                    None => {
                        let event = self.events.remove(at - busy.len());
                        self.event(event);
                    }
                }
            }
            Step::Tell { sender, unit } => self.tell(usize::from(sender), usize::from(unit)),
            Step::Move { unit, to } => self.start_move(usize::from(unit), usize::from(to)),
            Step::Drain { node } => {
                let node = usize::from(node);
                let to = (node + 1) % self.shape.nodes;
                let units: Vec<usize> = self.nodes[node].copies.keys().copied().collect();
                self.trace.push(format!("drain n{node}"));
                for unit in units {
                    self.start_move(unit, to);
                }
            }
            Step::Crash { node } => self.crash(usize::from(node)),
            Step::Restart { node } => self.restart(usize::from(node)),
            Step::Recover => self.recover(),
            Step::Reset { a, b } => self.reset(usize::from(a), usize::from(b)),
            Step::StoreBlind { applied } => {
                self.trace
                    .push(format!("store: next answer lost (applied {applied})"));
                self.blind = Some(applied);
            }
            Step::RestoreFails => {
                self.trace.push("next restore fails".into());
                self.restore_fails = true;
            }
        }
    }

    // ---- links -------------------------------------------------------------------------------

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        if from == to {
            self.arrive(to, from, msg);
            return;
        }
        let body = self.next_body;
        self.next_body += 1;
        self.bodies.insert(body, msg);
        let incarnation = self.nodes[from].incarnation;
        let link = self.links.entry((from, to)).or_default();
        let seq = link.out.push(Bytes::copy_from_slice(&body.to_be_bytes()));
        link.wire.push_back((incarnation, seq, body));
    }

    fn frame(&mut self, a: usize, b: usize) {
        let Some(link) = self.links.get_mut(&(a, b)) else {
            return;
        };
        let Some((incarnation, seq, body)) = link.wire.pop_front() else {
            return;
        };
        if self.nodes[b].dead {
            self.trace
                .push(format!("frame n{a}->n{b} #{seq}: to a dead node"));
            return;
        }
        if !link.inbox.admit(incarnation, seq) {
            self.trace
                .push(format!("frame n{a}->n{b} #{seq}: seen, dropped"));
            return;
        }
        link.out.ack(seq);
        let Some(msg) = self.bodies.get(&body).cloned() else {
            return;
        };
        self.trace
            .push(format!("frame n{a}->n{b} #{seq}: {}", brief(&msg)));
        self.arrive(b, a, msg);
    }

    fn reset(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.trace.push(format!("reset n{a}<->n{b}"));
        for (from, to) in [(a, b), (b, a)] {
            let peer = self.nodes[to].incarnation;
            let sender = self.nodes[from].incarnation;
            let Some(link) = self.links.get_mut(&(from, to)) else {
                continue;
            };
            link.wire.clear();
            self.lost += link.out.connected(peer).len();
            let first = link.out.first();
            let again: Vec<u64> = link
                .out
                .pending()
                .map(|b| u64::from_be_bytes(b[..8].try_into().expect("a body id")))
                .collect();
            for (i, body) in again.into_iter().enumerate() {
                link.wire.push_back((sender, first + i as u64, body));
            }
        }
    }

    // ---- senders -----------------------------------------------------------------------------

    fn tell(&mut self, s: usize, unit: usize) {
        let home = s % self.shape.nodes;
        if self.nodes[home].dead {
            return;
        }
        let sender = &mut self.senders[s];
        sender.next += 1;
        let seq = sender.next;
        sender.sent[unit].push(seq);
        self.trace.push(format!("s{s} tells room{unit} #{seq}"));
        if sender.fence[unit].is_some() {
            sender.held[unit].push(seq);
            return;
        }
        let route = sender.route[unit];
        self.send_work(home, route, unit, Work::Tell { sender: s, seq }, 0);
    }

    fn send_work(&mut self, from: usize, to: usize, unit: usize, work: Work, hops: u8) {
        self.send(from, to, Msg::Work { unit, work, hops });
    }

    fn hint(&mut self, node: usize, s: usize, unit: usize, owner: usize) {
        let home = s % self.shape.nodes;
        if home != node || self.nodes[node].dead {
            return;
        }
        let sender = &mut self.senders[s];
        match &mut sender.fence[unit] {
            Some((_, to)) => *to = owner,
            None if sender.route[unit] != owner => {
                self.next_token += 1;
                let token = self.next_token;
                sender.fence[unit] = Some((token, owner));
                let old = sender.route[unit];
                let fence = Work::Fence {
                    sender: s,
                    token,
                    origin: home,
                };
                self.send_work(home, old, unit, fence, 0);
            }
            None => {}
        }
    }

    fn fence_done(&mut self, s: usize, unit: usize, token: u64) {
        let home = s % self.shape.nodes;
        let sender = &mut self.senders[s];
        let Some((out, to)) = sender.fence[unit] else {
            return;
        };
        if out != token {
            return;
        }
        sender.fence[unit] = None;
        sender.route[unit] = to;
        let held = std::mem::take(&mut sender.held[unit]);
        for seq in held {
            self.send_work(home, to, unit, Work::Tell { sender: s, seq }, 0);
        }
    }

    // ---- arrivals ----------------------------------------------------------------------------

    fn arrive(&mut self, node: usize, from: usize, msg: Msg) {
        match msg {
            Msg::Work { unit, work, hops } => self.work(node, unit, work, hops),
            Msg::FenceDone {
                unit,
                sender,
                token,
            } => self.fence_done(sender, unit, token),
            Msg::Hint {
                unit,
                sender,
                owner,
            } => self.hint(node, sender, unit, owner),
            Msg::Offer {
                rel,
                unit,
                version,
                record,
                log,
                queue,
            } => self.offer(node, from, rel, unit, version, record, log, queue),
            Msg::RelayReady(rel) => self.source_event(node, rel, SourceEvent::RelayReady),
            Msg::Refused(rel) => {
                self.source_event(node, rel, SourceEvent::Refused(Refusal::other("refused")))
            }
            Msg::Committed(rel) => self.source_event(node, rel, SourceEvent::Committed),
            Msg::Aborted(rel) => {
                self.source_event(node, rel, SourceEvent::Aborted("aborted".into()))
            }
            Msg::Relay(rel, op) => {
                if let Some(t) = self.incoming(node, rel) {
                    t.arriving = Some(op);
                }
                self.target_event(node, rel, TargetEvent::Relay);
            }
            Msg::RelayReset(rel) => self.target_event(node, rel, TargetEvent::RelayReset),
            Msg::Cutover(rel, count, crc) => {
                let matches = self
                    .incoming(node, rel)
                    .is_some_and(|t| relay_digest(&t.relays) == (count, crc));
                self.target_event(node, rel, TargetEvent::Cutover { matches });
            }
            Msg::Withdraw(rel) => self.target_event(node, rel, TargetEvent::Withdrawn),
        }
    }

    fn work(&mut self, node: usize, unit: usize, work: Work, hops: u8) {
        match self.nodes[node].copies.get_mut(&unit) {
            Some(Copy::Open { .. }) => self.run_work(node, unit, work),
            Some(Copy::Source(s)) if !s.captured => s.queue.push(work),
            Some(Copy::Source(s)) if !s.handed => s.held.push(work),
            Some(Copy::Source(s)) => s.after.push(work),
            Some(Copy::Target(t)) => t.gated.push(work),
            None => {
                let owner = owner_index(&self.records[unit].1);
                if owner == node || hops >= MAX_HOPS {
                    self.lost += 1;
                    self.trace
                        .push(format!("n{node}: room{unit} {work:?} has nowhere to go"));
                    return;
                }
                let (sender, origin) = match work {
                    Work::Tell { sender, .. } => (sender, sender % self.shape.nodes),
                    Work::Fence { sender, origin, .. } => (sender, origin),
                };
                self.send_work(node, owner, unit, work, hops + 1);
                if origin != node {
                    self.send(
                        node,
                        origin,
                        Msg::Hint {
                            unit,
                            sender,
                            owner,
                        },
                    );
                }
            }
        }
    }

    /// Runs one piece of work on an open copy: a turn.
    fn run_work(&mut self, node: usize, unit: usize, work: Work) {
        self.touched.insert(unit);
        let Some(Copy::Open { log }) = self.nodes[node].copies.get_mut(&unit) else {
            return;
        };
        match work {
            Work::Tell { sender, seq } => {
                log.push((sender, seq));
                self.tells_ran += 1;
            }
            Work::Fence {
                sender,
                token,
                origin,
            } => self.send(
                node,
                origin,
                Msg::FenceDone {
                    unit,
                    sender,
                    token,
                },
            ),
        }
    }

    fn open(&mut self, node: usize, unit: usize, log: Vec<(usize, u64)>, work: Vec<Work>) {
        self.touched.insert(unit);
        self.nodes[node].copies.insert(unit, Copy::Open { log });
        for w in work {
            self.run_work(node, unit, w);
        }
    }

    // ---- moves: the source -------------------------------------------------------------------

    fn start_move(&mut self, unit: usize, to: usize) {
        let Some(from) = self
            .nodes
            .iter()
            .position(|n| !n.dead && matches!(n.copies.get(&unit), Some(Copy::Open { .. })))
        else {
            return;
        };
        if from == to || self.nodes[to].dead {
            return;
        }
        self.next_rel += 1;
        let rel = self.next_rel;
        let Some(Copy::Open { log }) = self.nodes[from].copies.remove(&unit) else {
            return;
        };
        let (version, record) = self.records[unit].clone();
        self.touched.insert(unit);
        self.trace
            .push(format!("move {rel}: room{unit} n{from}->n{to}"));
        // Deadlines from under one silence step to over two, so that the deadline passes in
        // every phase of some moves.
        let start = self.epoch;
        let deadline = start + Duration::from_secs(1 + rel % 12);
        let out = Outgoing {
            rel,
            to,
            machine: SourceMachine::new(start, deadline, SourceTiming::default()),
            clock: start,
            armed: false,
            log,
            queue: Vec::new(),
            captured: false,
            held: Vec::new(),
            handed: false,
            after: Vec::new(),
            version,
            record,
            reclaim: None,
            ended: false,
        };
        self.nodes[from]
            .copies
            .insert(unit, Copy::Source(Box::new(out)));
        self.source_event(
            from,
            rel,
            SourceEvent::Quiesced {
                gateways: Default::default(),
            },
        );
    }

    fn outgoing(&mut self, node: usize, rel: u64) -> Option<(usize, &mut Outgoing)> {
        self.nodes[node]
            .copies
            .iter_mut()
            .find_map(|(&u, c)| match c {
                Copy::Source(s) if s.rel == rel => Some((u, &mut **s)),
                _ => None,
            })
    }

    fn incoming(&mut self, node: usize, rel: u64) -> Option<&mut Incoming> {
        self.nodes[node].copies.values_mut().find_map(|c| match c {
            Copy::Target(t) if t.rel == rel => Some(&mut **t),
            _ => None,
        })
    }

    fn source_event(&mut self, node: usize, rel: u64, event: SourceEvent) {
        let Some((unit, s)) = self.outgoing(node, rel) else {
            return;
        };
        let line = format!("n{node} move {rel} source {event:?}");
        let actions = s.machine.on(event, s.clock);
        self.source_acts(node, unit, rel, line, actions);
    }

    /// The source's timer fires: its clock moves on to the time the machine asked for.
    fn source_timer(&mut self, node: usize, unit: usize) {
        let Some(Copy::Source(s)) = self.nodes[node].copies.get_mut(&unit) else {
            return;
        };
        s.armed = false;
        let Some(at) = s.machine.poll_timeout() else {
            return;
        };
        s.clock = s.clock.max(at);
        let rel = s.rel;
        let line = format!(
            "n{node} move {rel} source timer at +{:?}",
            s.clock.duration_since(self.epoch)
        );
        let actions = s.machine.handle_timeout(s.clock);
        self.source_acts(node, unit, rel, line, actions);
    }

    /// Counts a move that just ended, traces, carries out `actions`, and arms the source's timer
    /// if the machine waits for one.
    fn source_acts(
        &mut self,
        node: usize,
        unit: usize,
        rel: u64,
        line: String,
        actions: Vec<SourceAction>,
    ) {
        if let Some(Copy::Source(s)) = self.nodes[node].copies.get_mut(&unit)
            && !s.ended
            && s.machine.end().is_some()
        {
            s.ended = true;
            self.moves_ended += 1;
        }
        self.trace.push(format!("{line} -> {actions:?}"));
        for action in actions {
            self.source_action(node, unit, action);
        }
        if let Some(Copy::Source(s)) = self.nodes[node].copies.get_mut(&unit)
            && s.rel == rel
            && !s.armed
            && s.machine.poll_timeout().is_some()
        {
            s.armed = true;
            self.events.push(Event::SourceTimer(node, unit));
        }
    }

    fn source_action(&mut self, node: usize, unit: usize, action: SourceAction) {
        self.touched.insert(unit);
        let Some(Copy::Source(s)) = self.nodes[node].copies.get_mut(&unit) else {
            return;
        };
        let (rel, to) = (s.rel, s.to);
        match action {
            SourceAction::SealGateways(_)
            | SourceAction::CheckGateways(_)
            | SourceAction::ReleaseSessions(_) => {}
            SourceAction::SealUnit => self.events.push(Event::Boundary(node, unit)),
            // Before its turn boundary the lane stops waiting for one, and runs on as it was.
            SourceAction::CancelSeal => {
                if s.captured {
                    return;
                }
                self.events
                    .retain(|e| !matches!(e, Event::Boundary(n, u) if *n == node && *u == unit));
                let Some(Copy::Source(s)) = self.nodes[node].copies.remove(&unit) else {
                    return;
                };
                let s = *s;
                self.open(node, unit, s.log, s.queue);
            }
            SourceAction::SendCapture => {
                let msg = Msg::Offer {
                    rel,
                    unit,
                    version: s.version,
                    record: s.record.clone(),
                    log: s.log.clone(),
                    queue: s.queue.clone(),
                };
                self.send(node, to, msg);
            }
            SourceAction::Handover | SourceAction::ResendHandover => {
                let again = s.handed;
                s.handed = true;
                let held: Vec<QueuedOp> = s.held.iter().map(|w| w.encode(unit)).collect();
                let (count, crc) = relay_digest(&held);
                if again {
                    self.send(node, to, Msg::RelayReset(rel));
                }
                for op in held {
                    self.send(node, to, Msg::Relay(rel, op));
                }
                self.send(node, to, Msg::Cutover(rel, count, crc));
            }
            SourceAction::Withdraw => self.send(node, to, Msg::Withdraw(rel)),
            SourceAction::Resume => {
                let Some(Copy::Source(s)) = self.nodes[node].copies.remove(&unit) else {
                    return;
                };
                let s = *s;
                let work: Vec<Work> = s.queue.into_iter().chain(s.held).chain(s.after).collect();
                self.open(node, unit, s.log, work);
            }
            SourceAction::FenceReclaim { .. } => {
                let mut record = s.record.clone();
                record.owner_generation += 1;
                s.reclaim = Some(record.clone());
                self.events.push(Event::Write {
                    node,
                    unit,
                    expect: s.version,
                    record,
                    why: Purpose::Reclaim { rel },
                });
            }
            SourceAction::Release => {
                let Some(Copy::Source(s)) = self.nodes[node].copies.remove(&unit) else {
                    return;
                };
                for work in s.after {
                    self.send_work(node, s.to, unit, work, 0);
                }
            }
        }
    }

    // ---- moves: the target -------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn offer(
        &mut self,
        node: usize,
        from: usize,
        rel: u64,
        unit: usize,
        version: u64,
        record: UnitRecord,
        log: Vec<(usize, u64)>,
        queue: Vec<Work>,
    ) {
        if self.nodes[node].copies.contains_key(&unit) {
            self.send(node, from, Msg::Refused(rel));
            return;
        }
        self.touched.insert(unit);
        let mut wrote = record;
        wrote.owner = node_id(node);
        wrote.lease_generation = self.nodes[node].incarnation;
        wrote.owner_generation += 1;
        let incoming = Incoming {
            rel,
            from,
            machine: TargetMachine::new(self.epoch, TARGET_WITHIN),
            log,
            queue,
            relays: Vec::new(),
            arriving: None,
            gated: Vec::new(),
            restored: false,
            version,
            wrote,
        };
        self.nodes[node]
            .copies
            .insert(unit, Copy::Target(Box::new(incoming)));
        self.events.push(Event::Restore(node, unit));
        self.events.push(Event::TargetTimer(node, unit));
    }

    fn target_event(&mut self, node: usize, rel: u64, event: TargetEvent) {
        let line = format!("n{node} move {rel} target {event:?}");
        self.target_step(node, rel, line, |machine| machine.on(event));
    }

    /// The target's timer fires: the staged time is over, whenever the plan says it is.
    fn target_timer(&mut self, node: usize, unit: usize) {
        let Some(Copy::Target(t)) = self.nodes[node].copies.get(&unit) else {
            return;
        };
        let Some(at) = t.machine.poll_timeout() else {
            return;
        };
        let rel = t.rel;
        let line = format!(
            "n{node} move {rel} target timer at +{:?}",
            at.duration_since(self.epoch)
        );
        self.target_step(node, rel, line, |machine| machine.handle_timeout(at));
    }

    fn target_step(
        &mut self,
        node: usize,
        rel: u64,
        line: String,
        step: impl FnOnce(&mut TargetMachine) -> Vec<TargetAction>,
    ) {
        let Some(unit) = self.nodes[node].copies.iter().find_map(|(&u, c)| match c {
            Copy::Target(t) if t.rel == rel => Some(u),
            _ => None,
        }) else {
            return;
        };
        let Some(Copy::Target(t)) = self.nodes[node].copies.get_mut(&unit) else {
            return;
        };
        let actions = step(&mut t.machine);
        self.trace.push(format!("{line} -> {actions:?}"));
        for action in actions {
            self.target_action(node, unit, action);
        }
    }

    fn target_action(&mut self, node: usize, unit: usize, action: TargetAction) {
        self.touched.insert(unit);
        let Some(Copy::Target(t)) = self.nodes[node].copies.get_mut(&unit) else {
            return;
        };
        let (rel, from) = (t.rel, t.from);
        match action {
            TargetAction::SendRelayReady => self.send(node, from, Msg::RelayReady(rel)),
            TargetAction::SendRefused(_) => self.send(node, from, Msg::Refused(rel)),
            TargetAction::KeepRelay => t.relays.extend(t.arriving.take()),
            TargetAction::ClearRelay => t.relays.clear(),
            TargetAction::Commit => self.events.push(Event::Write {
                node,
                unit,
                expect: t.version,
                record: t.wrote.clone(),
                why: Purpose::Commit { rel },
            }),
            TargetAction::ReadBack => self.events.push(Event::Read {
                node,
                unit,
                why: Purpose::Commit { rel },
            }),
            TargetAction::Open => {
                let Some(Copy::Target(t)) = self.nodes[node].copies.remove(&unit) else {
                    return;
                };
                let t = *t;
                let work: Vec<Work> = t
                    .queue
                    .into_iter()
                    .chain(t.relays.iter().map(Work::decode))
                    .chain(t.gated)
                    .collect();
                self.open(node, unit, t.log, work);
            }
            TargetAction::SendCommitted => self.send(node, from, Msg::Committed(rel)),
            TargetAction::Discard => {
                let Some(Copy::Target(t)) = self.nodes[node].copies.remove(&unit) else {
                    return;
                };
                for work in t.gated {
                    self.work(node, unit, work, 0);
                }
            }
            TargetAction::SendAborted(_) => self.send(node, from, Msg::Aborted(rel)),
        }
    }

    // ---- the store, boundaries, restores, timers ---------------------------------------------

    fn event(&mut self, event: Event) {
        match event {
            Event::Write {
                node,
                unit,
                expect,
                record,
                why,
            } => {
                let current = self.records[unit].0;
                let wins = current == expect;
                let blind = self.blind.take();
                let applied = match blind {
                    Some(applied) => wins && applied,
                    None => wins,
                };
                if applied {
                    self.touched.insert(unit);
                    self.version += 1;
                    self.records[unit] = (self.version, record);
                }
                let answer = match (blind, wins) {
                    (Some(_), _) => Answer::Unknown,
                    (None, true) => Answer::Won,
                    (None, false) => Answer::Lost,
                };
                self.trace.push(format!(
                    "store write room{unit} for n{node} {why:?}: {answer:?} (applied {applied})"
                ));
                self.events.push(Event::Answer {
                    node,
                    unit,
                    why,
                    answer,
                });
            }
            Event::Read { node, unit, why } => {
                let (version, record) = self.records[unit].clone();
                self.events.push(Event::Answer {
                    node,
                    unit,
                    why,
                    answer: Answer::Read(record, version),
                });
            }
            Event::Answer {
                node,
                unit,
                why,
                answer,
            } => self.answer(node, unit, why, answer),
            Event::Boundary(node, unit) => {
                let Some(Copy::Source(s)) = self.nodes[node].copies.get_mut(&unit) else {
                    return;
                };
                s.captured = true;
                let rel = s.rel;
                self.source_event(
                    node,
                    rel,
                    SourceEvent::Captured {
                        late: Default::default(),
                    },
                );
            }
            Event::Restore(node, unit) => {
                let Some(Copy::Target(t)) = self.nodes[node].copies.get_mut(&unit) else {
                    return;
                };
                let rel = t.rel;
                let event = if std::mem::take(&mut self.restore_fails) {
                    TargetEvent::RestoreFailed(Refusal::incompatible("the state adapter panicked"))
                } else {
                    t.restored = true;
                    TargetEvent::Restored
                };
                self.target_event(node, rel, event);
            }
            Event::SourceTimer(node, unit) => self.source_timer(node, unit),
            Event::TargetTimer(node, unit) => self.target_timer(node, unit),
        }
    }

    fn answer(&mut self, node: usize, unit: usize, why: Purpose, answer: Answer) {
        if self.nodes[node].dead {
            return;
        }
        match why {
            Purpose::Commit { rel } => {
                let event = match answer {
                    Answer::Won => TargetEvent::CommitWon,
                    Answer::Lost => TargetEvent::CommitLost,
                    Answer::Unknown => TargetEvent::CommitUnknown,
                    Answer::Read(record, _) => {
                        let mine = self.incoming(node, rel).is_some_and(|t| {
                            ConditionalWrite::new(t.wrote.clone()).on_read(Ok(Some(&record)))
                                == Settled::Won
                        });
                        if mine {
                            TargetEvent::ReadShowsOwner
                        } else {
                            TargetEvent::ReadShowsOther
                        }
                    }
                };
                self.target_event(node, rel, event);
            }
            Purpose::Reclaim { rel } => match answer {
                Answer::Won => self.source_event(node, rel, SourceEvent::FenceWon),
                Answer::Unknown => self.source_event(node, rel, SourceEvent::FenceUnknown),
                // A conflict: read the record again; if it is still the source's own incarnation
                // (its earlier reclaim landed unseen), the reclaim is tried at the new version.
                Answer::Lost => self.events.push(Event::Read { node, unit, why }),
                Answer::Read(record, version) => {
                    let Some((_, s)) = self.outgoing(node, rel) else {
                        return;
                    };
                    let ours = s.reclaim.as_ref() == Some(&record);
                    if ours {
                        self.source_event(node, rel, SourceEvent::FenceWon);
                    } else if owner_index(&record) == node {
                        s.version = version;
                        s.record = record;
                        self.source_event(node, rel, SourceEvent::FenceStale);
                    } else {
                        self.source_event(node, rel, SourceEvent::FenceLost);
                    }
                }
            },
            Purpose::Rebuild => {
                let rebuilt = match answer {
                    Answer::Won => true,
                    Answer::Lost => false,
                    Answer::Unknown => {
                        self.events.push(Event::Read { node, unit, why });
                        return;
                    }
                    Answer::Read(record, _) => self.rebuilding.get(&unit).is_some_and(|wrote| {
                        ConditionalWrite::new(wrote.clone()).on_read(Ok(Some(&record)))
                            == Settled::Won
                    }),
                };
                self.rebuilding.remove(&unit);
                if rebuilt && !self.nodes[node].copies.contains_key(&unit) {
                    self.rebuilt[unit] = true;
                    self.trace
                        .push(format!("room{unit} rebuilt on n{node}, state restarted"));
                    self.open(node, unit, Vec::new(), Vec::new());
                }
            }
        }
    }

    // ---- crashes and recovery ----------------------------------------------------------------

    fn crash(&mut self, node: usize) {
        if self.nodes[node].dead || self.nodes.iter().filter(|n| !n.dead).count() <= 1 {
            return;
        }
        self.trace.push(format!("crash n{node}"));
        self.crashed = true;
        self.touched.extend(0..self.shape.units);
        self.nodes[node].dead = true;
        self.nodes[node].copies.clear();
        for (&(a, b), link) in self.links.iter_mut() {
            if a == node {
                link.wire.clear();
                link.out.clear();
            }
            if b == node {
                link.inbox = Inbox::default();
            }
        }
        self.events.retain(|e| match e {
            Event::Write { node: n, .. }
            | Event::Read { node: n, .. }
            | Event::Answer { node: n, .. }
            | Event::Boundary(n, _)
            | Event::Restore(n, _)
            | Event::SourceTimer(n, _)
            | Event::TargetTimer(n, _) => *n != node,
        });
        self.departed(node);
    }

    /// Membership declares `node` gone: moves to other nodes from it give up what they staged
    /// (no cutover will come); recovery rebuilds those units.
    fn departed(&mut self, node: usize) {
        let staged: Vec<(usize, u64)> = (0..self.shape.nodes)
            .filter(|&n| !self.nodes[n].dead)
            .flat_map(|n| {
                self.nodes[n].copies.values().filter_map(move |c| match c {
                    Copy::Target(t) if t.from == node => Some((n, t.rel)),
                    _ => None,
                })
            })
            .collect();
        for (n, rel) in staged {
            self.target_event(n, rel, TargetEvent::Silence);
        }
    }

    fn restart(&mut self, node: usize) {
        if !self.nodes[node].dead {
            return;
        }
        self.trace.push(format!("restart n{node}"));
        self.touched.extend(0..self.shape.units);
        let n = &mut self.nodes[node];
        n.dead = false;
        n.incarnation += 1;
        let incarnation = n.incarnation;
        for (&(_, b), link) in self.links.iter_mut() {
            if b == node {
                self.lost += link.out.connected(incarnation).len();
                link.wire.clear();
            }
        }
        for s in 0..self.shape.senders {
            if s % self.shape.nodes == node {
                let sender = &mut self.senders[s];
                sender.fence.iter_mut().for_each(|f| *f = None);
                sender.held.iter_mut().for_each(Vec::clear);
            }
        }
    }

    fn recover(&mut self) {
        let Some(survivor) = self.nodes.iter().position(|n| !n.dead) else {
            return;
        };
        self.trace.push(format!("recovery on n{survivor}"));
        for unit in 0..self.shape.units {
            let (version, record) = self.records[unit].clone();
            // A claim under way, or a move's copy still being given up, holds the unit's place on
            // the survivor: the next pass retries.
            if self.owner_lives(&record)
                || self.rebuilding.contains_key(&unit)
                || self.nodes[survivor].copies.contains_key(&unit)
            {
                continue;
            }
            let mut rebuilt = record;
            rebuilt.lease_generation = self.nodes[survivor].incarnation;
            rebuilt.owner = node_id(survivor);
            rebuilt.owner_generation += 1;
            rebuilt.object_generation = ObjectGeneration(rebuilt.object_generation.0 + 1000);
            self.rebuilding.insert(unit, rebuilt.clone());
            self.events.push(Event::Write {
                node: survivor,
                unit,
                expect: version,
                record: rebuilt,
                why: Purpose::Rebuild,
            });
        }
    }

    // ---- invariants --------------------------------------------------------------------------

    /// The invariants that hold after every step.
    pub fn check(&mut self) -> Result<(), String> {
        for unit in std::mem::take(&mut self.touched) {
            let open: Vec<usize> = (0..self.shape.nodes)
                .filter(|&n| {
                    !self.nodes[n].dead
                        && matches!(self.nodes[n].copies.get(&unit), Some(Copy::Open { .. }))
                })
                .collect();
            if open.len() > 1 {
                return Err(format!("room{unit} runs turns on nodes {open:?}"));
            }
            let record = &self.records[unit].1;
            let held = (0..self.shape.nodes).any(|n| {
                !self.nodes[n].dead
                    && match self.nodes[n].copies.get(&unit) {
                        Some(Copy::Open { .. } | Copy::Source(_)) => true,
                        Some(Copy::Target(t)) => t.restored,
                        None => false,
                    }
            });
            // A rebuild under way holds a fresh copy, gated until the store answers.
            let rebuilding = self.rebuilding.get(&unit) == Some(record);
            if !held && !rebuilding && self.owner_lives(record) {
                return Err(format!(
                    "room{unit} is lost: no node holds it, and its record names {}, alive",
                    record.owner
                ));
            }
            if !self.rebuilt[unit]
                && let Some(log) = self.log_of(unit)
            {
                let mut last: BTreeMap<usize, u64> = BTreeMap::new();
                for &(sender, seq) in log {
                    let before = last.insert(sender, seq).unwrap_or(0);
                    if seq <= before {
                        return Err(format!(
                            "room{unit} ran s{sender} #{seq} after #{before}: {}",
                            if seq == before {
                                "twice"
                            } else {
                                "out of order"
                            }
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// What must hold once the run has settled: every move ended once; with no crash, every
    /// accepted tell ran, and nothing was lost on the links.
    pub fn check_settled(&self) -> Result<(), String> {
        for (n, node) in self.nodes.iter().enumerate() {
            for (unit, copy) in &node.copies {
                if let Copy::Source(s) = copy
                    && !node.dead
                    && s.machine.end().is_none()
                    && !s.machine.fencing()
                {
                    return Err(format!("move {} of room{unit} on n{n} never ended", s.rel));
                }
            }
        }
        if self.crashed {
            return Ok(());
        }
        if self.lost > 0 {
            return Err(format!(
                "{} frames or tells were lost with no crash",
                self.lost
            ));
        }
        for unit in 0..self.shape.units {
            let Some(log) = self.log_of(unit) else {
                return Err(format!("room{unit} runs nowhere after settling"));
            };
            for (s, sender) in self.senders.iter().enumerate() {
                let ran: Vec<u64> = log
                    .iter()
                    .filter(|(who, _)| *who == s)
                    .map(|&(_, seq)| seq)
                    .collect();
                if ran != sender.sent[unit] {
                    return Err(format!(
                        "room{unit}: s{s} told {:?} but {:?} ran",
                        sender.sent[unit], ran
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether the record's owner is the live incarnation that took the unit (else recovery may
    /// rebuild it).
    fn owner_lives(&self, record: &UnitRecord) -> bool {
        let owner = &self.nodes[owner_index(record)];
        !owner.dead && owner.incarnation == record.lease_generation
    }

    fn log_of(&self, unit: usize) -> Option<&Vec<(usize, u64)>> {
        self.nodes
            .iter()
            .filter(|n| !n.dead)
            .find_map(|n| match n.copies.get(&unit) {
                Some(Copy::Open { log }) => Some(log),
                _ => None,
            })
    }
}

fn brief(msg: &Msg) -> String {
    match msg {
        Msg::Work { unit, work, hops } => format!("room{unit} {work:?} hop {hops}"),
        Msg::Offer { rel, unit, .. } => format!("offer {rel} room{unit}"),
        other => format!("{other:?}"),
    }
}
