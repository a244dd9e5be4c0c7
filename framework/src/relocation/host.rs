//! The host operation of a node (a drain) as data: whether one runs, its status and its events.
//! The drain itself is the node's (`node::drain`).

use tokio::sync::{broadcast, watch};

use super::reports::{HostStatus, RelocateOptions, RelocateOutcome, RelocationEvent};
use ferry_core::authority::NodeState;

/// The host operation of a node: one at a time.
pub(crate) struct HostOp {
    pub(crate) running:
        parking_lot::Mutex<Option<(RelocateOptions, watch::Receiver<Option<RelocateOutcome>>)>>,
    pub status: watch::Sender<HostStatus>,
    pub events: broadcast::Sender<RelocationEvent>,
}

impl HostOp {
    pub fn new() -> Self {
        HostOp {
            running: parking_lot::Mutex::new(None),
            status: watch::Sender::new(HostStatus {
                state: NodeState::Preparing,
                total: 0,
                moved: 0,
                failed: 0,
                bytes: 0,
                safe_to_shutdown: false,
            }),
            events: broadcast::Sender::new(1024),
        }
    }
}
