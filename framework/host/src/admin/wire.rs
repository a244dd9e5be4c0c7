//! The JSON the admin endpoint speaks: what each route takes and answers. The server and the
//! CLI share these types, so the two cannot drift apart.

use std::time::Duration;

use ferry::{
    BlockedReason, HostStatus, RelocateMode, RelocateOptions, RelocateOutcome, StandbyStatus,
};
use serde::{Deserialize, Serialize};

/// The deadline of a drain or shutdown when a request names none (the framework's default).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

/// The longest deadline a request may ask for: a day. Longer is surely a typo.
pub const MAX_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// `GET /status`: the node, its peers, and where its host operation stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusBody {
    /// The node's id.
    pub node: String,
    /// Its lifecycle state (`Serving`, `Relocating`, `Relocated`, ...).
    pub state: String,
    /// The application version it runs.
    pub app_version: String,
    /// Units (spots and actors) it hosts now.
    pub units: usize,
    /// Game client sessions it holds now, if it is a gateway.
    pub sessions: Option<usize>,
    /// Its mesh peers.
    pub peers: Vec<PeerBody>,
    /// The drain running now or the last one: counts so far.
    pub progress: ProgressBody,
    /// Whether it hosts nothing and moves nothing: stopping it loses nothing.
    pub safe_to_shutdown: bool,
    /// The host operation running now, if any.
    pub running: Option<RunningBody>,
    /// How the last drain ended, if one ended since the node started.
    pub last_drain: Option<DrainReport>,
    /// Why recovery waits to rebuild dead nodes' units, if it does (as this node sees it).
    pub recovery_waiting: Option<RecoveryWaiting>,
    /// Its rooms' standbys and the copies it keeps for others (absent from a node that predates
    /// standbys, read as none).
    #[serde(default)]
    pub standby: StandbyBody,
}

/// A node's warm standbys, as `/status` shows them: whether a crash of this node would keep its
/// rooms, and what keeping them costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyBody {
    /// Rooms it owns whose factory keeps a standby.
    pub rooms: usize,
    /// Of those, the rooms whose standby holds a recent checkpoint.
    pub current: usize,
    /// Of those, the rooms whose changes wait for their standby longer than they should.
    pub behind: usize,
    /// Of those, the rooms no node can hold a copy of now: a crash rebuilds them from nothing.
    #[serde(default)]
    pub alone: usize,
    /// How long the oldest change not yet held by a standby has waited, in milliseconds (`None`:
    /// every standby holds everything).
    pub oldest_unheld_ms: Option<u64>,
    /// Copies it keeps for rooms other nodes own.
    pub copies: usize,
    /// Checkpoints it sent since it started.
    pub checkpoints_sent: u64,
    /// Checkpoint bytes it sent since it started.
    pub bytes_sent: u64,
}

impl From<&StandbyStatus> for StandbyBody {
    fn from(status: &StandbyStatus) -> Self {
        StandbyBody {
            rooms: status.rooms,
            current: status.current,
            behind: status.behind,
            alone: status.alone,
            oldest_unheld_ms: status.oldest_unheld.map(millis),
            copies: status.copies,
            checkpoints_sent: status.checkpoints_sent,
            bytes_sent: status.bytes_sent,
        }
    }
}

/// Recovery that cannot rebuild dead nodes' units now, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryWaiting {
    /// The dead nodes whose units wait.
    pub dead: Vec<String>,
    /// How many units wait, when the coordinator counted them.
    pub units: Option<usize>,
    /// What is missing and what to do.
    pub reason: String,
}

impl From<ferry::RecoveryStall> for RecoveryWaiting {
    fn from(stall: ferry::RecoveryStall) -> Self {
        RecoveryWaiting {
            dead: stall.dead.iter().map(ToString::to_string).collect(),
            units: stall.units,
            reason: stall.reason,
        }
    }
}

/// One mesh peer as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerBody {
    /// The peer's node id.
    pub node: String,
    /// Where the link stands: `Ready`, `Connecting`, `Backoff`, `Waiting` or `Removed` (the peer
    /// took this node for dead and refuses it for good).
    pub link: String,
    /// The peer's mesh address, if known.
    pub addr: Option<String>,
    /// How long ago this node last heard from the peer over the mesh, in milliseconds (`None`:
    /// never). A peer never heard from is taken for dead only after the outage limit.
    #[serde(default)]
    pub heard_ms: Option<u64>,
}

/// The counts of the drain running now, or of the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressBody {
    /// Units in the drain's inventory.
    pub total: usize,
    /// Units moved so far.
    pub moved: usize,
    /// Units that failed to move so far (they stay on the node).
    pub failed: usize,
    /// Bytes of state moved so far.
    pub bytes: u64,
}

