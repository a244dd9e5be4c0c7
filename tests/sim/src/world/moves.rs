//! Moves: the source and the target of each, driving the core's machines
//! ([`SourceMachine`], [`TargetMachine`]) and the lane's place in the move ([`LaneMove`]). The
//! source pre-copies its unit (`precopy`), seals it at a turn boundary, reads the records of what
//! it moves, offers the capture's image as a difference to what the target holds ([`Precopy`]),
//! relays what arrived since and cuts over; the target assembles the image ([`Assembly`]),
//! restores, commits by a conditional write and opens; after the handover, a reclaim by the
//! source races the target's commit in the store.
//!
//! [`LaneMove`]: ferry_core::relocation::lane::LaneMove

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use ferry_core::authority::{NodeState, UnitRecord};
use ferry_core::conditional::{ConditionalWrite, Settled};
use ferry_core::ids::UnitId;
use ferry_core::relocation::admission::{Admission, Offer, Staged, admit};
use ferry_core::relocation::assembly::Assembly;
use ferry_core::relocation::capture::{Base, Manifest, QueuedOp, relay_digest};
use ferry_core::relocation::frames::Refusal;
use ferry_core::relocation::lane::{LaneMove, Seal};
use ferry_core::relocation::precopy::{Precopy, base_for};
use ferry_core::relocation::protocol::{
    MoveEnd, SourceAction, SourceEvent, SourceMachine, SourceTiming, TargetAction, TargetEvent,
    TargetMachine, fence_conflict,
};
use ferry_core::relocation::{ReadyOutcome, RelocationId};
use ferry_core::sealing::Ticket;

use super::lanes::{Cell, Lane, Parcel};
use super::links::Msg;
use super::precopy::{Copying, MAX_STATE, Trimmed};
use super::store::{Cond, Key, Op, Purpose, Reply, Value};
use super::{Event, Timer, World, node_id};

/// How often a target that is still restoring says so.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What the source and target of a move say to each other.
#[derive(Debug, Clone)]
pub(crate) enum Reloc {
    /// A piece of a pre-copy round's image of `len` bytes, with its CRC-32C.
    Precopy {
        len: u64,
        offset: u64,
        crc: u32,
        bytes: Bytes,
    },
    /// A round's pieces are all sent: does the target hold `base`?
    PrecopyEnd {
        round: u32,
        base: Base,
    },
    PrecopyHeld {
        round: u32,
        holds: bool,
    },
    /// The capture, whose image's chunks follow.
    Offer(Box<OfferFrame>),
    /// A chunk of the image: all of it, or what differs from the base the target holds.
    Chunk {
        index: u32,
        offset: u64,
        bytes: Bytes,
    },
    /// The target does not hold the base the offer's chunks patch.
    BaseLost,
    /// The whole image instead, whose chunks follow.
    Resend(Manifest),
    Progress,
    RelayReady,
    Refused,
    Relay(Parcel),
    RelayReset,
    Cutover(u32, u32),
    Committed,
    Aborted,
    Withdraw,
}

/// What an offer says: the lane's units (their states travel in the image), its saved work, the
/// records as the source read them, the time left to the deadline, and the image's manifest.
#[derive(Debug, Clone)]
pub(crate) struct OfferFrame {
    primary: usize,
    cells: BTreeMap<usize, Cell>,
    journal: Vec<Parcel>,
    records: Vec<(usize, u64, UnitRecord)>,
    within: Duration,
    manifest: Manifest,
}

/// A move out of a node.
#[derive(Debug)]
pub(crate) struct Source {
    pub lane: u64,
    pub to: usize,
    pub machine: SourceMachine,
    /// Whether a timer is pending for the machine.
    pub armed: bool,
    /// The capture: the lane's units as sealed, and its saved work.
    pub cells: BTreeMap<usize, Cell>,
    pub journal: Vec<Parcel>,
    /// The records read before the offer, which the reclaim is conditional on.
    pub records: Vec<(usize, u64, UnitRecord)>,
    /// Whether the end was counted.
    pub ended: bool,
    /// When a frame from the target last reached this source.
    pub heard: std::time::Instant,
    /// The gateways told to seal, and the bound Actors they were told about.
    pub told: BTreeSet<ferry_core::ids::NodeId>,
    pub sealed: Vec<(usize, u64, usize, u32)>,
    /// Where the move stands before its machine takes over: pre-copy, then the window.
    pub copying: Copying,
    /// What the target holds of the unit's image, and what was sent.
    pub precopy: Precopy,
    /// The image as sealed, until the target has it: sent whole again if the target lost the
    /// pre-copy it was a difference to.
    pub image: Option<Bytes>,
    /// Whether the offer went (or was tried).
    pub offered: bool,
    /// The seal window of the drain that started the move, until the move leaves it.
    pub gate: Option<u64>,
    /// The move's place in that window, and when it took it.
    pub placed: Option<(Ticket, std::time::Instant)>,
    /// Whether the window let the move pre-copy ahead of the seals, until its pre-copy is over.
    pub copy_place: bool,
    /// When the unit was sealed and when the target said it committed: the unit's pause, which
    /// the window learns from.
    pub sealed_at: Option<std::time::Instant>,
    pub committed_at: Option<std::time::Instant>,
}

/// A move into a node.
#[derive(Debug)]
pub(crate) struct Target {
    pub from: usize,
    pub machine: TargetMachine,
    pub armed: bool,
    /// The staged lane, once restored.
    pub lane: Option<u64>,
    /// The offer's cells and saved work, until restored; their states come from the image.
    pub offer: Option<(usize, BTreeMap<usize, Cell>, Vec<Parcel>)>,
    /// The image's chunks as they arrive; none while the whole image is awaited.
    pub assembly: Option<Assembly>,
    pub awaiting_whole: bool,
    /// When the source last heard that the work goes on.
    pub reported: std::time::Instant,
    pub records: Vec<(usize, u64, UnitRecord)>,
    pub relays: Vec<Parcel>,
    /// The relay record that just arrived, kept only if the machine says so.
    pub arriving: Option<Parcel>,
    /// What the commit writes (the primary's record first).
    pub wrote: Vec<UnitRecord>,
}

