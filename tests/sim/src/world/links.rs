//! Frames between nodes. Each direction keeps what it sent and the peer has not acknowledged, with
//! the core's [`Outbox`] and [`Inbox`], and sends it again on the next connection: a reset loses
//! what was on the wire, never what was accepted. A frame's acknowledgement rides on the next frame
//! delivered after it, so a reset can also repeat a frame that was delivered, which the receiver
//! must drop. A partition holds every frame until it heals; one that outlasts the idle timeout
//! resets the connection. A link whose peer takes nothing (cut off, or down) keeps a bounded
//! backlog, and refuses a send past it, as the mesh does.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_core::delivery::{Inbox, Outbox};

use super::World;
use super::lanes::Parcel;
use super::moves::Reloc;
use super::sessions::SessionMsg;

/// How long a silent link lasts before both sides take it for dead.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many frames a link keeps unacknowledged for a peer that takes nothing (a partition cuts it
/// off, or its process is down) before it refuses more. It stands for the mesh's `send_queue`
/// (65,536 frames, behind its bound of unacknowledged bytes), made small so that a cut of a few
/// seconds fills it, as a long one fills the runtime's.
const BACKLOG: usize = 4;

/// A frame the link did not take, given back: `BACKLOG` frames wait for a peer that takes none
/// (the mesh's `MeshError::Backlogged`). What the sender does then is its own, as in the runtime.
#[derive(Debug)]
pub(crate) struct Backlogged(pub Msg);

/// What one node says to another.
#[derive(Debug, Clone)]
pub(crate) enum Msg {
    /// A message for a unit.
    Deliver(Parcel),
    /// The terminal of a request, for the node that asked: a reply, or an error.
    Reply { id: u64, ok: bool },
    /// The unit lives on `owner` now.
    Hint { unit: usize, owner: usize },
    /// A frame of a move.
    Reloc { rel: u64, frame: Reloc },
    /// Do you hear me?
    Probe { stamp: u64, generation: u64 },
    /// The answer to a probe.
    ProbeAnswer {
        stamp: u64,
        running: bool,
        vouched: bool,
    },
    /// Rebuild a dead node's unit here, if its record is still as the coordinator read it.
    Recover {
        unit: usize,
        version: u64,
        previous: Box<ferry_core::authority::UnitRecord>,
        owner_descriptor: Option<u64>,
        /// Promote the standby copy held here, of this series or a later one, gated on the
        /// standby record at this version too.
        promote: Option<(ferry_core::standby::Series, u64)>,
    },
    /// A checkpoint of a room, for its standby, with the cell and the queue its image stands for.
    Checkpoint {
        unit: usize,
        checkpoint: Box<ferry_core::standby::checkpoints::Checkpoint>,
        cell: Box<super::lanes::Cell>,
        queue: Vec<super::lanes::Parcel>,
    },
    /// A standby's answer to a checkpoint: applied (or held already), or refused.
    Checkpointed {
        unit: usize,
        series: ferry_core::standby::Series,
        number: u64,
        ok: bool,
    },
    /// About a game client's session.
    Session(SessionMsg),
}

/// One direction between two nodes.
#[derive(Debug, Default)]
pub(crate) struct Link {
    out: Outbox,
    /// On the wire: sender process, number, body.
    wire: VecDeque<(u64, u64, u64)>,
    /// The receiving side's account of what it delivered.
    inbox: Inbox,
    /// Bodies, numbered from `base` up (the outbox keeps their numbers as bytes).
    bodies: VecDeque<Msg>,
    base: u64,
}

impl Link {
    fn body(&self, number: u64) -> Option<&Msg> {
        self.bodies
            .get(usize::try_from(number.checked_sub(self.base)?).ok()?)
    }
}

/// A partition, since when.
pub(crate) type Cut = (usize, usize);

impl World {
    /// Links with a frame to deliver, not cut off by a partition.
    pub(crate) fn busy_links(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.wired
            .iter()
            .copied()
            .filter(|&(a, b)| !self.parted(a, b))
    }

