//! Pre-copy: before it quiesces its unit, a move ships the unit's image to the target while the
//! unit runs, round after round of what changed, for as long as the core's [`Precopy`] says it is
//! worth it. A move of a drain copies only while the drain's seal window lets it copy ahead of
//! the seals. Each round waits for its share of the node's budget of bytes sent and not answered,
//! and for the target to say it holds the round's image whole ([`Held`]); no answer within the
//! silence step ends pre-copy, and the seal sends the whole image. Then a move of a drain waits
//! for a place in the drain's seal window ([`SealWindow`](ferry_core::sealing::SealWindow)) and
//! quiesces its unit, as the runtime's `SourceRun::go` does.
//!
//! The rooms' state adapter makes deltas of its own ([`Trimmed`]), some of them rebuilt wrong,
//! so that seals reach the core's choice between a byte difference and a recipe of deltas, and
//! targets the fallback to the whole image that the image's checksum forces.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::ids::UnitId;
use ferry_core::relocation::RelocationId;
use ferry_core::relocation::capture::{Base, Capture, CellCapture, MembershipData};
use ferry_core::relocation::precopy::{Deltas, Held, IN_FLIGHT_BYTES, Round, may_hold};
use ferry_core::relocation::protocol::{SourceEvent, told_at_quiesce};
use ferry_core::sealing::{COPY_AHEAD, windowed};

use super::lanes::{Cell, Parcel};
use super::links::Msg;
use super::moves::{Reloc, op};
use super::{Event, Timer, World};

/// The node's pre-copy budget in KiB, as the runtime's semaphore counts it.
const BUDGET_KIB: usize = IN_FLIGHT_BYTES / 1024;

/// How long a target keeps a pre-copy that no piece or offer touched: longer than any move's
/// deadline allows between two rounds, or between its last round and its offer (the runtime's).
const KEPT: Duration = Duration::from_secs(120);

/// The largest state a node takes (its `max_state`): above every unit's image here, so that
/// targets refuse no offer for its size, and hold up to four of them in pre-copies.
pub(crate) const MAX_STATE: u64 = 4 << 20;

/// Where a move stands before its machine takes over.
#[derive(Debug, Clone)]
pub(crate) enum Copying {
    /// A snapshot of the running unit is due, at its next turn boundary.
    Snapshot,
    /// The move waits for its drain's window to let it copy ahead of the seals, before its
    /// first snapshot: an image taken before would go stale while it waits.
    Place,
    /// A round waits for its share of the node's budget, in KiB.
    Budget {
        round: u32,
        pieces: Vec<(u64, Bytes)>,
        base: Base,
        kib: usize,
    },
    /// A round went to the target, which is waited for until `until`.
    Answer {
        round: u32,
        kib: usize,
        bytes: usize,
        until: Instant,
    },
    /// Pre-copy is over: the move waits for a place in its drain's seal window.
    Window,
    /// The unit was asked to quiesce: the move's machine drives the rest.
    Over,
}

/// A node's budget of pre-copy bytes sent and not answered, as the runtime's semaphore: KiB free,
/// and the moves whose round waits for its share, first come first served.
#[derive(Debug)]
pub(crate) struct Budget {
    free: usize,
    waiting: VecDeque<u64>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            free: BUDGET_KIB,
            waiting: VecDeque::new(),
        }
    }
}

/// The rooms' state adapter, as far as its deltas go: a delta is the bytes between what two
/// states share at their start and at their end, with the two lengths. One delta in four (by its
/// checksum) it rebuilds one byte wrong, as a buggy `apply_delta` would: the target must catch
/// it by the image's checksum and be sent the whole image.
pub(crate) struct Trimmed;

impl Trimmed {
    /// Whether this delta is one the adapter rebuilds wrong.
    fn wrong(delta: &[u8]) -> bool {
        crc32c::crc32c(delta).is_multiple_of(4)
    }
}

