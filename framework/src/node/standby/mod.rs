//! Warm standby on a node: the rooms it owns keep a copy on another node, checkpointed at turn
//! boundaries, and the copies it keeps for others are promoted when their owner dies. The
//! decisions (numbering, what a checkpoint ships, acceptance, which copy to promote) are the
//! core's, in `ferry_core::standby`; this module carries them out.
//!
//! - `checkpointing`: the owner's side: checkpoints taken at turn boundaries, shipped within the
//!   node's budget, acknowledged, and the store's record of who holds each room's copy.
//! - `copies`: the holder's side: the copies kept here, each changed only by the next checkpoint.
//! - `promotion`: making a dead owner's room out of the copy kept here.
//! - `shipping`: the owner's frames to holders, sent at once or gathered with others.

mod checkpointing;
mod copies;
mod promotion;
mod shipping;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::handle::Node;
use crate::ids::NodeId;
use ferry_core::standby::frames::StandbyFrame;

/// What a node's standbys look like now: for `ferry status`, the metrics and the cluster view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyStatus {
    /// Rooms this node owns whose factory keeps a standby.
    pub rooms: usize,
    /// Of those, the rooms whose standby acknowledged a checkpoint and is not behind.
    pub current: usize,
    /// Of those, the rooms whose oldest change has waited for its standby longer than the core's
    /// `BEHIND_AFTER` (their checkpoints wait for the budget, or for a holder that does not answer).
    pub behind: usize,
    /// Of those, the rooms no node can hold a copy of now (a one-node cluster, or every other
    /// node drains): they play on unprotected, and a crash rebuilds them from nothing.
    pub alone: usize,
    /// How long the oldest change not yet held by its standby has waited, over this node's rooms
    /// (`None`: every standby holds everything).
    pub oldest_unheld: Option<Duration>,
    /// Copies this node keeps for rooms other nodes own.
    pub copies: usize,
    /// Checkpoints sent since the node started.
    pub checkpoints_sent: u64,
    /// Checkpoint bytes sent since the node started.
    pub bytes_sent: u64,
}

impl Node {
    /// What this node's standbys look like now.
    pub fn standby_status(&self) -> StandbyStatus {
        let owned = self.owned_counts(tokio::time::Instant::now());
        StandbyStatus {
            rooms: owned.rooms,
            current: owned.current,
            behind: owned.behind,
            alone: owned.alone,
            oldest_unheld: owned.oldest_unheld,
            copies: self.core.standby.copies.held.lock().len(),
            checkpoints_sent: owned.checkpoints_sent,
            bytes_sent: owned.bytes_sent,
        }
    }

    /// A standby frame from `from`: a checkpoint or a drop for a copy kept here, an answer for a
    /// room this node owns.
    pub(crate) fn on_standby_frame(&self, from: NodeId, frame: StandbyFrame) {
        match frame {
            StandbyFrame::Checkpoint { .. } | StandbyFrame::Drop { .. } => {
                self.on_copy_frame(from, frame);
            }
            StandbyFrame::Acked { .. } | StandbyFrame::Refused { .. } => {
                self.on_checkpoint_answer(from, frame);
            }
        }
    }
}
