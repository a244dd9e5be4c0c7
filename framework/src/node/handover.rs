//! The one place a move's handover goes out: the relay records (what reached the source after
//! its seal, in the order it arrived) and the cutover that closes them with their count and
//! CRC-32C, sent the first time by the lane as it hands the unit over, and again by the source
//! after a link reset.

use super::handle::Node;
use crate::cluster::frames::Frame;
use crate::ids::NodeId;
use crate::relocation::RelocationId;
use crate::relocation::capture::{QueuedOp, relay_digest};
use crate::relocation::frames::RelocFrame;

/// The handover of one move to its target.
pub(crate) struct Handover<'a> {
    pub node: &'a Node,
    pub target: &'a NodeId,
    pub rel: RelocationId,
}

impl Handover<'_> {
    /// Sends one relay record. Unsent, the cutover will not match, and the source sends them all
    /// again.
    pub fn relay(&self, op: QueuedOp) {
        let rel = self.rel;
        if let Err(error) = self.send(RelocFrame::Relay { rel, op }) {
            tracing::warn!(%rel, %error, "relay record not sent; the cutover will not match");
        }
    }

    /// Closes the relay records sent: the target checks their count and checksum.
    pub fn cutover(&self, records: &[QueuedOp]) {
        let (count, crc) = relay_digest(records);
        let rel = self.rel;
        if let Err(error) = self.send(RelocFrame::Cutover { rel, count, crc }) {
            tracing::warn!(%rel, %error, "cutover not sent; it will be sent again");
        }
    }

    /// Sends every relay record again after a reset, then the cutover.
    pub fn again(&self, records: &[QueuedOp]) {
        let rel = self.rel;
        if let Err(error) = self.send(RelocFrame::RelayReset { rel }) {
            tracing::debug!(%rel, %error, "relay reset not sent; it will be sent again");
            return;
        }
        for op in records {
            self.relay(op.clone());
        }
        self.cutover(records);
    }

    fn send(&self, frame: RelocFrame) -> Result<(), crate::mesh::MeshError> {
        self.node
            .mesh_send(self.target, Frame::Reloc(Box::new(frame)))
    }
}