impl Deltas for Trimmed {
    fn delta(&self, factory: &str, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
        if factory != "room" {
            return None;
        }
        let head = base.iter().zip(now).take_while(|(a, b)| a == b).count();
        let (base_rest, now_rest) = (&base[head..], &now[head..]);
        let tail = base_rest
            .iter()
            .rev()
            .zip(now_rest.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let mut delta = (head as u64).to_le_bytes().to_vec();
        delta.extend((tail as u64).to_le_bytes());
        delta.extend(&now_rest[..now_rest.len() - tail]);
        Some(delta)
    }

    fn apply(&self, factory: &str, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
        let length = |at: usize| {
            delta
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(|b| u64::from_le_bytes(b) as usize)
        };
        let (Some(head), Some(tail)) = (length(0), length(8)) else {
            return Err("the delta is too short".into());
        };
        if factory != "room" || head.saturating_add(tail) > base.len() {
            return Err("the delta does not fit its base".into());
        }
        let mut now = [&base[..head], &delta[16..], &base[base.len() - tail..]].concat();
        if Self::wrong(delta) {
            match now.first_mut() {
                Some(first) => *first ^= 1,
                None => now.push(1),
            }
        }
        Ok(now)
    }
}

/// How often seals sent a recipe of the adapters' deltas, and how often a target found one
/// rebuilt wrong and asked for the whole image.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recipes {
    /// Seals that sent a recipe.
    pub sent: usize,
    /// Recipes a target found rebuilt wrong.
    pub wrong: usize,
}

/// What a target holds of one move's pre-copy.
#[derive(Debug)]
pub(crate) struct Precopied {
    pub source: usize,
    pub held: Held,
    touched: Instant,
}

impl World {
    /// The image of a lane's cells as the runtime's lane encodes it ([`Capture::into_image`]):
    /// their states first, then the rest, with the saved work for a seal (none for a snapshot).
    pub(crate) fn image(
        &self,
        primary: usize,
        cells: &BTreeMap<usize, Cell>,
        journal: &[Parcel],
    ) -> Bytes {
        let cells = cells
            .iter()
            .map(|(&u, cell)| {
                let membership = if self.is_room(u) {
                    let members = cell.members.iter().filter_map(|&m| match self.unit_id(m) {
                        UnitId::Actor(actor) => Some(actor),
                        UnitId::Spot(_) => None,
                    });
                    MembershipData::Spot(members.collect())
                } else {
                    MembershipData::Actor(cell.spot.map(|s| self.spot_id(s)))
                };
                CellCapture {
                    id: self.unit_id(u),
                    factory: self.factory(u).into(),
                    state: Some(cell.state.to_vec()),
                    timers: Vec::new(),
                    membership,
                    binding: cell.binding.clone(),
                }
            })
            .collect();
        let capture = Capture {
            unit: self.unit_id(primary),
            cells,
            callbacks: Vec::new(),
            ticks: Vec::new(),
            journal: journal.iter().map(op).collect(),
        };
        Bytes::from(capture.into_image().expect("a capture encodes"))
    }

    /// A move begins with its first snapshot, once its drain's window (if any) lets it copy,
    /// unless it has no pre-copy to do (a move to the unit's standby); until its deadline, it
    /// may wait for nothing else.
    pub(crate) fn start_copy(&mut self, node: usize, rel: u64, deadline: Instant) {
        let process = self.nodes[node].process;
        self.arm(deadline, Timer::Copy { node, process, rel });
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        match s.gate.filter(|_| !s.precopy.is_over()) {
            Some(gate) => {
                s.copying = Copying::Place;
                if let Some(g) = self.gates.get_mut(&gate) {
                    g.copiers.push_back(rel);
                }
                self.let_copy(gate);
                if self
                    .gates
                    .get(&gate)
                    .is_some_and(|g| g.copiers.contains(&rel))
                {
                    self.waits.copy += 1;
                }
            }
            None => self.events.push(Event::Snapshot { node, rel }),
        }
    }

