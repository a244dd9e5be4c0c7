//! Logical identities: what callers address, kept unchanged when a unit moves.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The longest id Ferry accepts, in bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 255;

/// An id that is empty or longer than [`MAX_ID_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {kind} id of {len} bytes: ids must be 1 to 255 bytes of UTF-8")]
pub struct InvalidId {
    /// Which kind of id was being made ("spot", "actor", "node").
    pub kind: std::borrow::Cow<'static, str>,
    /// The length that was offered.
    pub len: usize,
}

fn check(kind: &'static str, text: &str) -> Result<Arc<str>, InvalidId> {
    if text.is_empty() || text.len() > MAX_ID_BYTES {
        return Err(InvalidId {
            kind: kind.into(),
            len: text.len(),
        });
    }
    Ok(Arc::from(text))
}

/// How many decoded ids a thread keeps to hand out again.
const INTERNED: usize = 4096;

thread_local! {
    /// Ids this thread decoded lately. The same few node and unit ids arrive in frame after frame;
    /// each decode of one is then a look-up, not an allocation and, later, a free on another thread.
    static DECODED: std::cell::RefCell<foldhash::HashSet<Arc<str>>> =
        std::cell::RefCell::new(foldhash::HashSet::default());
}

/// [`check`], handing out the text of an id decoded before on this thread.
fn interned(kind: &'static str, text: &str) -> Result<Arc<str>, InvalidId> {
    DECODED.with_borrow_mut(|seen| {
        if let Some(id) = seen.get(text) {
            return Ok(id.clone());
        }
        let id = check(kind, text)?;
        if seen.len() >= INTERNED {
            seen.clear();
        }
        seen.insert(id.clone());
        Ok(id)
    })
}

/// Reads an id's text where the decoder has it (in the frame's buffer, for postcard), with no
/// string of its own: a decoded id is then only a look-up in [`interned`].
struct IdText(&'static str);

impl serde::de::Visitor<'_> for IdText {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} id", self.0)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Arc<str>, E> {
        interned(self.0, text).map_err(E::custom)
    }
}

macro_rules! logical_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Makes an id, refusing empty ids and ids over 255 bytes.
            pub fn new(text: impl AsRef<str>) -> Result<Self, InvalidId> {
                check($kind, text.as_ref()).map(Self)
            }

            /// The id as text, exactly as it was given.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;
            fn try_from(text: &str) -> Result<Self, InvalidId> {
                Self::new(text)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(IdText($kind)).map(Self)
            }
        }
    };
}

logical_id!(
    /// The global id of a Spot (a room, a match, a lobby).
    SpotId,
    "spot"
);
logical_id!(
    /// The global id of an Actor (a player or other entity).
    ActorId,
    "actor"
);
logical_id!(
    /// The id of one node (host process) of the cluster.
    NodeId,
    "node"
);

/// What moves as one piece and what messages are addressed to: a Spot or an Actor.
///
/// Spots and Actors live in separate namespaces, so a Spot and an Actor may share a name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnitId {
    /// A Spot (and, for a SpotWide spot, its member Actors with it).
    Spot(SpotId),
    /// An Actor (a player, say), with its own state, moving alone or with the room it is a member
    /// of.
    Actor(ActorId),
}

impl UnitId {
    /// The id as text, without its kind.
    pub fn as_str(&self) -> &str {
        match self {
            UnitId::Spot(id) => id.as_str(),
            UnitId::Actor(id) => id.as_str(),
        }
    }
}

impl fmt::Display for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitId::Spot(id) => write!(f, "spot:{id}"),
            UnitId::Actor(id) => write!(f, "actor:{id}"),
        }
    }
}

impl fmt::Debug for UnitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<SpotId> for UnitId {
    fn from(id: SpotId) -> Self {
        UnitId::Spot(id)
    }
}

impl From<ActorId> for UnitId {
    fn from(id: ActorId) -> Self {
        UnitId::Actor(id)
    }
}

impl From<&SpotId> for UnitId {
    fn from(id: &SpotId) -> Self {
        UnitId::Spot(id.clone())
    }
}

impl From<&ActorId> for UnitId {
    fn from(id: &ActorId) -> Self {
        UnitId::Actor(id.clone())
    }
}

/// The incarnation of a unit: set when it is created, kept across moves, so a
/// reference taken before a move still names the same object after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectGeneration(pub u64);

/// The identity of one move: random, so two moves never share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RelocationId(pub u128);

impl fmt::Display for RelocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_1_to_255_bytes_and_refuse_the_rest() {
        assert!(SpotId::new("r").is_ok());
        assert!(SpotId::new("x".repeat(255)).is_ok());
        let err = SpotId::new("x".repeat(256)).unwrap_err();
        assert_eq!(err.len, 256);
        assert!(ActorId::new("").is_err());
        // 85 three-byte characters are 255 bytes; one more is too long.
        assert!(ActorId::new("€".repeat(85)).is_ok());
        assert!(ActorId::new("€".repeat(86)).is_err());
    }

    #[test]
    fn ids_match_exactly() {
        assert_ne!(SpotId::new("Room").ok(), SpotId::new("room").ok());
        assert_ne!(SpotId::new("room ").ok(), SpotId::new("room").ok());
    }

    #[test]
    fn decoding_refuses_bad_ids() {
        let bytes = postcard::to_allocvec("").unwrap();
        assert!(postcard::from_bytes::<ActorId>(&bytes).is_err());
        let bytes = postcard::to_allocvec("p1").unwrap();
        assert_eq!(
            postcard::from_bytes::<ActorId>(&bytes).unwrap(),
            ActorId::new("p1").unwrap()
        );
        // A decoder that has to unescape the text first gives it on loan too.
        assert_eq!(
            serde_json::from_str::<SpotId>(r#""r\u00e9\"1""#).unwrap(),
            SpotId::new("ré\"1").unwrap()
        );
        assert!(serde_json::from_str::<SpotId>("\"\"").is_err());
        assert!(serde_json::from_str::<SpotId>("7").is_err());
    }
}
