//! The errors that travel between nodes: how a message or request ended, and why a unit could not
//! be created or reached. Each tells the caller what to do about it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::{InvalidId, NodeId, UnitId};

/// Why a message or request did not reach its end. Every request ends in exactly one terminal:
/// its reply or one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MessageError {
    /// No reply came in time; the unit may be slow, overloaded or gone.
    #[error("request to {id} got no reply within {after:?}; retry, or give it a longer timeout")]
    Timeout {
        /// The unit that was asked.
        id: UnitId,
        /// The timeout that ran out.
        after: Duration,
    },
    /// No unit of that id exists anywhere.
    #[error("no unit {id} exists; create it first, or address an Instance Spot with activation")]
    UnknownId {
        /// The id that was addressed.
        id: UnitId,
    },
    /// The unit stopped before it could handle the message.
    #[error("unit {id} stopped before it handled the message")]
    UnitStopped {
        /// The unit that stopped.
        id: UnitId,
    },
    /// The unit's handler panicked while handling this very request.
    #[error("unit {id} failed while handling the request (its handler panicked; see the node log)")]
    UnitFailed {
        /// The unit whose handler panicked.
        id: UnitId,
    },
    /// The unit handles another message type than the one sent.
    #[error("unit {id} does not accept {sent}; it takes {expected}")]
    WrongMessageType {
        /// The unit that was addressed.
        id: UnitId,
        /// The type that was sent.
        sent: String,
        /// The type the unit's handler takes.
        expected: String,
    },
    /// The reply had another type than the caller asked for.
    #[error("unit {id} replied with another type than {expected}; check the request's reply type")]
    WrongReplyType {
        /// The unit that replied.
        id: UnitId,
        /// The type the caller expected.
        expected: String,
    },
    /// A message could not be encoded or decoded for the wire.
    #[error("message for {id} could not be encoded or decoded: {reason}")]
    Codec {
        /// The unit that was addressed.
        id: UnitId,
        /// What the codec said.
        reason: String,
    },
    /// The node is not serving (not started yet, shutting down, or stopped).
    #[error("node is not serving (state {state}); wait for it to start, or use another node")]
    NotServing {
        /// The node's lifecycle state at the time.
        state: String,
    },
    /// The reply could not be encoded for the node that asked.
    #[error("the reply could not be sent back: {reason}")]
    ReplyLost {
        /// Why it was lost: the encoder's error, or that the message lost track of its unit.
        reason: String,
    },
    /// The node already has its limit of requests waiting for replies; nothing was sent.
    #[error(
        "{limit} requests are already waiting for replies on this node; wait for some to end, \
         or raise max_requests_in_flight"
    )]
    TooManyRequests {
        /// The node's `max_requests_in_flight`.
        limit: usize,
    },
    /// The location store kept failing while this node looked up where the unit lives; the
    /// message was not delivered.
    #[error(
        "where {id} lives could not be read from the location store ({attempts} tries: {reason}); \
         nothing was delivered: check the store's health, then send again"
    )]
    RouteLookupFailed {
        /// The unit that was addressed.
        id: UnitId,
        /// How many reads were tried.
        attempts: u32,
        /// What the store said last.
        reason: String,
    },
    /// The node that had the request left the cluster (or restarted) before it answered.
    #[error(
        "node {node} left the cluster before it answered the request to {id}; the request may or \
         may not have run there: check before you send it again"
    )]
    PeerGone {
        /// The unit that was asked.
        id: UnitId,
        /// The node that had the request.
        node: NodeId,
    },
    /// The unit's record names a node that left the cluster, and no other node runs it yet:
    /// recovery rebuilds it on a survivor, unless it may not be rebuilt. Nothing was delivered.
    #[error(
        "{id} ran on node {node}, which left the cluster, and no other node runs it yet \
         (recovery rebuilds it on a survivor, unless it may not be rebuilt); nothing was \
         delivered: send again shortly"
    )]
    OwnerLeft {
        /// The unit that was addressed.
        id: UnitId,
        /// The node its record still names.
        node: NodeId,
    },
    /// The unit's owner could not be reached over the mesh; nothing was delivered.
    #[error("{id} could not be reached: {reason}; retry once the store and mesh are back")]
    Unreachable {
        /// The unit that was addressed.
        id: UnitId,
        /// The mesh's error, or which peer left before it took the call.
        reason: String,
    },
}