    /// The lane takes a snapshot of its running unit (none once a move captured it, or gone): the
    /// core says what of it to send, or that pre-copy is over.
    pub(crate) fn snapshot(&mut self, node: usize, rel: u64) {
        let Some((n, s)) = self.source(rel) else {
            return;
        };
        if n != node || !matches!(s.copying, Copying::Snapshot) {
            return;
        }
        if s.gate.is_some() && !s.copy_place && !s.precopy.is_over() {
            self.broken.get_or_insert(format!(
                "n{node} move {rel} took a snapshot to pre-copy before its drain's window let it copy"
            ));
        }
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let lane = s.lane;
        let due = self.ticks_due();
        let running = self.nodes[node]
            .lanes
            .get_mut(&lane)
            .filter(|l| l.stance.imageable());
        if let Some(l) = running {
            for (u, cell) in l.cells.iter_mut() {
                cell.catch_up(*u, due);
            }
        }
        let image = self.nodes[node]
            .lanes
            .get(&lane)
            .filter(|l| l.stance.imageable())
            .map(|l| self.image(l.primary, &l.cells, &[]));
        let Some(image) = image else {
            self.copied(node, rel);
            return;
        };
        let len = image.len();
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        match s.precopy.round(image) {
            Round::Seal => {
                trace!(self, "n{node} move {rel}: {len} bytes; pre-copy is over");
                self.copied(node, rel);
            }
            Round::Send {
                round,
                pieces,
                base,
            } => {
                let bytes: usize = pieces.iter().map(|(_, piece)| piece.len()).sum();
                let kib = bytes.div_ceil(1024).clamp(1, BUDGET_KIB);
                s.copying = Copying::Budget {
                    round,
                    pieces,
                    base,
                    kib,
                };
                trace!(
                    self,
                    "n{node} move {rel}: pre-copy round {round}, {bytes} of {len} bytes"
                );
                self.nodes[node].budget.waiting.push_back(rel);
                self.grant(node);
                if self.nodes[node].budget.waiting.contains(&rel) {
                    self.waits.budget += 1;
                }
            }
        }
    }

    /// Rounds that wait for the node's budget take their share in the order they asked, while
    /// it lasts: one that does not fit holds back those behind it.
    fn grant(&mut self, node: usize) {
        while let Some(&rel) = self.nodes[node].budget.waiting.front() {
            let kib = match self.source(rel) {
                Some((n, s)) if n == node => match s.copying {
                    Copying::Budget { kib, .. } => Some(kib),
                    _ => None,
                },
                _ => None,
            };
            let budget = &mut self.nodes[node].budget;
            match kib {
                Some(kib) if kib > budget.free => return,
                Some(kib) => {
                    budget.free -= kib;
                    budget.waiting.pop_front();
                    self.send_round(node, rel);
                }
                None => {
                    budget.waiting.pop_front();
                }
            }
        }
    }

    /// Sends a round's pieces and its end, and waits for the answer for the silence step (at
    /// most until the deadline). A frame the link does not take ends pre-copy.
    fn send_round(&mut self, node: usize, rel: u64) {
        let now = self.now;
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let Copying::Budget {
            round,
            pieces,
            base,
            kib,
        } = std::mem::replace(&mut s.copying, Copying::Over)
        else {
            return;
        };
        let until = (now + s.machine.step()).min(s.machine.deadline());
        let bytes = pieces.iter().map(|(_, piece)| piece.len()).sum();
        s.copying = Copying::Answer {
            round,
            kib,
            bytes,
            until,
        };
        let to = s.to;
        let frames = pieces
            .into_iter()
            .map(|(offset, bytes)| Reloc::Precopy {
                len: base.len,
                offset,
                crc: crc32c::crc32c(&bytes),
                bytes,
            })
            .chain(std::iter::once(Reloc::PrecopyEnd { round, base }));
        for frame in frames {
            if self.send(node, to, Msg::Reloc { rel, frame }).is_err() {
                self.round_lost(node, rel);
                return;
            }
        }
        let process = self.nodes[node].process;
        self.arm(until, Timer::Copy { node, process, rel });
    }

    /// The round on its way is given up (unsent, or unanswered): the target may hold nothing,
    /// and the seal sends the whole image.
    fn round_lost(&mut self, node: usize, rel: u64) {
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let Copying::Answer { kib, .. } = s.copying else {
            return;
        };
        s.precopy.lost();
        trace!(self, "n{node} move {rel}: pre-copy round lost");
        self.nodes[node].budget.free += kib;
        self.copied(node, rel);
        self.grant(node);
    }

    /// The target's answer to a round. An answer to the round on its way gives its budget back
    /// and takes the next snapshot; one the move no longer waits for goes to its machine.
    pub(crate) fn precopy_held(&mut self, node: usize, rel: u64, round: u32, holds: bool) {
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        match s.copying {
            Copying::Answer {
                round: sent, kib, ..
            } => {
                s.precopy.answered(round, holds);
                if round == sent {
                    s.copying = Copying::Snapshot;
                    self.nodes[node].budget.free += kib;
                    self.events.push(Event::Snapshot { node, rel });
                    self.grant(node);
                }
            }
            Copying::Over => self.source_event(rel, SourceEvent::PrecopyHeld { round, holds }),
            _ => {}
        }
    }

