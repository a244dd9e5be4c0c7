//! The handle to a unit's lane: its queue for messages and its control channel, with the work a
//! node asks of the lane between turns, and a unit's route to its lane. The lane itself is the
//! node's (`node::lane`).

use std::any::TypeId;
use std::sync::Arc;

use parking_lot::RwLock;

use ferry_core::errors::{MessageError, UnitError};
use ferry_core::relocation::RelocationId;
use ferry_core::relocation::capture::{Capture, QueuedOp};
use ferry_core::session::SessionBinding;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::cell::{AnyFactory, UnitCell};
use super::envelope::{Envelope, Payload};
use crate::ids::{ActorId, NodeId, ObjectGeneration, SpotId, UnitId};
use crate::mailbox;

/// The sending side of a lane.
pub(crate) struct LaneTx<N> {
    pub data: mailbox::Sender<Envelope<Slot>>,
    pub ctl: mpsc::UnboundedSender<Control<N>>,
}

pub(crate) type Done = oneshot::Sender<Result<(), UnitError>>;

/// Where a seal's capture is sent.
pub(crate) type SealDone = oneshot::Sender<Result<(Capture, Instant), SealRefused>>;

/// A lane's answer to a move about to seal its unit.
pub(crate) struct Quiet {
    /// The client sessions bound to its Actors, which must hold their inputs.
    pub bindings: Vec<(ActorId, SessionBinding)>,
    /// Every unit on the lane now, so that their records can be read before the seal.
    pub units: Vec<UnitId>,
}

/// Why a lane did not seal its unit; the unit runs on where it was.
#[derive(Debug)]
pub(crate) enum SealRefused {
    /// It is not running here, or is in another move.
    Busy(String),
    /// A state adapter failed or panicked while capturing it.
    Adapter(String),
}

impl std::fmt::Display for SealRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealRefused::Busy(why) | SealRefused::Adapter(why) => f.write_str(why),
        }
    }
}

/// Work for the lane itself, run between turns ahead of queued messages.
pub(crate) enum Control<N> {
    /// Move the Actor hosted here into `spot`.
    Join {
        actor: ActorId,
        spot: SpotId,
        spot_entry: Entry<N>,
        done: Done,
    },
    /// Take in an Actor that joins this SpotWide spot, with what was sent to it on the old route.
    Attach {
        cell: Box<dyn UnitCell<N>>,
        slot: Slot,
        backlog: Vec<Envelope<Slot>>,
        done: Done,
    },
    /// A PerActor spot learns that an Actor joined or left it.
    Member { actor: ActorId, joined: bool },
    /// Send the Actor hosted here back to its node's Entry Spot.
    Leave { actor: ActorId, done: Done },
    /// Close every unit of this lane (the node is shutting down): after the work already queued
    /// has run, or at once (`now`), answering what is queued with `UnitStopped`.
    Close {
        done: oneshot::Sender<()>,
        now: bool,
    },
    /// Stop one unit (with its members, for a SpotWide spot), running its closing callbacks.
    Stop { unit: UnitId, done: Done },
    /// Start running turns: the unit is recorded as owned here, as `owned` says.
    Open { owned: Owned },
    /// Seal at the next turn boundary (for an ApplicationSignaled spot: after its next deferring
    /// turn) and capture the unit.
    Seal { rel: RelocationId, done: SealDone },
    /// A move is about to seal this unit: answer the client sessions bound to its Actors, and
    /// hold back new binds (they stay queued, and move with the unit) until the move ends, so
    /// that every bound session is one the move told to hold its inputs.
    Quiesce {
        rel: RelocationId,
        unit: UnitId,
        done: oneshot::Sender<Result<Quiet, String>>,
    },
    /// Stop waiting for a seal that has not happened yet.
    CancelSeal { rel: RelocationId },
    /// Take an image of the unit as it runs, for a move's pre-copy round.
    Snapshot {
        done: oneshot::Sender<Option<Vec<u8>>>,
    },
    /// Relay what was held to the target, then cut over.
    Handover {
        rel: RelocationId,
        target: NodeId,
        done: oneshot::Sender<Vec<QueuedOp>>,
    },
    /// Run the unit here again (the move failed before commit, or was fenced back). `me` is the
    /// lane's own handle, to route the unit's ids here again after a handover removed them.
    Resume {
        rel: RelocationId,
        me: Arc<LaneTx<N>>,
        done: oneshot::Sender<()>,
    },
    /// The target committed: drop this copy.
    Release { rel: RelocationId },
    /// On the target: open the restored unit with these relay records behind its saved work,
    /// recorded as owned here as `owned` says.
    OpenMoved {
        relay: Vec<QueuedOp>,
        committed: Instant,
        owned: Owned,
    },
    /// Take a checkpoint for the room's standby at this turn boundary, if one is due (an answer
    /// came, or a new holder was chosen).
    Checkpoint,
    /// Give up a unit that never opened (another node owns it): what was queued follows the owner.
    Discard,
}

