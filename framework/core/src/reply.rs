//! Where a request's answer goes, as plain data that can queue, move and cross the mesh.

use serde::{Deserialize, Serialize};

use crate::ids::NodeId;

/// Where a request's terminal goes: the node that asked, and its request number there.
///
/// It is plain data, not a channel, so a queued request keeps its way home when its unit moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    /// The node that asked.
    pub node: NodeId,
    /// The request's number on that node.
    pub request: u64,
}
