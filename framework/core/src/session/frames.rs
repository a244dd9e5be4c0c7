//! What gateways and the nodes running bound Actors say to each other on the mesh.
//!
//! Every frame travels on the ordered stream between two nodes, so a gateway's seal
//! acknowledgement reaches the source after every input the gateway sent it before.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::SessionId;
use crate::ids::ActorId;
use crate::ids::RelocationId;

/// One bound Actor of a session, as a move names it to the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundActor {
    /// The bound Actor.
    pub actor: ActorId,
    /// The session on the gateway.
    pub session: SessionId,
    /// The bind within the session.
    pub epoch: u32,
}

/// One frame about sessions between two nodes.
#[derive(Debug, Serialize, Deserialize)]
pub enum SessionFrame {
    /// Actor's node → gateway: the bind was applied here (with the Actor's factory), or not.
    Bound {
        /// The session on the gateway.
        session: SessionId,
        /// The Actor the bind was for.
        actor: ActorId,
        /// The bind within the session.
        epoch: u32,
        /// The Actor's factory, or why the bind was refused.
        verdict: Result<String, String>,
    },
    /// Actor's node → gateway: the Actor let this binding go (another session bound it, or it
    /// stopped), for this reason.
    Unbound {
        /// The session on the gateway.
        session: SessionId,
        /// The Actor whose binding ended.
        actor: ActorId,
        /// The bind within the session.
        epoch: u32,
        /// Why it ended, passed on to the client.
        reason: String,
    },
    /// Actor's node → gateway: a push, numbered per binding.
    Push {
        /// The session on the gateway.
        session: SessionId,
        /// The Actor that pushed it.
        actor: ActorId,
        /// The bind within the session.
        epoch: u32,
        /// The push's number within its binding.
        seq: u64,
        /// The pushed message, encoded.
        payload: Bytes,
    },
    /// Source → gateway: hold these Actors' inputs; answer `SealAck` once held. `hold` is the
    /// time left to the move's deadline: the release is due by then, however long the move works.
    Seal {
        /// The move that seals the Actors; its `SealAck` and `Release` name it again.
        rel: RelocationId,
        /// The Actors concerned.
        actors: Vec<BoundActor>,
        /// How long to hold them at most.
        hold: Duration,
    },
    /// Gateway → source: every input sent before this is on its way ahead of it.
    SealAck {
        /// The move whose seal is acknowledged.
        rel: RelocationId,
    },
    /// Source → gateway: the move ended; these Actors run on `owner` (`None`: nowhere).
    Release {
        /// The move that ended, as its `Seal` named it.
        rel: RelocationId,
        /// The Actors concerned.
        actors: Vec<BoundActor>,
        /// Where the Actors run now.
        owner: Option<crate::ids::NodeId>,
    },
}
