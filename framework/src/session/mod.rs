//! Game client sessions: players connect to a gateway node over QUIC or WebSocket, authenticate, bind their
//! Actors, and keep their connection while those Actors (or their rooms) move between nodes.
//!
//! Layout, in the order a client's input flows:
//! - [`wire`]: the client protocol: frames each way, length-delimited postcard with a size limit.
//! - `json`: the same frames as JSON, one per WebSocket text message (docs/client-protocol.md).
//! - [`tls`]: the gateway's server certificate, and the trust a client gives it.
//! - `connection`: one client's session whatever its transport, the async shell that drives the
//!   core's session machine (`ferry_core::session::machine`): a task per session.
//! - `quic`: the QUIC listener (postcard frames), feeding its sessions.
//! - `websocket` (feature `websocket`): the WebSocket listener (JSON frames), feeding its sessions.
//! - `host`: what sessions need of the node they run on, which the node provides.
//! - `hub`: the gateway: it binds the listeners, owns their sessions, and carries the mesh side of
//!   bindings to them.
//!
//! An Actor's binding (gateway node, session, next push number) is part of the Actor: it is
//! captured and restored with it, so `ctx.push` reaches the gateway from wherever the Actor runs,
//! and the gateway puts pushes back in order by their numbers even when two nodes sent them.
//! Before a move seals a unit, its source asks the gateways of the unit's bound Actors to hold
//! those Actors' inputs, and waits for their acknowledgements (sent on the same ordered mesh
//! stream as the inputs, so every input sent before is already queued on the source). After the
//! move commits, the source tells the gateways the new owner and they release what they held,
//! before any newer input; if the move is abandoned, they release it to the source. A gateway
//! holds them for as long as the move may take (its source says its deadline with the seal), so a
//! move that works long never costs a player the connection.

pub(crate) mod connection;
pub(crate) mod host;
pub(crate) mod hub;
pub(crate) mod json;
pub(crate) mod quic;
pub mod tls;
#[cfg(feature = "websocket")]
mod websocket;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

pub(crate) use ferry_core::session::frames;
pub use ferry_core::session::{
    Identity, SessionBinding, SessionId, SessionLimits, SessionOp, SessionRef, wire,
};
pub use tls::SessionTls;
pub use wire::CloseCode;

use crate::ids::{ActorId, NodeId};

/// The application's hook that decides who a client is and which Actors it may bind.
///
/// It runs on the session's task, between two frames of that client: keep it quick (check a
/// signature, look up a cache), and do slow work (a database) before the player connects.
pub trait Authenticator: Send + Sync + 'static {
    /// Checks the token of the client's first frame. `Err` closes the session with that reason.
    fn authenticate(&self, token: &[u8]) -> Result<Identity, String>;

    /// Whether `identity` may bind `actor`; `Err` refuses the bind with that reason (the session
    /// stays open). Every bind is allowed by default.
    fn authorize_bind(&self, _identity: &Identity, _actor: &ActorId) -> Result<(), String> {
        Ok(())
    }
}

/// An [`Authenticator`] from a fixed table of tokens, for demos, tests and tools.
#[derive(Debug, Clone, Default)]
pub struct StaticTokens {
    tokens: HashMap<Vec<u8>, Identity>,
}

impl StaticTokens {
    /// An empty table: every token is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `token` as the client called `name`.
    pub fn with(mut self, token: impl Into<Vec<u8>>, name: impl Into<String>) -> Self {
        self.tokens.insert(token.into(), Identity::new(name));
        self
    }
}

impl Authenticator for StaticTokens {
    fn authenticate(&self, token: &[u8]) -> Result<Identity, String> {
        self.tokens
            .get(token)
            .cloned()
            .ok_or_else(|| "unknown token; ask the game service for a fresh one".to_owned())
    }
}

/// How a node accepts game clients: where, with which certificate, who may connect, and the
/// limits each session is held to.
#[derive(Clone)]
pub struct SessionSettings {
    /// Where the client listener binds (UDP); port 0 picks a free one, see `Node::session_addr`.
    pub listen: SocketAddr,
    /// The certificate clients verify.
    pub tls: SessionTls,
    /// Who a client is, from its token.
    pub authenticator: Arc<dyn Authenticator>,
    /// The limits of each session.
    pub limits: SessionLimits,
    /// A WebSocket listener beside the QUIC one (JSON frames, docs/client-protocol.md), if any.
    /// It needs the framework's `websocket` feature.
    pub websocket: Option<WebSocketSettings>,
}

impl SessionSettings {
    /// Settings with the default limits and no WebSocket listener.
    pub fn new(listen: SocketAddr, tls: SessionTls, authenticator: impl Authenticator) -> Self {
        SessionSettings {
            listen,
            tls,
            authenticator: Arc::new(authenticator),
            limits: SessionLimits::default(),
            websocket: None,
        }
    }
}

impl fmt::Debug for SessionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionSettings")
            .field("listen", &self.listen)
            .field("limits", &self.limits)
            .field("websocket", &self.websocket)
            .finish_non_exhaustive()
    }
}

/// Where a gateway accepts WebSocket clients (browsers, and clients in any language), and how.
#[derive(Debug, Clone)]
pub struct WebSocketSettings {
    /// Where it binds (TCP); port 0 picks a free one, see `Node::websocket_addr`.
    pub listen: SocketAddr,
    /// The certificate for `wss://`; `None` serves plain `ws://`, allowed on loopback only.
    pub tls: Option<SessionTls>,
}

/// Why the client listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The listen address could not be bound.
    #[error(
        "could not bind the client listener on {addr}: {source}; pick a free port or stop what holds it"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificate could not be used.
    #[error(transparent)]
    Tls(#[from] tls::SessionTlsError),
    /// A limit is out of range.
    #[error("invalid session limits: {0}")]
    Limits(String),
    /// The WebSocket listener cannot be set up as asked.
    #[error("the WebSocket listener cannot start: {0}")]
    WebSocket(String),
}

/// Why `ctx.push` did not send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// No session is bound to this unit.
    #[error("{id} has no session bound; a client must bind it before it can be pushed to")]
    NotBound {
        /// The unit that pushed, with no client to push to.
        id: crate::ids::UnitId,
    },
    /// The message could not be encoded.
    #[error("the push could not be encoded for its client: {reason}")]
    Encode {
        /// What the encoder (postcard, or JSON for a WebSocket client) said.
        reason: String,
    },
    /// The gateway holding the session cannot be reached now; the push was not sent.
    #[error("gateway {gateway} cannot be reached ({reason}); the push was not sent")]
    Unreachable {
        /// The gateway node.
        gateway: NodeId,
        /// What the mesh said.
        reason: String,
    },
}
