//! The owner's side of a standby: checkpoints taken at turn boundaries, shipped within the node's
//! budget to the node placement names, acknowledged, and the store's record of the series held.

use super::super::handle::Node;
use crate::ids::NodeId;
use ferry_core::standby::frames::StandbyFrame;

/// The rooms this node owns that keep a standby.
#[derive(Default)]
pub(crate) struct Owning {}

impl Node {
    /// The holder answered a checkpoint.
    pub(super) fn on_checkpoint_answer(&self, from: NodeId, frame: StandbyFrame) {
        let _ = (from, frame);
    }
}
