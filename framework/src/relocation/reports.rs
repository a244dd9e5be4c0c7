//! What a move or a drain reports: the options it takes, how it ended, and the events a node
//! sends while it moves units. Plain data, shared by the one-unit and the whole-host paths.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use ferry_core::authority::NodeState;
pub use ferry_core::drain::{BlockedReason, RelocateOutcome};
use ferry_core::relocation::RelocationId;
use ferry_core::relocation::phases::MovePhases;
use ferry_core::relocation::precopy::Copied;
use ferry_core::relocation::protocol::MoveEnd;

use crate::ids::{NodeId, UnitId};

/// The in-flight byte budget of a drain, in KiB (16 MiB).
pub(crate) const BUDGET_KIB: u32 = 16 * 1024;

/// Why a host drain is asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RelocateMode {
    /// Maintenance: move every unit to any serving node of the same version.
    PlannedMaintenance,
    /// A rolling update: move every unit to nodes of `target_version` only.
    RollingUpdate {
        /// The application version the units go to.
        target_version: String,
    },
}

/// What `relocate` is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelocateOptions {
    /// Where the units may go: any serving node, or only nodes of a target version.
    pub mode: RelocateMode,
    /// How long it may take; past it no unit is sealed, units before relay-ready go back, and a
    /// unit past the point of no return that has not opened is force-stopped.
    pub deadline: Duration,
}

impl Default for RelocateOptions {
    fn default() -> Self {
        RelocateOptions {
            mode: RelocateMode::PlannedMaintenance,
            deadline: Duration::from_secs(30),
        }
    }
}

/// Where a host operation stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    /// The node's state.
    pub state: NodeState,
    /// Units in the drain's inventory.
    pub total: usize,
    /// Units moved so far.
    pub moved: usize,
    /// Units that failed to move so far (they stay here).
    pub failed: usize,
    /// Bytes of state moved so far.
    pub bytes: u64,
    /// Whether the node hosts nothing and moves nothing: it can be stopped without loss.
    pub safe_to_shutdown: bool,
}

/// What happens during a drain, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelocationEvent {
    /// A drain started with this many units.
    Started {
        /// Units in the inventory.
        units: usize,
    },
    /// A unit moved.
    UnitMoved(Box<MoveReport>),
    /// A unit did not move.
    UnitFailed {
        /// The unit that did not move (a room's spot for a room and its members).
        unit: UnitId,
        /// Why it did not move, in words for an operator.
        reason: String,
    },
    /// The drain ended.
    Completed(RelocateOutcome),
}

/// Why a unit could not start to move (nothing was sealed; it runs on where it was).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MoveError {
    /// The unit is not hosted on this node.
    #[error("{id} is not hosted on this node; move it from the node that hosts it")]
    NotHosted {
        /// The unit asked to move, which this node does not host.
        id: UnitId,
    },
    /// An Actor in a SpotWide spot moves with its spot.
    #[error("{id} is a member of SpotWide {spot} and moves with it; move the spot")]
    MovesWithSpot {
        /// The Actor asked to move.
        id: UnitId,
        /// The SpotWide spot it is a member of: move that instead.
        spot: UnitId,
    },
    /// The unit's factory says it is bound to its node.
    #[error("{id} is registered with RelocationPolicy::Disabled and stays on its node")]
    RelocationDisabled {
        /// The unit whose factory forbids moves.
        id: UnitId,
    },
    /// No node can take the unit.
    #[error("no node can take {id}: {reason}")]
    NoTarget {
        /// The unit that found no target.
        id: UnitId,
        /// Why: the named target does not serve the factory, or no other node has it and room.
        reason: String,
    },
    /// The node is not serving.
    #[error("this node is {state}; moves start only while it serves")]
    NotServing {
        /// This node's state when asked (moves start only while Serving or Relocating).
        state: NodeState,
    },
    /// The location store has not confirmed this node's lease lately, so a move could not
    /// commit: it does not start (the unit runs on here). Retry once the store answers again.
    #[error(
        "the location store has not confirmed this node's lease lately; {id} stays here: retry \
         once the store answers again"
    )]
    StoreUnavailable {
        /// The unit that was to move, and runs on here.
        id: UnitId,
    },
}

/// What one move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveReport {
    /// The move's id (it is on every log line of the move).
    pub relocation: RelocationId,
    /// The unit the move was of (a room's spot for a room and its members).
    pub unit: UnitId,
    /// Where it was.
    pub from: NodeId,
    /// Where it was sent.
    pub to: NodeId,
    /// How it ended.
    pub end: MoveEnd,
    /// Bytes of the capture's image as sealed.
    pub bytes: u64,
    /// What went over the link: pre-copy rounds and bytes before the seal, and bytes after it.
    pub copied: Copied,
    /// From the seal to the cutover being sent (S0 to S1), if it got that far.
    pub interruption: Option<Duration>,
    /// From the seal until the source heard the target opened it, if it did.
    pub pause: Option<Duration>,
    /// Where the time went, phase by phase.
    pub phases: MovePhases,
    /// Why it did not move, where the source knows it for certain (a drain reports this).
    pub blocked: Option<BlockedReason>,
    /// It moved, but only after the deadline: the target's commit won the race with the
    /// source's reclaim at the deadline.
    pub after_deadline: bool,
}
