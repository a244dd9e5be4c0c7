//! What crash recovery reports as it runs (the recovery itself is the node's: `node::recovery`).

use crate::ids::{NodeId, UnitId};

pub use ferry_core::standby::promotion::Fresh;

/// What recovery does, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryEvent {
    /// A pass started for a dead node (`None`: remembered units after a cold start; this node's
    /// own id: units an earlier process of it left, which it takes back).
    Started {
        /// The dead node.
        dead: Option<NodeId>,
    },
    /// These units were rebuilt on survivors (or freed, if not recoverable).
    Completed {
        /// The dead node.
        dead: Option<NodeId>,
        /// The units dealt with.
        ids: Vec<UnitId>,
    },
    /// These rooms were made again out of their standby copies, with the members the copies
    /// held: they go on from their last checkpoint.
    Promoted {
        /// The dead node.
        dead: Option<NodeId>,
        /// The rooms promoted.
        ids: Vec<UnitId>,
    },
    /// A room whose factory keeps a standby starts again from nothing, and why.
    FromNothing {
        /// The dead node.
        dead: Option<NodeId>,
        /// The room.
        id: UnitId,
        /// Why its standby copy could not be promoted.
        why: Fresh,
    },
    /// These units could not be rebuilt in this pass; the next pass retries them.
    Failed {
        /// The dead node.
        dead: Option<NodeId>,
        /// The units still waiting.
        ids: Vec<UnitId>,
    },
    /// Recovery waits: dead nodes' units cannot be rebuilt until something changes (the stall
    /// says what). Told once when it starts waiting, and again if the reason changes.
    Waiting(RecoveryStall),
    /// Recovery no longer waits: what it waited for is there (or nothing is left to recover).
    Unblocked,
}

/// Why recovery cannot rebuild dead nodes' units now, and what would let it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryStall {
    /// The dead nodes whose units wait.
    pub dead: Vec<NodeId>,
    /// How many units wait, when the coordinator counted them (`None` when no node serves to
    /// coordinate recovery, so none counted).
    pub units: Option<usize>,
    /// What is missing, and what to do about it, in a sentence.
    pub reason: String,
}
