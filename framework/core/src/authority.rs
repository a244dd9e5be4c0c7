//! What the location store holds: one authority record per unit and one descriptor per node.
//!
//! Records are postcard-encoded values under short keys. The store's version of a record is what
//! conditional writes are gated on; the generations inside it are what a reader reasons about.

use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::ids::{ActorId, NodeId, ObjectGeneration, SpotId, UnitId};

/// Where a unit is in its life, as the store sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// Owned and running on its owner (or on its way to a move's target, which writes itself as
    /// owner when it commits).
    Active,
}

/// The authority record of one unit: who owns it, and which incarnation it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// The node that runs it.
    pub owner: NodeId,
    /// The owner's lease generation when it took the unit.
    pub lease_generation: u64,
    /// The incarnation; kept across moves.
    pub object_generation: ObjectGeneration,
    /// +1 on every change of owner.
    pub owner_generation: u64,
    /// The factory type name that builds it.
    pub factory: String,
    /// Where it is in its life.
    pub stage: Stage,
    /// For an Actor: the User Spot it is a member of. `join` and `leave` write it and a move keeps
    /// it, so that recovery rebuilds the Actor in its room.
    pub spot: Option<SpotId>,
    /// Whether recovery rebuilds it on a survivor when its owner dies (otherwise its id is freed).
    pub recoverable: bool,
}

impl UnitRecord {
    /// Encodes the record as a store value.
    pub fn encode(&self) -> Bytes {
        encode(self)
    }

    /// Decodes a store value; a value that does not decode is reported as corrupt.
    pub fn decode(key: &str, value: &[u8]) -> Result<Self, CorruptRecord> {
        decode(key, value, "authority record")
    }

    /// The first record of a unit created on `owner`: owner generation 1, a fresh incarnation.
    pub fn created(
        owner: NodeId,
        lease_generation: u64,
        object_generation: ObjectGeneration,
        factory: &str,
        recoverable: bool,
    ) -> UnitRecord {
        UnitRecord {
            owner,
            lease_generation,
            object_generation,
            owner_generation: 1,
            factory: factory.to_owned(),
            stage: Stage::Active,
            spot: None,
            recoverable,
        }
    }

    /// The record a move's target writes when it commits: the same incarnation, owned by `owner`
    /// under its lease, one owner generation on, with the spot the unit had when it was captured.
    pub fn moved_to(
        &self,
        owner: NodeId,
        lease_generation: u64,
        spot: Option<SpotId>,
    ) -> UnitRecord {
        UnitRecord {
            owner,
            lease_generation,
            owner_generation: self.owner_generation + 1,
            stage: Stage::Active,
            spot,
            ..self.clone()
        }
    }

    /// The record a move's source writes to fence the move out: still its own, one owner
    /// generation on, so the target's commit (conditional on the version it was given) fails.
    pub fn fenced(&self) -> UnitRecord {
        UnitRecord {
            owner_generation: self.owner_generation + 1,
            ..self.clone()
        }
    }

    /// The record of a unit rebuilt on `owner` after its owner died: a fresh start, so a new
    /// incarnation, built by `factory`, in no room until it joins one again; recoverability is
    /// kept.
    pub fn rebuilt(
        &self,
        owner: NodeId,
        lease_generation: u64,
        object_generation: ObjectGeneration,
        factory: &str,
    ) -> UnitRecord {
        UnitRecord {
            owner,
            lease_generation,
            object_generation,
            owner_generation: self.owner_generation + 1,
            factory: factory.to_owned(),
            stage: Stage::Active,
            spot: None,
            recoverable: self.recoverable,
        }
    }

    /// The same record with the Actor's room membership changed to `spot`: no new claim.
    pub fn in_spot(&self, spot: Option<SpotId>) -> UnitRecord {
        UnitRecord {
            spot,
            ..self.clone()
        }
    }

    /// Whether `other` is the same claim of the unit: the same owner process (node and lease
    /// generation), owner generation and incarnation (other fields, such as an Actor's spot,
    /// change without a new claim). Two processes of one node id that both claim a unit (one
    /// stalled, the other started in its place) never take each other's claim for their own.
    pub fn same_claim(&self, other: &UnitRecord) -> bool {
        self.owner == other.owner
            && self.lease_generation == other.lease_generation
            && self.owner_generation == other.owner_generation
            && self.object_generation == other.object_generation
    }
}

/// Encodes a store value. Records of ids, strings and integers always encode.
pub(crate) fn encode<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(postcard::to_allocvec(value).unwrap_or_default())
}

/// A store value that does not decode: written by another version, or damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the store entry {key} is corrupt ({reason}); delete it, or check which version wrote it")]
pub struct CorruptRecord {
    /// The key of the entry.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Decodes a store value, reporting one that does not decode as corrupt.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    key: &str,
    value: &[u8],
    what: &str,
) -> Result<T, CorruptRecord> {
    postcard::from_bytes(value).map_err(|e| CorruptRecord {
        key: key.to_owned(),
        reason: format!("{what} does not decode: {e}"),
    })
}

/// The store key of a unit's authority record.
pub fn unit_key(id: &UnitId) -> String {
    match id {
        UnitId::Spot(s) => format!("u/s/{s}"),
        UnitId::Actor(a) => format!("u/a/{a}"),
    }
}

/// The unit a record key names, if it is one.
pub fn unit_of_key(key: &str) -> Option<UnitId> {
    if let Some(s) = key.strip_prefix("u/s/") {
        SpotId::new(s).ok().map(UnitId::Spot)
    } else if let Some(a) = key.strip_prefix("u/a/") {
        ActorId::new(a).ok().map(UnitId::Actor)
    } else {
        None
    }
}

