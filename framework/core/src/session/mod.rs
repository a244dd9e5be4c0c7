//! What a game client's session is to the rest of the cluster: its id, an Actor's binding to it,
//! and the changes to that binding, which travel with the Actor like messages.
//!
//! - [`wire`]: the client protocol, frames each way.
//! - [`frames`]: what gateways and the nodes running bound Actors say to each other on the mesh.

pub mod frames;
pub mod wire;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::NodeId;

/// One client session on its gateway node. Random, so a restarted gateway never reuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Which session an Actor is bound to: the gateway node holding the client's connection, the
/// session there, and which bind of that session (a session that binds an Actor again starts a
/// new epoch, so a late push of the old binding cannot pass for one of the new).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionRef {
    /// The gateway node.
    pub gateway: NodeId,
    /// The session on it.
    pub session: SessionId,
    /// The bind within the session.
    pub epoch: u32,
    /// How the session's client reads pushes.
    pub encoding: wire::Encoding,
}

/// An Actor's binding as it moves with the Actor: where its pushes go, and the number of its next
/// push, which the gateway uses to deliver pushes in order whichever node sent them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionBinding {
    /// The session.
    pub session: SessionRef,
    /// The number of the next push.
    pub next_push: u64,
}

/// A change to an Actor's binding. It travels to the Actor like a message (queued in order with
/// its messages, captured and relayed with them when it moves), but the framework applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionOp {
    /// Bind the Actor to this session, replacing any other.
    Bind(SessionRef),
    /// Unbind it, if it is still bound to this session.
    Unbind(SessionRef),
    /// No change: a sending node's order marker. It is answered in queue order, once every
    /// message queued before it has run, so the sender knows its old path is empty.
    Fence,
}