/// How the store records a unit this node runs: what its standby checkpoints are numbered and
/// named under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owned {
    /// The record's owner generation under this node.
    pub generation: u64,
    /// The unit's incarnation.
    pub incarnation: ObjectGeneration,
}

impl Owned {
    /// As `record` says.
    pub fn of(record: &ferry_core::authority::UnitRecord) -> Self {
        Owned {
            generation: record.owner_generation,
            incarnation: record.object_generation,
        }
    }
}

/// A unit's number on this node, given when it is built or restored here and never reused.
///
/// Messages on a lane's queue carry it instead of the unit's id: the id is shared, and a sender
/// cloning it while the lane drops it would bounce its reference count between cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Slot(pub(crate) u64);

/// A unit's local route. A sender may keep a copy (a [`crate::UnitRef`]) and push along it
/// without the directory for as long as it stays the unit's route.
pub(crate) struct Entry<N> {
    pub lane: Arc<LaneTx<N>>,
    pub factory: Arc<dyn AnyFactory<N>>,
    /// How its lane knows it; it stays the same when the unit changes lanes on this node.
    pub slot: Slot,
    /// Whether this is still the unit's route. A kept copy pushes under its read lock, and the
    /// shard clears it under its write lock when the entry is replaced or removed: so once a
    /// lane has repointed or removed a unit, every message sent along a kept copy is queued.
    current: Arc<RwLock<bool>>,
}

impl<N> Clone for Entry<N> {
    fn clone(&self) -> Self {
        Entry {
            lane: self.lane.clone(),
            factory: self.factory.clone(),
            slot: self.slot,
            current: self.current.clone(),
        }
    }
}

impl<N: 'static> Entry<N> {
    pub fn new(lane: Arc<LaneTx<N>>, factory: Arc<dyn AnyFactory<N>>, slot: Slot) -> Self {
        Entry {
            lane,
            factory,
            slot,
            current: Arc::new(RwLock::new(true)),
        }
    }

    /// Refuses a message of another type than the unit takes.
    pub fn check_type(
        &self,
        id: &UnitId,
        msg_type: TypeId,
        payload: &Payload,
    ) -> Result<(), MessageError> {
        let info = self.factory.info();
        if info.msg_type == msg_type {
            return Ok(());
        }
        Err(MessageError::WrongMessageType {
            id: id.clone(),
            sent: payload.type_name().to_owned(),
            expected: info.msg_type_name.to_owned(),
        })
    }

    /// Pushes along a kept copy of the route: `Err` gives the envelope back if this is not the
    /// unit's route any more; `Ok(false)` if the lane has ended.
    pub fn push_kept(&self, envelope: Envelope<Slot>) -> Result<bool, Envelope<Slot>> {
        let current = self.current.read();
        if !*current {
            return Err(envelope);
        }
        Ok(self.lane.data.send(envelope).is_ok())
    }

    pub(crate) fn retire(&self) {
        *self.current.write() = false;
    }
}
