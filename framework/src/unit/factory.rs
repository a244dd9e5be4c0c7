//! What the runtime knows of a factory without its type: the kind of unit it makes, how that unit
//! runs and moves, and the message type it takes.

use std::any::TypeId;
use std::sync::Arc;

/// Why an adapter could not capture or restore a unit's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state adapter failed: {0}")]
pub struct AdapterError(pub String);

/// The kind of a relocation policy, without its adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// See `RelocationPolicy::Disabled`.
    Disabled,
    /// See `RelocationPolicy::Recreate`.
    Recreate,
    /// See `RelocationPolicy::PreserveState`.
    PreserveState,
}

/// How a User Spot runs its turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutionMode {
    /// One queue for the Spot and all its members: never two of their turns at once, and they move
    /// together as one unit (a room).
    #[default]
    SpotWide,
    /// A lane for the Spot and one per member Actor: members run in parallel and move one by one.
    PerActor,
}

/// When a SpotWide spot may be captured for a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadinessMode {
    /// After whichever turn is running when the move is asked for.
    #[default]
    AnyTurnBoundary,
    /// Only after a turn that called `ctx.relocation_ready_defer()` (a settled round).
    ApplicationSignaled,
}

/// What a handler panic does to its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnPanic {
    /// Stop the unit; its queued requests get an error.
    #[default]
    Stop,
    /// Replace the instance with a fresh one from the factory and carry on with the queue.
    Restart,
}

/// The kind of unit a factory makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactoryKind {
    /// Actors: created into the Entry Spot, they join and leave User Spots.
    Actor,
    /// User Spots, created by the application.
    UserSpot(ExecutionMode),
    /// Instance Spots, activated by the first message that carries activation intent.
    InstanceSpot,
}

/// Everything about a factory except how it builds: what the runtime needs to decide.
#[derive(Debug, Clone)]
pub struct FactoryInfo {
    /// The type name it is registered under.
    pub type_name: Arc<str>,
    /// What it makes.
    pub kind: FactoryKind,
    /// Its relocation policy's kind.
    pub policy: PolicyKind,
    /// Its readiness mode.
    pub readiness: ReadinessMode,
    /// What a panic does.
    pub on_panic: OnPanic,
    /// Whether its units are brought back eagerly after a crash or cold start.
    pub remembered: bool,
    /// Whether recovery rebuilds its units on a survivor when their node dies.
    pub recoverable: bool,
    /// Whether its rooms keep a warm standby copy on another node.
    pub standby: ferry_core::standby::Policy,
    pub(crate) msg_type: TypeId,
    pub(crate) msg_type_name: &'static str,
}