/// A relay record as the digest counts it, and saved work as an image carries it.
pub(crate) fn op(parcel: &Parcel) -> QueuedOp {
    let text = format!("{parcel:?}");
    QueuedOp {
        to: ferry_core::ids::UnitId::Spot(ferry_core::ids::SpotId::new("relay").expect("an id")),
        payload: Bytes::from(text.into_bytes()),
        session: None,
        reply: None,
    }
}

fn digest(parcels: &[Parcel]) -> (u32, u32) {
    relay_digest(&parcels.iter().map(op).collect::<Vec<_>>())
}

impl World {
    /// Moves the lane of `unit` (its room, for a member) from wherever it runs to `to`, through
    /// the seal window `gate` of a drain; the move, if one starts. It pre-copies first.
    pub(crate) fn move_unit(&mut self, unit: usize, to: usize, gate: Option<u64>) -> Option<u64> {
        let (from, lane) = self.host(unit)?;
        if from == to || !self.nodes[to].up {
            return None;
        }
        let rel = self.fresh();
        let primary = self.nodes[from].lanes.get(&lane)?.primary;
        // Deadlines from under one silence step to over two, so that the deadline passes in every
        // phase of some moves.
        let deadline = self.now + Duration::from_secs(1 + rel % 12);
        let machine = SourceMachine::new(self.now, deadline, SourceTiming::default());
        let precopy = self
            .standby_move_to(from, primary, to)
            .map_or_else(Precopy::new, Precopy::from_standby);
        trace!(
            self,
            "move {rel}: u{primary} n{from}->n{to}, deadline +{}s",
            1 + rel % 12
        );
        self.outgoing.insert(
            rel,
            (
                from,
                Source {
                    lane,
                    to,
                    machine,
                    armed: false,
                    cells: BTreeMap::new(),
                    journal: Vec::new(),
                    records: Vec::new(),
                    ended: false,
                    heard: self.now,
                    told: BTreeSet::new(),
                    sealed: Vec::new(),
                    copying: Copying::Snapshot,
                    precopy,
                    image: None,
                    offered: false,
                    gate,
                    placed: None,
                    copy_place: false,
                    sealed_at: None,
                    committed_at: None,
                },
            ),
        );
        self.start_copy(from, rel, deadline);
        Some(rel)
    }

    pub(crate) fn source(&mut self, rel: u64) -> Option<(usize, &mut Source)> {
        let (node, s) = self.outgoing.get_mut(&rel)?;
        (self.nodes[*node].up).then_some((*node, s))
    }

    /// Feeds the source machine an event, now.
    pub(crate) fn source_event(&mut self, rel: u64, event: SourceEvent) {
        let now = self.now;
        let Some(node) = self.source(rel).map(|(node, _)| node) else {
            return;
        };
        let line = self.line(|| format!("n{node} move {rel} source {event:?}"));
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let actions = s.machine.on(event, now);
        self.source_acts(rel, line, actions);
    }

    /// A move given up for the target's silence: nothing may have come from the target for the
    /// silence step (a target that works long, and says so, is waited for).
    fn check_silence(&mut self, rel: u64) {
        let now = self.now;
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let silent = matches!(s.machine.end(), Some(MoveEnd::Restored(why)) if why == "the target did not answer");
        let step = SourceTiming::default().step;
        if silent && now < s.heard + step {
            let heard = now.duration_since(s.heard);
            self.broken.get_or_insert(format!(
                "move {rel} gave up on its target for silence {heard:?} after a frame from it"
            ));
        }
    }

    /// The source machine's timer.
    pub(crate) fn source_timer(&mut self, node: usize, rel: u64) {
        let now = self.now;
        let Some((n, s)) = self.source(rel) else {
            return;
        };
        if n != node {
            return;
        }
        s.armed = false;
        let actions = s.machine.handle_timeout(now);
        let line = self.line(|| format!("n{node} move {rel} source timer"));
        self.source_acts(rel, line, actions);
    }

    fn source_acts(&mut self, rel: u64, line: String, actions: Vec<SourceAction>) {
        let ended = self.source(rel).and_then(|(_, s)| {
            let first = !s.ended && s.machine.end().is_some();
            s.ended |= first;
            s.machine.end().filter(|_| first).cloned()
        });
        if let Some(end) = &ended {
            self.moves_ended += 1;
            trace!(self, "{line} -> {actions:?}; the move ends {end:?}");
            self.check_silence(rel);
        } else {
            trace!(self, "{line} -> {actions:?}");
        }
        for action in actions {
            self.source_action(rel, action);
        }
        self.leave_window(rel);
        if ended.is_some()
            && let Some((node, s)) = self.source(rel)
            && s.precopy.left_behind(s.offered)
        {
            let to = s.to;
            let frame = Reloc::Withdraw;
            self.post(node, to, Msg::Reloc { rel, frame });
        }
        if let Some(end) = &ended {
            self.drain_move_ended(rel, end);
            if *end != MoveEnd::Moved
                && let Some((node, lane)) = self.source(rel).map(|(n, s)| (n, s.lane))
                && let Some(primary) = self.nodes[node].lanes.get(&lane).map(|l| l.primary)
            {
                self.standby_stays(node, primary);
            }
        }
        let process = |w: &World, n: usize| w.nodes[n].process;
        if let Some((node, s)) = self.source(rel)
            && !s.armed
            && let Some(at) = s.machine.poll_timeout()
        {
            s.armed = true;
            let process = process(self, node);
            self.arm(at, Timer::Source { node, process, rel });
        }
        // A move that ended and whose lane is gone or back is forgotten.
        if self
            .outgoing
            .get(&rel)
            .is_some_and(|(_, s)| s.machine.end().is_some())
        {
            self.outgoing.remove(&rel);
        }
    }

