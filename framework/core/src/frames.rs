//! What nodes say to each other on the mesh.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::errors::{MessageError, UnitError};
use crate::ids::{ActorId, NodeId, SpotId, UnitId};
use crate::reply::ReplyTo;

/// The most times a message is forwarded before it is given up as unknown.
pub const MAX_HOPS: u8 = 8;

/// One frame between nodes.
#[derive(Debug, Serialize, Deserialize)]
pub enum Frame {
    /// A message for a unit.
    Deliver(Deliver),
    /// The terminal of a request (or of a call), for the node that asked.
    Reply {
        /// The request number on the asking node.
        request: u64,
        /// The encoded reply, or why there is none.
        terminal: Result<Bytes, MessageError>,
    },
    /// The unit lives elsewhere now: update your route.
    RouteHint {
        /// The unit the sender asked for.
        id: UnitId,
        /// The node that runs it now, as the receiver knows it.
        owner: NodeId,
    },
    /// A frame of a move between two nodes (boxed, as the rarer and larger frames are: a
    /// small frame is quicker to hand from task to task, and most frames are deliveries).
    Reloc(Box<crate::relocation::frames::RelocFrame>),
    /// About client sessions: binds, pushes, seals and releases.
    Session(crate::session::frames::SessionFrame),
    /// Between a room's owner and the node that keeps its standby copy.
    Standby(Box<crate::standby::frames::StandbyFrame>),
    /// An operation one node asks of another; answered with a `Reply`.
    Call {
        /// The request number on the asking node.
        request: u64,
        /// What is asked.
        call: Box<Call>,
    },
    /// Do you hear me? Asked of every peer each probe period, so that a lapsed lease is never
    /// taken for death while the mesh still hears the node (see `cluster::witness`).
    Probe {
        /// The asker's send time, in its own clock; the answer brings it back.
        stamp: u64,
        /// The asker's lease generation, which tells this process from a later one of its id.
        generation: u64,
    },
    /// The answer to a `Probe`.
    ProbeAnswer {
        /// The probe's stamp.
        stamp: u64,
        /// Whether the answering node still runs turns.
        running: bool,
        /// False once the answering node has taken the asker (this process) for dead: the asker
        /// must stop at once.
        vouched: bool,
    },
    /// A tell the receiving node sent, which a node forwarding it lost: the peer it was handed to
    /// left before acknowledging it.
    TellLost {
        /// The unit it was for.
        to: UnitId,
        /// The node it was handed to last.
        peer: NodeId,
        /// The message, encoded.
        payload: Bytes,
    },
}

/// A message for a unit, with where its reply goes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Deliver {
    /// The unit the message is for.
    pub to: UnitId,
    /// The message, postcard-encoded (empty for a session change); read off the mesh, it shares
    /// the frame's buffer.
    #[serde(deserialize_with = "crate::shared_bytes::shared_bytes")]
    pub payload: Bytes,
    /// A change to the Actor's session binding, instead of a message. The rare fields are boxed:
    /// a delivery is moved from task to task several times, and a small one moves quicker.
    pub session: Option<Box<crate::session::SessionOp>>,
    /// Where the reply goes, for a request.
    pub reply: Option<Box<ReplyTo>>,
    /// The Instance Spot factory to activate if the unit does not exist yet.
    pub activate: Option<Box<str>>,
    /// The node that first sent it, to be told of a better route.
    pub origin: NodeId,
    /// How many times it was forwarded.
    pub hops: u8,
}

/// Operations between nodes.
#[derive(Debug, Serialize, Deserialize)]
pub enum Call {
    /// Create a unit on the receiving node (placement chose it).
    Create {
        /// The registered name of the factory to build it with.
        type_name: String,
        /// The unit to create.
        id: UnitId,
        /// Whether an existing unit is fine.
        or_get: bool,
    },
    /// Rebuild a unit of a dead node on the receiving node, if its record is still at `version`.
    Recover {
        /// The unit to rebuild.
        id: UnitId,
        /// The version of the dead owner's record.
        version: u64,
        /// That record.
        previous: crate::authority::UnitRecord,
        /// The version of the dead owner's descriptor when it was taken for dead (`None`: it
        /// had none): the rebuild is gated on it, so an owner that came back is not rebuilt.
        owner_descriptor: Option<u64>,
    },
    /// Make the receiving node's standby copy of a dead node's room the room, if the room's
    /// record is still at `version`, the dead owner's descriptor at `owner_descriptor`, and the
    /// standby record at `standby_version`.
    Promote {
        /// The room to promote.
        id: UnitId,
        /// The version of the dead owner's record.
        version: u64,
        /// That record.
        previous: crate::authority::UnitRecord,
        /// The version of the dead owner's descriptor when it was taken for dead.
        owner_descriptor: Option<u64>,
        /// The oldest series the copy may be in (the one the standby record names).
        series: crate::standby::Series,
        /// The version of the standby record that names the receiving node.
        standby_version: u64,
    },
    /// Activate an Instance Spot on the receiving node (placement chose it).
    Activate {
        /// The registered name of the Instance Spot's factory.
        type_name: String,
        /// The Instance Spot to activate.
        id: UnitId,
    },
    /// A PerActor spot that moved to the receiving node hears that an Actor joined or left it
    /// while it moved.
    Member {
        /// The PerActor spot that moved here.
        spot: SpotId,
        /// The Actor that joined or left it.
        actor: ActorId,
        /// Joined, or left.
        joined: bool,
    },
}

