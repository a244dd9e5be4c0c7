//! What gateways and the nodes running bound Actors say to each other on the mesh.
//!
//! Every frame travels on the ordered stream between two nodes, so a gateway's seal
//! acknowledgement reaches the source after every input the gateway sent it before.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::SessionId;
use crate::ids::ActorId;
use crate::relocation::RelocationId;

/// One bound Actor of a session, as a move names it to the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BoundActor {
    pub actor: ActorId,
    pub session: SessionId,
    pub epoch: u32,
}

/// One frame about sessions between two nodes.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum SessionFrame {
    /// Actor's node → gateway: the bind was applied here (with the Actor's factory), or not.
    Bound {
        session: SessionId,
        actor: ActorId,
        epoch: u32,
        verdict: Result<String, String>,
    },
    /// Actor's node → gateway: the Actor let this binding go (another session bound it, or it
    /// stopped), for this reason.
    Unbound {
        session: SessionId,
        actor: ActorId,
        epoch: u32,
        reason: String,
    },
    /// Actor's node → gateway: a push, numbered per binding.
    Push {
        session: SessionId,
        actor: ActorId,
        epoch: u32,
        seq: u64,
        payload: Bytes,
    },
    /// Source → gateway: hold these Actors' inputs; answer `SealAck` once held. `hold` is the
    /// time left to the move's deadline: the release is due by then, however long the move works.
    Seal {
        rel: RelocationId,
        actors: Vec<BoundActor>,
        hold: Duration,
    },
    /// Gateway → source: every input sent before this is on its way ahead of it.
    SealAck { rel: RelocationId },
    /// Source → gateway: the move ended; these Actors run on `owner` (`None`: nowhere).
    Release {
        rel: RelocationId,
        actors: Vec<BoundActor>,
        owner: Option<crate::ids::NodeId>,
    },
}
