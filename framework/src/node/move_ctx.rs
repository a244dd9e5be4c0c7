//! What a move from this node may touch of it, and nothing more: its id, state limit and lease,
//! the store, the readiness of the unit's factory, the gateways of the unit's sessions, the mesh
//! links to its target and gateways, and the node's host events. The move's run (`source`) holds
//! this, not the node.

use std::sync::Arc;

use tokio::sync::{AcquireError, OwnedSemaphorePermit};

use super::handle::Node;
use super::handover::Handover;
use crate::cluster::frames::Frame;
use crate::ids::{NodeId, UnitId};
use crate::mesh::{MeshError, PeerState};
use crate::relocation::RelocationId;
use crate::relocation::frames::RelocFrame;
use crate::relocation::moves::PRECOPY_KIB;
use crate::relocation::precopy::Deltas;
use crate::relocation::reports::RelocationEvent;
use crate::session::frames::SessionFrame;
use crate::store::{Lease, LocationStore};
use crate::unit::factory::ReadinessMode;

/// A move's view of the node it leaves.
pub(crate) struct MoveCtx {
    node: Node,
}

impl MoveCtx {
    pub fn new(node: Node) -> MoveCtx {
        MoveCtx { node }
    }

    /// The node the unit leaves.
    pub fn id(&self) -> &NodeId {
        self.node.id()
    }

    /// The state adapters of the node's factories, for the deltas a seal may send.
    pub fn deltas(&self) -> &dyn Deltas {
        &*self.node.core
    }

    /// The largest capture this node sends.
    pub fn max_state(&self) -> u64 {
        self.node.config().max_state
    }

    /// The node's owner lease: the move's fence is conditional on it.
    pub fn lease(&self) -> Lease {
        self.node.lease()
    }

    pub fn store(&self) -> &Arc<dyn LocationStore> {
        self.node.store()
    }

    /// Whether the unit seals only where the application says (`ApplicationSignaled`).
    pub fn waits_for_the_app(&self, id: &UnitId) -> bool {
        self.node.core.units.directory.get(id).is_some_and(|entry| {
            entry.factory.info().readiness == ReadinessMode::ApplicationSignaled
        })
    }

    /// Whether a gateway is gone: no mesh link is up to it, or the cluster counts it dead.
    pub fn gone(&self) -> impl Fn(&NodeId) -> bool + use<> {
        let peers = self.node.peers();
        let dead = self.node.core.cluster.dead.read().clone();
        move |gateway| {
            let linked = peers
                .iter()
                .any(|p| p.node == *gateway && p.state == PeerState::Ready);
            !linked || dead.contains(gateway)
        }
    }

    /// Tells a gateway of the unit's sessions (this node included) what the move does.
    pub fn to_gateway(&self, gateway: &NodeId, frame: SessionFrame) -> Result<(), MeshError> {
        self.node.to_gateway(gateway, frame)
    }

    /// Sends the target one of the move's frames.
    pub fn to_target(&self, target: &NodeId, frame: RelocFrame) -> Result<(), MeshError> {
        self.node.mesh_send(target, Frame::Reloc(Box::new(frame)))
    }

    /// Sends the target one of pre-copy's own frames: a round's pieces, its end, and the
    /// withdrawal of a pre-copy no offer took. They go on the link's bulk stream, so a sealed
    /// unit's frames never wait behind another unit's pre-copy; the withdrawal goes the same
    /// way so that it never overtakes the pieces it withdraws. Best effort: a round cut by a
    /// reset goes unanswered, and the seal then sends the whole image.
    pub fn precopy_to_target(&self, target: &NodeId, frame: RelocFrame) -> Result<(), MeshError> {
        self.node
            .mesh_send_bulk(target, Frame::Reloc(Box::new(frame)))
    }

    /// The move's handover to its target, sent again after a reset.
    pub fn handover<'a>(&'a self, target: &'a NodeId, rel: RelocationId) -> Handover<'a> {
        Handover {
            node: &self.node,
            target,
            rel,
        }
    }

    /// Waits for `bytes` (in KiB) of the node's pre-copy budget: its share of the link while the
    /// target has not said it holds them.
    pub fn precopy_budget(
        &self,
        bytes: usize,
    ) -> impl Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + use<> {
        let budget = self.node.core.moves.precopy_budget.clone();
        let kib = u32::try_from(bytes.div_ceil(1024).clamp(1, PRECOPY_KIB)).unwrap_or(u32::MAX);
        budget.acquire_many_owned(kib)
    }

    /// Tells whoever follows the node's host operations how the move ended.
    pub fn emit(&self, event: RelocationEvent) {
        self.node.emit(event);
    }
}
