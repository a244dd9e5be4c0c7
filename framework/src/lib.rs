//! Ferry: host game servers whose live rooms and players move between hosts while they run.
//!
//! Ferry is two crates. `ferry_core` holds what nodes, gateways and the store agree on and the
//! decisions of a move, with no I/O: ids, authority records, frames, captures, the source and target
//! machines, per-link delivery numbering, and conditional writes settled by reading back. This crate
//! is the runtime that drives it: lanes that run turns, the mesh, the store clients, the gateways and
//! the [`Node`] API. Inbound mesh frames come in at `node::dispatch` (one dispatch for messages,
//! moves, sessions and calls).
//!
//! Layout, from the modules that use no other module here to those that use the rest (a module
//! imports only from those above it in this list):
//! - [`ids`], [`timer`]: the core's ids and timers, re-exported.
//! - `mailbox`: the queue a lane's messages wait in.
//! - [`store`]: the location store, the authority on where every unit lives (memory, redis, or
//!   etcd with feature `etcd`).
//! - [`mesh`]: QUIC between nodes with mutual TLS by node id, and ordered, acknowledged frames.
//! - `unit`: a unit's own data: envelopes, [`Message`], [`Target`], pending replies, factory
//!   kinds, the type-erased cell, the lane handle, the directory and the standby state, generic
//!   over the node.
//! - [`session`]: game clients on QUIC or WebSocket (feature `websocket`). The one exception to
//!   the order: its listeners and hub still take the [`Node`] handle to serve a session.
//! - [`error`]: the typed errors callers see; [`client`]: the client library bots, samples and
//!   tests connect with.
//! - [`cluster`]: cluster state: authority records, placement, the route cache, the mesh's
//!   witness, the lease clock, lost tells and recovery events.
//! - [`relocation`]: moves and drains as data: options, reports, events, staged moves.
//! - [`node`]: [`Node`] and everything it does: lanes, messaging, routing and the one dispatch of
//!   inbound mesh frames, membership, recovery, the two sides of a move, drains, the gateway,
//!   shutdown.
//! - [`behavior`]: what applications implement, one synchronous turn at a time.
//! - [`registry`]: factories per type name with their relocation policy, and the typed cells they
//!   build.
//! - `start`: [`Node::start`], which takes a [`Registry`].
//!
//! The protocol decisions (authority, routes, moves, sessions, recovery plans) come from the
//! `ferry_core` crate; this crate carries them out.

pub mod behavior;
pub mod client;
pub mod cluster;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub use ferry_core::ids;
mod mailbox;
pub mod mesh;
pub mod node;
pub mod registry;
pub mod relocation;
pub mod session;
mod start;
pub mod store;
pub use ferry_core::timer;
mod unit;

pub use behavior::{Behavior, Ctx, Message, ReadyOutcome};
pub use cluster::recovery::{RecoveryEvent, RecoveryStall};
pub use error::{DeferError, MessageError, RegistrationError, ResumeError, StartError, UnitError};
pub use ferry_core::standby::Policy as StandbyPolicy;
pub use ids::{ActorId, InvalidId, NodeId, ObjectGeneration, SpotId, UnitId};
pub use node::{
    MeshSettings, Node, NodeConfig, NodeState, ReplyTo, SHUTDOWN_MARGIN, ShutdownOutcome,
    ShutdownReason, StandbyStatus, TEARDOWN_GRACE, Target, UnitRef,
};
pub use registry::{
    AdapterError, ExecutionMode, FactoryKind, OnPanic, PolicyKind, ReadinessMode, Registration,
    Registry, RelocationPolicy, SerdeAdapter, StateAdapter,
};
pub use relocation::{
    BlockedReason, HostStatus, MoveError, MoveReport, RelocateMode, RelocateOptions,
    RelocateOutcome, RelocationEvent, RelocationId,
};
pub use session::{
    Authenticator, Identity, PushError, SessionLimits, SessionSettings, SessionTls, StaticTokens,
    WebSocketSettings,
};
pub use timer::{OverrunPolicy, Tick};

/// The guide's code blocks, compiled and run as doctests so they stay true to the code.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../docs/concepts.md")]
    pub struct Concepts;

    #[doc = include_str!("../../docs/relocation.md")]
    pub struct Relocation;

    #[doc = include_str!("../../docs/getting-started.md")]
    pub struct GettingStarted;
}
