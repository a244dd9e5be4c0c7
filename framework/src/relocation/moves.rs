//! The moves a node takes part in, on either side, as data: the source's channel for its target's
//! answers, and the target's staged units. The moves themselves are run by the node
//! (`node::source`, `node::target`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use ferry_core::relocation::RelocationId;
use ferry_core::relocation::assembly::Assembly;
use ferry_core::relocation::capture::QueuedOp;
use ferry_core::relocation::frames::RecordAt;
use ferry_core::relocation::phases::TargetPhases;
use ferry_core::relocation::precopy::{Held, IN_FLIGHT_BYTES};
use ferry_core::relocation::protocol::{ReportedPhase, SourceEvent, TargetMachine};

use crate::ids::{NodeId, UnitId};
use crate::unit::lane::LaneTx;

/// The moves a node takes part in, on either side.
pub(crate) struct Moves<N> {
    /// Moves from this node: where the target's answers go.
    pub outgoing: Mutex<HashMap<RelocationId, Outgoing>>,
    /// Moves to this node: the staged units.
    pub incoming: Mutex<HashMap<RelocationId, Staging<N>>>,
    /// How many moves to this node are staged, for whoever waits until none may open here.
    pub arrivals: tokio::sync::watch::Sender<usize>,
    /// Moves from this node: the pre-copy bytes they may have sent and not seen held, in KiB.
    pub precopy_budget: Arc<Semaphore>,
    /// Moves to this node: what they pre-copied here before their offer.
    pub precopied: Mutex<HashMap<RelocationId, Precopied>>,
}

/// The node's pre-copy budget, in KiB.
pub(crate) const PRECOPY_KIB: usize = IN_FLIGHT_BYTES / 1024;

/// What a move pre-copied to this node, until its offer takes it.
pub(crate) struct Precopied {
    /// The node the move comes from.
    pub source: NodeId,
    /// The image as it arrived.
    pub held: Held,
    /// When its last piece arrived: one left without an offer for long is dropped.
    pub touched: Instant,
}

impl<N> Default for Moves<N> {
    fn default() -> Self {
        Moves {
            outgoing: Mutex::default(),
            incoming: Mutex::default(),
            arrivals: tokio::sync::watch::Sender::new(0),
            precopy_budget: Arc::new(Semaphore::new(PRECOPY_KIB)),
            precopied: Mutex::default(),
        }
    }
}

impl<N> Moves<N> {
    /// The source side's inbox: an answer for a move from this node (its target's, or a
    /// gateway's acknowledgement) goes to the move's events, and what it says of the target's
    /// phases to the move's report. An answer for a move that has ended is dropped.
    pub fn to_source(&self, rel: RelocationId, event: SourceEvent, phase: Option<ReportedPhase>) {
        let mut outgoing = self.outgoing.lock();
        let Some(waiting) = outgoing.get_mut(&rel) else {
            return;
        };
        match phase {
            Some(ReportedPhase::Restore(took)) => waiting.target.restore = took,
            Some(ReportedPhase::Commit(took)) => waiting.target.commit = took,
            None => {}
        }
        let _ = waiting.events.send(event);
    }
}

/// A move from this node, as the target's answers reach it.
pub(crate) struct Outgoing {
    /// The unit that moves.
    pub unit: UnitId,
    /// The move's events.
    pub events: mpsc::UnboundedSender<SourceEvent>,
    /// What the target reported of its phases so far.
    pub target: TargetPhases,
}

/// A move to this node, while its unit is staged here.
pub(crate) struct Staging<N> {
    pub(crate) source: NodeId,
    pub(crate) unit: UnitId,
    pub(crate) records: Vec<RecordAt>,
    pub(crate) assembly: Option<Assembly>,
    pub(crate) machine: TargetMachine,
    pub(crate) lane: Option<Arc<LaneTx<N>>>,
    /// How long the restore took, for the source's report.
    pub(crate) restored_in: Duration,
    /// How long the store commit took.
    pub(crate) committed_in: Duration,
    pub(crate) relay: Vec<QueuedOp>,
    /// The offer's base was not held here: the whole image is awaited (`RelocFrame::Resend`).
    pub(crate) awaiting_whole: bool,
    /// The relay record being fed to the machine.
    pub(crate) arriving: Option<QueuedOp>,
    /// When progress was last reported to the source.
    pub(crate) reported: Instant,
}
