//! What the mesh could not deliver: a frame accepted for a peer that will never acknowledge it
//! (the peer was removed, or restarted) is handed back here. A request among them ends with
//! [`MessageError::PeerGone`]; a tell is counted, logged and reported to the node that sent it.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};

use super::handle::Node;
use crate::cluster::frames::{Deliver, Frame};
use crate::cluster::losses::Undelivered;
use crate::error::MessageError;
use crate::ids::{NodeId, UnitId};
use crate::mesh::Lost;

impl Node {
    /// How many tells this node sent that no node will run, because the peer they were handed to
    /// left the cluster or restarted before acknowledging them, or because the node that ran
    /// their unit left and no node runs it yet. Each is also reported on
    /// [`Node::undelivered_events`] and logged at `warn`.
    pub fn tells_lost(&self) -> u64 {
        self.core.links.losses.tells.load(Ordering::Relaxed)
    }

    /// Each tell this node sent that no node will run, from now on, with the unit it was for and
    /// the message; also those this node sent through another node that lost them there.
    pub fn undelivered_events(&self) -> broadcast::Receiver<Undelivered> {
        self.core.links.losses.reports.subscribe()
    }

    /// A peer left the cluster: the requests handed to it end, as the frames it never
    /// acknowledged come back from the mesh.
    pub(crate) fn peer_gone(&self, peer: &NodeId) {
        let ended = self.core.units.replies.fail_sent_to(peer);
        if ended > 0 {
            tracing::warn!(%peer, requests = ended,
                "requests ended unanswered: the node that had them left the cluster");
        }
    }

    /// Ends what waited for the frames the mesh gives back, until the mesh closes.
    pub(crate) async fn serve_losses(self, mut losses: mpsc::UnboundedReceiver<Lost<Frame>>) {
        while let Some(Lost { peer, frames, .. }) = losses.recv().await {
            for frame in frames {
                self.lost_frame(&peer, frame);
            }
        }
    }

    fn lost_frame(&self, peer: &NodeId, frame: Frame) {
        match frame {
            Frame::Deliver(deliver) => self.lost_deliver(peer, deliver),
            Frame::Call { request, call } => {
                tracing::debug!(%peer, ?call, "a call was lost with its peer");
                self.core.units.replies.complete(
                    request,
                    Err(MessageError::Unreachable {
                        id: call.unit(),
                        reason: format!("node {peer} left before it took the call"),
                    }),
                );
            }
            Frame::TellLost { to, peer, payload } => self.report_tell(to, peer, payload),
            other => tracing::debug!(%peer, frame = ?other, "a frame was lost with its peer"),
        }
    }

    fn lost_deliver(&self, peer: &NodeId, deliver: Deliver) {
        let Deliver {
            to,
            payload,
            session,
            reply,
            origin,
            ..
        } = deliver;
        if let Some(reply_to) = reply {
            let error = MessageError::PeerGone {
                id: to,
                node: peer.clone(),
            };
            self.complete(&reply_to, Err(error));
            return;
        }
        if session.is_some() {
            // A session change: the gateway's own sequence numbers notice and rebind.
            tracing::debug!(%peer, unit = %to, "a session change was lost with its peer");
            return;
        }
        self.tell_lost(peer, to, payload, origin);
    }

    /// A tell no node will run, because `peer` (the node it was handed to, or the one that ran
    /// its unit) left the cluster: reported to the node that sent it, here or across the mesh.
    pub(crate) fn tell_lost(&self, peer: &NodeId, to: UnitId, payload: Bytes, origin: NodeId) {
        if origin == *self.id() {
            self.report_tell(to, peer.clone(), payload);
            return;
        }
        let report = Frame::TellLost {
            to,
            peer: peer.clone(),
            payload,
        };
        if let Err(error) = self.mesh_send(&origin, report) {
            tracing::warn!(%origin, %error, "a lost tell could not be reported to its sender");
        }
    }

    /// Counts, logs and reports a tell of this node's that no node will run.
    pub(crate) fn report_tell(&self, to: UnitId, peer: NodeId, payload: Bytes) {
        self.core.links.losses.tells.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("ferry_tells_lost_total").increment(1);
        tracing::warn!(unit = %to, %peer, "a tell was lost: the node it was handed to, or the one that ran its unit, left the cluster");
        // No receiver is fine: the count and the log stay.
        let _ = self
            .core
            .links
            .losses
            .reports
            .send(Undelivered { to, peer, payload });
    }
}
