//! This node as a gateway: where it accepts game clients, and the session frames nodes send each
//! other about them (the sessions themselves are `session`'s).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::handle::Node;
use crate::cluster::frames::Frame;
use crate::ids::{NodeId, UnitId};
use crate::mesh::MeshError;
use crate::relocation::protocol::SourceEvent;
use crate::session::frames::SessionFrame;
use crate::session::host::SessionHost;
use crate::session::hub::Hub;
use crate::store::StoreError;
use crate::unit::cell::AnyFactory;
use crate::unit::envelope::{Payload, ReplyTo};
use crate::unit::replies::Replies;

impl Node {
    /// Where this node accepts game clients, if it does.
    pub fn session_addr(&self) -> Option<SocketAddr> {
        self.core.sessions.as_ref().map(Hub::local_addr)
    }

    /// Where this node accepts WebSocket clients, if it does.
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        self.core.sessions.as_ref().and_then(Hub::websocket_addr)
    }

    /// How many client sessions this node holds now.
    pub fn session_count(&self) -> usize {
        self.core
            .sessions
            .as_ref()
            .map_or(0, |hub| hub.sessions.count())
    }

    /// Sends a session frame to a gateway node (this one included).
    pub(crate) fn to_gateway(
        &self,
        gateway: &NodeId,
        frame: SessionFrame,
    ) -> Result<(), MeshError> {
        if gateway == self.id() {
            self.on_session_frame(self.id().clone(), frame);
            Ok(())
        } else {
            self.mesh_send(gateway, Frame::Session(frame))
        }
    }

    /// A session frame arrived from `from` (or from this node itself).
    pub(crate) fn on_session_frame(&self, from: NodeId, frame: SessionFrame) {
        match frame {
            SessionFrame::SealAck { rel } => {
                let sealed = SourceEvent::GatewaySealed(from);
                self.core.moves.to_source(rel, sealed, None);
            }
            SessionFrame::Seal { rel, actors, hold } => {
                if let Some(hub) = &self.core.sessions {
                    let seal = SessionFrame::Seal { rel, actors, hold };
                    hub.on_frame(self, from.clone(), seal);
                }
                // Every input this gateway sent before is queued ahead of this answer.
                if let Err(error) = self.to_gateway(&from, SessionFrame::SealAck { rel }) {
                    debug!(%from, %error, "seal acknowledgement not sent");
                }
            }
            other => {
                if let Some(hub) = &self.core.sessions {
                    hub.on_frame(self, from, other);
                }
            }
        }
    }
}

impl SessionHost for Node {
    fn id(&self) -> &NodeId {
        Node::id(self)
    }

    fn send_encoded(
        &self,
        to: UnitId,
        payload: Payload,
        reply: Option<ReplyTo>,
        via: Option<&NodeId>,
    ) {
        Node::send_encoded(self, to, payload, reply, via);
    }

    fn replies(&self) -> &Arc<Replies> {
        &self.core.units.replies
    }

    fn stopping(&self) -> bool {
        self.core.stop.is_cancelled()
    }

    fn fenced(&self) -> bool {
        Node::fenced(self)
    }

    fn refresh(&self) -> Duration {
        self.config().refresh
    }

    async fn owner_of(&self, id: &UnitId) -> Result<Option<NodeId>, StoreError> {
        Ok(self.read_record(id).await?.map(|record| record.owner))
    }

    fn factory(&self, type_name: &str) -> Option<Arc<dyn AnyFactory<Node>>> {
        self.core.factory(type_name)
    }
}