    /// A move's pre-copy stops waiting, if what it waits for is due: a round's answer (pre-copy
    /// is over), or, at the deadline, leave to copy, a snapshot or the budget (so is pre-copy),
    /// or a place in the window (the move ends unsealed).
    pub(crate) fn copy_timer(&mut self, node: usize, rel: u64) {
        let now = self.now;
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        let due = now >= s.machine.deadline();
        match s.copying {
            Copying::Answer { until, .. } if now >= until => self.round_lost(node, rel),
            Copying::Snapshot if due => self.copied(node, rel),
            Copying::Place if due => {
                s.precopy.lost();
                if let Some(g) = s.gate.and_then(|gate| self.gates.get_mut(&gate)) {
                    g.copiers.retain(|r| *r != rel);
                }
                self.copied(node, rel);
            }
            Copying::Budget { .. } if due => {
                s.precopy.lost();
                self.nodes[node].budget.waiting.retain(|r| *r != rel);
                self.copied(node, rel);
                self.grant(node);
            }
            Copying::Window if due => {
                s.copying = Copying::Over;
                if let Some(g) = s.gate.and_then(|gate| self.gates.get_mut(&gate)) {
                    g.waiting.retain(|r| *r != rel);
                }
                self.source_event(rel, SourceEvent::Deadline);
            }
            _ => {}
        }
    }

    /// Pre-copy is over: a move of a drain waits for a place in its window, unless its unit
    /// seals only at its application's safe point ([`windowed`]); then the unit quiesces.
    fn copied(&mut self, node: usize, rel: u64) {
        let signaled = self
            .outgoing
            .get(&rel)
            .and_then(|(_, s)| self.nodes[node].lanes.get(&s.lane))
            .is_some_and(|l| self.signaled(l.primary));
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        if std::mem::take(&mut s.copy_place)
            && let Some(gate) = s.gate
        {
            if let Some(g) = self.gates.get_mut(&gate) {
                g.window.copied();
            }
            self.let_copy(gate);
        }
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        match s.gate.filter(|_| windowed(signaled)) {
            Some(gate) => {
                s.copying = Copying::Window;
                if let Some(g) = self.gates.get_mut(&gate) {
                    g.waiting.push_back(rel);
                }
                self.admit(gate);
                if self
                    .gates
                    .get(&gate)
                    .is_some_and(|g| g.waiting.contains(&rel))
                {
                    self.waits.window += 1;
                }
            }
            None => {
                s.gate = None;
                self.quiesce(node, rel);
            }
        }
    }

    /// The moves that wait for leave to copy ahead of a drain's seals take their first snapshot,
    /// in the order they asked, as long as the window lets them copy.
    pub(crate) fn let_copy(&mut self, gate: u64) {
        loop {
            let Some(&rel) = self.gates.get(&gate).and_then(|g| g.copiers.front()) else {
                return;
            };
            let waits = self
                .source(rel)
                .filter(|(_, s)| matches!(s.copying, Copying::Place));
            let Some((node, _)) = waits else {
                if let Some(g) = self.gates.get_mut(&gate) {
                    g.copiers.pop_front();
                }
                continue;
            };
            let copying = self
                .outgoing
                .values()
                .filter(|(_, s)| s.gate == Some(gate) && s.copy_place)
                .count();
            let Some(g) = self.gates.get_mut(&gate) else {
                return;
            };
            if !g.window.copy() {
                return;
            }
            g.copiers.pop_front();
            let (limit, drained) = (g.window.limit(), g.node);
            if copying >= limit * COPY_AHEAD {
                self.broken.get_or_insert(format!(
                    "move {rel} began to pre-copy in n{drained}'s drain while {copying} moves \
                     copied, and its window lets {limit} seal"
                ));
            }
            let Some((_, s)) = self.source(rel) else {
                return;
            };
            s.copy_place = true;
            s.copying = Copying::Snapshot;
            self.events.push(Event::Snapshot { node, rel });
        }
    }

