//! A node's standby state, below the node that acts on it (`node::standby`): the rooms it owns
//! that keep a standby, with what their checkpoints share, and the copies it keeps for other
//! nodes' rooms. Generic over the node `N`, as the other unit types are.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::lane::{Control, LaneTx};
use crate::ids::{NodeId, ObjectGeneration, UnitId};
use ferry_core::standby::checkpoints::{Budget, Checkpoints};
use ferry_core::standby::frames::StandbyFrame;
use ferry_core::standby::placement::{Candidates, Silent};
use ferry_core::standby::replica::Replica;

/// A node's standby state: what it checkpoints as an owner, and the copies it keeps.
pub(crate) struct Standbys<N> {
    /// The rooms this node owns that keep a standby.
    pub(crate) owning: Owning<N>,
    /// The copies this node keeps for rooms other nodes own.
    pub(crate) copies: Copies,
}

impl<N> Default for Standbys<N> {
    fn default() -> Self {
        Standbys {
            owning: Owning::default(),
            copies: Copies::default(),
        }
    }
}

/// One room this node owns that keeps a standby, shared by its lane (which takes the checkpoints
/// at its turn boundaries) and its node (which handles the answers).
pub(crate) struct Room<N> {
    /// The room.
    pub(crate) unit: UnitId,
    /// Whether its effects wait for its standby (confirmed mode).
    pub(crate) holds_effects: bool,
    /// Whether its checkpoints carry what is queued (the core's `Policy::carries_queue`).
    pub(crate) carries_queue: bool,
    /// How long its checkpoints may wait to go with others (the core's `Policy::gather`).
    pub(crate) gather: Duration,
    pub(crate) factory: Arc<str>,
    pub(crate) incarnation: ObjectGeneration,
    /// Its lane, to take a checkpoint when one is due for a reason other than a turn.
    pub(crate) lane: Weak<LaneTx<N>>,
    pub(crate) state: Mutex<RoomState>,
}

/// A room's checkpoints, and whether its standby record is being written.
pub(crate) struct RoomState {
    /// `None` once the room left the node, or a holder said another owner runs it.
    pub(crate) checkpoints: Option<Checkpoints>,
    /// Whether a write of the standby record is under way.
    pub(crate) naming: bool,
    /// Whether the room is on the keeper's watch list.
    pub(crate) watched: bool,
}

impl<N> Room<N> {
    /// Asks the room's lane to take a checkpoint at its next turn boundary.
    pub(crate) fn wake(&self) {
        if let Some(lane) = self.lane.upgrade() {
            let _ = lane.ctl.send(Control::Checkpoint);
        }
    }
}

/// The rooms this node owns that keep a standby, and what their checkpoints share. Locks are
/// taken in the order: the map of rooms, a room, the budget, the silent holders or the watch
/// list.
pub(crate) struct Owning<N> {
    pub(crate) rooms: Mutex<HashMap<UnitId, Arc<Room<N>>>>,
    /// The rooms the keeper looks at on its rounds: those with something under way.
    pub(crate) watch: Mutex<Vec<Arc<Room<N>>>>,
    /// Frames to holders that wait to go together, and the sender's wake-up.
    pub(crate) gathered: Mutex<Gathered>,
    pub(crate) gathering: Notify,
    pub(crate) budget: Mutex<Budget>,
    /// Holders that left a checkpoint unanswered, passed over for a while.
    pub(crate) silent: Mutex<Silent>,
    /// What placement read of the cluster view when the rooms were last aimed.
    pub(crate) placed: Mutex<Candidates>,
    pub(crate) sent: AtomicU64,
    pub(crate) bytes: AtomicU64,
}

impl<N> Default for Owning<N> {
    fn default() -> Self {
        Owning {
            rooms: Mutex::default(),
            watch: Mutex::default(),
            gathered: Mutex::default(),
            gathering: Notify::new(),
            budget: Mutex::default(),
            silent: Mutex::default(),
            placed: Mutex::default(),
            sent: AtomicU64::default(),
            bytes: AtomicU64::default(),
        }
    }
}

/// Frames to holders waiting to go together, in the order they were given, and when the first
/// must leave.
#[derive(Default)]
pub(crate) struct Gathered {
    pub(crate) frames: Vec<(NodeId, StandbyFrame)>,
    pub(crate) due: Option<Instant>,
    /// The sender stopped with the node: frames go at once.
    pub(crate) stopped: bool,
}

/// One copy kept here.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The node that sent its checkpoints.
    pub(crate) owner: NodeId,
    /// The room's incarnation.
    pub(crate) incarnation: ObjectGeneration,
    /// The copy.
    pub(crate) replica: Replica,
}

/// The copies this node keeps, by room.
#[derive(Default)]
pub(crate) struct Copies {
    pub(crate) held: Mutex<HashMap<UnitId, Held>>,
}