impl From<&HostStatus> for ProgressBody {
    fn from(status: &HostStatus) -> Self {
        ProgressBody {
            total: status.total,
            moved: status.moved,
            failed: status.failed,
            bytes: status.bytes,
        }
    }
}

/// Which host operation runs, since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningBody {
    /// `drain` or `shutdown`.
    pub operation: String,
    /// `maintenance` or `rolling-update`.
    pub mode: Mode,
    /// The version units go to, for a rolling update.
    pub version: Option<String>,
    /// How long it has run, in milliseconds.
    pub elapsed_ms: u64,
}

/// Why a node is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Move every unit to any serving node of the same version.
    #[default]
    Maintenance,
    /// Move every unit to nodes of the given version only.
    RollingUpdate,
}

impl Mode {
    /// The name requests use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Maintenance => "maintenance",
            Mode::RollingUpdate => "rolling-update",
        }
    }
}

/// `POST /relocate`: how to drain. Every field may be left out: an empty body drains for
/// maintenance within 30 seconds.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelocateRequest {
    /// Why; `maintenance` by default.
    #[serde(default)]
    pub mode: Mode,
    /// The version to move to; required for `rolling-update`, refused otherwise.
    pub version: Option<String>,
    /// How long the drain may take, in milliseconds (30000 by default).
    pub deadline_ms: Option<u64>,
}

impl RelocateRequest {
    /// The framework's options for this request, or what is wrong with it.
    pub fn options(&self) -> Result<RelocateOptions, String> {
        let mode = match (self.mode, &self.version) {
            (Mode::Maintenance, None) => RelocateMode::PlannedMaintenance,
            (Mode::Maintenance, Some(_)) => {
                return Err(
                    "`version` is only for mode \"rolling-update\"; leave it out for \
                            \"maintenance\""
                        .to_owned(),
                );
            }
            (Mode::RollingUpdate, Some(version)) if !version.trim().is_empty() => {
                RelocateMode::RollingUpdate {
                    target_version: version.clone(),
                }
            }
            (Mode::RollingUpdate, _) => {
                return Err("mode \"rolling-update\" needs a non-empty `version`: the \
                            application version the units go to"
                    .to_owned());
            }
        };
        Ok(RelocateOptions {
            mode,
            deadline: deadline(self.deadline_ms)?,
        })
    }
}

/// `POST /shutdown`: how long the drain before the stop may take.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownRequest {
    /// How long the drain and the stop may take together, in milliseconds (30000 by default).
    pub deadline_ms: Option<u64>,
}

/// A deadline in milliseconds checked against its bounds, or the default.
pub fn deadline(ms: Option<u64>) -> Result<Duration, String> {
    let Some(ms) = ms else {
        return Ok(DEFAULT_DEADLINE);
    };
    let deadline = Duration::from_millis(ms);
    if deadline.is_zero() || deadline > MAX_DEADLINE {
        return Err(format!(
            "`deadline_ms` is {ms}; it must be above 0 and at most {} (a day)",
            MAX_DEADLINE.as_millis()
        ));
    }
    Ok(deadline)
}

/// `POST /resume` answers this once the node serves again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    /// The id of the node that resumed.
    pub node: String,
    /// Its state now: `Serving`.
    pub state: String,
    /// The state it was in when asked (`Relocated`, or `Serving` if it served already).
    pub was: String,
}

/// `POST /units`: a spot or an actor to create on this node, so that clients have something to
/// bind (load generators, smoke tests, a lobby made by hand).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitRequest {
    /// `spot` or `actor`.
    pub kind: UnitKind,
    /// The registered factory (type name) to build it with.
    pub factory: String,
    /// The id to give the unit, unique among units of its kind.
    pub id: String,
    /// For an actor: the User Spot on this node it joins once created.
    pub join: Option<String>,
}

/// What `POST /units` creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnitKind {
    /// A User Spot, such as a room.
    Spot,
    /// An actor, such as a player.
    Actor,
}

/// `POST /units` answers this (201 Created) once the unit runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitCreated {
    /// The unit, as `spot:<id>` or `actor:<id>`.
    pub unit: String,
    /// The node it runs on: the one asked.
    pub node: String,
    /// The spot it joined, if it was asked to.
    pub joined: Option<String>,
}

