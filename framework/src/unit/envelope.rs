//! What travels on a unit's queue: a message by value (or encoded), who sent it and where its reply goes.

use std::any::{Any, TypeId};
use std::sync::Arc;

use bytes::Bytes;
use ferry_core::errors::MessageError;
use ferry_core::session::SessionOp;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ids::{SpotId, UnitId};

pub use ferry_core::reply::ReplyTo;

/// Anything that can be sent to a unit or returned from one. It must round-trip through postcard:
/// it is encoded when it crosses the mesh or moves with its unit, and a small one (up to 23 bytes
/// encoded) travels encoded on its own node too, so that sending it allocates nothing. A larger
/// one is passed by value.
pub trait Message: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> Message for T {}

/// Who a message is for: a unit by id, optionally with the intent to activate an Instance Spot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub(crate) id: UnitId,
    pub(crate) activate: Option<Arc<str>>,
}

impl Target {
    /// An Instance Spot of `type_name`: the first message activates it, exactly once.
    pub fn instance(type_name: &str, spot: SpotId) -> Self {
        Target {
            id: UnitId::Spot(spot),
            activate: Some(Arc::from(type_name)),
        }
    }

    /// The unit addressed.
    pub fn id(&self) -> &UnitId {
        &self.id
    }
}

impl<T: Into<UnitId>> From<T> for Target {
    fn from(id: T) -> Self {
        Target {
            id: id.into(),
            activate: None,
        }
    }
}

/// The most bytes a message may take encoded to travel inline, in the envelope itself.
const INLINE_BYTES: usize = 23;

/// A message body: by value on its own node, encoded once it has crossed the mesh or moved.
pub(crate) enum Payload {
    /// A message too large to travel inline, boxed.
    Local {
        value: Box<dyn Any + Send>,
        type_name: &'static str,
    },
    /// A small message, encoded into the envelope: a local tell of it allocates nothing, and it
    /// crosses the mesh or moves with its unit as the same bytes.
    Inline(Inline),
    Encoded(Bytes),
    /// A change to an Actor's session binding: the framework applies it, in queue order.
    Session(SessionOp),
    /// What a tell's turn yields: nobody reads it.
    Empty,
}

/// A small message's postcard bytes, with its type so that it is taken out only as that type.
pub(crate) struct Inline {
    type_id: TypeId,
    type_name: fn() -> &'static str,
    len: u8,
    bytes: [u8; INLINE_BYTES],
}

impl Inline {
    /// `None` when `value` does not encode into [`INLINE_BYTES`].
    fn encode<M: Message>(value: &M) -> Option<Self> {
        // A value much larger than the buffer would only be encoded to fail.
        if std::mem::size_of::<M>() > 2 * INLINE_BYTES {
            return None;
        }
        let mut bytes = [0u8; INLINE_BYTES];
        let len = postcard::to_slice(value, &mut bytes).ok()?.len();
        Some(Inline {
            type_id: TypeId::of::<M>(),
            type_name: std::any::type_name::<M>,
            len: u8::try_from(len).ok()?,
            bytes,
        })
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Payload {
    /// A message by value: inline when it encodes small, boxed otherwise.
    pub fn local<M: Message>(value: M) -> Self {
        match Inline::encode(&value) {
            Some(inline) => Payload::Inline(inline),
            None => Payload::Local {
                value: Box::new(value),
                type_name: std::any::type_name::<M>(),
            },
        }
    }

    /// The type it holds, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Payload::Local { type_name, .. } => type_name,
            Payload::Inline(inline) => (inline.type_name)(),
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
            Payload::Inline(inline) if inline.type_id == TypeId::of::<M>() => {
                postcard::from_bytes(inline.as_bytes())
                    .map_err(|e| format!("undecodable bytes ({e})"))
            }
            Payload::Inline(inline) => Err((inline.type_name)().to_owned()),
            Payload::Encoded(bytes) => {
                postcard::from_bytes(&bytes).map_err(|e| format!("undecodable bytes ({e})"))
            }
            Payload::Session(_) => Err("a session binding change".to_owned()),
            Payload::Empty => Err("nothing".to_owned()),
        }
    }

    /// Its bytes when it is already encoded; otherwise itself, to be encoded by its unit's type.
    pub fn into_encoded(self) -> Result<Bytes, Payload> {
        match self {
            Payload::Encoded(bytes) => Ok(bytes),
            Payload::Inline(inline) => Ok(crate::mesh::codec::copy_shared(inline.as_bytes())),
            other => Err(other),
        }
    }

    /// Its bytes on the wire: as they are if already encoded, else encoded from the `M` it holds.
    pub fn encode<M: Message>(self) -> Result<Bytes, String> {
        let msg = match self.into_encoded() {
            Ok(bytes) => return Ok(bytes),
            Err(held) => held.take::<M>()?,
        };
        postcard::to_allocvec(&msg)
            .map(Bytes::from)
            .map_err(|e| e.to_string())
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

/// A reply or the error that ends a request.
pub(crate) type Terminal = Result<Payload, MessageError>;

/// One message for a unit: addressed by id on its way, by the unit's slot on a lane's queue.
pub(crate) struct Envelope<To = UnitId> {
    pub to: To,
    pub payload: Payload,
    /// Boxed: most messages are tells, and a small envelope is quicker to queue.
    pub reply: Option<Box<ReplyTo>>,
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
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_message_travels_inline_and_comes_back_as_itself() {
        let payload = Payload::local((7u32, 1.5f32, String::from("jump")));
        assert!(matches!(payload, Payload::Inline(_)));
        let back: (u32, f32, String) = payload.take().expect("same type");
        assert_eq!(back, (7, 1.5, "jump".to_owned()));
    }

    #[test]
    fn a_large_message_is_boxed_and_comes_back_as_itself() {
        let big = vec![9u8; 100];
        let payload = Payload::local(big.clone());
        assert!(matches!(payload, Payload::Local { .. }));
        assert_eq!(payload.take::<Vec<u8>>().expect("same type"), big);
    }

    #[test]
    fn an_inline_message_is_refused_as_another_type_with_its_own_name() {
        // Both encode to the same byte: only the type check tells them apart.
        let err = Payload::local(1u64)
            .take::<u32>()
            .expect_err("another type");
        assert_eq!(err, "u64");
    }

    #[test]
    fn an_inline_message_crosses_as_the_bytes_its_type_encodes_to() {
        let msg = (3u16, String::from("hi"));
        let bytes = Payload::local(msg.clone())
            .into_encoded()
            .ok()
            .expect("inline");
        assert_eq!(
            bytes.as_ref(),
            postcard::to_allocvec(&msg).expect("encodes")
        );
        assert!(Payload::local(vec![0u8; 64]).into_encoded().is_err());
    }
}