    fn source_action(&mut self, rel: u64, action: SourceAction) {
        let Some((node, s)) = self.source(rel) else {
            return;
        };
        let (lane, to) = (s.lane, s.to);
        let units: Vec<usize> = s.cells.keys().copied().collect();
        let relid = RelocationId(u128::from(rel));
        if let Some(primary) = self.nodes[node].lanes.get(&lane).map(|l| l.primary) {
            self.touched.insert(primary);
        }
        match action {
            SourceAction::SealGateways(gateways) => self.seal_gateways(node, rel, lane, gateways),
            SourceAction::CheckGateways(pending) => self.check_gateways(rel, pending),
            SourceAction::ReleaseSessions(to) => self.release_sessions(node, rel, to),
            SourceAction::SealUnit => {
                let signaled = self.nodes[node]
                    .lanes
                    .get(&lane)
                    .is_some_and(|l| self.signaled(l.primary));
                let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
                    self.source_event(rel, SourceEvent::SealRefused("the unit stopped".into()));
                    return;
                };
                match l.stance.seal(relid, signaled) {
                    // An ApplicationSignaled room seals after its deferring turn: the next
                    // boundary, as a plain one captures at once.
                    Seal::Capture | Seal::Wait => {
                        l.sealing = Some(rel);
                        self.events.push(Event::Boundary { node, lane, rel });
                    }
                    Seal::Refused => {
                        self.source_event(rel, SourceEvent::SealRefused("already moving".into()))
                    }
                }
            }
            SourceAction::CancelSeal => {
                if let Some(l) = self.nodes[node].lanes.get_mut(&lane) {
                    if l.stance.cancel_seal(relid) {
                        for parcel in std::mem::take(&mut l.deferred).into_iter().rev() {
                            l.queue.push_front(parcel);
                        }
                    }
                    // Only its own seal: a move that never quiesced the unit cancels nothing.
                    if l.sealing == Some(rel) {
                        l.sealing = None;
                        self.events
                            .retain(|e| !matches!(e, Event::Boundary { rel: r, .. } if *r == rel));
                    }
                }
                self.run_queue(node, lane);
            }
            SourceAction::SendCapture => self.call(node, Op::Get(units), Purpose::Records { rel }),
            SourceAction::SendWhole => {
                let Some((_, s)) = self.source(rel) else {
                    return;
                };
                let Some(image) = s.image.clone() else {
                    let gone = Refusal::other("the sealed image is gone");
                    self.source_event(rel, SourceEvent::Refused(gone));
                    return;
                };
                let sealed = s.precopy.whole(image);
                trace!(
                    self,
                    "n{node} move {rel}: the target lost the pre-copy; the whole image goes"
                );
                self.send_image(node, rel, Reloc::Resend(sealed.manifest), sealed.pieces);
            }
            // Not taken (backlogged), it is dropped: the offer it withdraws may stay staged there
            // until it expires or a newer offer of the unit replaces it.
            SourceAction::Withdraw => self.post(
                node,
                to,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Withdraw,
                },
            ),
            SourceAction::Handover => self.handover(node, rel, lane, to),
            SourceAction::ResendHandover => {
                let relayed = self.nodes[node]
                    .lanes
                    .get(&lane)
                    .map(|l| l.relayed.clone())
                    .unwrap_or_default();
                // Not taken, none of it is sent, as in the runtime: the fence decides the move.
                let reset = Msg::Reloc {
                    rel,
                    frame: Reloc::RelayReset,
                };
                if self.send(node, to, reset).is_err() {
                    return;
                }
                let (count, crc) = digest(&relayed);
                for parcel in relayed {
                    self.post(
                        node,
                        to,
                        Msg::Reloc {
                            rel,
                            frame: Reloc::Relay(parcel),
                        },
                    );
                }
                self.post(
                    node,
                    to,
                    Msg::Reloc {
                        rel,
                        frame: Reloc::Cutover(count, crc),
                    },
                );
            }
            SourceAction::Resume => self.resume(node, rel, lane),
            SourceAction::Release => self.release(node, rel, lane),
            SourceAction::FenceReclaim { .. } => {
                let lease = self.lease_cond(node);
                let Some((_, s)) = self.source(rel) else {
                    return;
                };
                let mut conds: Vec<Cond> = s
                    .records
                    .iter()
                    .map(|(u, v, _)| Cond::Version(Key::Unit(*u), *v))
                    .collect();
                conds.push(lease);
                let puts = s
                    .records
                    .iter()
                    .map(|(u, _, r)| (Key::Unit(*u), Value::Unit(r.fenced())))
                    .collect();
                self.call(
                    node,
                    Op::Batch {
                        conds,
                        puts,
                        deletes: Vec::new(),
                    },
                    Purpose::Fence { rel },
                );
            }
        }
    }

    /// The lane reaches its turn boundary (an ApplicationSignaled room's deferring turn): the
    /// seal captures, or the state adapter panics and the unit runs on.
    pub(crate) fn boundary(&mut self, node: usize, lane: u64, rel: u64) {
        let relid = RelocationId(u128::from(rel));
        let fails = std::mem::take(&mut self.faults.capture_fails);
        let Some(l) = self.nodes[node].lanes.get(&lane) else {
            return;
        };
        if l.sealing != Some(rel) {
            return;
        }
        let primary = l.primary;
        let signaled = self.signaled(primary);
        if signaled {
            self.lives[primary].defers += 1;
            self.touched.insert(primary);
        }
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        l.sealing = None;
        if signaled {
            l.stance.deferred();
        }
        let owed = l.stance.captured(relid, signaled, !fails);
        // Binds held back for this move are saved work too, ahead of what is still queued.
        for parcel in std::mem::take(&mut l.deferred).into_iter().rev() {
            l.queue.push_front(parcel);
        }
        if fails {
            trace!(
                self,
                "n{node}: capture of u{primary} fails: its state adapter panicked"
            );
            if let Some(outcome) = owed {
                self.ready_completed(node, primary, outcome);
            }
            self.run_queue(node, lane);
            self.source_event(
                rel,
                SourceEvent::SealRefused("its state adapter panicked".into()),
            );
            return;
        }
        // The capture takes the state as its game loop left it, up to the seal.
        let due = self.ticks_due();
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        for (u, cell) in l.cells.iter_mut() {
            cell.catch_up(*u, due);
        }
        let cells = l.cells.clone();
        let journal: Vec<Parcel> = l.queue.iter().cloned().collect();
        let late = self.late_gateways(rel, &cells);
        let states = cells.iter().map(|(u, c)| (*u, c.state.clone())).collect();
        self.sealed.insert(rel, states);
        let now = self.now;
        if let Some((_, s)) = self.source(rel) {
            s.cells = cells;
            s.journal = journal;
            s.sealed_at = Some(now);
        }
        self.source_event(rel, SourceEvent::Captured { late });
    }

    /// Whether a room's readiness is signalled by its application (every other room): it defers
    /// a move to its safe point, and hears once how each move it deferred for ended.
    pub(crate) fn signaled(&self, unit: usize) -> bool {
        self.is_room(unit) && unit % 2 == 1
    }

    /// An ApplicationSignaled room hears how a move it deferred for ended.
    fn ready_completed(&mut self, node: usize, room: usize, outcome: ReadyOutcome) {
        trace!(self, "n{node}: u{room} hears {outcome:?}");
        self.lives[room].completions += 1;
        self.touched.insert(room);
    }

    /// The records of the units moved are read: offer the capture, or refuse the move.
    pub(crate) fn records_read(&mut self, node: usize, rel: u64, reply: Reply) {
        let now = self.now;
        let lane = self.outgoing.get(&rel).map(|(_, s)| s.lane);
        let primary = lane
            .and_then(|lane| self.nodes[node].lanes.get(&lane))
            .map_or(0, |l| l.primary);
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let units: Vec<usize> = s.cells.keys().copied().collect();
        let me = node_id(node);
        let records: Option<Vec<(usize, u64, UnitRecord)>> = match reply {
            Reply::Got(found) => units
                .iter()
                .zip(found)
                .map(|(u, f)| f.filter(|(_, r)| r.owner == me).map(|(v, r)| (*u, v, r)))
                .collect(),
            _ => None,
        };
        let Some(records) = records else {
            self.source_event(
                rel,
                SourceEvent::Refused(Refusal::other("the records could not be read here")),
            );
            return;
        };
        let within = s.machine.deadline().saturating_duration_since(now);
        s.records = records.clone();
        let (cells, journal) = (s.cells.clone(), s.journal.clone());
        let image = self.image(primary, &cells, &journal);
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let sealed = s.precopy.seal(image.clone(), &Trimmed);
        s.image = Some(image);
        s.offered = true;
        self.recipes.sent += usize::from(sealed.manifest.recipe.is_some());
        trace!(
            self,
            "n{node} move {rel}: sealed {} bytes, {} sent as {}",
            sealed.manifest.len,
            sealed
                .pieces
                .iter()
                .map(|(_, piece)| piece.len())
                .sum::<usize>(),
            match sealed.manifest {
                m if m.recipe.is_some() => "a recipe of deltas",
                m if m.base.is_some() => "a difference",
                _ => "whole",
            }
        );
        // The states travel in the image alone.
        let cells = cells
            .into_iter()
            .map(|(u, cell)| {
                let state = Bytes::new();
                (u, Cell { state, ..cell })
            })
            .collect();
        let offer = Reloc::Offer(Box::new(OfferFrame {
            primary,
            cells,
            journal,
            records,
            within,
            manifest: sealed.manifest,
        }));
        self.send_image(node, rel, offer, sealed.pieces);
    }

    /// Sends an offer (or a resend) and then its chunks. A frame the link does not take makes
    /// the target unavailable for now: a drain tries the unit again after its pause.
    fn send_image(&mut self, node: usize, rel: u64, first: Reloc, pieces: Vec<(u64, Bytes)>) {
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let to = s.to;
        let chunks = pieces
            .into_iter()
            .enumerate()
            .map(|(index, (offset, bytes))| Reloc::Chunk {
                index: index as u32,
                offset,
                bytes,
            });
        for frame in std::iter::once(first).chain(chunks) {
            if self.send(node, to, Msg::Reloc { rel, frame }).is_err() {
                let unreachable = Refusal::other("the target is unreachable: backlogged");
                self.source_event(rel, SourceEvent::Refused(unreachable));
                return;
            }
        }
    }

    /// The point of no return: the unit's ids leave for the target, what the lane held is
    /// relayed, then the cutover.
    fn handover(&mut self, node: usize, rel: u64, lane: u64, to: usize) {
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            self.source_event(rel, SourceEvent::Silence);
            return;
        };
        if !l
            .stance
            .handover(RelocationId(u128::from(rel)), node_id(to))
        {
            return;
        }
        let units: Vec<usize> = l.cells.keys().copied().collect();
        let relay = std::mem::take(&mut l.hold);
        l.relayed = relay.clone();
        let mut displaced = Vec::new();
        for u in &units {
            let id = self.unit_id(*u);
            displaced.extend(self.nodes[node].routes.hand_over(id, node_id(to)));
            self.nodes[node].directory.remove(u);
        }
        let (count, crc) = digest(&relay);
        // What the link does not take is sent again with the handover's resend.
        for parcel in relay {
            self.post(
                node,
                to,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Relay(parcel),
                },
            );
        }
        self.post(
            node,
            to,
            Msg::Reloc {
                rel,
                frame: Reloc::Cutover(count, crc),
            },
        );
        for parcel in displaced {
            self.route(node, parcel);
        }
    }

    /// The unit runs here again: saved work, what was relayed and held, then what came back.
    fn resume(&mut self, node: usize, rel: u64, lane: u64) {
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        let Some(resumed) = l.stance.resume(RelocationId(u128::from(rel))) else {
            return;
        };
        let relayed = std::mem::take(&mut l.relayed);
        let held = std::mem::take(&mut l.hold);
        l.queue.extend(relayed);
        l.queue.extend(held);
        let units: Vec<usize> = l.cells.keys().copied().collect();
        let primary = l.primary;
        trace!(self, "n{node}: u{primary} runs here again");
        if resumed.signaled {
            self.ready_completed(node, primary, ReadyOutcome::Continued);
        }
        if resumed.handed {
            for u in units {
                self.nodes[node].directory.insert(u, lane);
                let id = self.unit_id(u);
                let returned = self.nodes[node].routes.taken_back(&id);
                if let Some(l) = self.nodes[node].lanes.get_mut(&lane) {
                    l.queue.extend(returned);
                }
                self.touched.insert(u);
            }
        }
        self.run_queue(node, lane);
    }

    /// The target owns the unit: the source's copy is dropped; what came back follows the unit.
    fn release(&mut self, node: usize, rel: u64, lane: u64) {
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            return;
        };
        if l.stance.release(RelocationId(u128::from(rel))).is_none() {
            return;
        }
        let Some(l) = self.drop_lane(node, lane) else {
            return;
        };
        self.last_moved = Some(l.primary);
        for parcel in l.hold {
            self.send_parcel(node, parcel);
        }
        for u in l.cells.keys() {
            let id = self.unit_id(*u);
            for parcel in self.nodes[node].routes.moved(&id) {
                self.route(node, parcel);
            }
        }
    }

    /// The reclaim's answer.
    pub(crate) fn fenced_write(&mut self, node: usize, rel: u64, reply: Reply) {
        match reply {
            Reply::Committed => self.source_event(rel, SourceEvent::FenceWon),
            Reply::Conflict { lease: false } => {
                let Some((_, s)) = self.source(rel) else {
                    return;
                };
                let units = s.records.iter().map(|(u, _, _)| *u).collect();
                self.call(node, Op::ReadBack(units), Purpose::FenceRead { rel });
            }
            // The lease refused it, or no answer: nothing says the target won. Asked again.
            _ => self.source_event(rel, SourceEvent::FenceUnknown),
        }
    }

    /// The records read again after a reclaim met a conflict: another owner or incarnation
    /// means the target committed; else the conditions take what the store holds now.
    pub(crate) fn fence_reread(&mut self, node: usize, rel: u64, reply: Reply) {
        let me = node_id(node);
        let Reply::Got(found) = reply else {
            self.source_event(rel, SourceEvent::FenceUnknown);
            return;
        };
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let event = fence_conflict(
            &me,
            s.records
                .iter()
                .zip(&found)
                .map(|((_, _, read), now)| (read, now.as_ref().map(|(_, r)| r))),
        );
        if event == SourceEvent::FenceStale {
            // Tried again on the records as they stand now.
            for ((_, version, record), now) in s.records.iter_mut().zip(found) {
                if let Some((v, r)) = now {
                    *version = v;
                    *record = r;
                }
            }
        }
        self.source_event(rel, event);
    }

    // ---- the target ----------------------------------------------------------------------------

    fn target(&mut self, node: usize, rel: u64) -> Option<&mut Target> {
        self.nodes[node].incoming.get_mut(&rel)
    }

    /// A frame of a move reaches `node`.
    pub(crate) fn on_reloc(&mut self, node: usize, from: usize, rel: u64, frame: Reloc) {
        let now = self.now;
        if let Some((_, s)) = self.source(rel)
            && s.to == from
        {
            s.heard = now;
        }
        match frame {
            Reloc::Precopy {
                len,
                offset,
                crc,
                bytes,
            } => self.on_precopy(node, from, rel, len, offset, crc, &bytes),
            Reloc::PrecopyEnd { round, base } => self.precopy_end(node, from, rel, round, base),
            Reloc::PrecopyHeld { round, holds } => self.precopy_held(node, rel, round, holds),
            Reloc::Offer(offer) => self.offered(node, from, rel, *offer),
            Reloc::Chunk {
                index,
                offset,
                bytes,
            } => self.on_chunk(node, rel, index, offset, &bytes),
            Reloc::BaseLost => self.source_event(rel, SourceEvent::BaseLost),
            Reloc::Resend(manifest) => {
                if let Some(t) = self.target(node, rel)
                    && t.awaiting_whole
                {
                    t.awaiting_whole = false;
                    t.assembly = Assembly::new(manifest, None).ok();
                }
                self.assembled(node, rel);
            }
            Reloc::Progress => self.source_event(rel, SourceEvent::Progress),
            Reloc::RelayReady => {
                // The target holds the image: it is never sent again.
                if let Some((_, s)) = self.source(rel) {
                    s.image = None;
                }
                self.source_event(rel, SourceEvent::RelayReady)
            }
            Reloc::Refused => {
                self.source_event(rel, SourceEvent::Refused(Refusal::other("refused")))
            }
            Reloc::Committed => {
                if let Some((_, s)) = self.source(rel) {
                    s.committed_at = Some(now);
                }
                self.source_event(rel, SourceEvent::Committed)
            }
            Reloc::Aborted => self.source_event(rel, SourceEvent::Aborted("aborted".into())),
            Reloc::Relay(parcel) => {
                if let Some(t) = self.target(node, rel) {
                    t.arriving = Some(parcel);
                }
                self.target_event(node, rel, TargetEvent::Relay);
            }
            Reloc::RelayReset => self.target_event(node, rel, TargetEvent::RelayReset),
            Reloc::Cutover(count, crc) => {
                let matches = self
                    .target(node, rel)
                    .is_some_and(|t| digest(&t.relays) == (count, crc));
                let serving = self.nodes[node].state == NodeState::Serving;
                self.target_event(node, rel, TargetEvent::Cutover { matches, serving });
            }
            Reloc::Withdraw => {
                self.nodes[node].precopied.remove(&rel);
                self.target_event(node, rel, TargetEvent::Withdrawn)
            }
        }
    }

    /// An offer arrives: admitted or refused, its image assembled over what this node holds of
    /// the move's pre-copy, or the whole image asked for if it does not hold the base.
    fn offered(&mut self, node: usize, from: usize, rel: u64, offer: OfferFrame) {
        let OfferFrame {
            primary,
            cells,
            journal,
            records,
            within,
            manifest,
        } = offer;
        let precopied = self.nodes[node]
            .precopied
            .remove(&rel)
            .map(|p| p.held.into_image());
        // A move to the node that keeps the room's standby seals against that copy.
        let standby = self.standby_copy(node, primary);
        let held = base_for(manifest.base, precopied.into_iter().chain(standby));
        let units: Vec<UnitId> = records.iter().map(|(u, _, _)| self.unit_id(*u)).collect();
        let staged: Vec<(u64, Vec<UnitId>, bool)> = self.nodes[node]
            .incoming
            .iter()
            .map(|(r, t)| {
                let carried = t.records.iter().map(|(u, _, _)| self.unit_id(*u)).collect();
                (*r, carried, t.machine.committing())
            })
            .collect();
        let me = node_id(node);
        let offer = Offer {
            me: &me,
            state: self.nodes[node].state,
            units: &units,
            len: manifest.len,
            max_state: MAX_STATE,
        };
        let staged_at = staged.iter().map(|(r, carried, committing)| Staged {
            rel: RelocationId(u128::from(*r)),
            units: carried,
            committing: *committing,
        });
        let refused = match admit(offer, staged_at) {
            Admission::Refuse(_) => true,
            Admission::Take { supersede } => {
                for earlier in supersede {
                    let earlier = u64::try_from(earlier.0).expect("a simulated move");
                    trace!(self, "n{node}: move {earlier} gives way to move {rel}");
                    self.target_event(node, earlier, TargetEvent::Withdrawn);
                }
                false
            }
        };
        if refused
            || cells.keys().any(|u| self.lane_of(node, *u).is_some())
            || self.nodes[node].incoming.contains_key(&rel)
        {
            self.check_refusal(node, rel, (primary, &units), &staged);
            self.post(
                node,
                from,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Refused,
                },
            );
            return;
        }
        let generation = self.nodes[node].lease.map_or(0, |(g, _)| g);
        let wrote = records
            .iter()
            .map(|(u, _, r)| {
                let spot = cells.get(u).and_then(|c| c.spot).map(|s| self.spot_id(s));
                r.moved_to(me.clone(), generation, spot)
            })
            .collect();
        // A difference to a base not held here waits for the whole image instead.
        let assembly = Assembly::new(manifest, held).ok();
        let awaiting_whole = assembly.is_none();
        let target = Target {
            from,
            machine: TargetMachine::new(self.now, within),
            armed: false,
            lane: None,
            offer: Some((primary, cells, journal)),
            assembly,
            awaiting_whole,
            reported: self.now,
            records,
            relays: Vec::new(),
            arriving: None,
            wrote,
        };
        self.nodes[node].incoming.insert(rel, target);
        self.arm_target(node, rel);
        // Taken: the source counts silence from here, not from its offer.
        let frame = if awaiting_whole {
            trace!(
                self,
                "n{node} move {rel}: the offer's pre-copied base is not held here"
            );
            Reloc::BaseLost
        } else {
            Reloc::Progress
        };
        self.post(node, from, Msg::Reloc { rel, frame });
        // All there already: nothing changed since the pre-copy this node holds.
        self.assembled(node, rel);
    }

    /// A chunk of a staged move's image (dropped while the whole image is awaited).
    fn on_chunk(&mut self, node: usize, rel: u64, index: u32, offset: u64, bytes: &[u8]) {
        let now = self.now;
        let Some(t) = self.target(node, rel) else {
            return;
        };
        let Some(assembly) = t.assembly.as_mut() else {
            return;
        };
        match assembly.add(index, offset, bytes) {
            Ok(false) if now >= t.reported + PROGRESS_EVERY => {
                t.reported = now;
                let from = t.from;
                let frame = Reloc::Progress;
                self.post(node, from, Msg::Reloc { rel, frame });
            }
            Ok(false) => {}
            Ok(true) => self.assembled(node, rel),
            Err(error) => {
                let refusal = Refusal::other(error.to_string());
                self.target_event(node, rel, TargetEvent::RestoreFailed(refusal));
            }
        }
    }

    /// Every chunk of a staged move is in (a difference to a pre-copy may have none): the
    /// image is checked and decoded, its states go to the offer's cells, and the restore runs,
    /// the source hearing every second that it does (and at once, for an image too large to
    /// restore on a task).
    fn assembled(&mut self, node: usize, rel: u64) {
        let Some(t) = self.target(node, rel) else {
            return;
        };
        if !t.assembly.as_ref().is_some_and(Assembly::complete) {
            return;
        }
        let Some(assembly) = t.assembly.take() else {
            return;
        };
        let in_task = assembly.restores_in_task();
        let finished = assembly.finish(&Trimmed);
        let capture = match finished {
            Ok(capture) => capture,
            Err(error) if error.wants_whole() => return self.ask_whole(node, rel),
            Err(error) => {
                let refusal = Refusal::other(error.to_string());
                self.target_event(node, rel, TargetEvent::RestoreFailed(refusal));
                return;
            }
        };
        let states: Vec<(usize, Vec<u8>)> = capture
            .cells
            .into_iter()
            .map(|cell| (self.unit_index(&cell.id), cell.state.unwrap_or_default()))
            .collect();
        let Some(t) = self.target(node, rel) else {
            return;
        };
        if let Some((_, cells, _)) = &mut t.offer {
            for (u, state) in states {
                if let Some(cell) = cells.get_mut(&u) {
                    cell.state = Bytes::from(state);
                }
            }
        }
        self.events.push(Event::Restore { node, lane: 0, rel });
        // As the runtime: a small image sent whole is restored with no report at its assembly.
        if in_task {
            self.keep_reporting(node, rel);
        } else {
            self.progress(node, rel);
        }
    }

    /// A serving target refuses a new offer of a unit only while an earlier move of it commits
    /// there, or while the unit runs there: a staged copy left by a move its source gave up
    /// (perhaps behind a partition that swallowed the withdrawal) gives way, so that the move
    /// tried again after the heal goes through.
    fn check_refusal(
        &mut self,
        node: usize,
        rel: u64,
        (primary, units): (usize, &[UnitId]),
        staged: &[(u64, Vec<UnitId>, bool)],
    ) {
        let n = &self.nodes[node];
        let staged_lanes: Vec<u64> = n.incoming.values().filter_map(|t| t.lane).collect();
        let overlaps = |carried: &[UnitId]| carried.iter().any(|u| units.contains(u));
        let committing = staged
            .iter()
            .any(|(_, carried, committing)| overlaps(carried) && *committing);
        let runs_here = units.iter().any(|u| {
            self.lane_of(node, self.unit_index(u))
                .is_some_and(|lane| !staged_lanes.contains(&lane))
        });
        let stale = staged
            .iter()
            .any(|(r, carried, _)| overlaps(carried) && *r != rel);
        if n.state == NodeState::Serving && stale && !committing && !runs_here {
            self.broken.get_or_insert(format!(
                "n{node} refused move {rel} of u{primary}: only a stale staged copy stood in the way"
            ));
        }
    }

    /// The restore ends: the unit is staged in a gated lane (or its adapter panicked).
    pub(crate) fn restored(&mut self, node: usize, _lane: u64, rel: u64) {
        let fails = std::mem::take(&mut self.faults.restore_fails);
        let Some(t) = self.target(node, rel) else {
            return;
        };
        let Some((primary, cells, journal)) = t.offer.take() else {
            return;
        };
        let from = t.from;
        if fails {
            trace!(
                self,
                "n{node}: restore of u{primary} fails: its state adapter panicked"
            );
            self.target_event(
                node,
                rel,
                TargetEvent::RestoreFailed(Refusal::incompatible("the state adapter panicked")),
            );
            return;
        }
        if cells.keys().any(|u| self.lane_of(node, *u).is_some()) {
            self.target_event(
                node,
                rel,
                TargetEvent::RestoreFailed(Refusal::other("already hosted here")),
            );
            return;
        }
        self.check_restored(node, rel, &cells);
        let units: Vec<usize> = cells.keys().copied().collect();
        let mut lane = Lane::new(primary, cells, LaneMove::staged());
        lane.queue.extend(journal);
        let id = self.add_lane(node, lane);
        if let Some(t) = self.target(node, rel) {
            t.lane = Some(id);
        }
        for u in units {
            self.arrived(node, u, from, id);
        }
        self.target_event(node, rel, TargetEvent::Restored);
    }

    /// A target still restoring says so, so that the source does not take it for silent.
    pub(crate) fn progress(&mut self, node: usize, rel: u64) {
        let Some(t) = self.target(node, rel) else {
            return;
        };
        if t.offer.is_none() {
            return;
        }
        let from = t.from;
        let progress = Msg::Reloc {
            rel,
            frame: Reloc::Progress,
        };
        // A target that cannot tell its source stops reporting: it is silent, as it should be.
        if self.send(node, from, progress).is_err() {
            return;
        }
        self.keep_reporting(node, rel);
    }

    /// Reports progress again in [`PROGRESS_EVERY`], for as long as the restore runs.
    fn keep_reporting(&mut self, node: usize, rel: u64) {
        let process = self.nodes[node].process;
        self.arm(
            self.now + PROGRESS_EVERY,
            Timer::Progress { node, process, rel },
        );
    }

    fn arm_target(&mut self, node: usize, rel: u64) {
        let process = self.nodes[node].process;
        let Some(t) = self.target(node, rel) else {
            return;
        };
        if t.armed {
            return;
        }
        if let Some(at) = t.machine.poll_timeout() {
            t.armed = true;
            self.arm(at, Timer::Target { node, process, rel });
        }
    }

    pub(crate) fn target_event(&mut self, node: usize, rel: u64, event: TargetEvent) {
        let line = self.line(|| format!("n{node} move {rel} target {event:?}"));
        let Some(t) = self.target(node, rel) else {
            return;
        };
        let actions = t.machine.on(event);
        self.target_acts(node, rel, line, actions);
    }

    pub(crate) fn target_timer(&mut self, node: usize, rel: u64) {
        let now = self.now;
        let Some(t) = self.target(node, rel) else {
            return;
        };
        t.armed = false;
        let actions = t.machine.handle_timeout(now);
        let line = self.line(|| format!("n{node} move {rel} target timer"));
        self.target_acts(node, rel, line, actions);
    }

    fn target_acts(&mut self, node: usize, rel: u64, line: String, actions: Vec<TargetAction>) {
        trace!(self, "{line} -> {actions:?}");
        for action in actions {
            self.target_action(node, rel, action);
        }
        self.arm_target(node, rel);
        if self.target(node, rel).is_some_and(|t| t.machine.finished()) {
            self.nodes[node].incoming.remove(&rel);
            self.shut_once_decided(node);
        }
    }

    fn target_action(&mut self, node: usize, rel: u64, action: TargetAction) {
        let Some(t) = self.target(node, rel) else {
            return;
        };
        let from = t.from;
        let lane = t.lane;
        match action {
            TargetAction::SendRelayReady => self.post(
                node,
                from,
                Msg::Reloc {
                    rel,
                    frame: Reloc::RelayReady,
                },
            ),
            TargetAction::SendRefused(_) => self.post(
                node,
                from,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Refused,
                },
            ),
            TargetAction::SendCommitted => self.post(
                node,
                from,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Committed,
                },
            ),
            TargetAction::SendAborted(_) => self.post(
                node,
                from,
                Msg::Reloc {
                    rel,
                    frame: Reloc::Aborted,
                },
            ),
            TargetAction::KeepRelay => t.relays.extend(t.arriving.take()),
            TargetAction::ClearRelay => t.relays.clear(),
            TargetAction::Commit => {
                let mut conds: Vec<Cond> = t
                    .records
                    .iter()
                    .map(|(u, v, _)| Cond::Version(Key::Unit(*u), *v))
                    .collect();
                let puts = t
                    .records
                    .iter()
                    .zip(&t.wrote)
                    .map(|((u, _, _), r)| (Key::Unit(*u), Value::Unit(r.clone())))
                    .collect();
                conds.push(self.lease_cond(node));
                self.call(
                    node,
                    Op::Batch {
                        conds,
                        puts,
                        deletes: Vec::new(),
                    },
                    Purpose::Commit { rel },
                );
            }
            TargetAction::ReadBack => {
                let first = t.records.first().map(|(u, _, _)| *u);
                if let Some(u) = first {
                    self.call(node, Op::ReadBack(vec![u]), Purpose::ReadBack { rel });
                }
            }
            TargetAction::Open => {
                let relays = std::mem::take(&mut t.relays);
                let Some(lane) = lane else {
                    return;
                };
                let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
                    return;
                };
                l.queue.extend(relays);
                let gated = std::mem::take(&mut l.gated);
                l.queue.extend(gated);
                l.stance.open();
                let primary = l.primary;
                trace!(self, "n{node}: u{primary} opens here");
                // A restored ApplicationSignaled room hears first that it moved.
                if self.signaled(primary) {
                    self.ready_completed(node, primary, ReadyOutcome::Relocated);
                }
                self.run_queue(node, lane);
            }
            TargetAction::Discard => {
                if let Some(lane) = lane {
                    self.discard(node, lane);
                }
            }
        }
    }

    /// The commit's answer.
    pub(crate) fn committed(&mut self, node: usize, rel: u64, reply: Reply) {
        let event = match reply {
            Reply::Committed => TargetEvent::CommitWon,
            Reply::Conflict { .. } => TargetEvent::CommitLost,
            Reply::Unknown
            | Reply::Unavailable
            | Reply::Reset
            | Reply::Got(_)
            | Reply::Scanned(..) => TargetEvent::CommitUnknown,
        };
        self.target_event(node, rel, event);
    }

    /// The commit read back.
    pub(crate) fn read_back(&mut self, node: usize, rel: u64, reply: Reply) {
        let Some(t) = self.target(node, rel) else {
            return;
        };
        let Some(wrote) = t.wrote.first().cloned() else {
            return;
        };
        let read = match &reply {
            Reply::Got(found) => Ok(found.first().and_then(|f| f.as_ref()).map(|(_, r)| r)),
            _ => Err(()),
        };
        let event = match ConditionalWrite::new(wrote).on_read(read) {
            Settled::Won => TargetEvent::ReadShowsOwner,
            Settled::Lost => TargetEvent::ReadShowsOther,
            Settled::ReadBack | Settled::Unknown => TargetEvent::CommitUnknown,
        };
        self.target_event(node, rel, event);
    }
}

/// A move's frame in a line of the trace.
pub(crate) fn brief(frame: &Reloc) -> String {
    match frame {
        Reloc::Precopy {
            len, offset, bytes, ..
        } => format!("pre-copy {} bytes at {offset} of {len}", bytes.len()),
        Reloc::Offer(offer) => format!(
            "offer u{} with {} saved, {} bytes in {} chunks{}",
            offer.primary,
            offer.journal.len(),
            offer.manifest.len,
            offer.manifest.chunks,
            if offer.manifest.base.is_some() {
                " over a pre-copy"
            } else {
                ""
            }
        ),
        Reloc::Chunk {
            index,
            offset,
            bytes,
        } => format!("chunk {index}: {} bytes at {offset}", bytes.len()),
        other => format!("{other:?}"),
    }
}
