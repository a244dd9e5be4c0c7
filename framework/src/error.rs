//! The errors a caller of Ferry can see, each telling what to do about it.

pub use ferry_core::errors::{MessageError, UnitError};

/// A factory registration that makes no sense, reported when the node starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// Two factories were registered under one type name.
    #[error("two factories are registered as {type_name:?}; each type name takes exactly one")]
    Duplicate {
        /// The type name.
        type_name: String,
    },
    /// A state adapter was given where the unit that moves is not the spot's state.
    #[error(
        "{type_name:?} is a PerActor spot and moves as a shell: only Disabled or Recreate apply, not PreserveState"
    )]
    AdapterOnPerActorSpot {
        /// The type name.
        type_name: String,
    },
    /// ApplicationSignaled readiness was asked for where it has no meaning.
    #[error("{type_name:?}: ApplicationSignaled readiness applies to SpotWide spots only")]
    ReadinessNotSpotWide {
        /// The type name.
        type_name: String,
    },
    /// A standby was asked for where no room's state would be in its copy.
    #[error(
        "{type_name:?} keeps a standby, but {why}; register it with PreserveState (a state adapter) as a User Spot (SpotWide) or an Instance Spot, or without a standby"
    )]
    StandbyWithoutState {
        /// The type name.
        type_name: String,
        /// What stands in the way.
        why: &'static str,
    },
    /// An empty type name.
    #[error("a factory was registered with an empty type name")]
    EmptyTypeName,
}

/// A node that could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The factory registrations were refused; the list says each problem.
    #[error("factory registrations refused: {}", list(.0))]
    Registration(Vec<RegistrationError>),
    /// The location store could not be used.
    #[error("the location store could not be used at start: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The mesh could not start.
    #[error("the mesh could not start: {0}")]
    Mesh(#[from] crate::mesh::MeshError),
    /// The client listener could not start.
    #[error("the client listener could not start: {0}")]
    Sessions(#[from] crate::session::SessionError),
    /// Another process holds this node id and still runs: starting would evict it.
    #[error(
        "node id {node} is held by a live node at mesh address {mesh_addr} ({detail}); this \
         process did not start and changed nothing: stop that node first, or give this one \
         another id (each running node needs its own)"
    )]
    IdInUse {
        /// The node id.
        node: crate::ids::NodeId,
        /// The mesh address the live holder publishes.
        mesh_addr: std::net::SocketAddr,
        /// What answered there.
        detail: String,
    },
}

/// Why a node could not be put back into service; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// A drain is running: it decides the state when it ends.
    #[error("node {node} is draining; wait for the drain to end, then resume it")]
    Draining {
        /// The node asked to resume.
        node: crate::ids::NodeId,
    },
    /// The node is stopping, stopped or failed: it cannot serve again in this process.
    #[error(
        "node {node} is {state} and cannot serve again in this process; start it again instead"
    )]
    Ended {
        /// The node asked to resume.
        node: crate::ids::NodeId,
        /// The state it had reached when asked.
        state: ferry_core::authority::NodeState,
    },
}

fn list(errors: &[RegistrationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why `relocation_ready_defer` was refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeferError {
    /// The unit's factory is not SpotWide with ApplicationSignaled readiness.
    #[error(
        "relocation_ready_defer applies only to SpotWide spots registered with ApplicationSignaled readiness"
    )]
    NotApplicationSignaled,
    /// This turn already called it.
    #[error("relocation_ready_defer was already called in this turn")]
    AlreadyDeferred,
}
