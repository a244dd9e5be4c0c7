//! What travels on a unit's queue: a message by value (or encoded), who sent it and where its reply goes.

use std::any::Any;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::behavior::Message;
use crate::error::MessageError;
use crate::ids::{NodeId, UnitId};
use crate::session::SessionOp;

/// A message body: by value on its own node, encoded once it has crossed the mesh or moved.
pub(crate) enum Payload {
    Local {
        value: Box<dyn Any + Send>,
        type_name: &'static str,
    },
    Encoded(Bytes),
    /// A change to an Actor's session binding: the framework applies it, in queue order.
    Session(SessionOp),
    /// What a tell's turn yields: nobody reads it.
    Empty,
}

impl Payload {
    pub fn local<M: Message>(value: M) -> Self {
        Payload::Local {
            value: Box::new(value),
            type_name: std::any::type_name::<M>(),
        }
    }

    /// The type it holds, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Payload::Local { type_name, .. } => type_name,
            Payload::Encoded(_) => "encoded bytes",
            Payload::Session(_) => "a session binding change",
            Payload::Empty => "nothing",
        }
    }

    /// Takes the value out as `M`; `Err` gives back the name of the type it really holds.
    pub fn take<M: Message>(self) -> Result<M, String> {
        match self {
            Payload::Local { value, type_name } => value
                .downcast::<M>()
                .map(|b| *b)
                .map_err(|_| type_name.to_owned()),
            Payload::Encoded(bytes) => {
                postcard::from_bytes(&bytes).map_err(|e| format!("undecodable bytes ({e})"))
            }
            Payload::Session(_) => Err("a session binding change".to_owned()),
            Payload::Empty => Err("nothing".to_owned()),
        }
    }

    /// The body as it travels: a session change as such, anything else encoded by `encode`.
    pub fn into_wire(
        self,
        encode: impl FnOnce(Payload) -> Result<Bytes, String>,
    ) -> Result<(Bytes, Option<SessionOp>), String> {
        match self {
            Payload::Session(op) => Ok((Bytes::new(), Some(op))),
            other => encode(other).map(|bytes| (bytes, None)),
        }
    }

    /// The body from how it travels.
    pub fn from_wire(bytes: Bytes, session: Option<SessionOp>) -> Payload {
        match session {
            Some(op) => Payload::Session(op),
            None => Payload::Encoded(bytes),
        }
    }
}

/// Where a request's terminal goes: the node that asked, and its request number there.
///
/// It is plain data, not a channel, so a queued request keeps its way home when its unit moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    /// The node that asked.
    pub node: NodeId,
    /// The request's number on that node.
    pub request: u64,
}

/// A reply or the error that ends a request.
pub(crate) type Terminal = Result<Payload, MessageError>;

/// One message for a unit: addressed by id on its way, by the unit's slot on a lane's queue.
pub(crate) struct Envelope<To = UnitId> {
    pub to: To,
    pub payload: Payload,
    pub reply: Option<ReplyTo>,
}

impl<To> Envelope<To> {
    /// The same message under another address.
    pub fn readdress<T>(self, to: T) -> Envelope<T> {
        Envelope {
            to,
            payload: self.payload,
            reply: self.reply,
        }
    }
}