/// The prefix of every unit record.
pub const UNIT_PREFIX: &str = "u/";
/// The prefix of every remembered unit: units brought back eagerly after a crash or a cold start.
pub const REMEMBERED_PREFIX: &str = "r/";

/// The store key that remembers a unit (its value is the factory's type name).
pub fn remembered_key(id: &UnitId) -> String {
    match id {
        UnitId::Spot(s) => format!("{REMEMBERED_PREFIX}s/{s}"),
        UnitId::Actor(a) => format!("{REMEMBERED_PREFIX}a/{a}"),
    }
}

/// The unit a remembered key names, if it is one.
pub fn unit_of_remembered_key(key: &str) -> Option<UnitId> {
    key.strip_prefix(REMEMBERED_PREFIX)
        .and_then(|rest| unit_of_key(&format!("u/{rest}")))
}

/// The prefix of every standby record: which node holds a room's standby copy, in which series.
pub const STANDBY_PREFIX: &str = "b/";

/// The store key of a room's standby record.
pub fn standby_key(id: &UnitId) -> String {
    match id {
        UnitId::Spot(s) => format!("{STANDBY_PREFIX}s/{s}"),
        UnitId::Actor(a) => format!("{STANDBY_PREFIX}a/{a}"),
    }
}

/// The room a standby key names, if it is one.
pub fn unit_of_standby_key(key: &str) -> Option<UnitId> {
    key.strip_prefix(STANDBY_PREFIX)
        .and_then(|rest| unit_of_key(&format!("u/{rest}")))
}

/// The prefix of every node descriptor.
pub const NODE_PREFIX: &str = "n/";

/// The store key of a node's descriptor.
pub fn node_key(node: &NodeId) -> String {
    format!("{NODE_PREFIX}{node}")
}

/// What a node publishes about itself so peers can find it and place units on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDescriptor {
    /// The node's id.
    pub node: NodeId,
    /// Where its mesh listens, if it has one.
    pub mesh_addr: Option<SocketAddr>,
    /// The application version it runs.
    pub app_version: String,
    /// Its lifecycle state.
    pub state: NodeState,
    /// How many units it takes at most.
    pub capacity: u64,
    /// How many units it hosted when it last published.
    pub units: u64,
    /// Preference among equally loaded nodes (higher first).
    pub weight: u32,
    /// The factory type names registered on it.
    pub factories: Vec<String>,
    /// Its lease generation: a restarted node publishes a higher one.
    pub lease_generation: u64,
    /// The peers it counts on hearing from over the mesh (as of its previous membership read):
    /// past its lease it runs turns only while each of them answers it.
    pub peers: Vec<NodeId>,
}

impl NodeDescriptor {
    /// Encodes the descriptor as a store value.
    pub fn encode(&self) -> Bytes {
        encode(self)
    }

    /// Decodes a store value.
    pub fn decode(key: &str, value: &[u8]) -> Result<Self, CorruptRecord> {
        decode(key, value, "node descriptor")
    }
}

/// A node's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NodeState {
    /// Starting up; not accepting work yet.
    Preparing,
    /// Accepting and running work.
    Serving,
    /// Moving its units to other nodes.
    Relocating,
    /// Every unit has moved away; connections stay until shutdown.
    Relocated,
    /// Closing its units for shutdown.
    Draining,
    /// Shut down.
    Stopped,
    /// Failed; see the log.
    Error,
}

impl NodeState {
    /// Every state, in lifecycle order (for status pages and metrics that list them all).
    pub const ALL: [NodeState; 7] = [
        NodeState::Preparing,
        NodeState::Serving,
        NodeState::Relocating,
        NodeState::Relocated,
        NodeState::Draining,
        NodeState::Stopped,
        NodeState::Error,
    ];

    /// The state stored as `n` (its place in [`NodeState::ALL`]); an unknown number is `Error`.
    pub fn from_u8(n: u8) -> NodeState {
        Self::ALL
            .get(usize::from(n))
            .copied()
            .unwrap_or(NodeState::Error)
    }

    /// Whether the node takes new messages in this state.
    pub fn accepts_work(self) -> bool {
        matches!(
            self,
            NodeState::Serving | NodeState::Relocating | NodeState::Relocated
        )
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_keep_spots_and_actors_apart() {
        let s = UnitId::Spot(SpotId::new("x/y").unwrap());
        let a = UnitId::Actor(ActorId::new("x/y").unwrap());
        assert_ne!(unit_key(&s), unit_key(&a));
        assert_eq!(unit_of_key(&unit_key(&s)), Some(s));
        assert_eq!(unit_of_key(&unit_key(&a)), Some(a));
        assert_eq!(unit_of_key("n/x"), None);
    }

    #[test]
    fn records_round_trip_and_garbage_is_corrupt() {
        let r = UnitRecord {
            owner: NodeId::new("n1").unwrap(),
            lease_generation: 3,
            object_generation: ObjectGeneration(77),
            owner_generation: 2,
            factory: "room".into(),
            stage: Stage::Active,
            spot: None,
            recoverable: true,
        };
        assert_eq!(UnitRecord::decode("k", &r.encode()).unwrap(), r);
        assert!(matches!(
            UnitRecord::decode("k", &[0xff, 0xff, 0xff]),
            Err(CorruptRecord { .. })
        ));
    }
}
