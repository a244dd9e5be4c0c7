//! Messages: tells and requests by id, pushes onto a lane here, terminals back to whoever asked,
//! and calls between nodes.

use std::any::TypeId;
use std::time::Duration;

use super::handle::Node;
use super::units::{KindCheck, kind_of};
use crate::cluster::frames::{Call, CreateAnswer, Deliver, Frame, MemberAnswer};
use crate::error::{MessageError, UnitError};
use crate::ids::{NodeId, UnitId};
use crate::unit::envelope::{Envelope, Message, Payload, ReplyTo, Target, Terminal};
use crate::unit::factory::FactoryKind;

/// How long a node waits for another node to answer a call (a remote creation).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl Node {
    /// Sends a message to a unit by id, wherever it lives in the cluster. Messages from one sender
    /// to one unit are handled in the order sent.
    ///
    /// An error here is certain (an unknown id, a wrong type for a unit hosted here); a tell to a
    /// unit on another node that turns out not to exist is dropped there.
    pub fn tell<M: Message>(&self, to: impl Into<Target>, msg: M) -> Result<(), MessageError> {
        self.send::<M>(to.into(), msg, None)
    }

    /// Sends a request and waits for its one terminal: the typed reply, or an error (the timeout
    /// included).
    pub async fn request<M: Message, R: Message>(
        &self,
        to: impl Into<Target>,
        msg: M,
        timeout: Duration,
    ) -> Result<R, MessageError> {
        let target = to.into();
        let id = target.id.clone();
        let mut waiting =
            self.core
                .units
                .replies
                .open()
                .ok_or_else(|| MessageError::TooManyRequests {
                    limit: self.core.units.replies.limit(),
                })?;
        let reply = ReplyTo {
            node: self.id().clone(),
            request: waiting.request,
        };
        self.send::<M>(target, msg, Some(reply))?;
        let reply = match tokio::time::timeout(timeout, &mut waiting.answer).await {
            Ok(Ok(terminal)) => terminal?,
            Ok(Err(_)) => return Err(MessageError::UnitStopped { id }),
            Err(_) => return Err(MessageError::Timeout { id, after: timeout }),
        };
        reply.take::<R>().map_err(|_| MessageError::WrongReplyType {
            id,
            expected: std::any::type_name::<R>().to_owned(),
        })
    }

    fn send<M: Message>(
        &self,
        target: Target,
        msg: M,
        reply: Option<ReplyTo>,
    ) -> Result<(), MessageError> {
        self.accepting()?;
        self.deliver::<M>(target, Payload::local(msg), reply)
    }

    /// Refuses new messages unless the node is serving.
    pub(crate) fn accepting(&self) -> Result<(), MessageError> {
        self.serving().map_err(|state| MessageError::NotServing {
            state: state.to_string(),
        })
    }

    /// Pushes a message held by value (an `M`) onto the lane of its unit here, or encodes it for
    /// the cluster to route.
    pub(crate) fn deliver<M: Message>(
        &self,
        target: Target,
        payload: Payload,
        reply: Option<ReplyTo>,
    ) -> Result<(), MessageError> {
        let mut envelope = Envelope {
            to: target.id,
            payload,
            reply: reply.map(Box::new),
        };
        if self.core.links.router.any_arriving() {
            let held = self.hold_if_arriving(envelope, TypeId::of::<M>(), |p| p.encode::<M>())?;
            let Some(sent) = held else {
                return Ok(());
            };
            envelope = sent;
        }
        let Some(envelope) = self.push(envelope, Some(TypeId::of::<M>()))? else {
            return Ok(());
        };
        // Not hosted here: encode once and let the cluster route it.
        let Envelope { to, payload, reply } = envelope;
        let bytes = payload
            .encode::<M>()
            .map_err(|reason| MessageError::Codec {
                id: to.clone(),
                reason,
            })?;
        self.route(Deliver {
            to,
            payload: bytes,
            session: None,
            reply,
            activate: target.activate.map(|a| Box::from(&*a)),
            origin: self.id().clone(),
            hops: 0,
        });
        Ok(())
    }

    /// Pushes onto the hosting lane; gives the envelope back if no lane here hosts its unit.
    ///
    /// The id stays with the sender: the lane's queue gets the unit's slot.
    pub(crate) fn push(
        &self,
        envelope: Envelope,
        msg_type: Option<TypeId>,
    ) -> Result<Option<Envelope>, MessageError> {
        let Envelope { to, payload, reply } = envelope;
        let not_hosted = self.core.units.directory.with(&to, |entry| {
            let Some(entry) = entry else {
                return Ok(Some((payload, reply)));
            };
            if let Some(t) = msg_type {
                entry.check_type(&to, t, &payload)?;
            }
            let queued = Envelope {
                to: entry.slot,
                payload,
                reply,
            };
            entry
                .lane
                .data
                .send(queued)
                .map(|()| None)
                .map_err(|_| MessageError::UnitStopped { id: to.clone() })
        })?;
        Ok(not_hosted.map(|(payload, reply)| Envelope { to, payload, reply }))
    }

    /// [`Node::push`] of an already-encoded message: one the lane refuses ends its request with
    /// the error (a tell's refusal is logged as `refused`). `None` once it is settled here.
    pub(crate) fn push_or_refuse(&self, envelope: Envelope, refused: &str) -> Option<Envelope> {
        let reply_to = envelope.reply.clone();
        match self.push(envelope, None) {
            Ok(not_here) => not_here,
            Err(error) => {
                match reply_to {
                    Some(reply_to) => self.complete(&reply_to, Err(error)),
                    None => tracing::debug!(%error, "{refused}"),
                }
                None
            }
        }
    }

    /// Delivers a request's terminal to whoever asked, here or across the mesh.
    pub(crate) fn complete(&self, reply_to: &ReplyTo, terminal: Terminal) {
        if reply_to.node == *self.id() {
            self.core.units.replies.complete(reply_to.request, terminal);
            return;
        }
        let terminal = terminal.and_then(|payload| {
            payload
                .into_encoded()
                .map_err(|other| MessageError::ReplyLost {
                    reason: format!("a reply of type {} was not encoded", other.type_name()),
                })
        });
        let frame = Frame::Reply {
            request: reply_to.request,
            terminal,
        };
        if let Err(error) = self.mesh_send(&reply_to.node, frame) {
            tracing::warn!(node = %reply_to.node, %error, "reply lost: the asking node is unreachable");
        }
    }

    /// Sends a frame to a peer.
    pub(crate) fn mesh_send(
        &self,
        to: &NodeId,
        frame: Frame,
    ) -> Result<(), crate::mesh::MeshError> {
        self.mesh_to(to)?.send(to, frame)
    }

    /// Sends a frame to a peer on the link's bulk stream: best effort, and never in the way of
    /// [`Node::mesh_send`]'s frames (see [`crate::mesh::Mesh::send_bulk`]).
    pub(crate) fn mesh_send_bulk(
        &self,
        to: &NodeId,
        frame: Frame,
    ) -> Result<(), crate::mesh::MeshError> {
        self.mesh_to(to)?.send_bulk(to, frame)
    }

    /// The mesh that reaches `to`, if this node has one.
    fn mesh_to(&self, to: &NodeId) -> Result<&crate::mesh::Mesh<Frame>, crate::mesh::MeshError> {
        self.core
            .links
            .mesh
            .as_ref()
            .ok_or_else(|| crate::mesh::MeshError::UnknownPeer(to.clone()))
    }

    /// Asks another node to do something and waits for its typed answer.
    pub(crate) async fn call<A: Message>(&self, to: &NodeId, call: Call) -> Result<A, UnitError> {
        let failed = |reason: String| UnitError::Unavailable {
            what: format!("asking node {to}"),
            reason,
        };
        let Some(mut waiting) = self.core.units.replies.open() else {
            return Err(failed(format!(
                "{} requests are already waiting for replies on this node",
                self.core.units.replies.limit()
            )));
        };
        let request = waiting.request;
        self.mesh_send(
            to,
            Frame::Call {
                request,
                call: Box::new(call),
            },
        )
        .map_err(|error| failed(error.to_string()))?;
        match tokio::time::timeout(CALL_TIMEOUT, &mut waiting.answer).await {
            Ok(Ok(Ok(payload))) => payload.take::<A>().map_err(failed),
            Ok(Ok(Err(error))) => Err(failed(error.to_string())),
            Ok(Err(_)) => Err(failed("the call was dropped".to_owned())),
            Err(_) => Err(failed(format!("no answer within {CALL_TIMEOUT:?}"))),
        }
    }

    /// Runs a call another node asked of this one, and answers it.
    pub(crate) async fn answer_call(self, from: NodeId, request: u64, call: Call) {
        let answer = match call {
            Call::Create {
                type_name,
                id,
                or_get,
            } => {
                let (wanted, kind) = kind_of(&id);
                let answer: CreateAnswer =
                    self.create_here(&type_name, id, or_get, wanted, kind).await;
                postcard::to_allocvec(&answer)
            }
            Call::Recover {
                id,
                version,
                previous,
                owner_descriptor,
            } => {
                let answer: CreateAnswer = self
                    .recover_here(id, version, previous, owner_descriptor)
                    .await;
                postcard::to_allocvec(&answer)
            }
            Call::Promote {
                id,
                version,
                previous,
                owner_descriptor,
                series,
                standby_version,
            } => {
                let answer: CreateAnswer = self
                    .promote_here(
                        id,
                        version,
                        previous,
                        owner_descriptor,
                        series,
                        standby_version,
                    )
                    .await;
                postcard::to_allocvec(&answer)
            }
            Call::Member {
                spot,
                actor,
                joined,
            } => {
                let unit = UnitId::Spot(spot.clone());
                let answer: MemberAnswer = if self.core.units.directory.get(&unit).is_some() {
                    self.notify_member(&spot, actor, joined);
                    Ok(())
                } else {
                    Err(UnitError::UnknownId { id: unit })
                };
                postcard::to_allocvec(&answer)
            }
            Call::Activate { type_name, id } => {
                let wanted: KindCheck = |k| k == FactoryKind::InstanceSpot;
                let answer: CreateAnswer = self
                    .create_here(&type_name, id, true, wanted, "instance spot")
                    .await;
                postcard::to_allocvec(&answer)
            }
        };
        let terminal = answer.map(Into::into).map_err(|e| MessageError::ReplyLost {
            reason: e.to_string(),
        });
        let _ = self.mesh_send(&from, Frame::Reply { request, terminal });
    }
}