    /// Keeps the index of links with frames on the wire true for `pair`.
    fn rewired(&mut self, pair: (usize, usize)) {
        if self.links.get(&pair).is_some_and(|l| !l.wire.is_empty()) {
            self.wired.insert(pair);
        } else {
            self.wired.remove(&pair);
        }
    }

    fn parted(&self, a: usize, b: usize) -> bool {
        self.partitions.contains(&(a.min(b), a.max(b)))
    }

    /// Sends a frame from `from` to `to` (to itself: handled at once), or gives it back when the
    /// link to a peer that takes nothing holds its backlog already.
    pub(crate) fn send(&mut self, from: usize, to: usize, msg: Msg) -> Result<(), Backlogged> {
        if from == to {
            self.arrive(to, from, msg);
            return Ok(());
        }
        if !self.nodes[from].up {
            return Ok(());
        }
        // Probes and their answers only update when a peer was last heard of: they arrive at once
        // unless a partition holds the link (then they are lost, as a probe's datagrams would be).
        if matches!(msg, Msg::Probe { .. } | Msg::ProbeAnswer { .. }) {
            if !self.parted(from, to) && self.nodes[to].up {
                self.arrive(to, from, msg);
            }
            return Ok(());
        }
        let stuck = self.parted(from, to) || !self.nodes[to].up;
        if stuck
            && self
                .links
                .get(&(from, to))
                .is_some_and(|l| l.out.len() >= BACKLOG)
        {
            trace!(self, "n{from}->n{to} backlogged: {} refused", brief(&msg));
            return Err(Backlogged(msg));
        }
        let process = self.nodes[from].process;
        let peer = self.nodes[to].process;
        let link = self.links.entry((from, to)).or_insert_with(|| {
            // The first connection names the peer's process: what is kept is for it alone.
            let mut link = Link::default();
            link.out.connected(peer);
            link
        });
        let body = link.base + link.bodies.len() as u64;
        link.bodies.push_back(msg);
        let seq = link
            .out
            .push(Bytes::copy_from_slice(&body.to_be_bytes()), 1);
        link.wire.push_back((process, seq, body));
        self.wired.insert((from, to));
        Ok(())
    }

    /// Sends a frame whose sender, as in the runtime, only logs it when the link refuses it:
    /// replies, answers of a move, notices, hints, withdrawals.
    pub(crate) fn post(&mut self, from: usize, to: usize, msg: Msg) {
        let _ = self.send(from, to, msg);
    }

    /// The next frame on the link from `a` to `b` arrives.
    pub(crate) fn frame(&mut self, a: usize, b: usize) {
        let Some(link) = self.links.get_mut(&(a, b)) else {
            return;
        };
        let Some((process, seq, body)) = link.wire.pop_front() else {
            return;
        };
        if link.wire.is_empty() {
            self.wired.remove(&(a, b));
        }
        let Some(link) = self.links.get_mut(&(a, b)) else {
            return;
        };
        if !self.nodes[b].up {
            return;
        }
        // Its acknowledgement rides on the next frame; the one before it is acknowledged now.
        link.out.ack(seq - 1);
        if !link.inbox.admit(process, seq) {
            link.out.ack(seq);
            trace!(self, "frame n{a}->n{b} #{seq}: seen before, dropped");
            return;
        }
        let Some(msg) = link.body(body).cloned() else {
            return;
        };
        forget_acknowledged(link);
        trace!(self, "frame n{a}->n{b} #{seq}: {}", brief(&msg));
        self.arrive(b, a, msg);
    }

    /// The connection between `a` and `b` resets: what was on the wire is lost; each side sends
    /// what the other has not acknowledged again, first and in order.
    pub(crate) fn reset(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        trace!(self, "reset n{a}<->n{b}");
        for (from, to) in [(a, b), (b, a)] {
            if !self.nodes[from].up {
                continue;
            }
            let peer = self.nodes[to].process;
            let sender = self.nodes[from].process;
            let Some(link) = self.links.get_mut(&(from, to)) else {
                continue;
            };
            link.wire.clear();
            let lost: Vec<Msg> = link
                .out
                .connected(peer)
                .runs
                .iter()
                .filter_map(|b| link.body(body_of(b)).cloned())
                .collect();
            let first = link.out.first();
            let again: Vec<u64> = link.out.pending().map(body_of).collect();
            for (i, body) in again.into_iter().enumerate() {
                link.wire.push_back((sender, first + i as u64, body));
            }
            self.rewired((from, to));
            for msg in lost {
                self.frame_lost(from, to, msg);
            }
        }
    }