    /// The moves waiting for a place in a drain's window quiesce, in the order they asked, as
    /// long as the window lets them through.
    pub(crate) fn admit(&mut self, gate: u64) {
        loop {
            let Some(&rel) = self.gates.get(&gate).and_then(|g| g.waiting.front()) else {
                return;
            };
            let waits = self
                .source(rel)
                .filter(|(_, s)| matches!(s.copying, Copying::Window));
            let Some((node, _)) = waits else {
                if let Some(g) = self.gates.get_mut(&gate) {
                    g.waiting.pop_front();
                }
                continue;
            };
            let now = self.now;
            let Some(g) = self.gates.get_mut(&gate) else {
                return;
            };
            let Some(ticket) = g.window.enter(now) else {
                // A place held so long that it no longer counts lets the next move through then.
                if let Some(at) = g.window.next_change(now) {
                    self.arm(at, Timer::Admit { gate });
                }
                return;
            };
            g.waiting.pop_front();
            self.check_entry(gate, rel);
            if let Some((_, s)) = self.source(rel) {
                s.placed = Some((ticket, now));
            }
            self.quiesce(node, rel);
        }
    }

    /// The move asks its lane for the gateways of its bound sessions, which from now on holds
    /// back new binds; a lane in another move, or gone, refuses.
    fn quiesce(&mut self, node: usize, rel: u64) {
        let Some((_, s)) = self.source(rel) else {
            return;
        };
        s.copying = Copying::Over;
        let lane = s.lane;
        let Some(l) = self.nodes[node].lanes.get_mut(&lane) else {
            self.source_event(rel, SourceEvent::SealRefused("the unit stopped".into()));
            return;
        };
        if let Err(why) = l.stance.quiesce(RelocationId(u128::from(rel))) {
            self.source_event(rel, SourceEvent::SealRefused(why.into()));
            return;
        }
        let primary = l.primary;
        self.touched.insert(primary);
        let bound = self.bound_gateways(node, lane);
        let gateways = told_at_quiesce(bound, self.signaled(primary));
        self.source_event(rel, SourceEvent::Quiesced { gateways });
    }

    // ---- the target ----------------------------------------------------------------------------

    /// One piece of a round: held for the move until its offer, within what this node holds of
    /// pre-copies in all ([`may_hold`]). A piece refused or broken drops what the move had here,
    /// and its round's end is answered as not held.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_precopy(
        &mut self,
        node: usize,
        from: usize,
        rel: u64,
        len: u64,
        offset: u64,
        crc: u32,
        bytes: &[u8],
    ) {
        let now = self.now;
        // A round given up may still be on its way when the offer comes.
        let offered = self.nodes[node].incoming.contains_key(&rel);
        let precopied = &mut self.nodes[node].precopied;
        // Pre-copies whose offer never came (their source failed before it) are dropped.
        precopied.retain(|_, p| now.duration_since(p.touched) < KEPT);
        let holding: u64 = precopied
            .iter()
            .filter(|(other, _)| **other != rel)
            .map(|(_, p)| p.held.len() as u64)
            .sum();
        if !may_hold(len, holding, MAX_STATE, offered) {
            precopied.remove(&rel);
            return;
        }
        let entry = precopied.entry(rel).or_insert_with(|| Precopied {
            source: from,
            held: Held::new(),
            touched: now,
        });
        entry.touched = now;
        if entry.held.piece(len, offset, bytes, crc).is_err() {
            precopied.remove(&rel);
        }
    }

    /// What arrived did not make the sealed image ([`wants_whole`]): the staged move waits for
    /// the whole image, as one whose base was never held.
    ///
    /// [`wants_whole`]: ferry_core::relocation::capture::TransferError::wants_whole
    pub(crate) fn ask_whole(&mut self, node: usize, rel: u64) {
        let Some(t) = self.nodes[node].incoming.get_mut(&rel) else {
            return;
        };
        t.awaiting_whole = true;
        let from = t.from;
        self.recipes.wrong += 1;
        trace!(
            self,
            "n{node} move {rel}: the deltas did not rebuild the sealed image; asking for it whole"
        );
        self.post(
            node,
            from,
            Msg::Reloc {
                rel,
                frame: Reloc::BaseLost,
            },
        );
    }

    /// A round's end: whether this node holds its image whole, answered to the source.
    pub(crate) fn precopy_end(
        &mut self,
        node: usize,
        from: usize,
        rel: u64,
        round: u32,
        base: Base,
    ) {
        let precopied = &mut self.nodes[node].precopied;
        let holds = precopied.get(&rel).is_some_and(|p| p.held.holds(base));
        if !holds {
            precopied.remove(&rel);
        }
        let frame = Reloc::PrecopyHeld { round, holds };
        self.post(node, from, Msg::Reloc { rel, frame });
    }
}
