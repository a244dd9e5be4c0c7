//! The holder's side of a standby: the copies kept here for rooms other nodes own, each changed
//! only by the next checkpoint of its series ([`ferry_core::standby::replica::apply`]).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::super::handle::Node;
use crate::ids::{NodeId, ObjectGeneration, UnitId};
use ferry_core::standby::frames::StandbyFrame;
use ferry_core::standby::replica::Replica;

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

impl Node {
    /// A checkpoint or a drop from a room's owner.
    pub(super) fn on_copy_frame(&self, from: NodeId, frame: StandbyFrame) {
        let _ = (from, frame);
    }
}