impl Call {
    /// The unit the call is about.
    pub fn unit(&self) -> UnitId {
        match self {
            Call::Create { id, .. }
            | Call::Recover { id, .. }
            | Call::Promote { id, .. }
            | Call::Activate { id, .. } => id.clone(),
            Call::Member { spot, .. } => UnitId::Spot(spot.clone()),
        }
    }
}

/// What a `Member` call answers.
pub type MemberAnswer = Result<(), UnitError>;

/// What a `Create`, `Recover`, `Promote` or `Activate` call answers.
pub type CreateAnswer = Result<bool, UnitError>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a peer sends, decoding a frame ends in a value or an error, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic_the_frame_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = postcard::from_bytes::<Frame>(&bytes);
        }

        /// Every other frame between nodes (replies, route hints, calls, session frames) decodes
        /// to what was encoded, compared by its encoding again.
        #[test]
        fn node_frames_round_trip(
            text in "\\PC*",
            payload in proptest::collection::vec(any::<u8>(), 0..128),
            numbers in any::<(u64, u32, u128)>(),
            ok in any::<bool>(),
        ) {
            use crate::relocation::RelocationId;
            use crate::session::SessionId;
            use crate::session::frames::{BoundActor, SessionFrame};
            let (n, epoch, rel) = numbers;
            let rel = RelocationId(rel);
            let unit = UnitId::Spot(crate::ids::SpotId::new("room").unwrap());
            let actor = crate::ids::ActorId::new("p1").unwrap();
            let node = NodeId::new("n1").unwrap();
            let bound = BoundActor { actor: actor.clone(), session: SessionId(n), epoch };
            let terminal = if ok {
                Ok(payload.clone().into())
            } else {
                Err(MessageError::UnknownId { id: unit.clone() })
            };
            let record = crate::authority::UnitRecord {
                owner: node.clone(),
                lease_generation: n,
                object_generation: crate::ids::ObjectGeneration(n),
                owner_generation: n / 3,
                factory: text.clone(),
                stage: crate::authority::Stage::Active,
                spot: None,
                recoverable: ok,
            };
            let frames = [
                Frame::Reply { request: n, terminal },
                Frame::RouteHint { id: unit.clone(), owner: node.clone() },
                Frame::Probe { stamp: n, generation: n / 2 },
                Frame::ProbeAnswer { stamp: n, running: ok, vouched: !ok },
                Frame::Call { request: n, call: Box::new(Call::Create { type_name: text.clone(), id: unit.clone(), or_get: ok }) },
                Frame::Call { request: n, call: Box::new(Call::Recover { id: unit.clone(), version: n, previous: record, owner_descriptor: ok.then_some(n) }) },
                Frame::Call { request: n, call: Box::new(Call::Activate { type_name: text.clone(), id: unit.clone() }) },
                Frame::Call { request: n, call: Box::new(Call::Member { spot: crate::ids::SpotId::new("room").unwrap(), actor: actor.clone(), joined: ok }) },
                Frame::Session(SessionFrame::Bound { session: SessionId(n), actor: actor.clone(), epoch, verdict: Ok(text.clone()) }),
                Frame::Session(SessionFrame::Unbound { session: SessionId(n), actor: actor.clone(), epoch, reason: text.clone() }),
                Frame::Session(SessionFrame::Push { session: SessionId(n), actor: actor.clone(), epoch, seq: n, payload: payload.into() }),
                Frame::Session(SessionFrame::Seal { rel, actors: vec![bound.clone()], hold: std::time::Duration::from_millis(n) }),
                Frame::Session(SessionFrame::SealAck { rel }),
                Frame::Session(SessionFrame::Release { rel, actors: vec![bound], owner: ok.then_some(node) }),
            ];
            for frame in &frames {
                let bytes = postcard::to_allocvec(frame).unwrap();
                let back: Frame = postcard::from_bytes(&bytes).unwrap();
                prop_assert_eq!(postcard::to_allocvec(&back).unwrap(), bytes);
            }
        }

        /// Deliveries round-trip exactly.
        #[test]
        fn deliveries_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..256), hops in any::<u8>(), request in any::<u64>()) {
            let frame = Frame::Deliver(Deliver {
                to: UnitId::Spot(crate::ids::SpotId::new("room").unwrap()),
                payload: payload.clone().into(),
                reply: Some(Box::new(ReplyTo { node: NodeId::new("n1").unwrap(), request })),
                activate: None,
                origin: NodeId::new("n2").unwrap(),
                hops,
                session: None,
            });
            let bytes = postcard::to_allocvec(&frame).unwrap();
            let Frame::Deliver(back) = postcard::from_bytes::<Frame>(&bytes).unwrap() else {
                panic!("not a delivery");
            };
            prop_assert_eq!(back.payload.to_vec(), payload);
            prop_assert_eq!(back.hops, hops);
            prop_assert_eq!(back.reply.map(|r| r.request), Some(request));
        }
    }
}