    /// Nothing passes between `a` and `b` until the partitions heal.
    pub(crate) fn partition(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        trace!(self, "partition n{a}|n{b}");
        self.partitions.insert((a.min(b), a.max(b)));
        self.parted_at.insert((a.min(b), a.max(b)), self.now);
    }

    /// Every partition heals; one that lasted past the idle timeout took its connection down.
    pub(crate) fn heal(&mut self) {
        trace!(self, "partitions heal");
        let parted: Vec<(Cut, Instant)> = std::mem::take(&mut self.parted_at).into_iter().collect();
        self.partitions.clear();
        for ((a, b), since) in parted {
            if self.now >= since + IDLE_TIMEOUT {
                self.reset(a, b);
            }
        }
    }

    /// A process of `node` ended: what it sent is gone with it, and what was on its way to it.
    pub(crate) fn links_down(&mut self, node: usize) {
        self.wired.retain(|&(a, b)| a != node && b != node);
        for (&(a, b), link) in self.links.iter_mut() {
            if a == node {
                link.wire.clear();
                link.out.clear();
                link.bodies.clear();
            }
            if b == node {
                link.wire.clear();
                link.inbox = Inbox::default();
            }
        }
    }

    /// A new process of `node` is up: what its peers kept for the process before can never be
    /// acknowledged, and is lost.
    pub(crate) fn links_up(&mut self, node: usize) {
        let process = self.nodes[node].process;
        let mut lost = Vec::new();
        self.wired.retain(|&(_, b)| b != node);
        for (&(a, b), link) in self.links.iter_mut() {
            if b == node {
                link.wire.clear();
                for body in link.out.connected(process).runs {
                    if let Some(msg) = link.body(body_of(&body)).cloned() {
                        lost.push((a, msg));
                    }
                }
            }
        }
        for (from, msg) in lost {
            self.frame_lost(from, node, msg);
        }
        for peer in 0..self.nodes.len() {
            if peer != node && self.nodes[peer].up {
                self.requests_lost_with(peer, node);
            }
        }
    }

    /// Membership took `peer` for gone: `node` drops what it kept for it.
    pub(crate) fn forget_peer(&mut self, node: usize, peer: usize) {
        self.wired.remove(&(node, peer));
        let Some(link) = self.links.get_mut(&(node, peer)) else {
            return;
        };
        link.wire.clear();
        let lost: Vec<Msg> = link
            .out
            .clear()
            .runs
            .iter()
            .filter_map(|b| link.body(body_of(b)).cloned())
            .collect();
        for msg in lost {
            self.frame_lost(node, peer, msg);
        }
        self.requests_lost_with(node, peer);
    }
}

/// Drops the bodies of frames that are acknowledged and off the wire (bodies are numbered in
/// the order sent, so what is kept runs from the oldest one still needed).
fn forget_acknowledged(link: &mut Link) {
    let oldest = link
        .out
        .pending()
        .next()
        .map(body_of)
        .into_iter()
        .chain(link.wire.front().map(|w| w.2))
        .min()
        .unwrap_or(link.base + link.bodies.len() as u64);
    while link.base < oldest && link.bodies.pop_front().is_some() {
        link.base += 1;
    }
}

fn body_of(bytes: &Bytes) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(word)
}

/// A frame in a line of the trace.
pub(crate) fn brief(msg: &Msg) -> String {
    match msg {
        Msg::Deliver(p) => format!("deliver {p:?}"),
        Msg::Reloc { rel, frame } => format!("move {rel} {}", super::moves::brief(frame)),
        other => format!("{other:?}"),
    }
}