/// Why a spot or actor could not be created, joined or left.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum UnitError {
    /// An id was not valid.
    #[error(transparent)]
    InvalidId(#[from] InvalidId),
    /// No factory of that type name is registered on this node.
    #[error(
        "no {kind} factory named {type_name:?} is registered; register it before starting the node"
    )]
    UnknownType {
        /// "spot", "instance spot" or "actor".
        kind: std::borrow::Cow<'static, str>,
        /// The type name that was asked for.
        type_name: String,
    },
    /// A unit with that id already exists.
    #[error("{id} already exists; use get_or_create to share it")]
    AlreadyExists {
        /// The existing unit.
        id: UnitId,
    },
    /// The unit addressed does not exist.
    #[error("no unit {id} exists")]
    UnknownId {
        /// The missing unit.
        id: UnitId,
    },
    /// The spot exists but with another type than asked for.
    #[error("{id} exists with type {existing:?}, not {asked:?}")]
    TypeMismatch {
        /// The spot that exists.
        id: UnitId,
        /// Its registered type.
        existing: String,
        /// The type that was asked for.
        asked: String,
    },
    /// The operation does not apply to this unit (joining an Instance Spot, for example).
    #[error("{id}: {reason}")]
    NotAllowed {
        /// The unit the operation was asked of.
        id: UnitId,
        /// What does not apply.
        reason: String,
    },
    /// The node is not serving.
    #[error("node is not serving (state {state})")]
    NotServing {
        /// The node's lifecycle state at the time.
        state: String,
    },
    /// No node could take the unit (none serving with the factory and capacity left).
    #[error(
        "no serving node has factory {type_name:?} and capacity left; start one or raise capacity"
    )]
    NoCapacity {
        /// The factory asked for.
        type_name: String,
    },
    /// The unit is being moved (sealed on its source, or staged on its target): a change to
    /// which units exist or which room an Actor is in would miss the copy that runs next, so it
    /// is refused and nothing changed. Retryable.
    #[error("{id} is being moved between nodes; nothing changed: retry once the move has ended")]
    Moving {
        /// The unit (or the room it moves with).
        id: UnitId,
    },
    /// The location store could not be reached (or has not confirmed this node's lease lately),
    /// so what needs it (a creation, a recovery, a record's change) waits; the rooms that run
    /// keep running. The outcome of a write in flight is unknown: re-read.
    #[error("{what} failed: the location store is unavailable ({reason}); retry once it is back")]
    StoreUnavailable {
        /// What was attempted.
        what: String,
        /// The store's error, or that it has not confirmed this node's lease lately.
        reason: String,
    },
    /// The location store or a peer could not be reached; the outcome is unknown, so re-read.
    #[error("{what} failed: {reason}; retry once the store and mesh are back")]
    Unavailable {
        /// What was attempted.
        what: String,
        /// What stood in the way: a store or mesh error, or a record that kept changing.
        reason: String,
    },
    /// Recovery asked this node to promote its standby copy of a dead node's room, and it holds
    /// none that may be promoted: recovery rebuilds the room from nothing instead.
    #[error("{id} cannot be promoted here: {why}")]
    NoStandbyCopy {
        /// The room.
        id: UnitId,
        /// Why no copy here may become the room.
        why: crate::standby::promotion::Fresh,
    },
    /// A join or leave took effect on the node, but the Actor's record could not be made to say
    /// so; until it does, a crash of the node rebuilds the Actor in the room last recorded.
    #[error(
        "{id} is now {now} on this node, but its record could not be updated: {reason}; call the \
         same join or leave again once the store is back, to record it"
    )]
    MembershipNotRecorded {
        /// The Actor that joined or left.
        id: UnitId,
        /// Where it is now: "a member of `<spot>`" or "in no room".
        now: String,
        /// What kept the record from saying so: a store error, another owner, or racing writes.
        reason: String,
    },
}