/// How a drain ended, as `POST /relocate` answers and `/status` remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainReport {
    /// `Relocated`, `Blocked` or `Undecided`.
    pub outcome: Outcome,
    /// Why it was blocked, when it was.
    pub reason: Option<BlockedReason>,
    /// Units moved off the node.
    pub moved: usize,
    /// Bytes of state moved.
    pub bytes: u64,
    /// Units that stayed on the node and run there again.
    pub stayed: Vec<String>,
    /// Units that were past the point of no return at the deadline while the store could not
    /// say who owns them: held, running nowhere, until it does.
    pub undecided: Vec<String>,
    /// How long the drain took, in milliseconds.
    pub elapsed_ms: u64,
    /// When no other node served (`NoServingPeer`): the drained nodes that `ferry resume` would
    /// bring back to take the units.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drained_peers: Vec<String>,
}

/// The kinds of drain outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Every unit moved: the node hosts none.
    Relocated,
    /// Some units stayed.
    Blocked,
    /// Some units wait for the store to say whether they moved.
    Undecided,
}

impl DrainReport {
    /// The report of `outcome`; `status` is the host status when the drain ended.
    pub fn new(outcome: &RelocateOutcome, status: &HostStatus, elapsed: Duration) -> Self {
        let names = |units: &[ferry::UnitId]| units.iter().map(ToString::to_string).collect();
        let (kind, reason, stayed, undecided) = match outcome {
            RelocateOutcome::Relocated { .. } => (Outcome::Relocated, None, Vec::new(), Vec::new()),
            RelocateOutcome::Blocked { reason, stayed } => {
                (Outcome::Blocked, Some(*reason), names(stayed), Vec::new())
            }
            RelocateOutcome::Undecided { units, stayed } => {
                (Outcome::Undecided, None, names(stayed), names(units))
            }
        };
        // A drain refused before it took inventory moved nothing; the host status still holds
        // the counts of the drain before it.
        let refused = matches!(
            reason,
            Some(
                BlockedReason::RuntimeNotReady
                    | BlockedReason::ShutdownRequested
                    | BlockedReason::OperationInProgress
                    | BlockedReason::StoreUnavailable
            )
        );
        let (moved, bytes) = match outcome {
            RelocateOutcome::Relocated { moved } => (*moved, status.bytes),
            _ if refused => (0, 0),
            _ => (status.moved, status.bytes),
        };
        DrainReport {
            outcome: kind,
            reason,
            moved,
            bytes,
            stayed,
            undecided,
            elapsed_ms: millis(elapsed),
            drained_peers: Vec::new(),
        }
    }
}

/// `POST /shutdown` answers this once the node has stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownReport {
    /// How the drain before the stop ended.
    pub drain: DrainReport,
    /// `Stopped`, or `ForceStopped` when some unit was closed at the deadline or some record
    /// could not be released.
    pub shutdown: ferry::ShutdownOutcome,
    /// Whether nothing was lost: every unit moved and the node stopped cleanly.
    pub clean: bool,
}

/// Every error the admin endpoint answers with: what went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One sentence for a person.
    pub error: String,
}

/// What an operator can do about a blocked drain.
pub fn advice(reason: BlockedReason) -> &'static str {
    match reason {
        BlockedReason::TargetUnavailable => {
            "no serving node could take them: start a node (of the target version, for a \
             rolling update) that registers their factories and has room, then drain again"
        }
        BlockedReason::NoServingPeer => {
            "no other node serves, so nothing could take them: bring a drained node back with \
             `ferry resume` or start a node, then drain again; stopping this node now ends its \
             rooms, and their state is lost"
        }
        BlockedReason::StoreUnavailable => {
            "the location store could not be reached: check redis and the network to it, then \
             drain again"
        }
        BlockedReason::RelocationDisabled => {
            "their factories are registered with RelocationPolicy::Disabled: they stay until the \
             node stops"
        }
        BlockedReason::StateIncompatible => {
            "a target could not restore their state: the target nodes' logs say why (often a \
             state format the new version cannot read)"
        }
        BlockedReason::AdapterFailed => {
            "a state adapter failed or panicked capturing them; they run on here with their \
             state: the node's log names each unit and the error, so fix the adapter, then \
             drain again"
        }
        BlockedReason::DeadlineExceeded => {
            "the deadline passed first: drain again, with a longer --deadline if it keeps passing"
        }
        BlockedReason::RelocationFailed => {
            "some moves failed: the node's log names each unit and why; drain again to retry"
        }
        BlockedReason::RuntimeNotReady => {
            "the node is not serving (still starting, or it lost its lease): check `ferry status`"
        }
        BlockedReason::ShutdownRequested => "the node is shutting down",
        BlockedReason::OperationInProgress => {
            "another drain is running: wait for it (`ferry status` shows its progress)"
        }
    }
}

/// A duration in whole milliseconds, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
