//! What a game client's session is to the rest of the cluster: its id, an Actor's binding to it,
//! and the changes to that binding, which travel with the Actor like messages.
//!
//! - [`wire`]: the client protocol, frames each way.
//! - [`frames`]: what gateways and the nodes running bound Actors say to each other on the mesh.
//! - [`binding`]: the Actor's side: what a bind, an unbind or a fence does to its binding, in
//!   queue order and around a move's quiet spell, and how its pushes are numbered.
//! - [`limits`]: the token bucket that paces a client.
//! - [`machine`]: one session on its gateway as a state machine (events in, actions out, time
//!   passed in): authentication, bindings, inputs held while a bound Actor moves, pushes put
//!   back in order.

pub mod binding;
pub mod frames;
pub mod limits;
pub mod machine;
pub mod wire;

use std::fmt;
use std::time::Duration;

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
    /// The session the Actor is bound to, and its gateway node.
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

/// Who a client is, as the application's authenticator decided from its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// A name for logs and for the authenticator's check of each bind.
    pub name: String,
}

impl Identity {
    /// An identity with this name.
    pub fn new(name: impl Into<String>) -> Self {
        Identity { name: name.into() }
    }
}

/// The limits a gateway holds each session to. Every one has a default that suits a game client
/// on the internet; crossing one ends that session with a reason, and nothing else.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionLimits {
    /// The largest frame body a client may send, in bytes (default 64 KiB).
    pub max_frame: usize,
    /// Inputs (and out-of-order pushes) a session may have held while its Actors move (default 256).
    pub max_held: usize,
    /// Frames per second a client may send on average (default 200).
    pub rate_per_second: u32,
    /// Frames a client may send in one burst above that rate (default 400).
    pub rate_burst: u32,
    /// While an Actor moves, its inputs are held until the move's deadline (its source says it
    /// with the seal), then this long more for the move's release to arrive; past that, or a
    /// missing push waited for this long, the session is closed (default 3 s).
    pub seal_timeout: Duration,
    /// How long a new connection has to authenticate (default 5 s).
    pub auth_timeout: Duration,
    /// How many Actors one session may bind at once (default 16); more binds are refused.
    pub max_bindings: usize,
    /// Frames waiting to be written to a client that reads too slowly (default 1024).
    pub max_outbound: usize,
    /// How long a connection may be silent before it is dropped (default 30 s; clients keep it
    /// alive with pings).
    pub idle_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_frame: 64 * 1024,
            max_held: 256,
            rate_per_second: 200,
            rate_burst: 400,
            seal_timeout: Duration::from_secs(3),
            auth_timeout: Duration::from_secs(5),
            max_bindings: 16,
            max_outbound: 1024,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a set of [`SessionLimits`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidLimits(&'static str);

impl SessionLimits {
    /// Checks that every limit is in range.
    pub fn validate(&self) -> Result<(), InvalidLimits> {
        let bad = |what| Err(InvalidLimits(what));
        if self.max_frame == 0 || self.max_frame > u32::MAX as usize {
            return bad("max_frame must be between 1 byte and 4 GiB");
        }
        if self.rate_per_second == 0 || self.rate_burst == 0 {
            return bad("rate_per_second and rate_burst must be at least 1");
        }
        if self.max_outbound == 0 || self.max_bindings == 0 {
            return bad("max_outbound and max_bindings must be at least 1");
        }
        if self.seal_timeout.is_zero() || self.auth_timeout.is_zero() || self.idle_timeout.is_zero()
        {
            return bad("seal_timeout, auth_timeout and idle_timeout must be non-zero");
        }
        Ok(())
    }
}
