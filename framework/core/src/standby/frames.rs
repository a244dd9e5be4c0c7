//! What a room's owner and its standby say to each other on the mesh.

use serde::{Deserialize, Serialize};

use super::Series;
use super::checkpoints::Checkpoint;
use crate::ids::{ObjectGeneration, UnitId};

/// One frame between an owner and the node that holds its room's standby.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StandbyFrame {
    /// Owner to holder: the next checkpoint of a room's series.
    Checkpoint {
        /// The room (the lane's first unit; its members ride in its image).
        unit: UnitId,
        /// The room's incarnation: a copy is only ever promoted into the same one.
        incarnation: ObjectGeneration,
        /// What changed since the checkpoint before.
        checkpoint: Checkpoint,
    },
    /// Holder to owner: the checkpoint is the copy now (or was already).
    Acked {
        /// The room.
        unit: UnitId,
        /// The checkpoint's series.
        series: Series,
        /// Its number.
        number: u64,
    },
    /// Holder to owner: the checkpoint was not applied; the owner starts a new series, unless
    /// `stale` (it no longer owns the room as the holder knows it), when it stops.
    Refused {
        /// The room.
        unit: UnitId,
        /// The checkpoint's series.
        series: Series,
        /// Its number.
        number: u64,
        /// The holder keeps a later series: the sender no longer owns the room.
        stale: bool,
        /// Why, for the log.
        reason: String,
    },
    /// Owner to holder: forget the copy of this series or an older one (the room moved,
    /// stopped, or its standby is kept elsewhere now).
    Drop {
        /// The room.
        unit: UnitId,
        /// The newest series the copy may be in to be dropped.
        series: Series,
    },
}

impl StandbyFrame {
    /// The room the frame is about.
    pub fn unit(&self) -> &UnitId {
        match self {
            StandbyFrame::Checkpoint { unit, .. }
            | StandbyFrame::Acked { unit, .. }
            | StandbyFrame::Refused { unit, .. }
            | StandbyFrame::Drop { unit, .. } => unit,
        }
    }
}
