//! Ferry: host game servers whose live rooms and players move between hosts while they run.
//!
//! Layout, in the order work flows through it:
//! - [`ids`]: the logical ids callers address (spots, actors, nodes); they never change on a move.
//! - [`registry`]: factories per type name, each with one relocation policy and readiness mode.
//! - [`behavior`]: what applications implement, one synchronous turn at a time, and its context.
//! - [`timer`]: timers as data (registrations, cursors, overrun policies), so they can move.
//! - [`node`]: the runtime of one host: lanes that run turns, routing by id, requests and replies.
//! - [`cluster`]: authority records, placement, routing across nodes, membership and leases.
//! - [`relocation`]: moving live units between nodes, one at a time or a whole host drained.
//! - [`session`]: game clients on QUIC or WebSocket (feature `websocket`): authentication, Actors
//!   bound to sessions, inputs held while a bound Actor moves, pushes in order from wherever it runs.
//! - [`client`]: the client library bots, samples and tests connect with.
//! - [`mesh`]: QUIC between nodes with mutual TLS by node id, and ordered, size-limited frames
//!   that are acknowledged and sent again over the next connection when a link resets.
//! - [`store`]: the location store, the authority on where every unit lives (memory, redis, or
//!   etcd with feature `etcd`).
//! - [`error`]: the typed errors callers see.

pub mod behavior;
pub mod client;
pub mod cluster;
pub mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub use ferry_core::ids;
pub mod mesh;
pub mod node;
pub mod registry;
pub mod relocation;
pub mod session;
pub mod store;
pub use ferry_core::timer;

pub use behavior::{Behavior, Ctx, Message, ReadyOutcome};
pub use cluster::recovery::{RecoveryEvent, RecoveryStall};
pub use error::{DeferError, MessageError, RegistrationError, ResumeError, StartError, UnitError};
pub use ids::{ActorId, InvalidId, NodeId, ObjectGeneration, SpotId, UnitId};
pub use node::{
    MeshSettings, Node, NodeConfig, NodeState, ReplyTo, SHUTDOWN_MARGIN, ShutdownOutcome,
    ShutdownReason, TEARDOWN_GRACE, Target, UnitRef,
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
