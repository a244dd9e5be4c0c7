//! The gateway of one node: it binds the client listeners (`quic`, and `websocket` with its
//! feature), owns their sessions (see `connection`), and carries the mesh side of bindings (binds,
//! pushes, seals and releases) to those sessions.

use std::net::SocketAddr;
use std::sync::Arc;

use ferry_core::session::machine::Event;

use super::connection::Sessions;
use super::frames::{BoundActor, SessionFrame};
use super::host::SessionHost;
use super::quic::QuicListener;
use super::{SessionError, SessionSettings};
use crate::ids::NodeId;

/// The client listeners of one node and their live sessions.
pub(crate) struct Hub {
    quic: QuicListener,
    #[cfg(feature = "websocket")]
    websocket: Option<super::websocket::WebSocketListener>,
    pub(crate) sessions: Arc<Sessions>,
}

impl Hub {
    /// Binds the listeners; nothing is accepted until [`Hub::start`].
    pub async fn bind(settings: &SessionSettings) -> Result<Hub, SessionError> {
        settings
            .limits
            .validate()
            .map_err(|e| SessionError::Limits(e.to_string()))?;
        let quic = QuicListener::bind(settings).await?;
        #[cfg(feature = "websocket")]
        let websocket = match &settings.websocket {
            Some(ws) => Some(super::websocket::WebSocketListener::bind(ws).await?),
            None => None,
        };
        #[cfg(not(feature = "websocket"))]
        if settings.websocket.is_some() {
            return Err(SessionError::WebSocket(
                "this build of Ferry has no WebSocket gateway; build the `ferry` crate with its \
                 `websocket` feature"
                    .to_owned(),
            ));
        }
        Ok(Hub {
            quic,
            #[cfg(feature = "websocket")]
            websocket,
            sessions: Arc::new(Sessions::new(settings)),
        })
    }

    /// Where the QUIC listener is bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.quic.local_addr()
    }

    /// Where the WebSocket listener is bound, if there is one.
    pub fn websocket_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "websocket")]
        return self.websocket.as_ref().map(|ws| ws.local_addr());
        #[cfg(not(feature = "websocket"))]
        None
    }

    /// Starts accepting clients.
    pub fn start<H: SessionHost>(&self, node: &H) {
        if let Some(accept) = self.quic.accept(node, &self.sessions) {
            self.sessions.spawn_task(accept);
        }
        #[cfg(feature = "websocket")]
        if let Some(accept) = self
            .websocket
            .as_ref()
            .and_then(|ws| ws.accept(node, &self.sessions))
        {
            self.sessions.spawn_task(accept);
        }
    }

    /// Closes every session with `reason` (each client reads it), waits for them to say so, and
    /// releases the ports.
    pub async fn shutdown<H: SessionHost>(&self, node: &H, reason: &str) {
        self.sessions.close_all(node, reason).await;
        self.close_listeners().await;
    }

    /// Drops every connection at once, as a crash would.
    pub async fn abort(&self) {
        self.sessions.abort().await;
        self.close_listeners().await;
    }

    /// Closes the QUIC endpoint and waits for its socket; the WebSocket listener closed with
    /// its accept loop.
    async fn close_listeners(&self) {
        self.quic.close().await;
        self.sessions.forget_all();
        self.quic.released().await;
    }

    /// Tells every session that `gone` left the cluster: bindings to Actors it ran are made again
    /// once recovery has rebuilt them.
    pub fn owner_left<H: SessionHost>(&self, node: &H, gone: &NodeId) {
        for session in &self.sessions.all() {
            let event = Event::OwnerLeft { node: gone.clone() };
            self.sessions.apply(node, session, event);
        }
    }

    /// A session frame from a node running bound Actors (or from this one).
    pub fn on_frame<H: SessionHost>(&self, node: &H, from: NodeId, frame: SessionFrame) {
        match frame {
            SessionFrame::Bound {
                session,
                actor,
                epoch,
                verdict,
            } => self.sessions.feed(
                node,
                session,
                Event::Bound {
                    actor,
                    epoch,
                    owner: from,
                    verdict,
                },
            ),
            SessionFrame::Unbound {
                session,
                actor,
                epoch,
                reason,
            } => self.sessions.feed(
                node,
                session,
                Event::Unbound {
                    actor,
                    epoch,
                    reason,
                },
            ),
            SessionFrame::Push {
                session,
                actor,
                epoch,
                seq,
                payload,
            } => self.sessions.feed(
                node,
                session,
                Event::Push {
                    actor,
                    epoch,
                    seq,
                    payload,
                },
            ),
            SessionFrame::Seal { rel, actors, hold } => {
                for BoundActor {
                    actor,
                    session,
                    epoch,
                } in actors
                {
                    let seal = Event::Seal {
                        rel,
                        actor,
                        epoch,
                        hold,
                    };
                    self.sessions.feed(node, session, seal);
                }
            }
            SessionFrame::Release { rel, actors, owner } => {
                for BoundActor {
                    actor,
                    session,
                    epoch,
                } in actors
                {
                    let owner = owner.clone();
                    let event = Event::Release {
                        rel,
                        actor,
                        epoch,
                        owner,
                    };
                    self.sessions.feed(node, session, event);
                }
            }
            SessionFrame::SealAck { .. } => {}
        }
    }
}
