//! Tells the mesh could not deliver, counted and reported (the node hands them here: `node::losses`).

use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::error::MessageError;
use crate::ids::{NodeId, UnitId};

/// How many reports an `Node::undelivered_events` receiver may fall behind before it is told it
/// missed some (the count in `Node::tells_lost` stays exact).
const REPORTS: usize = 4096;

/// A tell that `tell` accepted but that no node will run: the peer it was handed to left the
/// cluster or restarted before it acknowledged the tell, or the node that ran its unit left the
/// cluster and no node runs the unit yet.
#[derive(Debug, Clone)]
pub struct Undelivered {
    /// The unit it was for.
    pub to: UnitId,
    /// The node it was handed to last, or the one that ran its unit.
    pub peer: NodeId,
    pub(crate) payload: Bytes,
}

impl Undelivered {
    /// The message, decoded as the type it was sent as.
    pub fn message<M: DeserializeOwned>(&self) -> Result<M, MessageError> {
        postcard::from_bytes(&self.payload).map_err(|e| MessageError::Codec {
            id: self.to.clone(),
            reason: e.to_string(),
        })
    }
}

/// The count and the reports of one node's lost tells.
pub(crate) struct Losses {
    pub(crate) tells: AtomicU64,
    pub(crate) reports: broadcast::Sender<Undelivered>,
}

impl Losses {
    pub fn new() -> Self {
        Losses {
            tells: AtomicU64::new(0),
            reports: broadcast::Sender::new(REPORTS),
        }
    }
}
